//! A here-string after another redirection (`jq . >/dev/null <<<"$body"`, `done 2>&1 <<< "$x"`):
//! bash takes redirections in any order, the grammar (tree-sitter-bash 0.25) only takes a
//! here-string before the file redirections of a command. [`reorder`] swaps the two in place, on
//! one line: the here-string moves in front of the redirections that preceded it. The redirections
//! apply in the same order among themselves, standard input comes from the here-string either way,
//! and the rules see the same command, the same here-string and the same targets.

use std::ops::Range;

/// Whether `src` has a here-string at all (the cheap test before [`reorder`] copies anything).
pub fn present(src: &[u8]) -> bool {
    memchr::memmem::find(src, b"<<<").is_some()
}

/// Rewrites `bytes` so every here-string that follows file redirections on its line comes first.
/// Each swap keeps the length of the range it rewrites and stays inside one line, so byte offsets
/// outside it and every line number are unchanged. Returns whether anything changed.
pub fn reorder(bytes: &mut [u8]) -> bool {
    let swaps: Vec<(Range<usize>, Vec<u8>)> = memchr::memmem::find_iter(bytes, b"<<<")
        .filter_map(|at| swap(bytes, at))
        .collect();
    for (range, text) in &swaps {
        bytes[range.clone()].copy_from_slice(text);
    }
    !swaps.is_empty()
}

/// The swap for the here-string operator at `at`: the range from the first redirection before it
/// to the end of its word, and the rewritten text (here-string, one blank, redirections, blanks).
fn swap(src: &[u8], at: usize) -> Option<(Range<usize>, Vec<u8>)> {
    if at > 0 && src[at - 1] == b'<' || src.get(at + 3) == Some(&b'<') {
        return None;
    }
    let end = word_end(src, at + 3)?;
    let line_start = src[..at]
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |i| i + 1);
    let first = redirections_before(&src[line_start..at])? + line_start;
    let redirections = trim_end(&src[first..at]);
    let herestring = &src[at..end];
    if redirections.len() == at - first {
        // No blank between the last redirection and `<<<`: nothing to put between them.
        return None;
    }
    let mut text = Vec::with_capacity(end - first);
    text.extend_from_slice(herestring);
    text.push(b' ');
    text.extend_from_slice(redirections);
    text.resize(end - first, b' ');
    Some((first..end, text))
}

/// The end of the here-string's word that starts after the blanks at `from`: quotes, `$( … )`
/// and `${ … }` are skipped whole. None when the word runs past its line or is empty.
fn word_end(src: &[u8], from: usize) -> Option<usize> {
    let mut i = from
        + src[from..]
            .iter()
            .take_while(|b| matches!(b, b' ' | b'\t'))
            .count();
    let start = i;
    while let Some(&b) = src.get(i) {
        match b {
            b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'<' | b'>' | b')' => break,
            b'\\' => i += 2,
            b'\'' => i = closing_quote(src, i + 1, b'\'')? + 1,
            b'"' => i = closing_quote(src, i + 1, b'"')? + 1,
            b'$' if matches!(src.get(i + 1), Some(b'(' | b'{')) => {
                i = closing_group(src, i + 1)? + 1
            }
            _ => i += 1,
        }
    }
    (i > start && i <= src.len()).then_some(i.min(src.len()))
}

/// The index of the quote that closes one opened before `from`, on the same line; `"` honours
/// backslashes and skips `$( … )` whole.
fn closing_quote(src: &[u8], from: usize, quote: u8) -> Option<usize> {
    let mut i = from;
    while let Some(&b) = src.get(i) {
        match b {
            b'\n' => return None,
            b if b == quote => return Some(i),
            b'\\' if quote == b'"' => i += 2,
            b'$' if quote == b'"' && src.get(i + 1) == Some(&b'(') => {
                i = closing_group(src, i + 1)? + 1;
            }
            _ => i += 1,
        }
    }
    None
}

