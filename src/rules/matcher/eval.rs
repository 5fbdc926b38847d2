//! Evaluating a matcher on a node: conditions, relations (`has`, `inside`), `derived`, and whether a
//! leaf can match anywhere in the script.

use std::borrow::Cow;

use tree_sitter::{Node, TreeCursor};
use unicode_normalization::UnicodeNormalization;

use super::{Cx, Matcher, Relation, Sem, TextRegex, Words};
use crate::rules::grammar::{children_in_field, text};
use crate::rules::python::Binding;

/// Text compared by `regex`: NFKC-normalised, because Python treats `ｅｘｅｃ` as `exec` (PEP 3131).
pub fn normalized(s: &str) -> Cow<'_, str> {
    if s.is_ascii() {
        Cow::Borrowed(s)
    } else {
        Cow::Owned(s.nfkc().collect())
    }
}

impl Matcher {
    pub fn matches<'t>(&self, node: Node<'t>, cx: &Cx<'t>) -> bool {
        match self {
            Matcher::Kind(kinds) => kinds.contains(&node.kind_id()),
            Matcher::Regex(re) => re.regex.is_match(&normalized(text(node, cx.src))),
            Matcher::Exact(Words { words, .. }) => {
                let t = text(node, cx.src);
                words.iter().any(|w| w.len() == t.len() && w == t)
                    || (!t.is_ascii() && {
                        let n = normalized(t);
                        words.iter().any(|w| *w == *n)
                    })
            }
            Matcher::Has(rel) => rel.has(node, cx),
            Matcher::Inside(rel) => rel.inside(node, cx),
            Matcher::Not(m) => !m.matches(node, cx),
            Matcher::After(m) => node.prev_named_sibling().is_some_and(|p| m.matches(p, cx)),
            Matcher::All(ms) => ms.iter().all(|m| m.matches(node, cx)),
            Matcher::Any(ms) => ms.iter().any(|m| m.possible(cx) && m.matches(node, cx)),
            Matcher::Folded(re) => match cx.fold(node) {
                Some(v) => re.is_match(&v),
                // not a constant: one of the values it is known to take (a loop over constants,
                // an element of a constant container)
                None => match cx.sem.possible_values(node) {
                    Some(vs) => vs.iter().any(|v| re.is_match(v)),
                    // a parameter: any value one of its call sites is known to pass
                    None => matches!(&cx.sem, Sem::Python(py)
                        if py.parameter_values(node).iter().any(|v| re.is_match(v))),
                },
            },
            Matcher::Prefix(re) => cx.sem.prefixes(node).iter().any(|p| re.is_match(p)),
            Matcher::EveryPrefix(re) => {
                let prefixes = cx.sem.prefixes(node);
                !prefixes.is_empty() && prefixes.iter().all(|p| re.is_match(p))
            }
            Matcher::Quoted(want) => {
                let quoted = match &cx.sem {
                    Sem::Python(py) => py.fold_shell(node).is_some(),
                    Sem::Bash(_) => cx.fold(node).is_some(),
                };
                quoted == *want
            }
            Matcher::Derived(inner) => derived(node, inner, cx, 0),
            Matcher::Dynamic(want) => {
                // a Python loop variable over constants (`for cmd in CMDS`) takes known values
                // only, and so does a parameter every call of its function gives a constant
                // (Bash's loop values are asked for where a rule needs them: costly there)
                let constant = cx.sem.is_literal(node)
                    || cx.fold(node).is_some()
                    || matches!(&cx.sem, Sem::Python(py) if py.possible_values(node).is_some()
                        || py.parameter_always_constant(node));
                constant != *want
            }
            Matcher::Plain(want) => {
                let plain = match &cx.sem {
                    Sem::Python(py) => py.is_plain(node, 0),
                    Sem::Bash(_) => cx.sem.is_literal(node),
                };
                plain == *want
            }
            Matcher::Call(spec) => match &cx.sem {
                Sem::Python(py) => py.call_matches(node, spec, cx),
                Sem::Bash(_) => false,
            },
            Matcher::Command(spec) => match &cx.sem {
                Sem::Bash(sh) => sh.command_matches(node, spec, cx),
                Sem::Python(_) => false,
            },
            Matcher::MayBe(re) => {
                let values = match &cx.sem {
                    Sem::Python(py) => py.possible_values(node),
                    Sem::Bash(_) => cx.fold(node).map(|v| vec![v.to_string()]),
                };
                values.is_none_or(|vs| vs.iter().any(|v| re.is_match(v)))
            }
            Matcher::Resolves(set, _) => match &cx.sem {
                Sem::Python(py) => {
                    py.may_name(node, set) && py.names(node).iter().any(|n| set.contains(n))
                }
                Sem::Bash(_) => false,
            },
            Matcher::Recursive(want) => {
                let is = match &cx.sem {
                    Sem::Python(py) => py.is_recursive(node),
                    Sem::Bash(sh) => sh.is_recursive(node, cx),
                };
                is == *want
            }
        }
    }

    /// Whether this matcher can match any node of the script (decided once per script): exact text
    /// needs its word in the source, a call/command condition needs a call/command of that name
    /// somewhere. Everything else is assumed possible.
    pub fn possible(&self, cx: &Cx<'_>) -> bool {
        match self {
            // Identifiers compare after NFKC, so a non-ASCII script is searched in its NFKC form
            // (NFKC does not compose across the ASCII punctuation and spaces that delimit words).
            Matcher::Exact(w) => cx.leaf_possible(w.slot, || cx.has_literal_of(w.slot)),
            Matcher::Resolves(_, slot) => cx.leaf_possible(*slot, || cx.has_literal_of(*slot)),
            Matcher::Regex(TextRegex {
                literals: Some(_),
                slot,
                ..
            }) => cx.leaf_possible(*slot, || cx.has_literal_of(*slot)),
            Matcher::Call(spec) => {
                cx.leaf_possible(spec.slot, || spec.callee.any_of_sorted(cx.script_names()))
            }
            Matcher::Command(spec) => {
                cx.leaf_possible(spec.slot, || spec.name.any_of_sorted(cx.script_names()))
            }
            // (`derived` only looks at nodes of this script: what its inner matcher cannot
            // match anywhere, it cannot reach through a name or a call either)
            Matcher::All(_)
            | Matcher::Any(_)
            | Matcher::Has(_)
            | Matcher::Inside(_)
            | Matcher::Derived(_) => {
                cx.composite_possible(std::ptr::from_ref(self) as usize, || match self {
                    Matcher::All(ms) => ms.iter().all(|m| m.possible(cx)),
                    Matcher::Any(ms) => ms.iter().any(|m| m.possible(cx)),
                    Matcher::Has(rel) | Matcher::Inside(rel) => rel.inner.possible(cx),
                    Matcher::Derived(inner) => inner.possible(cx),
                    _ => true,
                })
            }
            _ => true,
        }
    }
}

