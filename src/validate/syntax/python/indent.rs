//! Python indentation as CPython measures it: widths with tabs to 1 and to 8 columns, clauses that
//! line up with their statement, and the first statement of a block.

use tree_sitter::Node;

use super::PySyntax;
use crate::domain::verdict::{Finding, Positions};
use crate::validate::syntax::finding;

impl PySyntax {
    /// `else:`/`elif`/`except`/`finally` must line up with the statement they belong to.
    pub(super) fn check_clause(
        &self,
        clause: Node<'_>,
        parent: Option<Node<'_>>,
        src: &str,
        pos: &Positions<'_>,
        out: &mut Vec<Finding>,
    ) {
        let Some(parent) = parent else { return };
        if parent.kind_id() == self.block || !starts_line(src, clause) {
            return;
        }
        if indent_of(src, clause) != indent_of(src, parent) {
            out.push(finding(
                pos,
                clause.start_byte(),
                "indentation",
                "unindent does not match any outer indentation level".into(),
            ));
        }
    }
}

/// The text between the start of a node's line and the node (tree-sitter knows the byte column).
fn line_prefix<'s>(src: &'s str, node: Node<'_>) -> &'s str {
    let start = node.start_byte();
    let column = node.start_position().column.min(start);
    src.get(start - column..start).unwrap_or("")
}

/// Indentation width of the line where `node` starts, with tabs to the next multiple of 1 and of 8
/// (CPython compares both and reports a TabError when they disagree).
pub(super) fn indent_of(src: &str, node: Node<'_>) -> (usize, usize) {
    let mut w1 = 0;
    let mut w8 = 0;
    for b in line_prefix(src, node).bytes() {
        match b {
            b' ' => {
                w1 += 1;
                w8 += 1;
            }
            b'\t' => {
                w1 += 1;
                w8 = (w8 / 8 + 1) * 8;
            }
            b'\x0c' => {
                w1 = 0;
                w8 = 0;
            }
            _ => break,
        }
    }
    (w1, w8)
}

pub(super) fn starts_line(src: &str, node: Node<'_>) -> bool {
    line_prefix(src, node)
        .bytes()
        .all(|b| matches!(b, b' ' | b'\t' | b'\x0c'))
}

/// The first statement of a block must be deeper than `deeper_than` in both tab widths.
pub(super) fn first_statement_indent(
    pos: &Positions<'_>,
    stmt: Node<'_>,
    deeper_than: (usize, usize),
    indent: (usize, usize),
) -> Option<Finding> {
    let deeper1 = indent.0 >= deeper_than.0;
    let deeper8 = indent.1 >= deeper_than.1;
    if deeper1 != deeper8 {
        return Some(finding(
            pos,
            stmt.start_byte(),
            "tab-error",
            "inconsistent use of tabs and spaces in indentation".into(),
        ));
    }
    (!deeper1).then(|| {
        finding(
            pos,
            stmt.start_byte(),
            "expected-indented-block",
            "expected an indented block".into(),
        )
    })
}

pub(super) fn indent_finding(
    pos: &Positions<'_>,
    stmt: Node<'_>,
    expected: (usize, usize),
    got: (usize, usize),
) -> Finding {
    let (rule, message) = if (got.0 > expected.0) != (got.1 > expected.1)
        || (got.0 == expected.0) != (got.1 == expected.1)
    {
        (
            "tab-error",
            "inconsistent use of tabs and spaces in indentation",
        )
    } else if got.0 > expected.0 {
        ("indentation", "unexpected indent")
    } else {
        (
            "indentation",
            "unindent does not match any outer indentation level",
        )
    };
    finding(pos, stmt.start_byte(), rule, message.into())
}