/// The index of the bracket that closes the `(` or `{` at `open`, on the same line, skipping
/// quoted text.
fn closing_group(src: &[u8], open: usize) -> Option<usize> {
    let (up, down) = if src[open] == b'(' {
        (b'(', b')')
    } else {
        (b'{', b'}')
    };
    let mut depth = 0usize;
    let mut i = open;
    while let Some(&b) = src.get(i) {
        match b {
            b'\n' => return None,
            b'\\' => i += 1,
            b'\'' | b'"' => i = closing_quote(src, i + 1, b)?,
            b if b == up => depth += 1,
            b if b == down => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Where the run of file redirections that ends just before the here-string starts, as an offset
/// into `line` (the line up to `<<<`). None when the word before the here-string is not a
/// redirection. Each redirection is one blank-separated chunk (`>/dev/null`, `2>&1`, `&>>log`) or
/// an operator chunk followed by its target (`> out`); a quoted target with blanks ends the run.
fn redirections_before(line: &[u8]) -> Option<usize> {
    let mut chunks: Vec<Range<usize>> = Vec::new();
    let mut end = line.len();
    loop {
        let stop = line[..end].iter().rposition(|b| !matches!(b, b' ' | b'\t'));
        let Some(last) = stop else { break };
        let start = line[..=last]
            .iter()
            .rposition(|b| matches!(b, b' ' | b'\t'))
            .map_or(0, |i| i + 1);
        chunks.push(start..last + 1);
        end = start;
        if chunks.len() > 16 {
            break;
        }
    }
    let mut first = None;
    let mut i = 0;
    while i < chunks.len() {
        let chunk = &line[chunks[i].clone()];
        if redirection(chunk) {
            first = Some(chunks[i].start);
            i += 1;
        } else if i + 1 < chunks.len() && operator(&line[chunks[i + 1].clone()]) && plain(chunk) {
            first = Some(chunks[i + 1].start);
            i += 2;
        } else {
            break;
        }
    }
    first
}

/// The operator part of a redirection: optional descriptor digits, then `>`, `>>`, `>|`, `<`,
/// `&>`, `&>>`, `>&`, `<&`. Returns its length.
fn operator_len(chunk: &[u8]) -> Option<usize> {
    let digits = chunk.iter().take_while(|b| b.is_ascii_digit()).count();
    let rest = &chunk[digits..];
    let len = [&b"&>>"[..], b"&>", b">>", b">|", b">&", b"<&", b">", b"<"]
        .iter()
        .find(|op| rest.starts_with(op))?
        .len();
    if digits > 0 && rest.starts_with(b"&") {
        return None;
    }
    Some(digits + len)
}

/// A whole redirection in one chunk: an operator with its target glued on.
fn redirection(chunk: &[u8]) -> bool {
    operator_len(chunk).is_some_and(|len| len < chunk.len() && plain(&chunk[len..]))
}

/// A chunk that is only a redirection operator.
fn operator(chunk: &[u8]) -> bool {
    operator_len(chunk) == Some(chunk.len())
}

/// A redirection target without operators or separators of its own (quotes without blanks and
/// expansions are fine).
fn plain(word: &[u8]) -> bool {
    !word.is_empty()
        && !word
            .iter()
            .any(|b| matches!(b, b'<' | b'>' | b';' | b'|' | b'&' | b'(' | b')'))
        || word.starts_with(b"&") && word[1..].iter().all(|b| b.is_ascii_digit() || *b == b'-')
}

fn trim_end(s: &[u8]) -> &[u8] {
    let keep = s
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t'))
        .map_or(0, |i| i + 1);
    &s[..keep]
}

#[cfg(test)]
mod tests {
    use super::reorder;

    fn fixed(text: &str) -> String {
        let mut bytes = text.as_bytes().to_vec();
        reorder(&mut bytes);
        assert_eq!(bytes.len(), text.len());
        String::from_utf8(bytes).expect("utf-8")
    }

    #[test]
    fn the_herestring_moves_before_the_redirections() {
        assert_eq!(
            fixed("jq -e . >/dev/null <<<\"$b\"\n"),
            "jq -e . <<<\"$b\" >/dev/null\n"
        );
        assert_eq!(fixed("cat >o 2>&1 <<<x\n"), "cat <<<x >o 2>&1\n");
        assert_eq!(
            fixed("done > log <<< \"$(cut -d' ' -f1 f)\" | wc\n"),
            "done <<< \"$(cut -d' ' -f1 f)\" > log | wc\n"
        );
        assert_eq!(fixed("cat <in <<< x; echo\n"), "cat <<< x <in; echo\n");
        // two blanks before the here-string: the spare one goes to the end
        assert_eq!(fixed("cat >o  <<<x\n"), "cat <<<x >o \n");
    }

    #[test]
    fn nothing_changes_where_the_grammar_already_agrees() {
        for text in [
            "cat <<< x >/dev/null\n",
            "cat <<<x\n",
            "echo a > b\ncat <<< x\n",
            "cat > \"my file\" <<< x\n",
            "cat >/dev/null<<<x\n",
            "cat >o <<< \"open\n",
            "cat <<<< x\n",
        ] {
            assert_eq!(fixed(text), text, "{text:?}");
        }
    }
}
