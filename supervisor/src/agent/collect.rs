//! Collecting artifacts after the steps (whatever their outcome): globs expanded within a budget
//! of directory entries, each regular file hashed and streamed in chunks; anything else (a
//! symlink, a directory, a FIFO, a file over a cap) is an error entry, never a job failure.

use std::collections::HashSet;
use std::io::Read as _;
use std::time::Instant;

use scriptgate_supervisor::job::paths::JobPath;
use scriptgate_supervisor::job::{ArtifactEntry, ArtifactPattern, JobError, Maxima, mime_type};
use scriptgate_supervisor::{ARTIFACT_CHUNK, ArtifactBegin, ArtifactEnd};
use sha2::{Digest, Sha256};

use super::files::{fs_error, hex, open_regular};
use super::fsafe::{Dir, Roots};

/// Where collected files go (frames to the host, a directory, or nowhere but their hash).
pub(crate) trait ArtifactOut {
    fn begin(&mut self, begin: &ArtifactBegin) -> Result<(), String>;
    fn data(&mut self, chunk: &[u8]) -> Result<(), String>;
    fn end(&mut self, end: &ArtifactEnd) -> Result<(), String>;
}

/// Collects every pattern's files into `out` until `deadline` (a file cut short by it is ended
/// cleanly and reported as a timeout, so the stream is never torn); `Err` only when `out` fails.
pub(crate) fn collect(
    roots: &Roots,
    patterns: &[ArtifactPattern],
    maxima: &Maxima,
    deadline: Instant,
    out: &mut dyn ArtifactOut,
) -> Result<Vec<ArtifactEntry>, String> {
    let mut entries = Vec::new();
    let mut seen = HashSet::new();
    let mut total = 0u64;
    let mut count = 0usize;
    for pattern in patterns {
        let matched = match expand(roots, pattern, maxima) {
            Ok(paths) => paths,
            Err(e) => {
                entries.push(ArtifactEntry::failed(&pattern.text, e));
                continue;
            }
        };
        for path in matched {
            if !seen.insert(path.clone()) {
                continue;
            }
            if count >= maxima.max_artifacts {
                let e = JobError::limit(format!(
                    "more than {} artifact files (this deployment's maximum)",
                    maxima.max_artifacts
                ));
                entries.push(ArtifactEntry::failed(path.to_string(), e));
                continue;
            }
            if Instant::now() >= deadline {
                entries.push(ArtifactEntry::failed(path.to_string(), late()));
                continue;
            }
            let entry = send(roots, &path, maxima, &mut total, deadline, out)?;
            count += usize::from(entry.error.is_none());
            entries.push(entry);
        }
    }
    Ok(entries)
}

/// One file: its entry (an error entry when it cannot be returned).
fn late() -> JobError {
    JobError::new(
        scriptgate_supervisor::job::ErrorType::Timeout,
        "artifact collection ran out of time",
    )
}

