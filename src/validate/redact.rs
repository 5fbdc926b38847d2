//! Output redaction: secrets of the known families (the validator's secret rules) in a run's
//! output, replaced by the form findings show them in, before the output leaves the service.

use crate::rules::secret::{SecretRules, redact};

/// `text` with every secret `rules` find replaced by its redacted form; `None` when it has none.
pub(crate) fn redact_secrets(rules: &SecretRules, text: &str) -> Option<String> {
    let found = rules.scan(text);
    if found.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for m in found {
        // Matches come in text order, one per secret; a start inside the last one adds nothing.
        if m.start < at {
            continue;
        }
        out.push_str(&text[at..m.start]);
        out.push_str(&redact(&text[m.start..m.end]));
        at = m.end;
    }
    out.push_str(&text[at..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::RuleSet;

    fn rules() -> RuleSet {
        RuleSet::embedded().expect("embedded rules")
    }

    #[test]
    fn a_known_secret_is_replaced_and_the_rest_kept() {
        let rules = rules();
        let token = concat!("ghp_", "aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5");
        let text = format!("line one\ntoken={token} end\n");
        let out = redact_secrets(&rules.secrets, &text).expect("a secret was found");
        assert!(!out.contains(token), "{out}");
        assert!(out.starts_with("line one\ntoken=ghp_***"), "{out}");
        assert!(out.ends_with(" end\n"), "{out}");
    }

    #[test]
    fn output_without_secrets_is_left_alone() {
        let rules = rules();
        assert_eq!(redact_secrets(&rules.secrets, "hello world\n"), None);
        assert_eq!(redact_secrets(&rules.secrets, ""), None);
    }
}
