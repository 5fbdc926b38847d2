//! Layer 1, size: limits checked before anything parses the script.

use super::verdict::{Finding, Layer, Severity};

fn finding(rule: &str, message: String, line: u32, column: u32) -> Finding {
    Finding {
        layer: Layer::Size,
        rule: rule.to_string(),
        severity: Severity::Block,
        message,
        line,
        column,
    }
}

/// Rejects scripts over `max_chars` characters (not bytes), empty scripts and NUL bytes.
pub fn check(text: &str, max_chars: usize) -> Option<Finding> {
    // A text of at most `max_chars` bytes has at most as many characters; otherwise counting
    // stops one past the limit, so a huge script costs no more than a legal one.
    if text.len() > max_chars && text.chars().take(max_chars + 1).count() > max_chars {
        return Some(finding(
            "max-characters",
            format!("script is longer than {max_chars} characters"),
            1,
            1,
        ));
    }
    if text.trim().is_empty() {
        return Some(finding("empty-script", "script is empty".into(), 1, 1));
    }
    if let Some(at) = memchr::memchr(0, text.as_bytes()) {
        let (line, column) = super::verdict::Positions::new(text).at(at);
        return Some(finding(
            "nul-byte",
            "script contains a NUL byte".into(),
            line,
            column,
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_characters_not_bytes() {
        let ten_chars = "é".repeat(10);
        assert!(check(&ten_chars, 10).is_none());
        let eleven = "é".repeat(11);
        assert_eq!(
            check(&eleven, 10).map(|f| f.rule),
            Some("max-characters".into())
        );
    }

    #[test]
    fn empty_and_nul_are_rejected_with_position() {
        assert_eq!(
            check("  \n\t", 100).map(|f| f.rule),
            Some("empty-script".into())
        );
        let f = check("print(1)\nx = '\0'\n", 100).expect("nul byte");
        assert_eq!((f.rule.as_str(), f.line, f.column), ("nul-byte", 2, 6));
    }
}