fn send(
    roots: &Roots,
    path: &JobPath,
    maxima: &Maxima,
    total: &mut u64,
    deadline: Instant,
    out: &mut dyn ArtifactOut,
) -> Result<ArtifactEntry, String> {
    let failed = |e: JobError| Ok(ArtifactEntry::failed(path.to_string(), e));
    let (mut file, meta) = match open_regular(roots, path) {
        Ok(Some(found)) => found,
        Ok(None) => return failed(JobError::failure(format!("`{path}` does not exist"))),
        Err(e) => return failed(e),
    };
    if meta.size > maxima.max_artifact_bytes {
        return failed(JobError::limit(format!(
            "`{path}` has {} bytes, above the maximum of {} per artifact",
            meta.size, maxima.max_artifact_bytes
        )));
    }
    if *total + meta.size > maxima.max_artifacts_total_bytes {
        return failed(JobError::limit(format!(
            "`{path}` would take the job's artifacts above the maximum of {} bytes",
            maxima.max_artifacts_total_bytes
        )));
    }
    let mime = mime_type(&path.to_string()).to_string();
    out.begin(&ArtifactBegin {
        path: path.to_string(),
        size_bytes: meta.size,
        mime_type: mime.clone(),
    })?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; ARTIFACT_CHUNK];
    let mut sent = 0u64;
    let mut read_error = None;
    while sent < meta.size {
        if Instant::now() >= deadline {
            read_error = Some(late());
            break;
        }
        let want = usize::try_from(meta.size - sent)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        match file.read(&mut buf[..want]) {
            Ok(0) => break,
            Ok(n) => {
                hasher.update(&buf[..n]);
                out.data(&buf[..n])?;
                sent += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                read_error = Some(fs_error(path, &e));
                break;
            }
        }
    }
    let sha256 = hex(&hasher.finalize());
    out.end(&ArtifactEnd {
        sha256: sha256.clone(),
    })?;
    // A file cut short ends with its (partial) hash: the receiver sees the size fall short and
    // drops it.
    if let Some(e) = read_error {
        return failed(e);
    }
    if sent != meta.size {
        return failed(JobError::failure(format!(
            "`{path}` changed while it was read"
        )));
    }
    *total += sent;
    Ok(ArtifactEntry {
        path: path.to_string(),
        sha256: Some(sha256),
        size_bytes: Some(sent),
        mime_type: Some(mime),
        error: None,
    })
}

fn has_magic(component: &str) -> bool {
    component.contains(['*', '?', '['])
}

/// The paths a pattern names: itself when it has no wildcard, else the matches, in order.
fn expand(
    roots: &Roots,
    pattern: &ArtifactPattern,
    maxima: &Maxima,
) -> Result<Vec<JobPath>, JobError> {
    let base = JobPath::parse(pattern.root.path()).map_err(JobError::internal)?;
    if !pattern.components.iter().any(|c| has_magic(c)) {
        let mut path = base;
        for c in &pattern.components {
            path = path
                .child(c)
                .ok_or_else(|| JobError::policy(format!("`{}` is not canonical", pattern.text)))?;
        }
        return Ok(vec![path]);
    }
    let dir = roots.open(pattern.root).map_err(|e| fs_error(&base, &e))?;
    let mut walk = Walk {
        pattern,
        budget: maxima.max_glob_entries,
        limit: maxima.max_artifacts,
        found: Vec::new(),
    };
    walk.visit(&dir, &base, 0)?;
    walk.found.sort();
    Ok(walk.found)
}

struct Walk<'a> {
    pattern: &'a ArtifactPattern,
    /// Directory entries still allowed to be looked at.
    budget: u64,
    limit: usize,
    found: Vec<JobPath>,
}

