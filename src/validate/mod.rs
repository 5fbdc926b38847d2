//! Validation: every script passes size → syntax → language → secrets → dangerous before any
//! container exists. The first layer with a blocking finding rejects the script; warn findings are
//! reported without blocking (unless configured to block).
//!
//! It is defence in depth, not the boundary (the container is), but it works on the syntax tree, so a
//! word in a comment or a string does not trip it while an aliased or string-built call does.

mod commands;
mod dangerous;
#[cfg(test)]
mod indirection_tests;
mod language;
mod limits;
mod phases;
mod redact;
mod secrets;
pub mod syntax;
// The verdict types live in `domain`; re-exported so `validate::verdict` keeps its paths.
pub use crate::domain::verdict;
mod kinds;
mod walk;
pub use commands::{CommandInvocation, MAX_COMMANDS};
pub(crate) use kinds::Kinds;

use std::collections::HashSet;
use std::sync::Arc;

use crate::domain::script::{Language, Script};
use crate::rules::RuleSet;
use verdict::{Finding, Layer, Positions, Severity, Verdict};

/// Validation settings.
#[derive(Debug, Clone)]
pub struct ValidationConfig {
    /// Scripts longer than this many characters are rejected before parsing.
    pub max_chars: usize,
    /// Treat `warn` findings as blocking.
    pub block_on_warn: bool,
    /// Secret and dangerous-pattern rules whose findings are dropped: exact ids, or a prefix
    /// ending in `*` (`python-*`, `*`). Resolve against the rules with [`disabled_rules`].
    pub disabled_rules: Vec<String>,
}

impl Default for ValidationConfig {
    fn default() -> Self {
        ValidationConfig {
            max_chars: 10_000,
            block_on_warn: false,
            disabled_rules: Vec::new(),
        }
    }
}

/// The text tree-sitter parses: Bash gets the grammar-gap normalisation (same length and offsets).
fn parse_text(language: Language, text: &str) -> std::borrow::Cow<'_, str> {
    match language {
        Language::Bash => syntax::bash::normalize(text),
        Language::Python => syntax::python::brackets::normalize(text),
    }
}

/// The text the rules see ([`parse_text`]) and its tree. A Bash script whose lines the grammar
/// ran together is parsed a second time with them apart ([`syntax::bash::split_merged_lines`]).
fn parse<'a>(
    grammar: &crate::rules::grammar::Grammar,
    text: &'a str,
) -> (std::borrow::Cow<'a, str>, tree_sitter::Tree) {
    let parsed = parse_text(grammar.language, text);
    let tree = grammar.parse(&parsed);
    if grammar.language == Language::Bash
        && let Some(split) = syntax::bash::split_merged_lines(&tree, &parsed)
    {
        let tree = grammar.parse(&split);
        return (std::borrow::Cow::Owned(split), tree);
    }
    (parsed, tree)
}

/// Runs the layers over scripts. Cheap to share: rules are compiled once and validation does no I/O.
#[derive(Debug, Clone)]
pub struct Validator {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    rules: RuleSet,
    kinds: Kinds,
    config: ValidationConfig,
    /// Rule ids matched by `config.disabled_rules`.
    disabled: HashSet<String>,
}

/// The rule ids `patterns` name (see [`ValidationConfig::disabled_rules`]); a pattern that names no
/// rule is an error, so a typo never silently leaves a rule on.
pub fn disabled_rules(rules: &RuleSet, patterns: &[String]) -> Result<HashSet<String>, String> {
    let mut ids = HashSet::new();
    for pattern in patterns {
        let matches = |id: &str| match pattern.strip_suffix('*') {
            Some(prefix) => id.starts_with(prefix),
            None => id == pattern,
        };
        let mut matched = false;
        for meta in rules.all_meta() {
            if matches(&meta.id) {
                matched = true;
                ids.insert(meta.id.clone());
            }
        }
        if !matched {
            return Err(format!(
                "validation.disabled_rules: `{pattern}` matches no rule (rule ids are listed by `scriptgate rules`)"
            ));
        }
    }
    Ok(ids)
}

