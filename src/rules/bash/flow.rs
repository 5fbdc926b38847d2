//! Values a Bash word can take beyond a constant: the words a loop variable runs over
//! (`for d in /dev/sd*; do dd of="$d"; done`), and the known leading part of a word built at run
//! time (`"$HOME/.ssh/$name"` starts with `~/.ssh/`).

use tree_sitter::Node;

use super::BashSem;
use crate::rules::grammar::{children, text};

/// At most this many values are kept for a word (loop variables multiply).
const MAX_VALUES: usize = 16;

enum Part<'t> {
    Text(String),
    Node(Node<'t>),
}

/// Every value of `prefixes` followed by every value of `values`.
fn combine(prefixes: &[String], values: &[String]) -> Vec<String> {
    prefixes
        .iter()
        .flat_map(|p| values.iter().map(move |v| format!("{p}{v}")))
        .take(MAX_VALUES)
        .collect()
}

impl BashSem<'_> {
    /// Every value a node can take when each is known: its constant value, or the values of
    /// the loop variables in it.
    pub fn possible_values(&self, node: Node<'_>) -> Option<Vec<String>> {
        self.values_at(node, 0)
    }

    fn values_at(&self, node: Node<'_>, depth: u8) -> Option<Vec<String>> {
        if depth > 8 {
            return None;
        }
        if let Some(v) = self.fold(node) {
            return Some(vec![v]);
        }
        let k = self.k;
        let kind = node.kind_id();
        if kind == k.simple_expansion || kind == k.expansion {
            let name = self.variable(node);
            if let Some(position) = positional(name) {
                return self.argument_values(node, position, depth);
            }
            if let Some(values) = self.named_argument_values(node, name, depth) {
                return Some(values);
            }
            return match self.facts.loops.get(name) {
                Some(values) => values.clone(),
                None => self.case_values(node, name),
            };
        }
        let mut out = vec![String::new()];
        for part in self.parts(node)? {
            let values = match part {
                Part::Text(t) => vec![t],
                Part::Node(n) => self.values_at(n, depth + 1)?,
            };
            out = combine(&out, &values);
        }
        Some(out)
    }

    /// The constants a plain expansion of a variable can stand for (`"$cmd"`), when every
    /// assignment of that variable is a constant (see `BashFacts::alternatives`).
    pub fn assigned_alternatives(&self, node: Node<'_>) -> Option<Vec<String>> {
        let values = self.facts.alternatives.get(self.expanded_variable(node)?)?;
        values.clone().filter(|v| !v.is_empty())
    }

    /// The known leading parts of a node's values: the values when all are known, else the
    /// constant text before the first part only known at run time.
    pub fn prefixes(&self, node: Node<'_>) -> Vec<String> {
        if let Some(values) = self.values_at(node, 0) {
            return values;
        }
        // `"$ws"` with `ws="preview-$PR"`: the leading parts of what it was assigned
        if let Some(leads) = self.leads_of(node) {
            return leads.to_vec();
        }
        let mut out = vec![String::new()];
        for part in self.parts(node).unwrap_or_default() {
            let values = match part {
                Part::Text(t) => vec![t],
                Part::Node(n) => match self.values_at(n, 1) {
                    Some(values) => values,
                    None => {
                        if let Some(leads) = self.leads_of(n) {
                            out = combine(&out, leads);
                        }
                        break;
                    }
                },
            };
            out = combine(&out, &values);
        }
        out.retain(|p| !p.is_empty());
        out
    }

    /// The known leading parts of a variable's value when the node is a plain expansion of one
    /// assigned once to a value only partly known.
    fn leads_of(&self, node: Node<'_>) -> Option<&[String]> {
        self.facts
            .leads
            .get(self.expanded_variable(node)?)?
            .as_deref()
    }

    /// The source text of every value assigned to the variable a node only expands
    /// (`RC="$HOME/.bashrc"`, `RC="$HOME/.zshrc"`, then `"$RC"`): what its value ends with when
    /// the start is only known at run time.
    pub(crate) fn assigned_texts(&self, node: Node<'_>) -> Option<Vec<&str>> {
        let ranges = self
            .facts
            .assigned_ranges
            .get(self.expanded_variable(node)?)?;
        Some(
            ranges
                .iter()
                .filter_map(|&(start, end)| self.src.get(start..end))
                .collect(),
        )
    }

    /// The variable a node is a plain expansion of (`$d`, `${d}`, `"$d"`), if that is all it is.
    fn expanded_variable(&self, node: Node<'_>) -> Option<&str> {
        // `"$ldb"`: a quoted string that is just the expansion
        if node.kind_id() == self.k.string && node.named_child_count() == 1 {
            let inner = node.named_child(0)?;
            if inner.byte_range().len() + 2 == node.byte_range().len() {
                return self.expanded_variable(inner);
            }
        }
        let kind = node.kind_id();
        if kind != self.k.simple_expansion && kind != self.k.expansion {
            return None;
        }
        // (in a string the grammar starts an expansion at the blanks before it)
        Some(expansion_name(text(node, self.src).trim_start()))
    }

    /// The pieces of a quoted string or concatenation: its child nodes and the text between them
    /// (unescaped as the shell would).
    fn parts<'t>(&self, node: Node<'t>) -> Option<Vec<Part<'t>>> {
        let k = self.k;
        let kind = node.kind_id();
        let (start, end, quoted) = if kind == k.string {
            let t = text(node, self.src);
            (
                node.start_byte() + t.find('"')? + 1,
                node.end_byte().checked_sub(1)?,
                true,
            )
        } else if kind == k.concatenation {
            (node.start_byte(), node.end_byte(), false)
        } else {
            return None;
        };
        let unescape = |s: &str| {
            if quoted {
                super::unescape_dquoted(s)
            } else {
                super::unescape_word(s)
            }
        };
        let mut out = Vec::new();
        let mut at = start;
        for child in children(node) {
            if child.end_byte() <= start || child.start_byte() >= end {
                continue;
            }
            let gap = self.src.get(at..child.start_byte().max(at))?;
            if !gap.is_empty() {
                out.push(Part::Text(unescape(gap)));
            }
            out.push(Part::Node(child));
            at = child.end_byte();
        }
        let gap = self.src.get(at.min(end)..end)?;
        if !gap.is_empty() {
            out.push(Part::Text(unescape(gap)));
        }
        Some(out)
    }

    /// `case "$ext" in py|sh) … "$ext" … ;; esac`: inside a branch whose patterns are all plain
    /// words, the variable the `case` tests is one of them.
    fn case_values(&self, node: Node<'_>, name: &str) -> Option<Vec<String>> {
        // the innermost branch holding the node whose statement tests `name`
        self.facts
            .case_items
            .iter()
            .filter(|item| {
                item.range.0 <= node.start_byte()
                    && node.end_byte() <= item.range.1
                    && item.tested == name
            })
            .min_by_key(|item| item.range.1 - item.range.0)?
            .patterns
            .clone()
    }

    /// `nuke() { rm -rf "$1"; }` … `nuke /`: inside a function, `$N` takes the `N`th argument of
    /// each of the script's calls of it, when every call's is known.
    fn argument_values(&self, node: Node<'_>, position: usize, depth: u8) -> Option<Vec<String>> {
        const MAX_CALLS: usize = 16;
        if self.facts.functions.values().all(Vec::is_empty) {
            return None;
        }
        let mut function = node.parent()?;
        while function.kind_id() != self.k.function_definition {
            function = function.parent()?;
        }
        let name = text(function.child_by_field_id(self.k.f_name)?, self.src);
        let calls = self.facts.functions.get(name)?;
        if calls.is_empty() || calls.len() > MAX_CALLS {
            return None;
        }
        let mut root = function;
        while let Some(parent) = root.parent() {
            root = parent;
        }
        let mut values = Vec::new();
        for &(start, end) in calls {
            // a call inside the function itself (recursion) passes on what it was given
            if start >= function.start_byte() && end <= function.end_byte() {
                continue;
            }
            let mut call = root.descendant_for_byte_range(start, end)?;
            while call.kind_id() != self.k.command || call.byte_range() != (start..end) {
                call = call.parent()?;
            }
            let args = crate::rules::grammar::children_in_field(call, self.k.f_argument);
            values.extend(self.values_at(*args.get(position - 1)?, depth + 1)?);
        }
        (!values.is_empty()).then(|| {
            values.truncate(MAX_VALUES);
            values
        })
    }

    /// `purge() { local d="$1"; find "$d" -delete; }`: a variable assigned once, to one of its
    /// function's positional parameters, takes what that parameter takes.
    fn named_argument_values(&self, node: Node<'_>, name: &str, depth: u8) -> Option<Vec<String>> {
        let &[(start, end)] = self.facts.assigned_ranges.get(name)?.as_slice() else {
            return None;
        };
        let value = self.src.get(start..end)?.trim_matches('"');
        if !value.starts_with('$') {
            return None;
        }
        let position = positional(expansion_name(value))?;
        let value = crate::rules::grammar::node_spanning(node, start, end)?;
        self.argument_values(value, position, depth + 1)
    }

    /// The variable an expansion names (`$x`, `${x}`).
    fn variable<'s>(&self, node: Node<'_>) -> &'s str
    where
        Self: 's,
    {
        expansion_name(text(node, self.src))
    }
}

/// The variable an expansion's text (`$d`, `${d}`, `${d:?}`, `${d:-/tmp}`) stands for whenever it
/// is set (a loop's is).
fn expansion_name(t: &str) -> &str {
    let inner = t
        .trim_start_matches('$')
        .trim_start_matches('{')
        .trim_end_matches('}');
    super::fold::value_of_name(inner).unwrap_or(inner)
}

/// The position of a positional parameter (`1` for `$1`, `${2}`); `None` for other names and `$0`.
pub(super) fn positional(name: &str) -> Option<usize> {
    let n: usize = name.parse().ok()?;
    (n > 0).then_some(n)
}
