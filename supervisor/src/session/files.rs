//! File operations of a session (the files API): each in a child forked for it, as the script's
//! uid, on paths opened beneath a handle of their root that refuse every symlink (the agent's
//! `fsafe`), the same rules as the job protocol's file steps. They run between two polls of the
//! session loop, so they work while a command runs.

use std::io::Read as _;
use std::time::{Duration, Instant};

use scriptgate_supervisor::job::paths::JobPath;
use scriptgate_supervisor::job::{ErrorType, JobError, Mode, mime_type};
use scriptgate_supervisor::sessions::{FileDone, FileOp, FileReply, FileRequest};
use scriptgate_supervisor::{ARTIFACT_CHUNK, ArtifactBegin, ArtifactEnd, FrameKind};
use sha2::{Digest, Sha256};

use super::json;
use crate::agent::files::{self, fs_error, hex};
use crate::agent::fsafe::{self, Dir, Roots};
use crate::agent::isolate::{self, OpError, Route};
use crate::agent::{ArtifactOut, Runtime};
use crate::emit_message;
use crate::hostjob::Frames;

/// How long one file operation may take.
const OP_TIME: Duration = Duration::from_secs(60);
/// Entries one delete removes at most.
const MAX_DELETE: u64 = 100_000;
/// Mode of uploaded files.
const UPLOAD_MODE: u32 = 0o644;

/// Runs `request` and sends its `FileDone`; `Err` when the host is gone.
pub(crate) fn serve(rt: &mut Runtime, request: FileRequest, data: &[u8]) -> Result<(), String> {
    let result = run(rt, request.op, data);
    let (done, error) = match result {
        Ok(done) => (Some(done), None),
        Err(e) => (None, Some(e)),
    };
    let reply = FileReply {
        op_id: request.op_id,
        done,
        error,
    };
    emit_message(FrameKind::FileDone, &json(&reply)?)
}

fn run(rt: &mut Runtime, op: FileOp, data: &[u8]) -> Result<FileDone, JobError> {
    let path = |p: &str| JobPath::resolve(p).map_err(JobError::policy);
    let roots = rt.roots.clone();
    let deadline = Instant::now() + OP_TIME;
    let done = match op {
        FileOp::Put { path: p, sha256 } => {
            let target = path(&p)?;
            if hex(&Sha256::digest(data)) != sha256 {
                return Err(JobError::internal("the upload does not match its sha256"));
            }
            let bytes = data.to_vec();
            let work = move |_: &mut isolate::OpChannel| put(&roots, &target, &bytes);
            isolate::run(rt, deadline, &mut Frames, Route::Pipe, work)
        }
        FileOp::Get { path: p } => {
            let target = path(&p)?;
            // The bytes go straight to the host's stream; the supervisor only waits meanwhile.
            let work = move |c: &mut isolate::OpChannel| get(&roots, &target, c);
            isolate::run(rt, deadline, &mut Frames, Route::HostStream, work)
        }
        FileOp::Delete { path: p } => {
            let target = path(&p)?;
            let work = move |_: &mut isolate::OpChannel| delete(&roots, &target);
            isolate::run(rt, deadline, &mut Frames, Route::Pipe, work)
        }
        FileOp::List {
            path: p,
            depth,
            max_entries,
        } => {
            let target = path(&p)?;
            let work = move |_: &mut isolate::OpChannel| {
                files::list(&roots, &target, depth, max_entries).map(FileDone::Listed)
            };
            isolate::run(rt, deadline, &mut Frames, Route::Pipe, work)
        }
    };
    match done {
        Ok(result) => result,
        Err(OpError::Timeout) => Err(JobError::new(
            ErrorType::Timeout,
            format!("the file operation took longer than {}s", OP_TIME.as_secs()),
        )),
        Err(OpError::Lost(why) | OpError::Out(why)) => Err(JobError::internal(why)),
    }
}

/// The upload, whole or not at all (staged and renamed; a full workspace leaves nothing).
fn put(roots: &Roots, path: &JobPath, data: &[u8]) -> Result<FileDone, JobError> {
    let mode = Mode::from_bits(UPLOAD_MODE).ok_or_else(|| JobError::internal("upload mode"))?;
    files::write(roots, path, data, mode, true).map(FileDone::Written)
}

