//! Applying one file's change to its contents, in memory: every hunk must match exactly (at its
//! stated line or the nearest offset), or nothing is returned.

use super::{Change, FilePatch, Hunk, Line};

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
