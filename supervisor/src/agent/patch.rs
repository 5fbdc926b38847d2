//! `apply_unified_diff` on disk, all files or none: every file is read and patched in memory first
//! (any hunk that does not apply ends the step with nothing changed), the new contents are staged
//! next to their targets, then renamed into place with the originals kept as hard links until
//! every rename succeeded; a failure on the way puts everything back.

use std::io::Read as _;

use scriptgate_supervisor::job::diff::{self, Change, FilePatch};
use scriptgate_supervisor::job::paths::JobPath;
use scriptgate_supervisor::job::{DiffOutput, JobError};

use super::files::{fs_error, open_regular, stage, staging_name};
use super::fsafe::{self, Dir, Roots};

/// Files larger than this are not patched (a diff is for source files).
const MAX_PATCHED_FILE: u64 = 64 << 20;

/// One file's change, computed and staged.
struct Planned<'a> {
    path: &'a JobPath,
    change: Change,
    /// New contents (`None`: deleted).
    contents: Option<Vec<u8>>,
    mode: u32,
}

/// Applies every file of the diff, or none.
pub(crate) fn apply(roots: &Roots, files: &[(JobPath, FilePatch)]) -> Result<DiffOutput, JobError> {
    let planned = files
        .iter()
        .map(|(path, patch)| plan(roots, path, patch))
        .collect::<Result<Vec<_>, _>>()?;
    let mut commit = Commit::default();
    let result = commit
        .stage_all(roots, &planned)
        .and_then(|()| commit.swap_all());
    match result {
        Ok(()) => commit.finish(),
        Err(e) => {
            commit.roll_back();
            return Err(e);
        }
    }
    let list = |c: Change| -> Vec<String> {
        planned
            .iter()
            .filter(|p| p.change == c)
            .map(|p| p.path.to_string())
            .collect()
    };
    Ok(DiffOutput {
        files_modified: list(Change::Modify),
        files_created: list(Change::Create),
        files_deleted: list(Change::Delete),
    })
}

fn plan<'a>(roots: &Roots, path: &'a JobPath, patch: &FilePatch) -> Result<Planned<'a>, JobError> {
    let original = current(roots, path)?;
    let mode = match (&original, patch.mode) {
        (Some((_, mode)), _) => *mode,
        (None, Some(mode)) => mode,
        (None, None) => 0o644,
    };
    let contents = diff::apply(patch, original.as_ref().map(|(bytes, _)| bytes.as_slice()))
        .map_err(JobError::failure)?;
    Ok(Planned {
        path,
        change: patch.change,
        contents,
        mode,
    })
}

/// The file's bytes and permission bits, `None` when it does not exist.
fn current(roots: &Roots, path: &JobPath) -> Result<Option<(Vec<u8>, u32)>, JobError> {
    let Some((mut file, meta)) = open_regular(roots, path)? else {
        return Ok(None);
    };
    if meta.size > MAX_PATCHED_FILE {
        return Err(JobError::limit(format!(
            "`{path}` is larger than {MAX_PATCHED_FILE} bytes, too large to patch"
        )));
    }
    let mut bytes = Vec::with_capacity(meta.size as usize);
    file.read_to_end(&mut bytes)
        .map_err(|e| fs_error(path, &e))?;
    Ok(Some((bytes, meta.permissions())))
}

/// One staged change: its directory, the target name, and what stands in for it.
struct Staged {
    dir: Dir,
    name: String,
    change: Change,
    /// The new contents, staged (creations and modifications).
    staged: Option<String>,
    /// The original, kept under another name until the end (modifications and deletions).
    backup: Option<String>,
    swapped: bool,
}

/// Staged changes and directories created for them, undone unless finished.
#[derive(Default)]
struct Commit {
    staged: Vec<Staged>,
    /// (root handle, components) of each directory created, in creation order.
    created_dirs: Vec<(Dir, Vec<String>)>,
}

