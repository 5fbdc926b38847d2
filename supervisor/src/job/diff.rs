//! Unified diffs (`diff -u`, `git diff`): parsed into file patches and applied to file contents in
//! memory, so the agent can check every hunk of every file before it changes anything.
//!
//! Supported: creations (`--- /dev/null`), modifications and deletions (`+++ /dev/null`), git's
//! `a/`/`b/` prefixes and extended headers (`new file mode`, `deleted file mode`, `index`), `\ No
//! newline at end of file`, and hunks found at an offset from their stated line (as `patch` and
//! `git apply` do; never with fuzz). Refused: binary patches, renames, copies and mode changes,
//! quoted paths, and any hunk whose lines do not add up.

use std::fmt;

use super::ErrorType;

/// A parsed diff: one entry per file, each file at most once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    pub files: Vec<FilePatch>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Create,
    Modify,
    Delete,
}

/// The change of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePatch {
    /// As the diff names it, `a/`/`b/` removed: relative to `/workspace`, or absolute.
    pub path: String,
    pub change: Change,
    pub hunks: Vec<Hunk>,
    /// Permission bits of a created file (`new file mode 100755`).
    pub mode: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    pub old_start: usize,
    pub old_len: usize,
    pub new_start: usize,
    pub new_len: usize,
    pub lines: Vec<Line>,
    /// `\ No newline at end of file` after the old side's last line.
    pub old_no_newline: bool,
    pub new_no_newline: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    Context(String),
    Remove(String),
    Add(String),
}

/// Why a diff cannot be applied before any file is looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiffError {
    /// Not a unified diff this code can read.
    Malformed(String),
    /// A binary patch (refused: the agent applies text only).
    Binary(String),
    /// A rename, copy or mode change.
    Unsupported(String),
}

impl DiffError {
    pub fn error_type(&self) -> ErrorType {
        match self {
            DiffError::Malformed(_) | DiffError::Unsupported(_) => ErrorType::SchemaError,
            DiffError::Binary(_) => ErrorType::PolicyViolation,
        }
    }
}

impl fmt::Display for DiffError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DiffError::Malformed(m) => write!(f, "malformed diff: {m}"),
            DiffError::Binary(p) => write!(f, "binary patches are refused (`{p}`)"),
            DiffError::Unsupported(m) => write!(f, "unsupported diff: {m}"),
        }
    }
}

impl std::error::Error for DiffError {}

/// Parses a unified diff. Text outside file sections (a commit message, `Only in …`) is ignored.
pub fn parse(text: &str) -> Result<Patch, DiffError> {
    if text.contains('\0') {
        return Err(DiffError::Binary("a NUL byte in the diff".into()));
    }
    let lines = split_lines(text);
    let mut parser = Parser { lines, at: 0 };
    let mut files: Vec<FilePatch> = Vec::new();
    while let Some(line) = parser.peek() {
        let file = if line.starts_with("diff --git ") {
            parser.git_section()?
        } else if line.starts_with("--- ")
            && parser.peek_at(1).is_some_and(|l| l.starts_with("+++ "))
        {
            Some(parser.plain_section()?)
        } else if is_binary_marker(line) {
            return Err(DiffError::Binary(line.to_string()));
        } else {
            parser.at += 1;
            None
        };
        if let Some(file) = file {
            if files.iter().any(|f| f.path == file.path) {
                return Err(DiffError::Malformed(format!(
                    "`{}` is changed twice",
                    file.path
                )));
            }
            files.push(file);
        }
    }
    if files.is_empty() {
        return Err(DiffError::Malformed("no file changes found".into()));
    }
    Ok(Patch { files })
}

/// Lines without their `\n` (a `\r` stays part of the line).
fn split_lines(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text.split('\n').collect();
    if text.ends_with('\n') {
        lines.pop();
    }
    lines
}

fn is_binary_marker(line: &str) -> bool {
    line.starts_with("GIT binary patch")
        || (line.starts_with("Binary files ") && line.ends_with(" differ"))
}

