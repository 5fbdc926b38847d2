//! Escapes and characters CPython's tokenizer refuses inside string literals, which
//! tree-sitter-python keeps as plain string content: a truncated `\x`, `\u`, `\U` or `\N{…}`
//! escape in a str literal (in bytes only `\x` is an escape), a `\U` escape past U+10FFFF, a
//! `\N{…}` escape whose name is no Unicode character name, and a
//! non-ASCII character in a bytes literal, and bytes joined to str (`b"a" "b"`). Raw literals
//! have no escapes.

use tree_sitter::Node;

use super::forms::Problem;
use crate::rules::grammar::{children, text};

/// The problem with one `string` node's literal parts, if any.
pub(super) fn literal(string: Node<'_>, src: &str) -> Option<Problem> {
    let prefix = string.child(0).map(|s| {
        text(s, src)
            .trim_end_matches(['"', '\''])
            .to_ascii_lowercase()
    })?;
    if prefix.contains('r') {
        return None;
    }
    let bytes = prefix.contains('b');
    for part in children(string).filter(|c| c.kind() == "string_content") {
        if bytes && !text(part, src).is_ascii() {
            return unicode_error("bytes can only contain ASCII literal characters");
        }
        if let Some(problem) = part_escapes(part, bytes, src) {
            return Some(problem);
        }
    }
    None
}

/// `b"a" "b"`: adjacent literals are joined at compile time, and bytes cannot join str.
pub(super) fn mixed_bytes(strings: Node<'_>, src: &str) -> Option<Problem> {
    let mut kinds = children(strings).filter(|c| c.kind() == "string").map(|s| {
        s.child(0).is_some_and(|start| {
            text(start, src)
                .trim_end_matches(['"', '\''])
                .to_ascii_lowercase()
                .contains('b')
        })
    });
    let first = kinds.next()?;
    kinds.any(|b| b != first).then(|| {
        (
            "invalid-syntax",
            "cannot mix bytes and nonbytes literals".to_string(),
        )
    })
}

fn unicode_error(what: &str) -> Option<Problem> {
    Some(("invalid-syntax", format!("(unicode error) {what}")))
}

/// A backslash the grammar did not take as an escape is one CPython does not know (a warning) or a
/// truncated one (an error); a complete `\U` escape may still name no character.
fn part_escapes(part: Node<'_>, bytes: bool, src: &str) -> Option<Problem> {
    for piece in children(part) {
        let after = src.get(piece.end_byte()..).unwrap_or("");
        match piece.kind() {
            "\\" => match after.chars().next() {
                Some('x') => return unicode_error("truncated \\xXX escape"),
                Some('u') if !bytes => return unicode_error("truncated \\uXXXX escape"),
                Some('U') if !bytes => return unicode_error("truncated \\UXXXXXXXX escape"),
                Some('N') if !bytes => return unicode_error("malformed \\N character escape"),
                _ => {}
            },
            "escape_sequence" if !bytes => {
                let t = text(piece, src);
                if let Some(hex) = t.strip_prefix("\\U")
                    && u32::from_str_radix(hex, 16).is_ok_and(|v| v > 0x10_ffff)
                {
                    return unicode_error("illegal Unicode character");
                }
                if let Some(name) = t.strip_prefix("\\N{").and_then(|n| n.strip_suffix('}'))
                    && !is_character_name(name)
                {
                    return unicode_error("unknown Unicode character name");
                }
            }
            _ => {}
        }
    }
    None
}

/// Whether CPython's `\N{…}` accepts `name`: a character name or alias (`NULL`, `BYTE ORDER
/// MARK`), the computed names of ideographs and syllables, compared without regard to case;
/// never a named sequence, never with extra spaces. The table is newer than Python 3.11's
/// Unicode 14.0, so only a name added since is accepted wrongly; none is ever refused wrongly,
/// because Unicode never withdraws a name.
fn is_character_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    name.is_ascii()
        && !upper.contains("  ")
        && upper.trim() == upper
        && unicode_names2::character(&upper).is_some()
}

#[cfg(test)]
mod tests {
    use crate::domain::script::{Language, Script};
    use crate::rules::RuleSet;
    use crate::validate::{ValidationConfig, Validator};

    #[test]
    fn truncated_escapes_fail_like_cpython() {
        let v = Validator::new(
            RuleSet::embedded().expect("rules compile"),
            ValidationConfig::default(),
        );
        let first = |src: &str| {
            crate::validate::syntax::check(&v, &Script::new(Language::Python, src))
                .into_iter()
                .map(|f| f.message)
                .next()
        };
        // (script, CPython 3.11 compile() fails on it); every row was checked.
        for (src, fails) in [
            ("s = 'a\\u12 b'\n", true),
            ("s = \"\\U0001F60\"\n", true),
            ("s = '\\x4'\n", true),
            ("s = b'\\x4'\n", true),
            ("s = '\\N'\n", true),
            ("s = f'{a}\\x4'\n", true),
            ("s = '\\U00110000'\n", true),
            ("s = b'caf\u{e9}'\n", true),
            ("s = b'\\u12 \\N a'\n", false),
            ("s = r'\\u12' + R'\\x' + rb'\\x'\n", false),
            (
                "s = '\\\\u12 \\d \\u00e9 \\U0001F600 \\x41 \\N{BULLET}'\n",
                false,
            ),
            ("s = f'{a}\\u00e9'\n", false),
            ("s = '\\N{BULLET POINT}'\n", true),
            ("s = f'{a} \\N{NOT A CHARACTER NAME}'\n", true),
            ("s = '\\N{LATIN SMALL LETTER  A}'\n", true),
            ("s = '\\N{SPACE }'\n", true),
            (
                "s = '\\N{LATIN CAPITAL LETTER A WITH MACRON AND GRAVE}'\n",
                true,
            ),
            ("s = b'\\N{BULLET POINT}'\n", false),
            ("s = r'\\N{BULLET POINT}'\n", false),
            ("s = '\\N{bullet} \\N{Latin Small Letter A}'\n", false),
            (
                "s = '\\N{LATIN CAPITAL LETTER GHA} \\N{BYTE ORDER MARK} \\N{NULL}'\n",
                false,
            ),
            (
                "s = '\\N{CJK UNIFIED IDEOGRAPH-4E00} \\N{HANGUL SYLLABLE GA}'\n",
                false,
            ),
            ("s = b'a' 'b'\n", true),
            ("s = 'a' rb'b'\n", true),
            ("s = b'a' Rb'b' 'c' f'd'\n", true),
            ("s = b'a' Rb'b'\nt = 'a' f'b' r'c'\n", false),
        ] {
            assert_eq!(first(src).is_some(), fails, "{src:?}: {:?}", first(src));
        }
    }
}