impl Commit {
    fn stage_all(&mut self, roots: &Roots, planned: &[Planned<'_>]) -> Result<(), JobError> {
        for p in planned {
            let (root, rel) = fsafe::locate(roots, p.path).map_err(|e| fs_error(p.path, &e))?;
            let Some((name, parents)) = rel.split_last() else {
                return Err(JobError::policy(format!(
                    "`{}` is a root directory",
                    p.path
                )));
            };
            let (dir, created) = root
                .create_dirs(parents)
                .map_err(|e| fs_error(p.path, &e))?;
            for d in created {
                let root = roots
                    .open(p.path.root())
                    .map_err(|e| fs_error(p.path, &e))?;
                self.created_dirs.push((root, d));
            }
            let mut entry = Staged {
                dir,
                name: name.clone(),
                change: p.change,
                staged: None,
                backup: None,
                swapped: false,
            };
            if let Some(contents) = &p.contents {
                let staged = staging_name(name, "patch");
                stage(&entry.dir, &staged, contents, p.mode).map_err(|e| fs_error(p.path, &e))?;
                entry.staged = Some(staged);
            }
            if p.change != Change::Create {
                let backup = staging_name(name, "orig");
                entry
                    .dir
                    .link_at(name, &backup)
                    .map_err(|e| fs_error(p.path, &e))?;
                entry.backup = Some(backup);
            }
            self.staged.push(entry);
        }
        Ok(())
    }

    fn swap_all(&mut self) -> Result<(), JobError> {
        for s in &mut self.staged {
            let done = match (&s.staged, s.change) {
                (Some(staged), Change::Create) => s.dir.rename_at(staged, &s.name, true),
                (Some(staged), _) => s.dir.rename_at(staged, &s.name, false),
                (None, _) => s.dir.unlink_at(&s.name, false),
            };
            done.map_err(|e| fs_error(&s.name, &e))?;
            s.swapped = true;
        }
        Ok(())
    }

    /// Puts back every original and removes everything staged or created.
    fn roll_back(self) {
        for s in self.staged.iter().rev() {
            if s.swapped {
                match &s.backup {
                    Some(backup) => {
                        let _ = s.dir.rename_at(backup, &s.name, false);
                    }
                    None => {
                        let _ = s.dir.unlink_at(&s.name, false);
                    }
                }
            } else if let Some(backup) = &s.backup {
                let _ = s.dir.unlink_at(backup, false);
            }
            if let Some(staged) = &s.staged
                && !s.swapped
            {
                let _ = s.dir.unlink_at(staged, false);
            }
        }
        for (root, dir) in self.created_dirs.iter().rev() {
            if let Some((name, parents)) = dir.split_last()
                && let Ok(parent) = root.open_dir(parents)
            {
                let _ = parent.unlink_at(name, true);
            }
        }
    }

    /// Drops the originals' extra names.
    fn finish(self) {
        for s in &self.staged {
            if let Some(backup) = &s.backup {
                let _ = s.dir.unlink_at(backup, false);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use scriptgate_supervisor::job::ErrorType;

    use super::*;

    fn setup() -> (tempfile::TempDir, std::path::PathBuf, Roots) {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).expect("ws");
        let roots = Roots::at(&ws, dir.path());
        (dir, ws, roots)
    }

    fn files(text: &str) -> Vec<(JobPath, FilePatch)> {
        diff::parse(text)
            .expect("parses")
            .files
            .into_iter()
            .map(|f| (JobPath::resolve(&f.path).expect("path"), f))
            .collect()
    }

    fn names(dir: &std::path::Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn creates_modifies_and_deletes_in_one_step() {
        let (_d, ws, roots) = setup();
        std::fs::write(ws.join("a.txt"), "one\ntwo\n").expect("a");
        std::fs::write(ws.join("old.txt"), "bye\n").expect("old");
        let diff = "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+TWO\n\
                    --- /dev/null\n+++ b/new/dir/n.txt\n@@ -0,0 +1 @@\n+new\n\
                    --- a/old.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n";
        let out = apply(&roots, &files(diff)).expect("applies");
        assert_eq!(out.files_modified, ["/workspace/a.txt"]);
        assert_eq!(out.files_created, ["/workspace/new/dir/n.txt"]);
        assert_eq!(out.files_deleted, ["/workspace/old.txt"]);
        assert_eq!(
            std::fs::read_to_string(ws.join("a.txt")).expect("a"),
            "one\nTWO\n"
        );
        assert_eq!(
            std::fs::read_to_string(ws.join("new/dir/n.txt")).expect("n"),
            "new\n"
        );
        assert_eq!(names(&ws), ["a.txt", "new"], "nothing staged is left");
    }

    #[test]
    fn a_diff_that_half_applies_changes_nothing() {
        let (_d, ws, roots) = setup();
        std::fs::write(ws.join("a.txt"), "one\ntwo\n").expect("a");
        std::fs::write(ws.join("b.txt"), "three\n").expect("b");
        let diff = "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+TWO\n\
                    --- /dev/null\n+++ b/created/c.txt\n@@ -0,0 +1 @@\n+c\n\
                    --- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-not three\n+x\n";
        let e = apply(&roots, &files(diff)).expect_err("the third file does not match");
        assert_eq!(e.kind, ErrorType::ExecutionFailure);
        assert!(e.message.contains("does not apply"), "{e}");
        assert_eq!(
            std::fs::read_to_string(ws.join("a.txt")).expect("a"),
            "one\ntwo\n"
        );
        assert_eq!(names(&ws), ["a.txt", "b.txt"]);
    }

    #[test]
    fn a_failure_while_swapping_puts_back_what_was_already_swapped() {
        let (_d, ws, roots) = setup();
        std::fs::write(ws.join("a.txt"), "one\n").expect("a");
        let diff = "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-one\n+ONE\n\
                    --- /dev/null\n+++ b/late.txt\n@@ -0,0 +1 @@\n+late\n";
        let planned = files(diff);
        let mut commit = Commit::default();
        let planned: Vec<Planned<'_>> = planned
            .iter()
            .map(|(p, f)| plan(&roots, p, f).expect("plans"))
            .collect();
        commit.stage_all(&roots, &planned).expect("staged");
        // Another file appears where the creation goes: its rename fails after a.txt's succeeded.
        std::fs::write(ws.join("late.txt"), "someone else's").expect("late");
        assert!(commit.swap_all().is_err());
        commit.roll_back();
        assert_eq!(
            std::fs::read_to_string(ws.join("a.txt")).expect("a"),
            "one\n"
        );
        assert_eq!(
            std::fs::read_to_string(ws.join("late.txt")).expect("late"),
            "someone else's"
        );
        assert_eq!(names(&ws), ["a.txt", "late.txt"]);
    }

    #[test]
    fn a_symlinked_target_is_refused_before_anything_changes() {
        let (_d, ws, roots) = setup();
        let outside = tempfile::tempdir().expect("outside");
        std::fs::write(outside.path().join("passwd"), "root\n").expect("target");
        std::os::unix::fs::symlink(outside.path().join("passwd"), ws.join("passwd")).expect("link");
        let e = apply(
            &roots,
            &files("--- a/passwd\n+++ b/passwd\n@@ -1 +1 @@\n-root\n+evil\n"),
        )
        .expect_err("link");
        assert_eq!(e.kind, ErrorType::PolicyViolation);
        assert_eq!(
            std::fs::read_to_string(outside.path().join("passwd")).expect("kept"),
            "root\n"
        );
    }
}
