//! The text a session command is validated as: a command line with the session's aliases
//! expanded, and an argv as the bash line it is equivalent to.
//!
//! The session's bash never expands aliases itself (a non-interactive bash leaves
//! `expand_aliases` off), so the expanded line is exactly what runs: what is validated, and
//! shown to approvers, is what bash executes, whatever the aliases hold.

use std::collections::{BTreeMap, BTreeSet};

/// `words` as one bash line that runs them without any expansion.
pub(crate) fn quote_argv(words: &[String]) -> String {
    words
        .iter()
        .map(|w| format!("'{}'", w.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `line` with the first word of each command replaced by its alias (recursively, each alias
/// once per position, as bash does).
pub(crate) fn expand_aliases(line: &str, aliases: &BTreeMap<String, String>) -> String {
    if aliases.is_empty() {
        return line.to_string();
    }
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    let mut at_start = true;
    let mut quote: Option<char> = None;
    while let Some(c) = rest.chars().next() {
        if quote.is_none() && at_start && !c.is_whitespace() {
            let end = rest
                .find(|c: char| c.is_whitespace() || "|&;()<>'\"`$\\".contains(c))
                .unwrap_or(rest.len());
            let word = &rest[..end];
            if !word.is_empty() {
                out.push_str(&expand_word(word, aliases));
                rest = &rest[end..];
                at_start = false;
                continue;
            }
        }
        rest = &rest[c.len_utf8()..];
        out.push(c);
        match (quote, c) {
            (Some('\''), '\'') | (Some('"'), '"') => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => {
                quote = Some(c);
                at_start = false;
            }
            (None, '\\') => {
                if let Some(next) = rest.chars().next() {
                    out.push(next);
                    rest = &rest[next.len_utf8()..];
                }
                at_start = false;
            }
            (None, ';' | '&' | '|' | '(' | '\n' | '{' | '!') => at_start = true,
            (None, c) if c.is_whitespace() => {}
            (None, _) => at_start = false,
        }
    }
    out
}

fn expand_word(word: &str, aliases: &BTreeMap<String, String>) -> String {
    let mut seen = BTreeSet::new();
    let mut current = word.to_string();
    loop {
        let first_end = current.find(char::is_whitespace).unwrap_or(current.len());
        let first = &current[..first_end];
        match aliases.get(first) {
            Some(value) if seen.insert(first.to_string()) => {
                current = format!("{value}{}", &current[first_end..]);
            }
            _ => return current,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aliases() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("ll".to_string(), "ls -l".to_string()),
            ("la".to_string(), "ll -a".to_string()),
            ("loop".to_string(), "loop x".to_string()),
        ])
    }

    #[test]
    fn only_first_words_of_commands_expand() {
        let a = aliases();
        assert_eq!(expand_aliases("ll src", &a), "ls -l src");
        assert_eq!(
            expand_aliases("cd x && ll; echo ll", &a),
            "cd x && ls -l; echo ll"
        );
        assert_eq!(
            expand_aliases("echo 'll; ll' | la", &a),
            "echo 'll; ll' | ls -l -a"
        );
        assert_eq!(expand_aliases("loop", &a), "loop x");
        assert_eq!(expand_aliases("\\ll", &a), "\\ll");
        assert_eq!(expand_aliases("(ll)\n  ll", &a), "(ls -l)\n  ls -l");
    }

    #[test]
    fn argv_is_quoted_word_by_word() {
        let words = vec!["printf".into(), "%s\n".into(), "it's $HOME".into()];
        assert_eq!(
            quote_argv(&words),
            r"'printf' '%s
' 'it'\''s $HOME'"
        );
    }
}