struct Parser<'a> {
    lines: Vec<&'a str>,
    at: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&'a str> {
        self.lines.get(self.at).copied()
    }

    fn peek_at(&self, ahead: usize) -> Option<&'a str> {
        self.lines.get(self.at + ahead).copied()
    }

    fn next(&mut self) -> Option<&'a str> {
        let line = self.peek();
        self.at += 1;
        line
    }

    /// `diff --git a/P b/P`, its extended headers, then (usually) `---`/`+++` and hunks.
    fn git_section(&mut self) -> Result<Option<FilePatch>, DiffError> {
        let header = self.next().unwrap_or_default();
        let names = &header["diff --git ".len()..];
        let mut change = Change::Modify;
        let mut mode = None;
        while let Some(line) = self.peek() {
            if line.starts_with("--- ") || line.starts_with("diff --git ") || line.starts_with("@@")
            {
                break;
            }
            self.at += 1;
            if is_binary_marker(line) {
                return Err(DiffError::Binary(names.to_string()));
            }
            if let Some(m) = line.strip_prefix("new file mode ") {
                change = Change::Create;
                mode = Some(file_mode(m)?);
            } else if line.starts_with("deleted file mode ") {
                change = Change::Delete;
            } else if ["rename ", "copy ", "similarity ", "dissimilarity "]
                .iter()
                .any(|p| line.starts_with(p))
            {
                return Err(DiffError::Unsupported(format!(
                    "renames and copies (`{names}`)"
                )));
            } else if line.starts_with("old mode ") || line.starts_with("new mode ") {
                return Err(DiffError::Unsupported(format!("mode changes (`{names}`)")));
            }
        }
        if self.peek().is_some_and(|l| l.starts_with("--- ")) {
            let mut file = self.plain_section()?;
            file.mode = mode;
            return Ok(Some(file));
        }
        // An empty file created or deleted has no hunks, only git's header.
        match change {
            Change::Modify => Err(DiffError::Malformed(format!(
                "`{names}` has a git header but no changes"
            ))),
            _ => Ok(Some(FilePatch {
                path: git_header_path(names)?,
                change,
                hunks: Vec::new(),
                mode,
            })),
        }
    }

    /// `--- old` / `+++ new` and the hunks after them.
    fn plain_section(&mut self) -> Result<FilePatch, DiffError> {
        let old = header_path(self.next().unwrap_or_default(), "--- ")?;
        let new = header_path(self.next().unwrap_or_default(), "+++ ")?;
        let null = |p: &str| p == "/dev/null";
        // git's `a/`/`b/` prefixes (`diff -u` writes the paths as they are).
        let strip = (null(&old) || old.starts_with("a/")) && (null(&new) || new.starts_with("b/"));
        let unprefix = |p: &str| -> String {
            if strip && !null(p) {
                p[2..].to_string()
            } else {
                p.to_string()
            }
        };
        let (change, path) = match (null(&old), null(&new)) {
            (true, true) => return Err(DiffError::Malformed("both sides are /dev/null".into())),
            (true, false) => (Change::Create, unprefix(&new)),
            (false, true) => (Change::Delete, unprefix(&old)),
            (false, false) => {
                let (o, n) = (unprefix(&old), unprefix(&new));
                if o != n {
                    return Err(DiffError::Unsupported(format!("renames (`{o}` to `{n}`)")));
                }
                (Change::Modify, n)
            }
        };
        if path.is_empty() {
            return Err(DiffError::Malformed("a file header names no file".into()));
        }
        let mut hunks = Vec::new();
        while self.peek().is_some_and(|l| l.starts_with("@@")) {
            hunks.push(self.hunk(&path)?);
        }
        if hunks.is_empty() {
            return Err(DiffError::Malformed(format!("`{path}` has no hunks")));
        }
        let file = FilePatch {
            path,
            change,
            hunks,
            mode: None,
        };
        sides_agree(&file)?;
        Ok(file)
    }

    fn hunk(&mut self, path: &str) -> Result<Hunk, DiffError> {
        let header = self.next().unwrap_or_default();
        let (old_start, old_len, new_start, new_len) = hunk_header(header).ok_or_else(|| {
            DiffError::Malformed(format!("bad hunk header `{header}` in `{path}`"))
        })?;
        let mut hunk = Hunk {
            old_start,
            old_len,
            new_start,
            new_len,
            lines: Vec::new(),
            old_no_newline: false,
            new_no_newline: false,
        };
        let (mut old_left, mut new_left) = (old_len, new_len);
        while old_left > 0 || new_left > 0 {
            let Some(line) = self.next() else {
                return Err(DiffError::Malformed(format!(
                    "a hunk of `{path}` ends early"
                )));
            };
            let (tag, text) = line.split_at(line.len().min(1));
            let (parsed, old, new) = match tag {
                // Some tools strip the space of an empty context line.
                " " | "" => (Line::Context(text.to_string()), 1, 1),
                "-" => (Line::Remove(text.to_string()), 1, 0),
                "+" => (Line::Add(text.to_string()), 0, 1),
                "\\" => {
                    self.no_newline(&mut hunk);
                    continue;
                }
                _ => {
                    return Err(DiffError::Malformed(format!(
                        "a hunk of `{path}` has fewer lines than its header says"
                    )));
                }
            };
            if old > old_left || new > new_left {
                return Err(DiffError::Malformed(format!(
                    "a hunk of `{path}` has more lines than its header says"
                )));
            }
            old_left -= old;
            new_left -= new;
            hunk.lines.push(parsed);
        }
        if self.peek().is_some_and(|l| l.starts_with('\\')) {
            self.at += 1;
            self.no_newline(&mut hunk);
        }
        Ok(hunk)
    }

    /// `\ No newline at end of file` applies to the line before it.
    fn no_newline(&self, hunk: &mut Hunk) {
        match hunk.lines.last() {
            Some(Line::Context(_)) => {
                hunk.old_no_newline = true;
                hunk.new_no_newline = true;
            }
            Some(Line::Remove(_)) => hunk.old_no_newline = true,
            Some(Line::Add(_)) => hunk.new_no_newline = true,
            None => {}
        }
    }
}