impl Validator {
    /// The built-in rules with the default configuration, for the unit tests of layers above
    /// that may not reach `rules` themselves.
    #[cfg(test)]
    pub(crate) fn builtin() -> Self {
        let rules = RuleSet::embedded().expect("the built-in rules load");
        Validator::new(rules, ValidationConfig::default())
    }

    /// A validator; `config.disabled_rules` patterns that name no rule are ignored here (check
    /// them first with [`disabled_rules`]).
    pub fn new(rules: RuleSet, config: ValidationConfig) -> Self {
        let disabled = config
            .disabled_rules
            .iter()
            .filter_map(|p| disabled_rules(&rules, std::slice::from_ref(p)).ok())
            .flatten()
            .collect();
        Validator {
            inner: Arc::new(Inner {
                kinds: Kinds::new(&rules),
                rules,
                config,
                disabled,
            }),
        }
    }

    pub fn rules(&self) -> &RuleSet {
        &self.inner.rules
    }

    /// `text` with the secrets the rules know replaced by their redacted form (`None`: it has
    /// none).
    pub fn redact_secrets(&self, text: &str) -> Option<String> {
        redact::redact_secrets(&self.inner.rules.secrets, text)
    }

    pub fn config(&self) -> &ValidationConfig {
        &self.inner.config
    }

    pub(crate) fn kinds(&self) -> &Kinds {
        &self.inner.kinds
    }

    pub fn validate(&self, script: &Script) -> Verdict {
        let mut verdict = Verdict {
            language: script.language,
            valid: true,
            layer: None,
            findings: Vec::new(),
        };
        self.run_layers(script, &mut verdict);
        verdict
    }

    fn run_layers(&self, script: &Script, verdict: &mut Verdict) {
        let text = script.text.as_str();
        let language = script.language;
        if let Some(f) = limits::check(text, self.inner.config.max_chars) {
            return self.reject(verdict, Layer::Size, vec![f]);
        }
        let (parsed, tree) = parse(&self.inner.rules.tree(language).grammar, text);
        let pos = Positions::new(text);
        let walk = walk::run(
            &self.inner.kinds,
            self.inner.rules.tree(language),
            &tree,
            &parsed,
            &pos,
        );
        if !walk.syntax.is_empty() {
            return match language::mislabelled(language, text) {
                Some(f) => self.reject(verdict, Layer::Language, vec![f]),
                None => self.reject(verdict, Layer::Syntax, walk.syntax),
            };
        }
        if let Some(f) = language::check(language, text) {
            return self.reject(verdict, Layer::Language, vec![f]);
        }
        if self.accumulate(verdict, Layer::Secrets, self.secrets(&walk, &parsed, &pos)) {
            return;
        }
        self.accumulate(
            verdict,
            Layer::Dangerous,
            self.dangerous(language, &walk, &parsed, &pos),
        );
    }

    /// Secrets in text that is not a script (a session's environment values and uploaded
    /// files): the secret rules' patterns, redacted, with their line and column.
    pub fn scan_secrets(&self, text: &str) -> Vec<Finding> {
        let rules = &self.inner.rules.secrets;
        let pos = Positions::new(text);
        rules
            .scan(text)
            .into_iter()
            .map(|m| {
                let rule = &rules.rules[m.rule].meta;
                let (line, column) = pos.at(m.start);
                Finding {
                    layer: Layer::Secrets,
                    rule: rule.id.clone(),
                    severity: rule.severity,
                    message: format!(
                        "{}: {}",
                        rule.message,
                        crate::rules::secret::redact(&text[m.start..m.end])
                    ),
                    line,
                    column,
                }
            })
            .collect()
    }

    /// Mean time in microseconds of each step of [`Validator::validate`] on `script` over `n`
    /// runs, for the validation benchmark's breakdown (not an API).
    #[doc(hidden)]
    pub fn phase_times(&self, script: &Script, n: u32) -> Vec<(&'static str, f64)> {
        phases::times(self, script, n)
    }

