//! The messages of Python syntax errors tree-sitter reports (ERROR and MISSING nodes), worded
//! as CPython words them where the node tells enough.

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
