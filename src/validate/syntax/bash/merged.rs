//! Lines the grammar runs together. After a pipeline of three or more stages, tree-sitter-bash
//! (0.25) can drop the newline that ends it when the text after it goes on with `&&`, `||`, a
//! pipe or a redirection (tree-sitter-bash #347): `a | b | c` then `rm -rf ~ > /dev/null` parses as one
//! command `c` with the arguments `rm -rf ~`, and the `rm` is hidden from every rule. A line of
//! two or more assignments (`name=$1 want=$2`) is run on into the next line's command the same
//! way, which in a function body makes a following `if` a command name and the script a syntax
//! error it is not. Such a
//! newline is found in the tree (the smallest node around it is a command, whose words never
//! span an unquoted line break) and replaced by `;`, which bash reads the same there; the text is
//! then parsed again. Offsets are kept.

use tree_sitter::Tree;

/// The text with every newline the grammar swallowed into a command replaced by `;`, or `None`
/// when there is none (nearly always: only lines after a pipeline of three stages are looked at).
pub fn split_merged_lines(tree: &Tree, text: &str) -> Option<String> {
    let src = text.as_bytes();
    let root = tree.root_node();
    let mut merged = Vec::new();
    let mut line_start = 0;
    for nl in memchr::memchr_iter(b'\n', src) {
        let line = &src[line_start..nl];
        line_start = nl + 1;
        // (the grammar runs on into the next line when the text after it goes on with `&&`,
        // `||`, a pipe or a redirection, possibly lines later: `out=$(for …` … `done | sort)`;
        // the tree says whether it did)
        let after_pipeline = single_pipes(line) >= 2;
        // (a backslash-newline continues the command: the grammar is right there)
        let line_end = line.strip_suffix(b"\r").unwrap_or(line);
        let continued = line_end.iter().rev().take_while(|b| **b == b'\\').count() % 2 == 1;
        if continued || (!after_pipeline && !assignments_only(line)) {
            continue;
        }
        let Some(node) = root.descendant_for_byte_range(nl, nl + 1) else {
            continue;
        };
        if node.kind() == "command" && node.start_byte() < nl {
            merged.push(nl);
        }
    }
    if merged.is_empty() {
        return None;
    }
    let mut bytes = src.to_vec();
    for nl in merged {
        bytes[nl] = b';';
    }
    String::from_utf8(bytes).ok()
}

/// Whether a line is two or more assignments and nothing else (`name=$1 want=$2`): in a function
/// body the grammar takes the next line's first word (`if`) as the command they prefix.
fn assignments_only(line: &[u8]) -> bool {
    let Ok(line) = std::str::from_utf8(line) else {
        return false;
    };
    let words: Vec<&str> = line.split_whitespace().collect();
    words.len() >= 2
        && words.iter().all(|w| {
            w.split_once('=').is_some_and(|(name, value)| {
                name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                    && !value.contains(['"', '\'', '`', '('])
            })
        })
}

/// How many `|` of a line are pipes rather than halves of `||`.
fn single_pipes(line: &[u8]) -> usize {
    memchr::memchr_iter(b'|', line)
        .filter(|&i| (i == 0 || line[i - 1] != b'|') && line.get(i + 1) != Some(&b'|'))
        .count()
}

#[cfg(test)]
mod tests {
    use super::split_merged_lines;
    use crate::domain::script::Language;
    use crate::rules::grammar::Grammar;

    #[test]
    fn a_line_the_grammar_ran_into_a_pipeline_is_split_again() {
        let g = Grammar::new(Language::Bash);
        for (text, fixed) in [
            ("a | b | c\nk > o\n", Some("a | b | c;k > o\n")),
            ("a | b | c\n\nk > o\n", Some("a | b | c;\nk > o\n")),
            (
                "f() {\n    a=$1 b=$2\n    if true; then\n        echo x\n    fi\n}\n",
                Some("f() {\n    a=$1 b=$2;    if true; then\n        echo x\n    fi\n}\n"),
            ),
            ("a=1 b=2\nls\n", Some("a=1 b=2;ls\n")),
            ("a=1\nls\n", None),
            (
                "a | grep x | head -30\necho B && cd s\n",
                Some("a | grep x | head -30;echo B && cd s\n"),
            ),
            // the line it runs into goes on with a pipe only lines later
            (
                "a | b | head -2\nout=$(for f in /p/[0-9]*/e; do\n  g \"$f\"\ndone | sort)\ncurl h >/dev/null\n",
                Some(
                    "a | b | head -2;out=$(for f in /p/[0-9]*/e; do\n  g \"$f\"\ndone | sort)\ncurl h >/dev/null\n",
                ),
            ),
            ("a | b\nk > o\n", None),
            // a continued line is one command for bash too
            ("curl -fsSL $u | gunzip | sudo \\\n  bash -s\n", None),
            ("a | b | c\nk\n", None),
            ("echo 'a | b | c\nk > o'\n", None),
            ("a || b || c\nk > o\n", None),
        ] {
            let tree = g.parse(text);
            assert_eq!(
                split_merged_lines(&tree, text).as_deref(),
                fixed,
                "{text:?}"
            );
            if let Some(f) = fixed {
                assert!(!g.parse(f).root_node().has_error(), "{f:?}");
            }
        }
    }
}
