//! Constant folding of Bash words: quoting, escapes and constant variables, as the shell would
//! see them (the output of constant commands in `$(…)` is in `output`).

use tree_sitter::Node;

use super::BashSem;
use crate::rules::codec::decode_c_escapes;
use crate::rules::grammar::{children, text};

const MAX_FOLD_DEPTH: u8 = 40;
const MAX_FOLD_LEN: usize = 64 * 1024;

impl BashSem<'_> {
    /// Whether a node is constant by its kind alone: a word, a quoted string without expansions,
    /// or a command name that is one of those.
    pub fn is_literal(&self, node: Node<'_>) -> bool {
        let k = node.kind_id();
        if k == self.k.word || k == self.k.raw_string || k == self.k.number {
            return true;
        }
        k == self.k.command_name
            && node.named_child_count() == 1
            && node.named_child(0).is_some_and(|c| {
                let k = c.kind_id();
                k == self.k.word || k == self.k.raw_string
            })
    }

    /// Whether [`BashSem::fold`] can succeed on a string or concatenation, decided without building
    /// its value: every expansion in it names a variable with a constant value.
    pub fn may_fold(&self, node: Node<'_>) -> bool {
        let k = node.kind_id();
        if k == self.k.simple_expansion || k == self.k.expansion {
            let t = text(node, self.src).trim_start();
            let name = t
                .trim_start_matches('$')
                .trim_start_matches('{')
                .trim_end_matches('}');
            // `${parts[*]}`, `${cfg[key]}`: an array's words
            if let Some((array, _)) = name.split_once('[') {
                return matches!(self.facts.arrays.get(array), Some(Some(_)))
                    || matches!(self.facts.assoc.get(array), Some(Some(_)));
            }
            return matches!(self.facts.consts.get(name), Some(Some(_)));
        }
        if k == self.k.string || k == self.k.concatenation || k == self.k.translated_string {
            return children(node).all(|c| self.may_fold(c));
        }
        // literal parts, punctuation, and `$(…)` (which folding decides)
        !node.is_named()
            || k == self.k.word
            || k == self.k.raw_string
            || k == self.k.ansi_c_string
            || k == self.k.number
            || k == self.k.string_content
            || k == self.k.command_substitution
    }

    /// The constant value of a word, string or expansion, as the shell would see it.
    pub fn fold(&self, node: Node<'_>) -> Option<String> {
        self.fold_at(node, 0).filter(|v| v.len() <= MAX_FOLD_LEN)
    }

    pub(super) fn fold_at(&self, node: Node<'_>, depth: u8) -> Option<String> {
        if depth > MAX_FOLD_DEPTH {
            return None;
        }
        let k = self.k;
        let d = depth + 1;
        let kind = node.kind_id();
        let t = text(node, self.src);
        if kind == k.word || kind == k.number {
            Some(unescape_word(t))
        } else if kind == k.raw_string {
            Some(t.get(1..t.len().saturating_sub(1))?.to_string())
        } else if kind == k.ansi_c_string {
            Some(decode_c_escapes(t.strip_prefix("$'")?.strip_suffix('\'')?))
        } else if kind == k.string || kind == k.translated_string {
            let inner_start = node.start_byte() + t.find('"')? + 1;
            let inner_end = node.end_byte().checked_sub(1)?;
            self.fold_parts(node, inner_start, inner_end, d, true, None)
        } else if kind == k.concatenation || kind == k.command_name {
            self.fold_parts(node, node.start_byte(), node.end_byte(), d, false, None)
        } else if kind == k.simple_expansion || kind == k.expansion {
            // In a string the grammar starts an expansion at the blanks before it (`"a $x $y"`):
            // they are text of the string.
            let body = t.trim_start();
            let lead = &t[..t.len() - body.len()];
            let value = self
                .fold_expansion(body)
                .or_else(|| self.positional_default(node, body))?;
            if lead.is_empty() {
                return Some(value);
            }
            Some(format!("{lead}{value}"))
        } else if kind == k.command_substitution {
            self.fold_substitution(node, d)
        } else if kind == k.string_content {
            Some(unescape_dquoted(t))
        } else {
            None
        }
    }

    /// The value of `$x`, `${x}`, `${!ref}`, `${a[1]}`, `${m[key]}`, `${s:1:2}` or `${X:-default}`.
    fn fold_expansion(&self, t: &str) -> Option<String> {
        let inner = t
            .trim_start_matches('$')
            .trim_start_matches('{')
            .trim_end_matches('}');
        // `${!ref}`: the variable whose name `ref` holds (both constants)
        if let Some(reference) = inner.strip_prefix('!')
            && let Some(Some(target)) = self.facts.consts.get(value_of_name(reference)?)
        {
            return self.facts.consts.get(target.as_str()).cloned().flatten();
        }
        // `${parts[1]}`: one word of an array of constants
        if let Some((name, index)) = inner.strip_suffix(']').and_then(|i| i.split_once('[')) {
            // `"${parts[*]}"`: one word, the words joined by the first character of IFS (`IFS=`
            // glues them)
            if index == "*" && !self.facts.assoc.contains_key(name) {
                let words = self.facts.arrays.get(name)?.as_ref()?;
                let separator = match self.facts.consts.get("IFS") {
                    Some(Some(ifs)) => ifs.chars().next().map(String::from),
                    None => Some(" ".to_string()),
                    // IFS set more than once: which one holds here is not known
                    Some(None) => return None,
                };
                return Some(words.join(separator.as_deref().unwrap_or("")));
            }
            if let Ok(index) = index.parse::<usize>()
                && !self.facts.assoc.contains_key(name)
            {
                return self.facts.arrays.get(name)?.as_ref()?.get(index).cloned();
            }
            // `${cfg[root]}`: one entry of an associative array of constants
            let key = index.trim_matches(|c| c == '"' || c == '\'');
            return self.facts.assoc.get(name)?.as_ref()?.get(key).cloned();
        }
        if let Some(part) = self.substring(inner) {
            return Some(part);
        }
        let name = value_of_name(inner)?;
        match self.facts.consts.get(name) {
            Some(value) => value.clone(),
            // The home directory, as `~` (what path rules compare with).
            None if name == "HOME" => Some("~".into()),
            // Set only by the environment: `${PREFIX:-/usr}` is its default whenever the
            // caller leaves it unset, the case a rule must assume.
            // `${WS_DIR:-$HOME}`: a default that is another variable, folded as that one
            None => constant_default(inner).or_else(|| {
                default_word(inner)
                    .filter(|w| plain_expansion(w))
                    .and_then(|w| self.fold_expansion(w))
            }),
        }
    }

    /// `${1:-/srv}` outside every function: a script is run without arguments (a request holds
    /// none), so its positional parameters are unset and the default is the value, unless the
    /// script sets them itself (`set -- …`). Inside a function they are the function's arguments.
    fn positional_default(&self, node: Node<'_>, body: &str) -> Option<String> {
        let (name, word) = split_default(body.strip_prefix("${")?.strip_suffix('}')?)?;
        super::flow::positional(name)?;
        let value = constant_word(word)?;
        if self.src.contains("set --") {
            return None;
        }
        let mut up = node.parent();
        while let Some(n) = up {
            if n.kind_id() == self.k.function_definition {
                return None;
            }
            up = n.parent();
        }
        Some(value)
    }

    /// A word's value with each part only known at run time (an unknown variable, a command's
    /// output) standing as `stand_in`: what a shell that parses the value again (ssh's remote
    /// one) sees the shape of. `None` for anything but a word, a string or an expansion.
    pub fn fold_with(&self, node: Node<'_>, stand_in: &str) -> Option<String> {
        if let Some(v) = self.fold(node) {
            return Some(v);
        }
        let k = self.k;
        let kind = node.kind_id();
        let t = text(node, self.src);
        if kind == k.string {
            let inner_start = node.start_byte() + t.find('"')? + 1;
            let inner_end = node.end_byte().checked_sub(1)?;
            self.fold_parts(node, inner_start, inner_end, 0, true, Some(stand_in))
        } else if kind == k.concatenation {
            self.fold_parts(
                node,
                node.start_byte(),
                node.end_byte(),
                0,
                false,
                Some(stand_in),
            )
        } else if kind == k.simple_expansion
            || kind == k.expansion
            || kind == k.command_substitution
        {
            Some(stand_in.to_string())
        } else {
            None
        }
    }

    /// Folds the children of `node` between `start` and `end`, keeping the text between them; a
    /// part that does not fold is `stand_in` when one is given.
    fn fold_parts(
        &self,
        node: Node<'_>,
        start: usize,
        end: usize,
        d: u8,
        quoted: bool,
        stand_in: Option<&str>,
    ) -> Option<String> {
        let mut out = String::new();
        let mut at = start;
        for child in children(node) {
            if child.end_byte() <= start || child.start_byte() >= end {
                continue;
            }
            let gap = self.src.get(at..child.start_byte().max(at))?;
            out.push_str(&if quoted {
                unescape_dquoted(gap)
            } else {
                unescape_word(gap)
            });
            match (self.fold_at(child, d), stand_in) {
                (Some(v), _) => out.push_str(&v),
                // the blanks the grammar puts in front of an expansion are text (see fold_at)
                (None, Some(word)) => {
                    let t = text(child, self.src);
                    out.push_str(&t[..t.len() - t.trim_start().len()]);
                    out.push_str(word);
                }
                (None, None) => return None,
            }
            at = child.end_byte();
        }
        let gap = self.src.get(at.min(end)..end)?;
        out.push_str(&if quoted {
            unescape_dquoted(gap)
        } else {
            unescape_word(gap)
        });
        Some(out)
    }

    /// `"${parts[@]}"` (or `${parts[*]}`) of an array of constants: its words, as a command's
    /// arguments.
    pub(crate) fn array_words(&self, node: Node<'_>) -> Option<Vec<String>> {
        let t = text(node, self.src).trim_matches('"');
        let name = t
            .strip_prefix("${")?
            .strip_suffix("[@]}")
            .or_else(|| t.strip_prefix("${")?.strip_suffix("[*]}"))?;
        self.facts.arrays.get(name)?.clone()
    }

    /// `${s:2:5}`, `${s:3}`: a slice of a constant, by character offset and length.
    fn substring(&self, inner: &str) -> Option<String> {
        let (name, range) = inner.split_once(':')?;
        let (offset, length) = match range.split_once(':') {
            Some((o, l)) => (o.trim(), Some(l.trim())),
            None => (range.trim(), None),
        };
        let offset: usize = offset.parse().ok()?;
        let value = self.facts.consts.get(name)?.as_ref()?;
        let rest = value.chars().skip(offset);
        Some(match length {
            Some(l) => rest.take(l.parse().ok()?).collect(),
            None => rest.collect(),
        })
    }
}

