//! The files API of a session: uploads (secret-scanned when they are text), downloads, deletes
//! and listings, on the job protocol's paths (under `/workspace` or `/tmp`, no symlinks). The
//! service checks a path before it asks; the supervisor opens it beneath its root, again. They
//! work while a command runs. The session's policy decides each first (`filerules.rs`).

use scriptgate_policy::Operation;
use scriptgate_supervisor::job::paths::JobPath;
use uuid::Uuid;

use super::{SessionError, Sessions};
use crate::auth::Caller;
use crate::sandbox::sessions::{FileDone, FileError, FileErrorType, FileOp};

/// Entries one listing returns at most.
const MAX_LIST_ENTRIES: u64 = 10_000;
/// The deepest listing.
const MAX_DEPTH: u32 = 16;

/// What a file operation answered.
#[derive(Debug, Clone)]
pub(crate) enum FileBody {
    Done(FileDone),
    /// A download: the bytes and their sha256.
    Bytes {
        data: Vec<u8>,
        sha256: String,
    },
}

/// Why a file operation failed, as the edge answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileFailure {
    /// The path breaks the rules (outside the places, a symlink, not a regular file).
    Path,
    NotFound,
    /// The workspace (or /tmp) has no room for it.
    Full,
    /// Anything else the operation ran into.
    Failed,
}

impl Sessions {
    /// `PUT …/files/{path}`: replaces the file with `data`, whole or not at all.
    pub(crate) async fn put_file(
        &self,
        caller: &Caller,
        id: Uuid,
        path: &str,
        data: Vec<u8>,
    ) -> Result<FileBody, SessionError> {
        let path = workspace_path(path)?;
        // Larger than the whole workspace: it cannot fit, so it is refused before it is sent.
        let room = self
            .get(caller, id)?
            .limits
            .workspace_mb
            .saturating_mul(1 << 20);
        if data.len() as u64 > room {
            return Err(SessionError::File(
                FileFailure::Full,
                format!(
                    "{} bytes do not fit the workspace ({room} bytes); nothing was written",
                    data.len()
                ),
            ));
        }
        if let Ok(text) = std::str::from_utf8(&data)
            && let Some(f) = self.validator.scan_secrets(text).first()
        {
            return Err(SessionError::Rejected(format!(
                "the upload holds a secret at line {}, column {} ({}: {})",
                f.line, f.column, f.rule, f.message
            )));
        }
        let session = self.get(caller, id)?;
        self.file_rules(
            caller,
            &session,
            &[Operation::Write, Operation::Create],
            &path,
        )
        .await?;
        let sha256 = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&data));
        self.file(caller, id, FileOp::Put { path, sha256 }, data)
            .await
    }

    /// `GET …/files/{path}`: the file's bytes.
    pub(crate) async fn get_file(
        &self,
        caller: &Caller,
        id: Uuid,
        path: &str,
    ) -> Result<FileBody, SessionError> {
        let path = workspace_path(path)?;
        let session = self.get(caller, id)?;
        self.file_rules(caller, &session, &[Operation::Read], &path)
            .await?;
        self.file(caller, id, FileOp::Get { path }, Vec::new())
            .await
    }

    /// `DELETE …/files/{path}`: a file, or a directory and everything in it.
    pub(crate) async fn delete_file(
        &self,
        caller: &Caller,
        id: Uuid,
        path: &str,
    ) -> Result<FileBody, SessionError> {
        let path = workspace_path(path)?;
        let session = self.get(caller, id)?;
        self.file_rules(caller, &session, &[Operation::Delete], &path)
            .await?;
        self.file(caller, id, FileOp::Delete { path }, Vec::new())
            .await
    }

    /// `GET …/files?path=&depth=`: the `list_tree` shape of the job protocol.
    pub(crate) async fn list_files(
        &self,
        caller: &Caller,
        id: Uuid,
        path: &str,
        depth: u32,
    ) -> Result<FileBody, SessionError> {
        let path = JobPath::resolve(path)
            .map_err(|e| SessionError::File(FileFailure::Path, e))?
            .to_string();
        if !(1..=MAX_DEPTH).contains(&depth) {
            return Err(SessionError::Invalid(format!(
                "depth: must be between 1 and {MAX_DEPTH}, got {depth}"
            )));
        }
        let session = self.get(caller, id)?;
        self.file_rules(caller, &session, &[Operation::List], &path)
            .await?;
        let op = FileOp::List {
            path,
            depth,
            max_entries: MAX_LIST_ENTRIES,
        };
        self.file(caller, id, op, Vec::new()).await
    }

    async fn file(
        &self,
        caller: &Caller,
        id: Uuid,
        op: FileOp,
        data: Vec<u8>,
    ) -> Result<FileBody, SessionError> {
        let session = self.get(caller, id)?;
        let sandbox = session.sandbox()?;
        let answer = sandbox
            .file(op, data)
            .await
            .map_err(|e| SessionError::Stopped(e.to_string()))?;
        {
            let mut live = session.live.lock().expect("session lock");
            super::Session::touch(&mut live);
        }
        match (answer.result, answer.bytes) {
            (Ok(FileDone::Read { sha256, .. }), Some(data)) => Ok(FileBody::Bytes { data, sha256 }),
            (Ok(FileDone::Read { .. }), None) => Err(SessionError::File(
                FileFailure::Failed,
                "the file did not arrive".into(),
            )),
            (Ok(done), _) => Ok(FileBody::Done(done)),
            (Err(e), _) => Err(failure(e)),
        }
    }
}

/// `/workspace/<path>` for a path relative to the workspace.
fn workspace_path(relative: &str) -> Result<String, SessionError> {
    let relative = relative.trim_start_matches('/');
    if relative.is_empty() {
        return Err(SessionError::File(
            FileFailure::Path,
            "the path must name a file under /workspace".into(),
        ));
    }
    JobPath::resolve(&format!("/workspace/{relative}"))
        .map(|p| p.to_string())
        .map_err(|e| SessionError::File(FileFailure::Path, e))
}

fn failure(e: FileError) -> SessionError {
    let kind = match e.kind {
        FileErrorType::PolicyViolation | FileErrorType::SchemaError => FileFailure::Path,
        FileErrorType::ResourceLimitExceeded => FileFailure::Full,
        FileErrorType::ExecutionFailure if e.message.contains("does not exist") => {
            FileFailure::NotFound
        }
        _ => FileFailure::Failed,
    };
    SessionError::File(kind, e.message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_in_the_workspace() {
        assert_eq!(
            workspace_path("a/b.txt").ok().as_deref(),
            Some("/workspace/a/b.txt")
        );
        assert!(workspace_path("../etc/passwd").is_err());
        assert!(workspace_path("a/../../x").is_err());
        assert!(workspace_path("").is_err());
    }
}
