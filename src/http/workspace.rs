//! The workspace of `/v1/execute` and `/v1/executions`: files in, artifact globs out, checked at
//! the edge (paths canonical and under `/workspace`, each once, contents that decode, sizes and
//! counts within the jobs maxima, globs as the job protocol reads them) into domain values.

use serde::Deserialize;
use serde_json::json;

use super::error::ApiError;
use crate::domain::work::WorkspaceFile;
use crate::sandbox::job::paths::{JobPath, Root};
use crate::sandbox::job::{self, Encoding, Maxima, WriteFile};

/// A file to write into `/workspace` before the script runs.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"path": "data/input.csv", "content": "a,b\n1,2\n"}))]
pub(crate) struct FileIn {
    /// Relative to `/workspace`, or absolute under it; canonical (no `..`, `.` or `//`).
    #[schema(example = "data/input.csv")]
    pub path: String,
    pub content: String,
    /// `utf8` (the default) or `base64` (for binary files).
    #[serde(default)]
    pub encoding: FileEncoding,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum FileEncoding {
    #[default]
    Utf8,
    Base64,
}

/// Artifact patterns are refused beyond this (one pattern of the jobs maximum stays free for
/// the plots a profile returns).
fn max_globs(maxima: &Maxima) -> usize {
    maxima.max_artifacts.saturating_sub(1)
}

/// The checked workspace of a script run.
pub(crate) fn workspace(
    files: Vec<FileIn>,
    artifacts: Vec<String>,
    maxima: &Maxima,
) -> Result<(Vec<WorkspaceFile>, Vec<String>), ApiError> {
    // The run is a job of one step per file, plus the script and its run.
    let max_files = maxima.max_steps.saturating_sub(2);
    if files.len() > max_files {
        return Err(ApiError::Schema(format!(
            "files: {} files is above this deployment's maximum of {max_files} (sandbox.jobs.max_steps - 2)",
            files.len()
        )));
    }
    let mut checked: Vec<WorkspaceFile> = Vec::with_capacity(files.len());
    let mut paths: Vec<JobPath> = Vec::with_capacity(files.len());
    for (i, f) in files.into_iter().enumerate() {
        let path = file_path(i, &f.path, &paths)?;
        let write = WriteFile {
            path: path.to_string(),
            content: f.content,
            encoding: match f.encoding {
                FileEncoding::Utf8 => Encoding::Utf8,
                FileEncoding::Base64 => Encoding::Base64,
            },
            mode: Default::default(),
        };
        if let Err(why) = write.bytes() {
            return Err(ApiError::Schema(format!("files[{i}].content: {why}")));
        }
        if write.decoded_len() > maxima.max_write_bytes {
            return Err(ApiError::Schema(format!(
                "files[{i}].content: {} bytes is above this deployment's maximum of {} (sandbox.jobs.max_write_bytes)",
                write.decoded_len(),
                maxima.max_write_bytes
            )));
        }
        paths.push(path);
        checked.push(WorkspaceFile {
            path: write.path,
            content: write.content,
            base64: write.encoding == Encoding::Base64,
        });
    }
    Ok((checked, globs(artifacts, maxima)?))
}

/// A file's path: under `/workspace`, canonical, neither a file given before nor a directory of
/// one (nor inside one).
fn file_path(i: usize, raw: &str, before: &[JobPath]) -> Result<JobPath, ApiError> {
    let bad = |why: String| ApiError::Schema(format!("files[{i}].path: {why}"));
    let path = JobPath::resolve(raw).map_err(bad)?;
    if path.root() != Root::Workspace || path.components().is_empty() {
        return Err(bad(format!("`{path}` is not a file under /workspace")));
    }
    if let Some(other) = before
        .iter()
        .find(|p| path.is_within(p) || p.is_within(&path))
    {
        return Err(bad(format!(
            "`{path}` is the same file as `{other}` or a directory of it"
        )));
    }
    Ok(path)
}

/// Artifact globs, read by the job protocol's own parser and checks (so they mean what a job's
/// `artifacts` mean), within `/workspace` and `/tmp`.
fn globs(artifacts: Vec<String>, maxima: &Maxima) -> Result<Vec<String>, ApiError> {
    if artifacts.len() > max_globs(maxima) {
        return Err(ApiError::Schema(format!(
            "artifacts: {} patterns is above this deployment's maximum of {} (sandbox.jobs.max_artifacts - 1)",
            artifacts.len(),
            max_globs(maxima)
        )));
    }
    for (i, pattern) in artifacts.iter().enumerate() {
        let probe = json!({"protocol_version": "1.0",
            "constraints": {"allowed_paths": ["/workspace", "/tmp"]},
            "steps": [{"id": "probe", "type": "list_tree", "arguments": {"path": "/workspace"}}],
            "artifacts": [pattern]});
        let error = match job::parse_value(&probe) {
            Ok(parsed) => job::check(parsed, maxima).err().map(|r| r.error.message),
            Err(e) => Some(e.message().to_string()),
        };
        if let Some(why) = error {
            let why = why.strip_prefix("artifacts: ").unwrap_or(&why);
            let why = why.replace("artifacts[0]: ", "");
            return Err(ApiError::Schema(format!("artifacts[{i}]: {why}")));
        }
    }
    Ok(artifacts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, content: &str, encoding: FileEncoding) -> FileIn {
        FileIn {
            path: path.into(),
            content: content.into(),
            encoding,
        }
    }

    fn message(files: Vec<FileIn>, artifacts: &[&str]) -> String {
        let artifacts = artifacts.iter().map(|a| a.to_string()).collect();
        match workspace(files, artifacts, &Maxima::default()) {
            Err(ApiError::Schema(m)) => m,
            other => panic!("expected a schema error, got {other:?}"),
        }
    }

    #[test]
    fn files_become_canonical_workspace_paths() {
        let (files, globs) = workspace(
            vec![
                file("data/in.csv", "a,b\n", FileEncoding::Utf8),
                file("/workspace/bin.dat", "AAE=", FileEncoding::Base64),
            ],
            vec!["out/*.png".into(), "/tmp/x.json".into()],
            &Maxima::default(),
        )
        .expect("valid");
        assert_eq!(files[0].path, "/workspace/data/in.csv");
        assert!(!files[0].base64 && files[1].base64);
        assert_eq!(globs, ["out/*.png", "/tmp/x.json"]);
    }

    #[test]
    fn bad_files_and_globs_name_their_field() {
        let utf8 = FileEncoding::Utf8;
        let cases = [
            (
                vec![file("../etc/passwd", "x", utf8)],
                vec![],
                "files[0].path",
            ),
            (
                vec![file("/tmp/a", "x", utf8)],
                vec![],
                "not a file under /workspace",
            ),
            (vec![file("/workspace", "x", utf8)], vec![], "files[0].path"),
            (
                vec![file("a", "x", utf8), file("/workspace/a", "y", utf8)],
                vec![],
                "files[1].path",
            ),
            (
                vec![file("a", "x", utf8), file("a/b", "y", utf8)],
                vec![],
                "directory",
            ),
            (
                vec![file("a", "***", FileEncoding::Base64)],
                vec![],
                "files[0].content",
            ),
            (vec![], vec!["/etc/*"], "artifacts[0]"),
            (vec![], vec!["/workspace/../x"], "artifacts[0]"),
            (vec![], vec!["ok.json", "/workspace/[a"], "artifacts[1]"),
        ];
        for (files, globs, mentions) in cases {
            let m = message(files, &globs);
            assert!(m.contains(mentions), "{m:?} should mention {mentions:?}");
        }
        let many: Vec<FileIn> = (0..99).map(|i| file(&format!("f{i}"), "", utf8)).collect();
        assert!(message(many, &[]).contains("maximum of 98"));
        let big = "x".repeat((16 << 20) + 1);
        assert!(message(vec![file("big", &big, utf8)], &[]).contains("max_write_bytes"));
    }
}