impl Relation {
    fn has<'t>(&self, node: Node<'t>, cx: &Cx<'t>) -> bool {
        if !self.inner.possible(cx) {
            return false;
        }
        // A field names (the first of) its children directly: no iteration.
        if let Some(field) = self.field {
            return node
                .child_by_field_id(field)
                .is_some_and(|child| self.inner.matches(child, cx));
        }
        cx.with_cursor(node, |cursor| self.has_with(cursor, cx))
    }

    fn has_with<'t>(&self, cursor: &mut TreeCursor<'t>, cx: &Cx<'t>) -> bool {
        if !cursor.goto_first_child() {
            return false;
        }
        if !self.stop_by_end {
            loop {
                if self.inner.matches(cursor.node(), cx) {
                    return true;
                }
                if !cursor.goto_next_sibling() {
                    return false;
                }
            }
        }
        // Depth-first over all descendants, iteratively (trees are depth-bounded by the syntax layer).
        let mut depth = 1usize;
        loop {
            if self.inner.matches(cursor.node(), cx) {
                return true;
            }
            if cursor.goto_first_child() {
                depth += 1;
                continue;
            }
            loop {
                if cursor.goto_next_sibling() {
                    break;
                }
                if depth == 1 || !cursor.goto_parent() {
                    return false;
                }
                depth -= 1;
            }
        }
    }

    fn inside<'t>(&self, node: Node<'t>, cx: &Cx<'t>) -> bool {
        if !self.inner.possible(cx) {
            return false;
        }
        if let Some(field) = self.field {
            let Some(parent) = cx.parent(node) else {
                return false;
            };
            let in_field = children_in_field(parent, field)
                .iter()
                .any(|c| c.id() == node.id());
            return in_field && self.inner.matches(parent, cx);
        }
        let mut current = cx.parent(node);
        while let Some(p) = current {
            if self.inner.matches(p, cx) {
                return true;
            }
            if !self.stop_by_end {
                return false;
            }
            current = cx.parent(p);
        }
        false
    }
}

/// `derived:`: `node` or a descendant matches `inner`, or so does an expression a name inside it
/// is bound to, or the body of a function of the script it calls (Python; names and calls followed
/// at most four deep).
fn derived<'t>(node: Node<'t>, inner: &Matcher, cx: &Cx<'t>, depth: u8) -> bool {
    let key = (std::ptr::from_ref(inner) as usize, node.id(), depth);
    cx.derived_memo(key, || derived_uncached(node, inner, cx, depth))
}

fn derived_uncached<'t>(node: Node<'t>, inner: &Matcher, cx: &Cx<'t>, depth: u8) -> bool {
    if inner.matches(node, cx) {
        return true;
    }
    // The compiler only accepts `derived` in Python rules.
    let Sem::Python(py) = &cx.sem else {
        return false;
    };
    let mut names: Vec<Node<'t>> = Vec::new();
    let mut calls: Vec<Node<'t>> = Vec::new();
    if node.kind_id() == py.k.call {
        calls.push(node);
    }
    let found = cx.with_cursor(node, |cursor| {
        let mut level = 0usize;
        if !cursor.goto_first_child() {
            return false;
        }
        level += 1;
        loop {
            let n = cursor.node();
            if inner.matches(n, cx) {
                return true;
            }
            if n.kind_id() == py.k.identifier {
                names.push(n);
            } else if n.kind_id() == py.k.call {
                calls.push(n);
            }
            if cursor.goto_first_child() {
                level += 1;
                continue;
            }
            loop {
                if cursor.goto_next_sibling() {
                    break;
                }
                if level <= 1 || !cursor.goto_parent() {
                    return false;
                }
                level -= 1;
            }
        }
    });
    if found {
        return true;
    }
    if node.kind_id() == py.k.identifier {
        names.push(node);
    }
    if depth >= 4 {
        return false;
    }
    // `compact(p, key)` in a loop: what the script's own function does with them
    let called = calls.iter().any(|call| {
        py.called_body(*call)
            .is_some_and(|body| body.id() != node.id() && derived(body, inner, cx, depth + 1))
    });
    called
        || names.iter().any(|n| {
            let bound = match py.binding_of(*n) {
                Some(Binding::Value(v)) | Some(Binding::Item(v, _)) => {
                    v.id() != node.id() && derived(v, inner, cx, depth + 1)
                }
                _ => false,
            };
            // (a list that grew: `targets += [...]`, `targets.append(p)`)
            bound
                || py
                    .grown(*n)
                    .iter()
                    .any(|g| g.node.id() != node.id() && derived(g.node, inner, cx, depth + 1))
        })
}
