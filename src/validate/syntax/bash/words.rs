//! Bash constructs whose insides `bash -n` does not parse but the grammar does, strictly: the
//! operands of `[ … ]` (for bash `[` is a command and `]` its last argument) and arithmetic
//! (`$(( … ))`, `(( … ))`, `for (( …; …; … ))`, evaluated only when they run). Each pass returns
//! the byte ranges [`super::normalize`] rewrites so the grammar sees what bash sees.

use std::ops::Range;

/// Words after which a command starts.
const OPENERS: [&[u8]; 8] = [
    b"if", b"then", b"do", b"else", b"elif", b"while", b"until", b"time",
];

/// Whether a command may start at `at`: after a line start, a command separator or a keyword.
pub fn command_position(src: &[u8], at: usize) -> bool {
    let before = src[..at].iter().rposition(|b| !matches!(b, b' ' | b'\t'));
    let Some(end) = before else { return true };
    if matches!(src[end], b'\n' | b';' | b'&' | b'|' | b'!' | b'{') {
        return true;
    }
    let word_start = src[..=end]
        .iter()
        .rposition(|b| !b.is_ascii_alphabetic())
        .map_or(0, |i| i + 1);
    let starts_line = word_start == 0 || matches!(src[word_start - 1], b' ' | b'\t' | b'\n' | b';');
    starts_line && OPENERS.contains(&&src[word_start..=end])
}

/// A `[` command (not `[[`): it becomes a plain word. Only `[` followed by a blank: a word that
/// merely starts with `[` stays with the grammar, whose verdict is then the stricter one.
pub fn test_brackets(src: &[u8]) -> impl Iterator<Item = Range<usize>> + '_ {
    memchr::memchr_iter(b'[', src)
        .filter(move |&at| {
            matches!(src.get(at + 1), Some(b' ' | b'\t'))
                && (at == 0 || src[at - 1] != b'[')
                && command_position(src, at)
        })
        .map(|at| at..at + 1)
}

/// `<>` (open for reading and writing; the grammar has no such operator) becomes `>>`: a redirect
/// that opens the file for writing without truncating it, as `<>` does, so rules on writes see it.
pub fn read_write_redirects(src: &[u8]) -> impl Iterator<Item = Range<usize>> + '_ {
    memchr::memmem::find_iter(src, b"<>")
        .filter(move |&at| at == 0 || src[at - 1] != b'<')
        .map(|at| at..at + 2)
}

/// `3<<<word`: a here-string on a numbered descriptor (the grammar takes here-strings on standard
/// input only). The descriptor's digits become blanks.
pub fn numbered_herestrings(src: &[u8]) -> impl Iterator<Item = Range<usize>> + '_ {
    memchr::memmem::find_iter(src, b"<<<").filter_map(move |at| {
        let digits = src[..at]
            .iter()
            .rev()
            .take_while(|b| b.is_ascii_digit())
            .count();
        let start = at - digits;
        let starts_word = start == 0
            || matches!(
                src[start - 1],
                b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'('
            );
        (digits > 0 && starts_word).then_some(start..at)
    })
}

/// `coproc [NAME] command`: bash runs the command as a coprocess; the grammar has no coprocess and
/// rejects a compound command after it. `coproc` becomes blanks, and so does the NAME bash allows
/// before a compound command (`coproc CALC { bc -l; }`): the grammar and the rules see the command.
pub fn coprocesses(src: &[u8]) -> impl Iterator<Item = Range<usize>> + '_ {
    const COMPOUND: [&[u8]; 9] = [
        b"{", b"(", b"while ", b"until ", b"for ", b"if ", b"case ", b"select ", b"[[ ",
    ];
    memchr::memmem::find_iter(src, b"coproc").filter_map(move |at| {
        let end = at + b"coproc".len();
        if !matches!(src.get(end), Some(b' ' | b'\t')) || !command_position(src, at) {
            return None;
        }
        let rest = &src[end..];
        let name_at = end
            + rest
                .iter()
                .take_while(|b| matches!(b, b' ' | b'\t'))
                .count();
        let name_len = src[name_at..]
            .iter()
            .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
            .count();
        let rest = &src[name_at + name_len..];
        let after_name = &rest[rest
            .iter()
            .take_while(|b| matches!(b, b' ' | b'\t'))
            .count()..];
        let reserved = matches!(
            &src[name_at..name_at + name_len],
            b"while" | b"until" | b"for" | b"if" | b"case" | b"select" | b"function" | b"time"
        );
        let named = name_len > 0
            && !reserved
            && !src[name_at].is_ascii_digit()
            && after_name.len() < src.len() - name_at - name_len
            && COMPOUND.iter().any(|k| after_name.starts_with(k));
        Some(if named {
            at..name_at + name_len
        } else {
            at..end
        })
    })
}