/// `a/P b/P` → `P` (both sides must name the same file).
fn git_header_path(rest: &str) -> Result<String, DiffError> {
    if rest.starts_with('"') {
        return Err(DiffError::Unsupported("quoted paths".into()));
    }
    let n = rest.len().saturating_sub(5) / 2;
    let same = rest.len() == 2 * n + 5
        && rest.starts_with("a/")
        && rest.get(2 + n..2 + n + 3) == Some(" b/")
        && rest.get(2..2 + n) == rest.get(5 + n..);
    match rest.get(2..2 + n) {
        Some(path) if same && !path.is_empty() => Ok(path.to_string()),
        _ => Err(DiffError::Unsupported(format!(
            "a git header naming two different files (`{rest}`)"
        ))),
    }
}

fn header_path(line: &str, prefix: &str) -> Result<String, DiffError> {
    let rest = &line[prefix.len()..];
    // A tab starts the timestamp `diff -u` writes.
    let path = rest
        .split('\t')
        .next()
        .unwrap_or_default()
        .trim_end_matches('\r');
    if path.starts_with('"') {
        return Err(DiffError::Unsupported("quoted paths".into()));
    }
    Ok(path.to_string())
}

fn file_mode(text: &str) -> Result<u32, DiffError> {
    u32::from_str_radix(text.trim(), 8)
        .ok()
        .filter(|m| m & 0o170000 == 0o100000)
        .map(|m| m & 0o777)
        .ok_or_else(|| DiffError::Unsupported(format!("file mode `{text}` (regular files only)")))
}

/// `@@ -a[,b] +c[,d] @@…`
fn hunk_header(line: &str) -> Option<(usize, usize, usize, usize)> {
    let rest = line.strip_prefix("@@ -")?;
    let (ranges, _) = rest.split_once(" @@")?;
    let (old, new) = ranges.split_once(" +")?;
    let range = |r: &str| -> Option<(usize, usize)> {
        match r.split_once(',') {
            Some((start, len)) => Some((start.parse().ok()?, len.parse().ok()?)),
            None => Some((r.parse().ok()?, 1)),
        }
    };
    let (a, b) = range(old)?;
    let (c, d) = range(new)?;
    Some((a, b, c, d))
}

