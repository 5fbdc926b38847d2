//! The text the Bash grammar parses: rewrites that undo evasions hiding a command and close the
//! grammar's gaps where `bash -n` is satisfied, keeping every byte offset ([`normalize`]).

use std::borrow::Cow;

use super::{herestrings, words};

/// The text to parse: `text` with evasions that hide a command from the grammar undone, keeping
/// every byte offset (see the module docs). Borrowed when nothing needs changing.
///
/// - a column-0 backslash that starts a command line becomes a space (`\rm` runs `rm`);
/// - `$IFS` / `${IFS}` become spaces, as the shell's word splitting makes them
///   (`rm${IFS}-rf${IFS}/` runs `rm -rf /`);
/// - a brace list opening a command line becomes words (`{rm,-rf,/}` runs `rm -rf /`);
/// - where bash -n is satisfied but the grammar is not: an empty `$( )` or ``` `` ``` becomes a
///   quoted blank, a `#` inside a name-like word and a `$` that starts no expansion become `_`,
///   `<>` becomes `>>`, `!` before a compound command a blank, `coproc` (and its NAME) and a
///   here-string's descriptor number blanks, and the insides bash leaves
///   unparsed (`[ … ]` as a command, arithmetic, malformed `${…}`) are rewritten
///   (`words`), and a here-string after file redirections moves in front of them (`herestrings`).
pub fn normalize(text: &str) -> Cow<'_, str> {
    let src = text.as_bytes();
    // Each pass looks for its trigger with memchr's substring search first and only copies the
    // text when it has something to change: most scripts are returned borrowed.
    let mut edits: Vec<std::ops::Range<usize>> = Vec::new();
    for at in memchr::memmem::find_iter(src, b"\n\\") {
        let i = at + 1;
        let continued = i >= 2 && src[i - 2] == b'\\';
        if !continued && src.get(i + 1).is_some_and(|b| *b != b'\n') {
            edits.push(i..i + 1);
        }
    }
    for at in memchr::memmem::find_iter(src, b"IFS") {
        let after = at + 3;
        let range = if at >= 2 && &src[at - 2..at] == b"${" && src.get(after) == Some(&b'}') {
            at - 2..after + 1
        } else if at >= 1
            && src[at - 1] == b'$'
            && src
                .get(after)
                .is_none_or(|b| !(b.is_ascii_alphanumeric() || *b == b'_'))
        {
            at - 1..after
        } else {
            continue;
        };
        edits.push(range);
    }
    edits.extend(empty_command_substitutions(src));
    edits.extend(empty_backquotes(src));
    edits.extend(word_hashes(src));
    edits.extend(lone_dollars(src));
    edits.extend(glued_braces(src));
    edits.extend(words::test_brackets(src));
    edits.extend(words::read_write_redirects(src));
    edits.extend(words::negated_compounds(src));
    edits.extend(words::numbered_herestrings(src));
    edits.extend(words::coprocesses(src));
    edits.extend(words::arithmetic(src));
    let expansions = edits.len();
    edits.extend(words::malformed_expansions(src));
    let braces = starts_a_line_with_a_brace_list(text);
    let herestrings = herestrings::present(src);
    if edits.is_empty() && !braces && !herestrings {
        return Cow::Borrowed(text);
    }
    let mut bytes = src.to_vec();
    for (i, range) in edits.into_iter().enumerate() {
        if i >= expansions {
            bytes[range].fill(b'_');
            continue;
        }
        if range.start >= 2 && &src[range.start - 2..range.start] == b"((" {
            words::blank_arithmetic(&mut bytes[range]);
            continue;
        }
        // An empty `$( )` becomes a quoted blank, `'  '`: still one word, as bash sees it.
        if src[range.start] == b'$' && src.get(range.start + 1) == Some(&b'(') {
            // Newlines stay where they are (quoted), so the lines keep their numbers.
            for b in &mut bytes[range.clone()] {
                if *b != b'\n' {
                    *b = b' ';
                }
            }
            bytes[range.start] = b'\'';
            bytes[range.end - 1] = b'\'';
        } else if src[range.start] == b'`' {
            bytes[range].fill(b'\'');
        } else if &src[range.clone()] == b"<>" {
            bytes[range].fill(b'>');
        } else if src[range.start] == b'!' {
            bytes[range.start] = b' ';
        } else if matches!(src[range.start], b'#' | b'$' | b'[') && range.len() == 1 {
            bytes[range.start] = b'_';
        } else {
            bytes[range].fill(b' ');
        }
    }
    if braces {
        brace_lists_to_words(&mut bytes);
    }
    if herestrings {
        herestrings::reorder(&mut bytes);
    }
    // Only ASCII bytes were replaced by ASCII spaces, so the bytes are still UTF-8.
    Cow::Owned(String::from_utf8(bytes).expect("ASCII-for-ASCII replacement keeps UTF-8"))
}

/// `$()` and `$( )`: an empty command substitution (valid, expands to nothing); the grammar wants
/// a command inside.
fn empty_command_substitutions(src: &[u8]) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
    memchr::memmem::find_iter(src, b"$(").filter_map(move |at| {
        let blanks = src[at + 2..]
            .iter()
            .take_while(|b| matches!(b, b' ' | b'\t' | b'\n'))
            .count();
        let close = at + 2 + blanks;
        (src.get(close) == Some(&b')')).then_some(at..close + 1)
    })
}

/// ``` `` ```: an empty backquoted command substitution, like `$()`; it becomes `''`.
fn empty_backquotes(src: &[u8]) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
    memchr::memmem::find_iter(src, b"``").filter_map(move |at| {
        let before = at.checked_sub(1).map(|i| src[i]);
        let lone = !matches!(before, Some(b'`' | b'\\')) && src.get(at + 2) != Some(&b'`');
        lone.then_some(at..at + 2)
    })
}

