//! Layer 4, secrets: credentials anywhere in the text (comments, docstrings, heredocs count), and in
//! string literals that hide them behind base64 or `\xNN` escapes.

mod fold;

use std::collections::HashSet;

use tree_sitter::Node;

use super::verdict::{Finding, Layer, Positions};
use crate::rules::codec::decode_hex;
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
    let plain = rules.scan(text);
    // What the plain scan reported: a folded value holding the same secret is not reported again.
    let seen: HashSet<&str> = plain.iter().map(|m| &text[m.start..m.end]).collect();
    let reversal = reverses(text, sem);
    let mut findings: Vec<Finding> = plain
        .iter()
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
        for (decoded, how) in decodings(node, text, sem, reversal) {
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
    findings.extend(assembled(rules, text, &seen, folds, sem, pos));
    findings
}

/// Secrets that only exist once literals are put together (`"ghp_" + "…"`, `"$a$b"`).
fn assembled(
    rules: &SecretRules,
    text: &str,
    seen: &HashSet<&str>,
    folds: &[Node<'_>],
    sem: &Sem<'_>,
    pos: &Positions<'_>,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    for folded in fold::fold_all(folds, text, sem) {
        for m in rules.scan(&folded.text) {
            let secret = &folded.text[m.start..m.end];
            // Secrets the plain-text scan found are its own (a secret split across literals may
            // still have one part that is a whole literal, so "appears in the text" is not enough);
            // a match inside the `name = ` prefix is not a secret of the value.
            if m.end <= folded.value_at || seen.contains(secret) {
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

/// Whether the script reverses strings (`s[::-1]`, `reversed(s)`, Bash `rev`), so that a literal may
/// hold a secret backwards. Checked once per script: reversing every long literal of every script
/// would double the scan for nothing.
fn reverses(text: &str, sem: &Sem<'_>) -> bool {
    match sem {
        Sem::Python(_) => text.contains("[::-1]") || text.contains("reversed("),
        Sem::Bash(_) => text
            .match_indices("rev")
            .any(|(at, _)| is_word_at(text, at, 3)),
    }
}

/// `text[at..at + len]` is a whole word (not part of `review`, `prev`, `--rev`).
fn is_word_at(text: &str, at: usize, len: usize) -> bool {
    let bytes = text.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'/');
    (at == 0 || !word(bytes[at - 1])) && bytes.get(at + len).is_none_or(|&b| !word(b))
}

/// The decoded forms of a string literal worth scanning: its escape-processed value when escapes
/// changed it, its hex or base64 decoding when that is printable text, and the value backwards
/// when the script reverses strings.
fn decodings(
    node: &Node<'_>,
    text: &str,
    sem: &Sem<'_>,
    reversal: bool,
) -> Vec<(String, &'static str)> {
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
    if reversal && candidate.len() >= 16 {
        out.push((candidate.chars().rev().collect(), "reversed"));
    }
    // Hex first: every hex string is also valid base64, whose decoding is then noise.
    let hex_like = candidate.len() >= 32
        && candidate.len() % 2 == 0
        && candidate.bytes().all(|b| b.is_ascii_hexdigit());
    if hex_like {
        if let Some(decoded) = decode_hex(candidate)
            && mostly_printable(&decoded)
        {
            out.push((decoded, "hex-encoded"));
        }
        return out;
    }
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
        // pieces unpacked into names in one assignment
        "_a, _b = \"ghp_N86tKvycm7L8gq\", \"LCHBKer0aF7boFJTnAYVIh\"\ntok = f\"{_a}{_b}\"\n",
        "requests.get(url, headers={\"Authorization\": \"token \" + \"ghp_\" + \"ZM5yDoNcQiZ0wIW8se7DIv3tmxvJm8aHGHJS\"})\n",
        // splats and `%` of a tuple held in a name
        "parts = [\"JdqL2kVF8thrxFeUZCRj\", \"AbNX7iFdh5MmdDWI\"]\ntok = \"ghp_{}{}\".format(*parts)\n",
        "parts = (\"ZYMmLOPIwFQuYhrsiF8n\", \"fMaunlNy5yX0Y3rN\")\nsend(token=\"ghp_{}{}\".format(*parts))\n",
        "parts = (\"ghp_\", \"N86tKvycm7L8gqLCHBKer0aF7boFJTnAYVIh\")\ntok = \"%s%s\" % parts\n",
        "tok = \"{}{}{}\".format(\"ghp_\", *(\"ZM5yDoNcQiZ0wIW8\", \"se7DIv3tmxvJm8aHGHJS\"))\n",
        // character codes in a list held in a name
        "_codes = [103, 104, 112, 95, 90, 89, 77, 109, 76, 79, 80, 73, 119, 70, 81, 117, 89, 104, 114, 115, 105, 70, 56, 110, 102, 77, 97, 117, 110, 108, 78, 121, 53, 121, 88, 48, 89, 51, 114, 78]\ntok = \"\".join(map(chr, _codes))\n",
        // a generator as the only argument (no brackets of its own)
        "tok = \"\".join(chr(c) for c in [103, 104, 112, 95, 90, 89, 77, 109, 76, 79, 80, 73, 119, 70, 81, 117, 89, 104, 114, 115, 105, 70, 56, 110, 102, 77, 97, 117, 110, 108, 78, 121, 53, 121, 88, 48, 89, 51, 114, 78])\n",
    ];

    const SPLIT_BASH: &[&str] = &[
        "k=('ghp_ZYMmLOPIwF' 'QuYhrsiF8nfMaunlNy5yX0Y3rN')\nprintf -v T '%s' \"${k[@]}\"\ncurl -H \"Authorization: token $T\" https://api.github.com/user\n",
        "p=(\"ghp_ZYMmLOPIwFQuY\" \"hrsiF8nfMaunlNy5yX0Y3rN\")\nIFS=\nt=\"${p[*]}\"\nunset IFS\n",
        "p=(ghp_ZYMmLOPIwFQuY hrsiF8nfMaunlNy5yX0Y3rN)\nt=\"${p[0]}${p[1]}\"\n",
        "a=\"ghp_\"; b=\"ZYMmLOPIwFQuYhrsiF8nfMaunlNy5yX0Y3rN\"; tok=\"$a$b\"\n",
        "a=ghp_\nb=JdqL2kVF8thrxFeUZCRjAbNX7iFdh5MmdDWI\nexport GITHUB_TOKEN=${a}${b}\n",
        "p=ghp_\ncurl -H \"Authorization: token ${p}N86tKvycm7L8gqLCHBKer0aF7boFJTnAYVIh\" https://api.github.com/user\n",
        // a value decoded by the shell when it is assigned
        "GITHUB_TOKEN=$(echo 'Z2hwX1pZTW1MT1BJd0ZRdVlocnNpRjhuZk1hdW5sTnk1eVgwWTNyTg==' | base64 -d)\nexport GITHUB_TOKEN\n",
        // an array joined with an empty IFS
        "parts=(ghp_ ZYMmLOPIwFQu YhrsiF8nfMaunlNy5yX0Y3rN)\ntok=\"$(IFS=; echo \"${parts[*]}\")\"\n",
    ];

    #[test]
    fn a_name_holding_a_constant_is_scanned_in_a_credential_slot() {
        let decoded = "import base64\nk = base64.b64decode(\"MjY5NDYzZDMyOTFjZWIxNDM4ZTcxMTZkYjdhYzUyNzU=\").decode()\nh = {\"DD-API-KEY\": k}\n";
        let keyword = "k = \"Xq7Lm2Vz9RtK4wPq\"\nclient = Client(api_key=k)\n";
        for case in [decoded, keyword] {
            let found = secret_rules(Language::Python, case);
            assert!(!found.is_empty(), "missed {case:?}");
        }
        let env = "k = os.environ[\"DD_API_KEY\"]\nh = {\"DD-API-KEY\": k}\nlabel = \"Xq7Lm2Vz9RtK4wPq\"\nf(key_name=label)\n";
        assert_eq!(secret_rules(Language::Python, env), Vec::<String>::new());
    }

    #[test]
    fn literals_unpacked_into_credential_names_are_scanned_under_the_name() {
        let unpacked = "HOST, USER, PASSWORD = \"mail.example.net\", \"archive\", \"Rv8!mQ2#tLw\"\nimap.login(USER, PASSWORD)\n";
        assert!(!secret_rules(Language::Python, unpacked).is_empty());
        // the same line with no credential among the names, and a password read at run time
        for case in [
            "HOST, USER, FOLDER = \"mail.example.net\", \"archive\", \"Rv8-mQ2-tLw\"\n",
            "USER, PASSWORD = \"archive\", os.environ[\"IMAP_PASSWORD\"]\n",
        ] {
            assert_eq!(secret_rules(Language::Python, case), Vec::<String>::new());
        }
    }

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
    fn a_part_that_is_a_whole_literal_does_not_hide_the_assembled_secret() {
        // The password is one literal of its own, but only the assembled URL says it is one.
        let cases = [
            "DSN = (\"postgresql://report:\" \"Vq8mT2xLp9Rz\"\n       \"@db.corp.net:5432/sales\")\n",
            "uri = \"amqp://worker:\" + \"Hs7Kd2Qw9Zx4\" + \"@mq.corp.net/jobs\"\n",
        ];
        for case in cases {
            let found = secret_rules(Language::Python, case);
            assert!(
                found.iter().any(|f| f.starts_with("url-credentials ")),
                "missed {case:?}: {found:?}"
            );
        }
        let bash = "part=Hs7Kd2Qw9Zx4\nurl=\"redis://:${part}@cache.corp.net:6379/0\"\n";
        let found = secret_rules(Language::Bash, bash);
        assert!(
            found.iter().any(|f| f.starts_with("url-credentials ")),
            "{found:?}"
        );
    }

    #[test]
    fn hex_and_reversed_literals_are_decoded() {
        // ghp_… written as hex, and an AWS key id written backwards (random, not real).
        let hex =
            "6768705f4e3836744b7679636d374c3867714c4348424b657230614637626f464a546e4159564968";
        let cases = [
            (
                Language::Python,
                format!("tok = bytes.fromhex(\"{hex}\").decode()\n"),
                "github-token ",
            ),
            (
                Language::Python,
                format!("tok = binascii.unhexlify('{hex}')\n"),
                "github-token ",
            ),
            (
                Language::Bash,
                format!("tok=$(echo {hex} | xxd -r -p)\n"),
                "github-token ",
            ),
            (
                Language::Python,
                "key_id = \"J7NVYTPX5LGSW7ZYAIKA\"[::-1]\n".into(),
                "aws-access-key-id ",
            ),
            (
                Language::Python,
                "key_id = \"\".join(reversed(\"Q7RNX3P2ZTLKW4MYAIKA\"))\n".into(),
                "aws-access-key-id ",
            ),
            (
                Language::Bash,
                "id=$(rev <<< \"Q7RNX3P2ZTLKW4MYAIKA\")\n".into(),
                "aws-access-key-id ",
            ),
            (
                Language::Bash,
                "id=$(echo 'J7NVYTPX5LGSW7ZYAIKA' | rev)\n".into(),
                "aws-access-key-id ",
            ),
        ];
        for (language, case, rule) in cases {
            let found = secret_rules(language, &case);
            assert!(
                found.iter().any(|f| f.starts_with(rule)),
                "{language}: missed {case:?}: {found:?}"
            );
        }
        // Digests are hex that decodes to noise; reversed prose is prose; `prev`/`review` are
        // not `rev`.
        let benign = [
            (
                Language::Python,
                "d = bytes.fromhex(\"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\")\n",
            ),
            (
                Language::Python,
                "s = \"the quick brown fox jumps over\"[::-1]\n",
            ),
            (
                Language::Bash,
                "prev=\"AKIAQ7RNX3P2ZTLKW4MY\"\necho review\n",
            ),
        ];
        for (language, case) in benign {
            let found = secret_rules(language, case);
            assert!(
                found
                    .iter()
                    .all(|f| !f.contains("(reversed)") && !f.contains("(hex-encoded)")),
                "{language}: flagged {case:?}: {found:?}"
            );
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
            "parts = (\"2024\", \"06\", \"03\")\nstamp = \"release-{}.{}.{}\".format(*parts)\n",
            "token = \"Bearer {}\".format(*sys.argv[1:2])\n",
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