impl Walk<'_> {
    fn visit(&mut self, dir: &Dir, at: &JobPath, index: usize) -> Result<(), JobError> {
        let components = &self.pattern.components;
        let Some(component) = components.get(index) else {
            return self.push(at.clone());
        };
        let last = index + 1 == components.len();
        if !has_magic(component) {
            let Some(next) = at.child(component) else {
                return Ok(());
            };
            if last {
                // Below a wildcard, a literal name matches only what exists.
                let exists = matches!(dir.stat_at(component), Ok(Some(_)));
                return if exists { self.push(next) } else { Ok(()) };
            }
            return match dir.open_dir(std::slice::from_ref(component)) {
                Ok(sub) => self.visit(&sub, &next, index + 1),
                Err(_) => Ok(()), // missing, or not a plain directory: no matches below
            };
        }
        if component == "**" {
            // Zero directories here, or one more level (symlinks are never followed).
            self.visit(dir, at, index + 1)?;
            for (sub, path) in self.subdirectories(dir, at)? {
                self.visit(&sub, &path, index)?;
            }
            return Ok(());
        }
        let matcher = glob::Pattern::new(component).map_err(|e| {
            JobError::new(
                scriptgate_supervisor::job::ErrorType::SchemaError,
                e.to_string(),
            )
        })?;
        let options = glob::MatchOptions {
            case_sensitive: true,
            require_literal_separator: true,
            require_literal_leading_dot: true,
        };
        for name in self.names(dir, at)? {
            if !matcher.matches_with(&name, options) {
                continue;
            }
            let Some(next) = at.child(&name) else {
                continue;
            };
            if last {
                self.push(next)?;
            } else if let Ok(sub) = dir.open_dir(std::slice::from_ref(&name)) {
                self.visit(&sub, &next, index + 1)?;
            }
        }
        Ok(())
    }

    fn names(&mut self, dir: &Dir, at: &JobPath) -> Result<Vec<String>, JobError> {
        let mut names = dir.names().map_err(|e| fs_error(at, &e))?;
        let n = names.len() as u64;
        if n > self.budget {
            return Err(JobError::limit(format!(
                "`{}` looks at more directory entries than this deployment's maximum",
                self.pattern.text
            )));
        }
        self.budget -= n;
        names.sort();
        Ok(names)
    }

    fn subdirectories(&mut self, dir: &Dir, at: &JobPath) -> Result<Vec<(Dir, JobPath)>, JobError> {
        let mut out = Vec::new();
        for name in self.names(dir, at)? {
            let is_dir = matches!(dir.stat_at(&name), Ok(Some(m)) if m.is_dir());
            let (Some(path), true) = (at.child(&name), is_dir) else {
                continue;
            };
            if let Ok(sub) = dir.open_dir(std::slice::from_ref(&name)) {
                out.push((sub, path));
            }
        }
        Ok(out)
    }

    fn push(&mut self, path: JobPath) -> Result<(), JobError> {
        if self.found.len() >= self.limit {
            return Err(JobError::limit(format!(
                "`{}` matches more than {} files (this deployment's maximum)",
                self.pattern.text, self.limit
            )));
        }
        self.found.push(path);
        Ok(())
    }
}

/// An [`ArtifactOut`] that keeps the files in memory (tests).
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct Kept {
    pub(crate) files: Vec<(ArtifactBegin, Vec<u8>, String)>,
}

#[cfg(test)]
impl ArtifactOut for Kept {
    fn begin(&mut self, begin: &ArtifactBegin) -> Result<(), String> {
        self.files.push((begin.clone(), Vec::new(), String::new()));
        Ok(())
    }

    fn data(&mut self, chunk: &[u8]) -> Result<(), String> {
        self.files
            .last_mut()
            .ok_or("data before begin")?
            .1
            .extend_from_slice(chunk);
        Ok(())
    }

    fn end(&mut self, end: &ArtifactEnd) -> Result<(), String> {
        self.files.last_mut().ok_or("end before begin")?.2 = end.sha256.clone();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use scriptgate_supervisor::job::{ErrorType, check, parse_value};
    use serde_json::json;

    use super::*;

    fn patterns(globs: &[&str]) -> Vec<ArtifactPattern> {
        let job = parse_value(&json!({"protocol_version": "1.0", "artifacts": globs,
            "steps": [{"id": "a", "type": "list_tree", "arguments": {"path": "/workspace"}}]}))
        .expect("parses");
        check(job, &Maxima::default())
            .expect("checks")
            .artifacts()
            .to_vec()
    }

    fn far() -> Instant {
        Instant::now() + std::time::Duration::from_secs(3600)
    }

    fn setup() -> (tempfile::TempDir, std::path::PathBuf, Roots) {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("out/deep")).expect("ws");
        let roots = Roots::at(&ws, dir.path());
        (dir, ws, roots)
    }