/// The file's bytes as artifact frames straight to the host, then its size and hash.
fn get(roots: &Roots, path: &JobPath, out: &mut dyn ArtifactOut) -> Result<FileDone, JobError> {
    let (mut file, meta) = files::open_regular(roots, path)?
        .ok_or_else(|| JobError::failure(format!("`{path}` does not exist")))?;
    let begin = ArtifactBegin {
        path: path.to_string(),
        size_bytes: meta.size,
        mime_type: mime_type(&path.to_string()).to_string(),
    };
    out.begin(&begin).map_err(JobError::internal)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; ARTIFACT_CHUNK];
    let mut sent = 0u64;
    // Never more than announced: a file that grows meanwhile is cut at its size when opened.
    while sent < meta.size {
        let want = usize::try_from(meta.size - sent).map_or(buf.len(), |l| l.min(buf.len()));
        let n = match file.read(&mut buf[..want]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(fs_error(path, &e)),
        };
        hasher.update(&buf[..n]);
        out.data(&buf[..n]).map_err(JobError::internal)?;
        sent += n as u64;
    }
    let sha256 = hex(&hasher.finalize());
    out.end(&ArtifactEnd {
        sha256: sha256.clone(),
    })
    .map_err(JobError::internal)?;
    Ok(FileDone::Read {
        path: path.to_string(),
        size_bytes: sent,
        sha256,
    })
}

/// A file, or a directory with everything in it (symlinks are removed, never followed).
fn delete(roots: &Roots, path: &JobPath) -> Result<FileDone, JobError> {
    let (root, rel) = fsafe::locate(roots, path).map_err(|e| fs_error(path, &e))?;
    let Some((name, parents)) = rel.split_last() else {
        return Err(JobError::policy(format!(
            "`{path}` is a root directory; delete what is in it"
        )));
    };
    let dir = root.open_dir(parents).map_err(|e| fs_error(path, &e))?;
    let meta = dir
        .stat_at(name)
        .map_err(|e| fs_error(path, &e))?
        .ok_or_else(|| JobError::failure(format!("`{path}` does not exist")))?;
    let mut count = 1u64;
    if meta.is_dir() {
        let inner = dir
            .open_dir(std::slice::from_ref(name))
            .map_err(|e| fs_error(path, &e))?;
        empty(&inner, path, &mut count, 0)?;
    }
    dir.unlink_at(name, meta.is_dir())
        .map_err(|e| fs_error(path, &e))?;
    Ok(FileDone::Deleted {
        path: path.to_string(),
        entries: count,
    })
}

fn empty(dir: &Dir, at: &JobPath, count: &mut u64, depth: u32) -> Result<(), JobError> {
    if depth > 64 {
        return Err(JobError::limit(format!(
            "`{at}` is nested too deep to delete"
        )));
    }
    for name in dir.names().map_err(|e| fs_error(at, &e))? {
        let Some(meta) = dir.stat_at(&name).map_err(|e| fs_error(at, &e))? else {
            continue;
        };
        *count += 1;
        if *count > MAX_DELETE {
            return Err(JobError::limit(format!(
                "`{at}` holds more than {MAX_DELETE} entries"
            )));
        }
        if meta.is_dir() {
            let sub = dir
                .open_dir(std::slice::from_ref(&name))
                .map_err(|e| fs_error(at, &e))?;
            let child = at.child(&name).unwrap_or_else(|| at.clone());
            empty(&sub, &child, count, depth + 1)?;
        }
        dir.unlink_at(&name, meta.is_dir())
            .map_err(|e| fs_error(at, &e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    #[test]
    fn delete_removes_trees_and_links_but_never_follows_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path().join("workspace");
        let tmp = dir.path().join("tmp");
        std::fs::create_dir_all(ws.join("a/b")).expect("dirs");
        std::fs::create_dir_all(&tmp).expect("tmp");
        std::fs::write(ws.join("a/b/f"), "x").expect("file");
        let outside = tempfile::tempdir().expect("outside");
        std::fs::write(outside.path().join("keep"), "k").expect("keep");
        symlink(outside.path(), ws.join("a/link")).expect("link");
        let roots = Roots::at(&ws, &tmp);
        let p = |s: &str| JobPath::parse(s).expect("path");
        let done = delete(&roots, &p("/workspace/a")).expect("deleted");
        assert_eq!(
            done,
            FileDone::Deleted {
                path: "/workspace/a".into(),
                entries: 4
            }
        );
        assert!(!ws.join("a").exists());
        assert!(
            outside.path().join("keep").exists(),
            "the link was not followed"
        );
        let e = delete(&roots, &p("/workspace/missing")).expect_err("missing");
        assert_eq!(e.kind, ErrorType::ExecutionFailure);
        let e = delete(&roots, &p("/workspace")).expect_err("root");
        assert_eq!(e.kind, ErrorType::PolicyViolation);
    }
}
