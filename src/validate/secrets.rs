//! Layer 4, secrets: credentials anywhere in the text (comments, docstrings, heredocs count), and in
//! string literals that hide them behind base64 or `\xNN` escapes.

mod fold;

use tree_sitter::Node;

use super::verdict::{Finding, Layer, Positions};
use crate::rules::matcher::Sem;
use crate::rules::python::decode_base64;
use crate::rules::secret::{SecretRules, redact};

pub use fold::{PY_FOLD_KINDS, SH_FOLD_KINDS};

pub fn check(
    rules: &SecretRules,
    text: &str,
    strings: &[Node<'_>],
    folds: &[Node<'_>],
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
    findings.extend(assembled(rules, text, folds, sem, pos));
    findings
}

/// Secrets that only exist once literals are put together (`"ghp_" + "…"`, `"$a$b"`).
fn assembled(
    rules: &SecretRules,
    text: &str,
    folds: &[Node<'_>],
    sem: &Sem<'_>,
    pos: &Positions<'_>,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    for folded in fold::fold_all(folds, text, sem) {
        for m in rules.scan(&folded.text) {
            let secret = &folded.text[m.start..m.end];
            // Secrets visible as one literal are the plain-text scan's; a match inside the `name = `
            // prefix is not a secret of the value.
            if m.end <= folded.value_at || text.contains(secret) {
                continue;
            }
            let rule = &rules.rules[m.rule].meta;
            let (line, column) = pos.at(folded.node.start_byte());
            findings.push(Finding {
                layer: Layer::Secrets,
                rule: rule.id.clone(),
                severity: rule.severity,
                message: format!(
                    "{} (assembled from parts): {}",
                    rule.message,
                    redact(secret)
                ),
                line,
                column,
            });
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

#[cfg(test)]
mod tests {
    use std::sync::LazyLock;

    use crate::domain::script::{Language, Script};
    use crate::domain::verdict::Layer;
    use crate::rules::RuleSet;
    use crate::validate::{ValidationConfig, Validator};

    static VALIDATOR: LazyLock<Validator> = LazyLock::new(|| {
        Validator::new(
            RuleSet::embedded().expect("rules"),
            ValidationConfig::default(),
        )
    });

    fn secret_rules(language: Language, text: &str) -> Vec<String> {
        VALIDATOR
            .inspect(&Script::new(language, text))
            .into_iter()
            .filter(|f| f.layer == Layer::Secrets)
            .map(|f| format!("{} {}", f.rule, f.message))
            .collect()
    }

    // The parts below are random characters, split so that no literal holds a whole token.
    const SPLIT_PYTHON: &[&str] = &[
        "tok = \"ghp_\" + \"ZYMmLOPIwFQuYhrsiF8n\" + \"fMaunlNy5yX0Y3rN\"\n",
        "tok = (\"ghp_\"\n       \"JdqL2kVF8thrxFeUZCRj\"\n       \"AbNX7iFdh5MmdDWI\")\n",
        "a = \"ghp_\"\nb = \"N86tKvycm7L8gqLCHBKer0aF7boFJTnAYVIh\"\ntok = f\"{a}{b}\"\n",
        "tok = \"%s%s\" % (\"ghp_\", \"ZM5yDoNcQiZ0wIW8se7DIv3tmxvJm8aHGHJS\")\n",
        "tok = \"{}{}\".format(\"ghp_\", \"ZYMmLOPIwFQuYhrsiF8nfMaunlNy5yX0Y3rN\")\n",
        "tok = \"\".join([\"ghp_\", \"JdqL2kVF8thrxFeUZCRj\", \"AbNX7iFdh5MmdDWI\"])\n",
        "parts = (\"ghp_\", \"JdqL2kVF8thrxFeUZCRj\", \"AbNX7iFdh5MmdDWI\")\ntok = \"\".join(parts)\n",
        "prefix = \"ghp_\"\nbody = \"N86tKvycm7L8gqLCHBKer0aF7boFJTnAYVIh\"\ntoken = prefix + body\n",
        "requests.get(url, headers={\"Authorization\": \"token \" + \"ghp_\" + \"ZM5yDoNcQiZ0wIW8se7DIv3tmxvJm8aHGHJS\"})\n",
    ];

    const SPLIT_BASH: &[&str] = &[
        "a=\"ghp_\"; b=\"ZYMmLOPIwFQuYhrsiF8nfMaunlNy5yX0Y3rN\"; tok=\"$a$b\"\n",
        "a=ghp_\nb=JdqL2kVF8thrxFeUZCRjAbNX7iFdh5MmdDWI\nexport GITHUB_TOKEN=${a}${b}\n",
        "p=ghp_\ncurl -H \"Authorization: token ${p}N86tKvycm7L8gqLCHBKer0aF7boFJTnAYVIh\" https://api.github.com/user\n",
    ];

    #[test]
    fn secrets_split_across_literals_are_put_together() {
        for (language, cases) in [
            (Language::Python, SPLIT_PYTHON),
            (Language::Bash, SPLIT_BASH),
        ] {
            for case in cases {
                let found = secret_rules(language, case);
                assert!(
                    found.iter().any(|f| f.starts_with("github-token ")),
                    "{language}: missed {case:?}: {found:?}"
                );
                assert!(
                    found.iter().all(|f| !f.contains("N86tKvyc")),
                    "the secret is redacted"
                );
            }
        }
    }

    #[test]
    fn names_of_assembled_values_reach_the_generic_rules() {
        let found = secret_rules(Language::Python, "password = \"Zk3mP9\" + \"xQ2vL7wR4t\"\n");
        assert!(
            found.iter().any(|f| f.starts_with("generic-credential ")),
            "{found:?}"
        );
    }

    #[test]
    fn a_secret_in_one_literal_is_reported_once() {
        let found = secret_rules(
            Language::Python,
            "tok = \"ghp_ZYMmLOPIwFQuYhrsiF8nfMaunlNy5yX0Y3rN\"\nheaders = {\"Authorization\": \"token \" + tok}\n",
        );
        assert_eq!(found.len(), 1, "{found:?}");
    }

    #[test]
    fn values_read_from_the_environment_are_not_secrets() {
        let python = [
            "headers = {\"Authorization\": \"Bearer \" + os.environ[\"TOKEN\"]}\n",
            "headers = {\"Authorization\": f\"Bearer {os.environ['TOKEN']}\"}\n",
            "token = os.environ.get(\"GITHUB_TOKEN\", \"\")\nauth = \"token \" + token\n",
            "url = \"https://api.github.com/repos/\" + owner + \"/\" + repo\n",
            "msg = \"%s: %s\" % (\"status\", \"ok\")\n",
            "password = \"${DB_PASSWORD}\"\n",
            "api_key = os.getenv(\"API_KEY\") or \"\"\nheaders = {\"X-Api-Key\": api_key}\n",
            "digest = \"sha256:\" + \"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\"\n",
            "key = \"{}/{}\".format(\"reports\", \"2024-summary-final.csv\")\n",
        ];
        let bash = [
            ": \"${API_TOKEN:?must be set}\"\n",
            ": \"${DB_PASSWORD:?DB_PASSWORD must be set}\"\n",
            "curl -H \"Authorization: Bearer ${TOKEN}\" https://api.example.com/v1/me\n",
            "TOKEN=\"${GITHUB_TOKEN:-}\"\ncurl -H \"Authorization: token $TOKEN\" https://api.github.com/user\n",
            "export VAULT_TOKEN=\"$(vault login -token-only -method=github)\"\n",
            "auth=\"Basic $(printf '%s:%s' \"$API_USER\" \"$API_PASS\" | base64)\"\n",
            "export API_KEY=\"${API_KEY:?set API_KEY}\"\nexport SIGNING_KEY=\"${SIGNING_KEY:-}\"\n",
            "printf 'machine %s login %s password %s\\n' \"$HOST\" \"$USER\" \"$TOKEN\" > ~/.netrc\n",
        ];
        for (language, cases) in [(Language::Python, &python[..]), (Language::Bash, &bash[..])] {
            for case in cases {
                let found = secret_rules(language, case);
                assert!(found.is_empty(), "{language}: flagged {case:?}: {found:?}");
            }
        }
    }
}
