//! Lines inside brackets that start left of their block. CPython ignores indentation inside
//! `(…)`, `[…]` and `{…}`; tree-sitter-python ends the block there and reports an error
//! (`for p in x:\n    d = {"a":\n1}`). Before parsing, the newline before such a line becomes a
//! space: the same bytes at the same offsets (positions still come from the original text), and
//! what CPython would parse.

use std::borrow::Cow;

/// `text` with the newlines before under-indented lines inside brackets replaced by spaces (the
/// original when there are none).
pub fn normalize(text: &str) -> Cow<'_, str> {
    let joins = joins(text.as_bytes());
    if joins.is_empty() {
        return Cow::Borrowed(text);
    }
    let mut bytes = text.as_bytes().to_vec();
    for at in joins {
        bytes[at] = b' ';
    }
    // Only ASCII newlines were replaced by ASCII spaces: still UTF-8.
    Cow::Owned(String::from_utf8(bytes).unwrap_or_else(|_| text.to_string()))
}

/// Offsets of the newlines to join: inside brackets, not ending a comment, followed by a
/// non-blank line indented less than the line that opened the outermost bracket.
fn joins(b: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut opened_at_indent = 0usize;
    let mut line_indent = indent(b, 0);
    let mut comment = false;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'#' => {
                comment = true;
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'"' | b'\'' => {
                let closed;
                (i, closed) = past_string(b, i);
                // A string left open: a syntax error that joining the next line could close
                // (`f("a | "")` + `print(b")`), so the text stays as written.
                if !closed {
                    return Vec::new();
                }
                continue;
            }
            b'(' | b'[' | b'{' => {
                if depth == 0 {
                    opened_at_indent = line_indent;
                }
                depth += 1;
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            b'\n' => {
                let next = indent(b, i + 1);
                let blank = matches!(b.get(i + 1 + next), None | Some(b'\n' | b'\r' | b'#'));
                if depth > 0 && !comment && !blank && next < opened_at_indent {
                    out.push(i);
                }
                if depth == 0 {
                    line_indent = next;
                }
                comment = false;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The width of the spaces and tabs starting at `at`.
fn indent(b: &[u8], at: usize) -> usize {
    b[at.min(b.len())..]
        .iter()
        .take_while(|c| **c == b' ' || **c == b'\t')
        .count()
}

/// The offset just past the string literal whose opening quote is at `at` (to the end of the
/// text when it is not closed; a one-line string also ends at its line's end), and whether it was
/// closed.
fn past_string(b: &[u8], at: usize) -> (usize, bool) {
    let q = b[at];
    let triple = b.get(at + 1) == Some(&q) && b.get(at + 2) == Some(&q);
    let mut i = at + if triple { 3 } else { 1 };
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            c if c == q && !triple => return (i + 1, true),
            c if c == q && b.get(i + 1) == Some(&q) && b.get(i + 2) == Some(&q) => {
                return (i + 3, true);
            }
            b'\n' if !triple => return (i, false),
            _ => i += 1,
        }
    }
    (b.len(), false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_indented_lines_inside_brackets_join_the_line_before() {
        let src = "for p in x:\n    d = {\"a\":\n1}\n    print(d)\n";
        let out = normalize(src);
        assert_eq!(out, "for p in x:\n    d = {\"a\": 1}\n    print(d)\n");
        assert_eq!(out.len(), src.len());
    }

    #[test]
    fn everything_else_is_left_alone() {
        for src in [
            "for p in x:\n    d = {\"a\":\n        1}\n",
            "x = [\n1,\n2]\n",
            "for p in x:\n    s = \"\"\"a\n(b\n\"\"\"\n",
            "for p in x:\n    d = (1,  # why\n0)\n",
            "for p in x:\n    d = (1,\n\n    2)\n",
            "s = '(' \nfor p in x:\n    pass\n",
            // an unterminated string is not closed by the next line
            "if x:\n    f(\"a | \"\")\nprint(b\")\n",
            "with f as fh:\n    print(n, \"read \n\", p)\n",
        ] {
            assert_eq!(normalize(src), src, "{src:?}");
        }
    }
}