/// A `#` inside a word that starts like a name (`KEY#x`, `a#b`) is part of the word for bash (a
/// comment starts only at the beginning of a word); the grammar reads it as a comment in command
/// and `export` positions. It becomes `_`, another word character.
fn word_hashes(src: &[u8]) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
    memchr::memchr_iter(b'#', src).filter_map(move |at| {
        let name = src[..at]
            .iter()
            .rev()
            .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
            .count();
        let before = at.checked_sub(name + 1).map(|i| src[i]);
        let starts_word =
            before.is_none_or(|b| matches!(b, b' ' | b'\t' | b'\n' | b';' | b'&' | b'|'));
        (name > 0 && starts_word).then_some(at..at + 1)
    })
}

/// A `$` before a character that cannot start an expansion (`echo a$|| b`, `/tmp/$.bin`) is a
/// literal dollar for bash; the grammar wants an expansion. It becomes `_`.
fn lone_dollars(src: &[u8]) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
    memchr::memchr_iter(b'$', src).filter_map(move |at| {
        let next = src.get(at + 1)?;
        let escaped = at > 0 && src[at - 1] == b'\\';
        let literal = matches!(
            next,
            b'|' | b'&'
                | b' '
                | b'\t'
                | b'\n'
                | b';'
                | b'<'
                | b'>'
                | b'/'
                | b'.'
                | b','
                | b':'
                | b'+'
                | b'%'
                | b'^'
                | b'~'
                | b']'
                | b'}'
                | b')'
        );
        (!escaped && literal).then_some(at..at + 1)
    })
}

/// A `{` glued to the next character in command position (`{echo hi`, `| {amount, x}`) is part of
/// a word for bash, not the reserved word that opens a group; the grammar opens a group. It becomes
/// `_`. Brace lists (`{rm,-rf,/}`) are left to [`brace_lists_to_words`].
fn glued_braces(src: &[u8]) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
    memchr::memchr_iter(b'{', src).filter_map(move |at| {
        let next = *src.get(at + 1)?;
        if matches!(next, b' ' | b'\t' | b'\n' | b'}') {
            return None;
        }
        let before = src[..at]
            .iter()
            .rev()
            .find(|b| !matches!(b, b' ' | b'\t'))
            .copied();
        if !before.is_none_or(|b| matches!(b, b'\n' | b';' | b'|' | b'&')) {
            return None;
        }
        let end = src[at..]
            .iter()
            .position(|b| matches!(b, b' ' | b'\t' | b'\n' | b';' | b'&' | b'|'))
            .map_or(src.len(), |p| at + p);
        let word = &src[at..end];
        let list = word.len() > 2 && word.ends_with(b"}") && word.contains(&b',');
        (!list).then_some(at..at + 1)
    })
}

/// Cheap check for [`brace_lists_to_words`]: a line whose first word starts with `{` and has a comma.
fn starts_a_line_with_a_brace_list(text: &str) -> bool {
    text.lines().any(|l| {
        l.trim_start_matches([' ', '\t'])
            .strip_prefix('{')
            .is_some_and(|rest| {
                rest.split([' ', '\t', ';', '&', '|'])
                    .next()
                    .is_some_and(|w| w.contains(','))
            })
    })
}

/// `{a,b,c}` as the first word of a line: the braces and commas become spaces.
fn brace_lists_to_words(bytes: &mut [u8]) -> bool {
    let mut changed = false;
    let mut line_start = 0;
    while line_start < bytes.len() {
        let line_end = bytes[line_start..]
            .iter()
            .position(|b| *b == b'\n')
            .map_or(bytes.len(), |p| line_start + p);
        let first = (line_start..line_end).find(|&i| !matches!(bytes[i], b' ' | b'\t'));
        if let Some(open) = first.filter(|&i| bytes[i] == b'{') {
            let word_end = (open..line_end)
                .find(|&i| matches!(bytes[i], b' ' | b'\t' | b';' | b'&' | b'|'))
                .unwrap_or(line_end);
            let word = &bytes[open..word_end];
            let balanced = word.len() > 2
                && word[word.len() - 1] == b'}'
                && !word[1..word.len() - 1].contains(&b'{')
                && !word[1..word.len() - 1].contains(&b'}');
            if balanced && word.contains(&b',') {
                for b in &mut bytes[open..word_end] {
                    if matches!(*b, b'{' | b'}' | b',') {
                        *b = b' ';
                    }
                }
                changed = true;
            }
        }
        line_start = line_end + 1;
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::normalize;

    #[test]
    fn column_zero_backslash_commands_are_normalized_in_place() {
        let text = "echo hi\n\\rm -rf /\nfoo \\\n\\bar\n";
        let fixed = normalize(text);
        assert_eq!(fixed.len(), text.len());
        assert_eq!(fixed, "echo hi\n rm -rf /\nfoo \\\n\\bar\n");
        assert!(matches!(
            normalize("echo hi\n  \\rm x\n"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn ifs_and_brace_lists_become_the_words_the_shell_sees() {
        let text =
            "rm${IFS}-rf$IFS/\n{cp,-r,/etc,/tmp/x}\nwhile IFS= read -r l; do :; done\necho $IFSX\n";
        let fixed = normalize(text);
        assert_eq!(fixed.len(), text.len());
        assert_eq!(
            fixed,
            "rm      -rf    /\n cp -r /etc /tmp/x \nwhile IFS= read -r l; do :; done\necho $IFSX\n"
        );
        // `IFS=` and `$IFSX` need no change, so nothing is copied.
        assert!(matches!(
            normalize("while IFS=: read -r a b; do echo $IFSX; done\n"),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