/// `! if …`, `! { …; }`: negating a compound command is valid bash; the grammar takes only simple
/// commands after `!`. The `!` becomes a blank (no rule depends on the negation).
pub fn negated_compounds(src: &[u8]) -> impl Iterator<Item = Range<usize>> + '_ {
    const COMPOUND: [&[u8]; 8] = [
        b"if ", b"while ", b"until ", b"for ", b"case ", b"{ ", b"(", b"[[ ",
    ];
    memchr::memchr_iter(b'!', src)
        .filter(move |&at| {
            let rest = src[at + 1..].trim_ascii_start();
            rest.len() < src.len() - at - 1
                && COMPOUND.iter().any(|k| rest.starts_with(k))
                && command_position(src, at)
        })
        .map(|at| at..at + 1)
}

/// The insides of arithmetic `((…))` that bash leaves unparsed: after `$`, in command position or
/// after `for`. Arithmetic holding a command substitution is left alone (its command is code).
pub fn arithmetic(src: &[u8]) -> impl Iterator<Item = Range<usize>> + '_ {
    memchr::memmem::find_iter(src, b"((").filter_map(move |at| {
        let opened = (at > 0 && src[at - 1] == b'$')
            || command_position(src, at)
            || src[..at].trim_ascii_end().ends_with(b"for");
        if !opened {
            return None;
        }
        let start = at + 2;
        let end = closing(src, start)?;
        let inside = &src[start..end];
        let opaque = !inside.trim_ascii().is_empty()
            && !inside.contains(&b'`')
            && memchr::memmem::find(inside, b"$(").is_none();
        opaque.then_some(start..end)
    })
}

/// The index of the `))` that closes arithmetic opened just before `from`.
fn closing(src: &[u8], from: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = from;
    while i < src.len() {
        match src[i] {
            b'(' => depth += 1,
            b')' if depth == 0 => return (src.get(i + 1) == Some(&b')')).then_some(i),
            b')' => depth -= 1,
            _ => {}
        }
        i += 1;
    }
    None
}

/// Rewrites the inside of one arithmetic range: a `0`, or for a `for ((…;…;…))` only its `;`.
pub fn blank_arithmetic(bytes: &mut [u8]) {
    let three_parts = bytes.contains(&b';');
    for b in bytes.iter_mut() {
        if !(three_parts && *b == b';') {
            *b = b' ';
        }
    }
    if !three_parts {
        bytes[0] = b'0';
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_start_after_separators_and_keywords() {
        let src = b"[ a ]; if [ b ]; then [ c ]; fi\necho [ x\nx=([k]=v)";
        let at: Vec<usize> = test_brackets(src).map(|r| r.start).collect();
        assert_eq!(at, vec![0, 10, 22]);
    }

    #[test]
    fn arithmetic_insides_are_found_unless_they_run_a_command() {
        let src = b"n=$((n + ))\n((i++))\nfor ((i=0; i<3; i++)); do :; done\nm=$(( $(date +%s) ))\n( (x) )";
        let found: Vec<&[u8]> = arithmetic(src).map(|r| &src[r]).collect();
        assert_eq!(found, vec![&b"n + "[..], b"i++", b"i=0; i<3; i++"]);
    }
}

/// `${…}` expansions whose insides are not a well-formed parameter expansion: bash checks them
/// only when they are expanded ("bad substitution" at run time, and nothing inside runs), the
/// grammar rejects them. The insides become `_`, a plain variable name. Expansions with quotes or
/// nested braces inside are left alone.
pub fn malformed_expansions(src: &[u8]) -> impl Iterator<Item = Range<usize>> + '_ {
    memchr::memmem::find_iter(src, b"${").filter_map(move |at| {
        if at > 0 && src[at - 1] == b'\\' {
            return None;
        }
        let start = at + 2;
        let len = src[start..]
            .iter()
            .position(|b| matches!(b, b'}' | b'{' | b'\n' | b'"' | b'\'' | b'`'))?;
        let inside = &src[start..start + len];
        (src[start + len] == b'}' && !inside.is_empty() && !well_formed(inside))
            .then_some(start..start + len)
    })
}