    /// Mean time in microseconds of each tree rule part on `script` over `n` runs, most costly first,
    /// for the validation benchmark's breakdown (not an API).
    #[doc(hidden)]
    pub fn rule_costs(&self, script: &Script, n: u32) -> Vec<(String, f64)> {
        phases::rule_costs(self, script, n)
    }

    /// Every finding of every layer, without stopping at the first rejection (for rule tests and
    /// diagnostics).
    pub fn inspect(&self, script: &Script) -> Vec<Finding> {
        let text = script.text.as_str();
        let language = script.language;
        let mut all: Vec<Finding> = limits::check(text, self.inner.config.max_chars)
            .into_iter()
            .collect();
        let (parsed, tree) = parse(&self.inner.rules.tree(language).grammar, text);
        let pos = Positions::new(text);
        let walk = walk::run(
            &self.inner.kinds,
            self.inner.rules.tree(language),
            &tree,
            &parsed,
            &pos,
        );
        all.extend(walk.syntax.iter().cloned());
        all.extend(language::check(language, text));
        all.extend(self.secrets(&walk, &parsed, &pos));
        all.extend(self.dangerous(language, &walk, &parsed, &pos));
        all
    }

    fn secrets(&self, walk: &walk::Walk<'_>, text: &str, pos: &Positions<'_>) -> Vec<Finding> {
        let sem = dangerous::semantics(self, walk, text);
        let rules = &self.inner.rules.secrets;
        secrets::check(rules, text, &walk.strings, &walk.folds, &sem, pos)
    }

    fn dangerous(
        &self,
        language: Language,
        walk: &walk::Walk<'_>,
        text: &str,
        pos: &Positions<'_>,
    ) -> Vec<Finding> {
        dangerous::hits(self, language, text, walk, 0)
            .into_iter()
            .map(|h| {
                let (line, column) = pos.at(h.at);
                Finding {
                    layer: Layer::Dangerous,
                    rule: h.rule,
                    severity: h.severity,
                    message: h.message,
                    line,
                    column,
                }
            })
            .collect()
    }

    fn blocks(&self, f: &Finding) -> bool {
        f.severity == Severity::Block || self.inner.config.block_on_warn
    }

    /// Adds a layer's findings; returns true when they reject the script.
    fn accumulate(&self, verdict: &mut Verdict, layer: Layer, mut found: Vec<Finding>) -> bool {
        if !self.inner.disabled.is_empty() {
            found.retain(|f| !self.inner.disabled.contains(&f.rule));
        }
        found.sort_by_key(|f| (f.line, f.column));
        found.dedup_by(|a, b| a.rule == b.rule && a.line == b.line && a.column == b.column);
        let rejected = found.iter().any(|f| self.blocks(f));
        verdict.findings.extend(found);
        if rejected {
            verdict.valid = false;
            verdict.layer = Some(layer);
        }
        rejected
    }

