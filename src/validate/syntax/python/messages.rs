//! The messages of Python syntax errors tree-sitter reports (ERROR and MISSING nodes), worded
//! as CPython words them where the node tells enough, and the one ERROR shape CPython accepts.

use tree_sitter::Node;

use crate::domain::verdict::{Finding, Positions};
use crate::rules::grammar::text;
use crate::validate::syntax::{excerpt, finding, first_token};

pub(super) fn error_message(node: Node<'_>, src: &str, pos: &Positions<'_>) -> Finding {
    let token = first_token(node).map(|t| text(t, src)).unwrap_or("");
    let body = text(node, src);
    let (rule, message) = if token.ends_with("\"\"\"") || token.ends_with("'''") {
        (
            "unterminated-string",
            "unterminated triple-quoted string literal".to_string(),
        )
    } else if token.ends_with('"') || token.ends_with('\'') || body.starts_with(['"', '\'']) {
        (
            "unterminated-string",
            "unterminated string literal".to_string(),
        )
    } else if let Some(open) = unclosed_bracket(body) {
        ("unclosed-bracket", format!("'{open}' was never closed"))
    } else {
        (
            "invalid-syntax",
            format!("invalid syntax near `{}`", excerpt(node, src)),
        )
    };
    finding(pos, node.start_byte(), rule, message)
}

/// `x: list[int] [1]`: an annotation is any expression to CPython, but the grammar's annotations
/// stop after a generic type, so a subscript of one parses as an error followed by a list. The
/// error is then the generic type alone and the annotation field a non-empty list: a valid
/// subscript, not a syntax error.
pub(super) fn subscripted_annotation(error: Node<'_>) -> bool {
    let Some(parent) = error.parent().filter(|p| p.kind() == "assignment") else {
        return false;
    };
    let mut cursor = error.walk();
    let parts: Vec<Node<'_>> = error.named_children(&mut cursor).collect();
    let [generic] = parts[..] else {
        return false;
    };
    // nothing else in the error: `x: list[int] ) [1]` holds a stray `)` beside the type
    if generic.kind() != "type" || error.child_count() != 1 {
        return false;
    }
    let Some(annotation) = error
        .next_sibling()
        .filter(|n| parent.child_by_field_name("type") == Some(*n))
    else {
        return false;
    };
    annotation.named_child_count() == 1
        && annotation
            .named_child(0)
            .is_some_and(|l| l.kind() == "list" && l.named_child_count() > 0)
}

pub(super) fn missing_message(node: Node<'_>, pos: &Positions<'_>) -> Finding {
    let what = node.kind();
    let message = match what {
        ")" => "'(' was never closed".to_string(),
        "]" => "'[' was never closed".to_string(),
        "}" => "'{' was never closed".to_string(),
        ":" => "expected ':'".to_string(),
        w if w.chars().all(|c| c.is_ascii_alphabetic() || c == '_') => "invalid syntax".to_string(),
        w => format!("expected '{w}'"),
    };
    finding(pos, node.start_byte(), "missing-token", message)
}

/// The first bracket left open in `text` (strings are not tracked: good enough for a message).
fn unclosed_bracket(text: &str) -> Option<char> {
    let mut stack = Vec::new();
    for c in text.chars() {
        match c {
            '(' | '[' | '{' => stack.push(c),
            ')' | ']' | '}' => {
                stack.pop();
            }
            _ => {}
        }
    }
    stack.first().copied()
}