/// `[!#]name[[subscript]][operator rest]`, the shapes of a parameter expansion.
fn well_formed(inside: &[u8]) -> bool {
    let mut s = inside;
    // `${#name}` takes no operator after the name (bash says so only when it runs).
    let mut length = false;
    if let Some(rest) = s.strip_prefix(b"!").or_else(|| s.strip_prefix(b"#")) {
        if rest.is_empty() {
            return true; // `${#}`, `${!}`
        }
        length = s[0] == b'#';
        s = rest;
    }
    let name = if s[0].is_ascii_alphabetic() || s[0] == b'_' {
        s.iter()
            .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
            .count()
    } else if s[0].is_ascii_digit() {
        s.iter().take_while(|b| b.is_ascii_digit()).count()
    } else if matches!(s[0], b'@' | b'*' | b'#' | b'?' | b'-' | b'$' | b'!') {
        1
    } else {
        return false;
    };
    let special = !(s[0].is_ascii_alphabetic() || s[0] == b'_');
    s = &s[name..];
    if let Some(rest) = s.strip_prefix(b"[") {
        if special {
            return false; // `${@[x]}`: only names have subscripts
        }
        let Some(close) = rest.iter().position(|b| *b == b']') else {
            return false;
        };
        if close == 0 {
            return false;
        }
        s = &rest[close + 1..];
    }
    if s.is_empty() {
        return true;
    }
    if length {
        return false;
    }
    let ops: [&[u8]; 20] = [
        b":-", b":=", b":+", b":?", b"##", b"%%", b"//", b"/#", b"/%", b"^^", b",,", b"-", b"=",
        b"+", b"?", b"#", b"%", b"/", b"^", b",",
    ];
    if let Some(op) = ops.iter().find(|op| s.starts_with(op)) {
        return plain_rest(&s[op.len()..]);
    }
    if let Some(rest) = s.strip_prefix(b":") {
        return rest
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b" \t$_:()+-*".contains(b));
    }
    s.len() == 2 && s[0] == b'@' && s[1].is_ascii_alphabetic()
}

/// The word after an operator: anything but unquoted operator characters.
fn plain_rest(rest: &[u8]) -> bool {
    let mut i = 0;
    while i < rest.len() {
        match rest[i] {
            b'$' if rest.get(i + 1) == Some(&b'(') => return true, // code: leave it to the grammar
            b'&' | b';' | b'|' | b'<' | b'>' | b'(' | b')' => return false,
            b'\\' => i += 1,
            _ => {}
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod expansion_tests {
    use super::malformed_expansions;

    #[test]
    fn only_malformed_expansions_are_rewritten() {
        let good = [
            "${x}",
            "${#x}",
            "${!x}",
            "${x[@]}",
            "${#a[@]}",
            "${x:-d}",
            "${X:?must be set}",
            "${x#p}",
            "${x//a/b}",
            "${x:0:2}",
            "${x,,}",
            "${1:-$HOME}",
            "${x@Q}",
            "${#}",
            "${a[-1]}",
        ];
        for g in good {
            assert_eq!(malformed_expansions(g.as_bytes()).count(), 0, "{g}");
        }
        let bad = [
            "${[@]}",
            "${1 C:-x}",
            "${:-x}",
            "${1:-a&}",
            "${x @]}",
            "${1:/tmp/x}",
        ];
        for b in bad {
            assert_eq!(malformed_expansions(b.as_bytes()).count(), 1, "{b}");
        }
    }
}
