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

mod apply;

pub use apply::apply;

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

#[cfg(test)]
mod tests;