/// A creation only adds and a deletion only removes.
fn sides_agree(file: &FilePatch) -> Result<(), DiffError> {
    let lines = file.hunks.iter().flat_map(|h| &h.lines);
    let ok = match file.change {
        Change::Create => {
            file.hunks.iter().all(|h| h.old_len == 0)
                && lines.clone().all(|l| matches!(l, Line::Add(_)))
        }
        Change::Delete => {
            file.hunks.iter().all(|h| h.new_len == 0)
                && lines.clone().all(|l| matches!(l, Line::Remove(_)))
        }
        Change::Modify => true,
    };
    if ok {
        Ok(())
    } else {
        Err(DiffError::Malformed(format!(
            "`{}`: a creation may only add lines and a deletion only remove them",
            file.path
        )))
    }
}

/// A file's lines, and whether its last line ends with a newline.
struct Text<'a> {
    lines: Vec<&'a [u8]>,
    final_newline: bool,
}

impl<'a> Text<'a> {
    fn of(bytes: &'a [u8]) -> Self {
        let mut lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
        let final_newline = bytes.ends_with(b"\n");
        if final_newline || bytes.is_empty() {
            lines.pop();
        }
        Text {
            lines,
            final_newline,
        }
    }
}

fn join(lines: &[&[u8]], final_newline: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(lines.iter().map(|l| l.len() + 1).sum());
    for (i, line) in lines.iter().enumerate() {
        out.extend_from_slice(line);
        if i + 1 < lines.len() || final_newline {
            out.push(b'\n');
        }
    }
    out
}

/// Applies one file's change to its current contents (`None`: the file does not exist). Returns the
/// new contents, or `None` when the file is deleted.
pub fn apply(file: &FilePatch, original: Option<&[u8]>) -> Result<Option<Vec<u8>>, String> {
    match (file.change, original) {
        (Change::Create, Some(_)) => Err(format!("`{}` already exists", file.path)),
        (Change::Modify | Change::Delete, None) => Err(format!("`{}` does not exist", file.path)),
        (Change::Create, None) => {
            let lines: Vec<&[u8]> = added(file).collect();
            let last = file.hunks.last();
            Ok(Some(join(&lines, !last.is_some_and(|h| h.new_no_newline))))
        }
        (Change::Delete, Some(bytes)) => {
            let lines: Vec<&[u8]> = removed(file).collect();
            let last = file.hunks.last();
            let expected = join(&lines, !last.is_some_and(|h| h.old_no_newline));
            if bytes == expected.as_slice() {
                Ok(None)
            } else {
                Err(format!(
                    "`{}` is not what the diff deletes (its contents differ)",
                    file.path
                ))
            }
        }
        (Change::Modify, Some(bytes)) => modify(file, bytes).map(Some),
    }
}

fn added(file: &FilePatch) -> impl Iterator<Item = &[u8]> {
    file.hunks
        .iter()
        .flat_map(|h| &h.lines)
        .filter_map(|l| match l {
            Line::Add(t) => Some(t.as_bytes()),
            _ => None,
        })
}

fn removed(file: &FilePatch) -> impl Iterator<Item = &[u8]> {
    file.hunks
        .iter()
        .flat_map(|h| &h.lines)
        .filter_map(|l| match l {
            Line::Remove(t) => Some(t.as_bytes()),
            _ => None,
        })
}

fn modify(file: &FilePatch, bytes: &[u8]) -> Result<Vec<u8>, String> {
    let text = Text::of(bytes);
    let mut out: Vec<&[u8]> = Vec::with_capacity(text.lines.len());
    let mut final_newline = text.final_newline;
    let mut pos = 0usize;
    let mut offset: isize = 0;
    for (number, hunk) in file.hunks.iter().enumerate() {
        let old: Vec<&[u8]> = hunk
            .lines
            .iter()
            .filter_map(|l| match l {
                Line::Context(t) | Line::Remove(t) => Some(t.as_bytes()),
                Line::Add(_) => None,
            })
            .collect();
        let new = hunk.lines.iter().filter_map(|l| match l {
            Line::Context(t) | Line::Add(t) => Some(t.as_bytes()),
            Line::Remove(_) => None,
        });
        // A hunk that removes nothing is anchored after line `old_start`, others at it.
        let stated = if hunk.old_len == 0 {
            hunk.old_start
        } else {
            hunk.old_start.saturating_sub(1)
        };
        let expected = (stated as isize + offset).max(pos as isize) as usize;
        let at = find(&text, &old, expected, pos, hunk).ok_or_else(|| {
            format!(
                "hunk {} of `{}` does not apply (its lines near line {} are not in the file)",
                number + 1,
                file.path,
                hunk.old_start
            )
        })?;
        out.extend_from_slice(&text.lines[pos..at]);
        out.extend(new);
        pos = at + old.len();
        offset = at as isize - stated as isize;
        if pos == text.lines.len() {
            final_newline = !hunk.new_no_newline;
        }
    }
    out.extend_from_slice(&text.lines[pos..]);
    Ok(join(&out, final_newline))
}