/// An unquoted word: a backslash quotes the next character.
/// The variable whose value a parameter expansion (without `$`/braces) stands for when that
/// variable is set: `NAME`, `NAME:?message` and `NAME?message` (NAME or an error), `NAME:-default`
/// and `NAME:=default` (NAME whenever it is set; HOME always is). Operators that change the value
/// (`NAME#pattern`, `NAME/a/b`, `NAME:+alt`, `#NAME`) give `None`.
pub(super) fn value_of_name(inner: &str) -> Option<&str> {
    let split = inner
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(inner.len());
    let (name, op) = inner.split_at(split);
    let keeps = op.is_empty()
        || ["?", ":?", "-", ":-", "=", ":="]
            .iter()
            .any(|o| op.starts_with(o));
    (keeps && !name.is_empty()).then_some(name)
}

/// The default of `NAME:-word`, `NAME-word`, `NAME:=word` or `NAME=word` when the word is a
/// constant (no expansion, substitution or quote inside). Positional parameters (`${1:-x}`) are
/// the caller's arguments, not the environment: they do not fold.
fn constant_default(inner: &str) -> Option<String> {
    constant_word(default_word(inner)?)
}

/// A default word that is a constant as written (no expansion, substitution or quote inside).
fn constant_word(word: &str) -> Option<String> {
    (!word.is_empty() && !word.contains(['$', '`', '"', '\'', '\\', '{', '}']))
        .then(|| word.to_string())
}

