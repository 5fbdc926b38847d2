//! Layer 4, secrets: credentials anywhere in the text (comments, docstrings, heredocs count), and in
//! string literals that hide them behind base64 or `\xNN` escapes.

use tree_sitter::Node;

use super::verdict::{Finding, Layer, Positions};
use crate::rules::matcher::Sem;
use crate::rules::python::decode_base64;
use crate::rules::secret::{SecretRules, redact};

pub fn check(
    rules: &SecretRules,
    text: &str,
    strings: &[Node<'_>],
    sem: &Sem<'_>,
    pos: &Positions<'_>,
) -> Vec<Finding> {
    let mut findings: Vec<Finding> = rules
        .scan(text)
        .into_iter()
        .map(|m| {
            let rule = &rules.rules[m.rule].meta;
            let (line, column) = pos.at(m.start);
            Finding {
                layer: Layer::Secrets,
                rule: rule.id.clone(),
                severity: rule.severity,
                message: format!("{}: {}", rule.message, redact(&text[m.start..m.end])),
                line,
                column,
            }
        })
        .collect();
    for node in strings {
        for (decoded, how) in decodings(node, text, sem) {
            for m in rules.scan(&decoded) {
                let rule = &rules.rules[m.rule].meta;
                let (line, column) = pos.at(node.start_byte());
                findings.push(Finding {
                    layer: Layer::Secrets,
                    rule: rule.id.clone(),
                    severity: rule.severity,
                    message: format!(
                        "{} ({how}): {}",
                        rule.message,
                        redact(&decoded[m.start..m.end])
                    ),
                    line,
                    column,
                });
            }
        }
    }
    findings
}

/// The decoded forms of a string literal worth scanning: its escape-processed value when escapes
/// changed it, and its base64 decoding when it is printable text.
fn decodings(node: &Node<'_>, text: &str, sem: &Sem<'_>) -> Vec<(String, &'static str)> {
    let raw = &text[node.byte_range()];
    // Only escapes or a long unbroken base64-alphabet run can hide a secret; most literals have neither.
    let escaped = raw.contains('\\');
    let has_blob = raw
        .split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '-' | '_')))
        .any(|run| run.len() >= 20);
    if !escaped && !has_blob {
        return Vec::new();
    }
    let Some(value) = sem.fold(*node) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if raw.contains('\\') && !raw.contains(&value) {
        out.push((value.clone(), "escaped"));
    }
    let candidate = value.trim();
    let base64_like = candidate.len() >= 20
        && candidate
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=' | b'-' | b'_'));
    if base64_like
        && let Some(decoded) = decode_base64(candidate, candidate.contains(['-', '_']))
        && mostly_printable(&decoded)
    {
        out.push((decoded, "base64-encoded"));
    }
    out
}

fn mostly_printable(s: &str) -> bool {
    let total = s.chars().count();
    let printable = s
        .chars()
        .filter(|c| !c.is_control() || c.is_ascii_whitespace())
        .count();
    total > 0 && printable * 10 >= total * 9
}