    #[test]
    fn files_are_hashed_streamed_and_typed_by_extension() {
        let (_d, ws, roots) = setup();
        std::fs::write(ws.join("report.json"), "{}").expect("report");
        std::fs::write(ws.join("out/a.png"), vec![7u8; ARTIFACT_CHUNK * 2 + 5]).expect("png");
        std::fs::write(ws.join("out/deep/b.png"), "b").expect("png");
        std::fs::write(ws.join("out/.hidden.png"), "h").expect("hidden");
        let mut kept = Kept::default();
        let entries = collect(
            &roots,
            &patterns(&[
                "/workspace/report.json",
                "/workspace/out/*.png",
                "/workspace/**/b.png",
            ]),
            &Maxima::default(),
            far(),
            &mut kept,
        )
        .expect("collects");
        let paths: Vec<&str> = entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/workspace/report.json",
                "/workspace/out/a.png",
                "/workspace/out/deep/b.png"
            ]
        );
        assert!(entries.iter().all(|e| e.error.is_none()), "{entries:?}");
        assert_eq!(entries[0].mime_type.as_deref(), Some("application/json"));
        assert_eq!(kept.files[1].1.len(), ARTIFACT_CHUNK * 2 + 5);
        assert_eq!(Some(kept.files[1].2.clone()), entries[1].sha256);
        assert_eq!(
            entries[1].sha256,
            Some(hex(&Sha256::digest(vec![7u8; ARTIFACT_CHUNK * 2 + 5])))
        );
    }

    #[test]
    fn a_passed_deadline_ends_files_cleanly_as_timeouts() {
        let (_d, ws, roots) = setup();
        std::fs::write(ws.join("a.txt"), "a").expect("a");
        std::fs::write(ws.join("b.txt"), "b").expect("b");
        let mut kept = Kept::default();
        let entries = collect(
            &roots,
            &patterns(&["/workspace/*.txt"]),
            &Maxima::default(),
            Instant::now(),
            &mut kept,
        )
        .expect("collects");
        let kinds: Vec<Option<ErrorType>> = entries
            .iter()
            .map(|e| e.error.as_ref().map(|e| e.kind))
            .collect();
        assert_eq!(kinds, [Some(ErrorType::Timeout), Some(ErrorType::Timeout)]);
        assert!(kept.files.is_empty(), "nothing begun");
    }

    #[test]
    fn symlinks_directories_and_missing_files_are_per_artifact_errors() {
        let (_d, ws, roots) = setup();
        std::os::unix::fs::symlink("/etc/passwd", ws.join("link.txt")).expect("link");
        let mut kept = Kept::default();
        let entries = collect(
            &roots,
            &patterns(&[
                "/workspace/link.txt",
                "/workspace/out",
                "/workspace/none.txt",
            ]),
            &Maxima::default(),
            far(),
            &mut kept,
        )
        .expect("collects");
        let kinds: Vec<ErrorType> = entries
            .iter()
            .map(|e| e.error.as_ref().expect("an error").kind)
            .collect();
        assert_eq!(
            kinds,
            [
                ErrorType::PolicyViolation,
                ErrorType::PolicyViolation,
                ErrorType::ExecutionFailure
            ]
        );
        assert!(kept.files.is_empty());
    }

    #[test]
    fn a_glob_matching_100000_files_is_a_typed_error_not_a_long_walk() {
        let (_d, ws, roots) = setup();
        let many = ws.join("many");
        std::fs::create_dir(&many).expect("dir");
        for i in 0..100_000 {
            std::fs::File::create(many.join(format!("f{i}.txt"))).expect("file");
        }
        let mut kept = Kept::default();
        let started = std::time::Instant::now();
        let entries = collect(
            &roots,
            &patterns(&["/workspace/many/*.txt"]),
            &Maxima::default(),
            far(),
            &mut kept,
        )
        .expect("collects");
        assert_eq!(entries.len(), 1);
        let error = entries[0].error.as_ref().expect("an error");
        assert_eq!(error.kind, ErrorType::ResourceLimitExceeded);
        assert!(kept.files.is_empty());
        // A bound on a hang, not a speed goal.
        assert!(started.elapsed() < std::time::Duration::from_secs(60));
        let few = Maxima {
            max_glob_entries: 1_000_000,
            ..Maxima::default()
        };
        let entries = collect(
            &roots,
            &patterns(&["/workspace/many/*.txt"]),
            &few,
            far(),
            &mut kept,
        )
        .expect("collects");
        assert_eq!(
            entries[0].error.as_ref().map(|e| e.kind),
            Some(ErrorType::ResourceLimitExceeded),
            "over max_artifacts"
        );
    }
}