/// The default word of `NAME:-word` (or `:=`, `-`, `=`), as written, for a variable's name.
fn default_word(inner: &str) -> Option<&str> {
    if !inner.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        return None;
    }
    split_default(inner).map(|(_, word)| word)
}

/// The name and the default word of `NAME:-word` (or `:=`, `-`, `=`; `NAME` a variable or a
/// positional parameter), as written.
fn split_default(inner: &str) -> Option<(&str, &str)> {
    let split = inner.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
    let (name, op) = inner.split_at(split);
    [":-", ":=", "-", "="]
        .iter()
        .find_map(|o| op.strip_prefix(o))
        .map(|word| (name, word))
}

/// Whether `word` is one plain expansion of a variable (`$HOME`, `${HOME}`).
fn plain_expansion(word: &str) -> bool {
    let name = word
        .strip_prefix("${")
        .and_then(|w| w.strip_suffix('}'))
        .or_else(|| word.strip_prefix('$'))
        .unwrap_or("");
    name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

pub(super) fn unescape_word(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('\n') | None => {}
                Some(n) => out.push(n),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Inside double quotes a backslash only quotes `$`, `` ` ``, `"`, `\` and newline.
pub(super) fn unescape_dquoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.peek() {
                Some('$' | '`' | '"' | '\\') => out.extend(chars.next()),
                Some('\n') => {
                    chars.next();
                }
                _ => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_unescape_like_the_shell() {
        assert_eq!(unescape_word(r"\rm"), "rm");
        assert_eq!(unescape_dquoted(r#"a\$b\n"#), r"a$b\n");
    }

    #[test]
    fn expansions_that_keep_the_value_name_their_variable() {
        for (inner, name) in [
            ("HOME", Some("HOME")),
            ("HOME:?", Some("HOME")),
            ("HOME?unset", Some("HOME")),
            ("OUT:-/tmp/out", Some("OUT")),
            ("OUT:=x", Some("OUT")),
            ("1", Some("1")),
            ("HOME:+x", None),
            ("HOME#/", None),
            ("PATH/:/ ", None),
            ("#HOME", None),
            ("!ref", None),
        ] {
            assert_eq!(value_of_name(inner), name, "{inner}");
        }
    }
}
