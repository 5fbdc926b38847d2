//! Layer 2, syntax: tree-sitter ERROR and MISSING nodes, plus checks that close the grammars'
//! leniencies so the layer catches what `ast.parse` and `bash -n` catch.
//!
//! The checks run per node inside the one validation walk (`super::walk`).

pub mod bash;
pub mod python;

use tree_sitter::Node;

use super::verdict::{Finding, Layer, Positions, Severity};
use crate::rules::grammar::text;

/// Trees deeper than this are rejected: CPython refuses ~200 nested brackets, and every later
/// algorithm may then rely on bounded depth.
pub const MAX_DEPTH: usize = 400;

/// At most this many syntax findings are reported; the first is what matters.
pub const MAX_FINDINGS: usize = 5;

pub fn finding(positions: &Positions<'_>, at: usize, rule: &str, message: String) -> Finding {
    let (line, column) = positions.at(at);
    Finding {
        layer: Layer::Syntax,
        rule: rule.to_string(),
        severity: Severity::Block,
        message,
        line,
        column,
    }
}

/// A short, quoted excerpt of a node for messages (first line, at most 30 characters).
pub fn excerpt(node: Node<'_>, src: &str) -> String {
    let t = text(node, src).lines().next().unwrap_or("").trim();
    let mut short: String = t.chars().take(30).collect();
    if t.chars().count() > 30 {
        short.push('…');
    }
    short
}

/// The first anonymous token inside a node (the keyword or punctuation that opened an ERROR).
pub fn first_token<'t>(node: Node<'t>) -> Option<Node<'t>> {
    let mut current = node;
    loop {
        let child = current.child(0)?;
        if child.child_count() == 0 {
            return Some(child);
        }
        current = child;
    }
}

pub fn too_deep(positions: &Positions<'_>, node: Node<'_>) -> Finding {
    finding(
        positions,
        node.start_byte(),
        "nesting-too-deep",
        format!("nesting is deeper than {MAX_DEPTH} levels"),
    )
}