    fn reject(&self, verdict: &mut Verdict, layer: Layer, found: Vec<Finding>) {
        self.accumulate(verdict, layer, found);
        verdict.valid = false;
        verdict.layer = Some(layer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validator(disabled: &[&str]) -> Validator {
        Validator::new(
            RuleSet::embedded().expect("rules"),
            ValidationConfig {
                disabled_rules: disabled.iter().map(|s| s.to_string()).collect(),
                ..ValidationConfig::default()
            },
        )
    }

    /// An argv bound to a name first, a helper's `*args` tuple passed as the argv, or a loop
    /// variable over containers of argvs, is the command line it spells out (checked as Bash);
    /// ordinary commands so spelt pass.
    #[test]
    fn argvs_through_names_and_star_args_are_command_lines() {
        let v = validator(&[]);
        let rules = |src: &str| -> Vec<String> {
            v.validate(&Script::new(Language::Python, src.to_string()))
                .findings
                .into_iter()
                .map(|f| f.rule)
                .collect()
        };
        let refused_by = |src: &str, rule: &str| {
            let found = rules(src);
            assert!(
                found.iter().any(|r| r == rule),
                "{rule} not in {found:?}: {src}"
            );
        };
        let named = "import subprocess\nargs = [\"r\" + \"m\", \"-\" + \"rf\", \"/\"]\nsubprocess.call(args)\n";
        refused_by(named, "bash-rm-root");
        let rest = "import subprocess\ndef sh(*args, cwd=None):\n    return subprocess.run(args, cwd=cwd)\nsh(\"rm\", \"-rf\", \"/\")\n";
        refused_by(rest, "bash-rm-root");
        // argvs in a dict of lists (one a comprehension), run in nested loops
        let nested = "import subprocess\nSTEPS = {\n    \"mac\": [[\"setenforce\", \"0\"]],\n    \"edr\": [[\"systemctl\", \"stop\", s] for s in (\"osqueryd\",)],\n}\nfor group, cmds in STEPS.items():\n    for cmd in cmds:\n        subprocess.run(cmd)\n";
        refused_by(nested, "bash-security-tamper");
        // a shell command taken from a constant list: each is checked
        let shell_loop = "import subprocess\nfor cmd in [\"uptime\", \"rm -rf /\"]:\n    subprocess.run(cmd, shell=True)\n";
        refused_by(shell_loop, "bash-rm-root");
        let reads = "import subprocess\nfor cmd in [\"uptime\", \"df -h / | tail -1\"]:\n    subprocess.run(cmd, shell=True)\n    for host in [\"a\", \"b\"]:\n        subprocess.run([\"ssh\", \"-o\", \"BatchMode=yes\", f\"deploy@{host}\", cmd])\n";
        assert!(rules(reads).is_empty(), "{:?}", rules(reads));
        // a parameter's list spliced into an argv: what each call passes
        let spliced = "import subprocess\ndef run(cmd):\n    return subprocess.run([\"sudo\", \"-n\", *cmd])\nrun([\"nft\", \"list\", \"ruleset\"])\n";
        assert!(rules(spliced).is_empty(), "{:?}", rules(spliced));
        let spliced_rm =
            spliced.replace("\"nft\", \"list\", \"ruleset\"", "\"rm\", \"-rf\", \"/\"");
        refused_by(&spliced_rm, "bash-rm-root");
        let ordinary = "import subprocess\ncmd = [\"git\", \"log\", \"-5\"]\nsubprocess.run(cmd)\ndef sh(*args):\n    return subprocess.run(args)\nsh(\"git\", \"status\")\n";
        assert!(rules(ordinary).is_empty(), "{:?}", rules(ordinary));
    }

    #[test]
    fn disabled_rules_drop_their_findings_and_only_theirs() {
        let script = Script::new(
            Language::Python,
            "import ctypes\nimport os\nctypes.CDLL(None)\nos.system(input())\n",
        );
        let rules = |v: &Validator| -> Vec<String> {
            v.validate(&script)
                .findings
                .into_iter()
                .map(|f| f.rule)
                .collect()
        };
        assert!(rules(&validator(&[])).contains(&"python-ctypes".to_string()));
        let without_ctypes = validator(&["python-ctypes"]);
        assert_eq!(rules(&without_ctypes), vec!["python-os-command"]);
        assert!(!without_ctypes.validate(&script).valid);
        let everything = validator(&["*"]);
        assert!(everything.validate(&script).valid);
        // Syntax is not a rule: it still rejects.
        let broken = Script::new(Language::Python, "print(\n");
        assert_eq!(everything.validate(&broken).layer, Some(Layer::Syntax));
    }

    #[test]
    fn a_pattern_that_names_no_rule_is_an_error() {
        let rules = RuleSet::embedded().expect("rules");
        let ids = disabled_rules(&rules, &["bash-*".into()]).expect("prefix matches");
        assert!(ids.contains("bash-rm-root") && !ids.contains("python-ctypes"));
        let err = disabled_rules(&rules, &["python-ctype".into()]).expect_err("typo");
        assert!(err.contains("`python-ctype` matches no rule"), "{err}");
    }
}