/// Where `old` matches the file at or after `from`, nearest to `expected` first.
fn find(
    text: &Text<'_>,
    old: &[&[u8]],
    expected: usize,
    from: usize,
    hunk: &Hunk,
) -> Option<usize> {
    let n = text.lines.len();
    if old.len() > n.saturating_sub(from) {
        return None;
    }
    let last = n - old.len();
    let fits = |at: usize| -> bool {
        if text.lines[at..at + old.len()] != *old {
            return false;
        }
        // The old side's last line must end as the file's does (`\ No newline at end of file`).
        let at_end = at + old.len() == n;
        match (hunk.old_no_newline, at_end) {
            (true, end) => end && !text.final_newline,
            (false, true) => old.is_empty() || text.final_newline,
            (false, false) => true,
        }
    };
    let expected = expected.clamp(from, last);
    (0..=last - from)
        .flat_map(|d| [expected.checked_add(d), expected.checked_sub(d)])
        .flatten()
        .filter(|at| (from..=last).contains(at))
        .find(|at| fits(*at))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODIFY: &str = "\
diff --git a/src/app.py b/src/app.py
index 3b18e51..a2b1c3d 100644
--- a/src/app.py
+++ b/src/app.py
@@ -1,4 +1,4 @@
 import sys
-print('hello')
+print('hello, world')
 x = 1
 y = 2
";

    fn one(diff: &str) -> FilePatch {
        let mut patch = parse(diff).expect("parses");
        assert_eq!(patch.files.len(), 1);
        patch.files.remove(0)
    }

    #[test]
    fn a_git_modification_applies_at_its_line_and_at_an_offset() {
        let file = one(MODIFY);
        assert_eq!(file.path, "src/app.py");
        assert_eq!(file.change, Change::Modify);
        let original = b"import sys\nprint('hello')\nx = 1\ny = 2\n";
        let out = apply(&file, Some(original)).expect("applies");
        assert_eq!(
            out.as_deref(),
            Some(&b"import sys\nprint('hello, world')\nx = 1\ny = 2\n"[..])
        );
        let shifted = b"# header\n# more\nimport sys\nprint('hello')\nx = 1\ny = 2\nz = 3\n";
        let out = apply(&file, Some(shifted)).expect("applies at an offset");
        assert_eq!(
            out.as_deref(),
            Some(
                &b"# header\n# more\nimport sys\nprint('hello, world')\nx = 1\ny = 2\nz = 3\n"[..]
            )
        );
    }

    #[test]
    fn a_hunk_that_does_not_match_is_an_error_not_a_partial_change() {
        let file = one(MODIFY);
        let err =
            apply(&file, Some(b"import sys\nprint('bye')\nx = 1\ny = 2\n")).expect_err("no match");
        assert!(
            err.contains("hunk 1 of `src/app.py` does not apply"),
            "{err}"
        );
        assert!(apply(&file, None).is_err(), "missing file");
    }

    #[test]
    fn creations_and_deletions_with_dev_null() {
        let created = one("--- /dev/null\n+++ b/new/file.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n");
        assert_eq!(
            (created.change, created.path.as_str()),
            (Change::Create, "new/file.txt")
        );
        assert_eq!(
            apply(&created, None).expect("create"),
            Some(b"one\ntwo\n".to_vec())
        );
        assert!(apply(&created, Some(b"")).is_err(), "exists already");
        let deleted = one("--- a/old.txt\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-one\n-two\n");
        assert_eq!(deleted.change, Change::Delete);
        assert_eq!(apply(&deleted, Some(b"one\ntwo\n")).expect("delete"), None);
        assert!(
            apply(&deleted, Some(b"one\nthree\n")).is_err(),
            "different contents"
        );
    }

    #[test]
    fn git_empty_files_and_modes() {
        let patch = parse(
            "diff --git a/empty b/empty\nnew file mode 100755\nindex 0000000..e69de29\n\
             diff --git a/gone b/gone\ndeleted file mode 100644\nindex e69de29..0000000\n",
        )
        .expect("parses");
        assert_eq!(patch.files[0].change, Change::Create);
        assert_eq!(patch.files[0].mode, Some(0o755));
        assert_eq!(
            apply(&patch.files[0], None).expect("create"),
            Some(Vec::new())
        );
        assert_eq!(patch.files[1].change, Change::Delete);
        assert_eq!(apply(&patch.files[1], Some(b"")).expect("delete"), None);
    }

    #[test]
    fn missing_final_newlines_are_kept_and_checked() {
        let file = one(
            "--- a.txt\n+++ a.txt\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n",
        );
        assert_eq!(
            apply(&file, Some(b"a\nb")).expect("applies"),
            Some(b"a\nc".to_vec())
        );
        assert!(
            apply(&file, Some(b"a\nb\n")).is_err(),
            "the file ends with a newline"
        );
        let add_newline =
            one("--- a.txt\n+++ a.txt\n@@ -1 +1 @@\n-x\n\\ No newline at end of file\n+x\n");
        assert_eq!(
            apply(&add_newline, Some(b"x")).expect("applies"),
            Some(b"x\n".to_vec())
        );
    }

    #[test]
    fn binary_patches_renames_and_broken_hunks_are_refused() {
        let binary = "diff --git a/logo.png b/logo.png\nindex 1..2 100644\nGIT binary patch\nliteral 5\nabc\n";
        assert!(matches!(parse(binary), Err(DiffError::Binary(_))));
        assert!(matches!(
            parse("Binary files a/x and b/x differ\n"),
            Err(DiffError::Binary(_))
        ));
        assert!(matches!(
            parse("--- a\n+++ a\n@@ -1 +1 @@\n-\0\n+x\n"),
            Err(DiffError::Binary(_))
        ));
        let rename = "diff --git a/x b/y\nsimilarity index 100%\nrename from x\nrename to y\n";
        assert!(matches!(parse(rename), Err(DiffError::Unsupported(_))));
        assert!(matches!(
            parse("--- a/x\n+++ b/y\n@@ -1 +1 @@\n-a\n+b\n"),
            Err(DiffError::Unsupported(_))
        ));
        for broken in [
            "--- a\n+++ a\n@@ -1,3 +1,3 @@\n x\n-y\n+z\n",
            "--- a\n+++ a\n@@ -1 +1 @@\n-a\n-b\n+c\n",
            "--- a\n+++ a\n@@ nonsense @@\n",
            "--- a\n+++ a\n",
            "just some text\n",
            "",
        ] {
            assert!(
                matches!(parse(broken), Err(DiffError::Malformed(_))),
                "{broken:?}"
            );
        }
    }

    #[test]
    fn paths_are_returned_as_written_for_the_path_rules_to_judge() {
        let file = one("--- a/../etc/passwd\n+++ b/../etc/passwd\n@@ -1 +1 @@\n-root\n+evil\n");
        assert_eq!(file.path, "../etc/passwd");
        let file = one("--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-root\n+evil\n");
        assert_eq!(file.path, "/etc/passwd");
    }

    #[test]
    fn several_hunks_apply_in_order_with_their_offsets() {
        let original: Vec<u8> = (1..=20)
            .flat_map(|i| format!("line {i}\n").into_bytes())
            .collect();
        let diff = "--- f\n+++ f\n@@ -2,3 +2,3 @@\n line 2\n-line 3\n+LINE 3\n line 4\n@@ -15,3 +15,4 @@\n line 15\n line 16\n+inserted\n line 17\n";
        let out = apply(&one(diff), Some(&original))
            .expect("applies")
            .expect("kept");
        let text = String::from_utf8(out).expect("utf8");
        assert!(text.contains("line 2\nLINE 3\nline 4"), "{text}");
        assert!(text.contains("line 16\ninserted\nline 17"), "{text}");
        assert_eq!(text.lines().count(), 21);
    }
}
