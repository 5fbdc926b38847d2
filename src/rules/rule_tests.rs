//! Every rule is tested by its own examples: `patterns/tests/<id>.yml` with `valid:` and `invalid:`.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{EMBEDDED, RuleSet};
use crate::domain::script::{Language, Script};
use crate::domain::verdict::Layer;
use crate::validate::{ValidationConfig, Validator};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleTest {
    id: String,
    #[serde(default)]
    valid: Vec<String>,
    #[serde(default)]
    invalid: Vec<String>,
}

fn load_tests() -> BTreeMap<String, RuleTest> {
    let dir = EMBEDDED.get_dir("tests").expect("patterns/tests exists");
    dir.files()
        .filter(|f| f.path().extension().is_some_and(|e| e == "yml"))
        .map(|f| {
            let text = f.contents_utf8().expect("test files are UTF-8");
            let test: RuleTest = serde_norway::from_str(text)
                .unwrap_or_else(|e| panic!("{}: {e}", f.path().display()));
            (test.id.clone(), test)
        })
        .collect()
}

/// The languages a rule's examples are written in.
fn languages(rules: &RuleSet, id: &str) -> Vec<Language> {
    let tree_language = Language::ALL
        .into_iter()
        .find(|l| rules.tree(*l).rules.iter().any(|r| r.meta.id == id));
    match tree_language {
        Some(l) => vec![l],
        // Secret rules apply to any text; the examples are checked as both languages.
        None => Language::ALL.to_vec(),
    }
}

#[test]
fn rule_tests() {
    let rules = RuleSet::embedded().expect("embedded rules compile");
    let ids: Vec<String> = rules.all_meta().map(|m| m.id.clone()).collect();
    let mut tests = load_tests();
    let validator = Validator::new(rules, ValidationConfig::default());
    let rules = validator.rules();
    let mut failures = Vec::new();
    for id in &ids {
        let Some(test) = tests.remove(id) else {
            failures.push(format!("{id}: no test file patterns/tests/{id}.yml"));
            continue;
        };
        if test.invalid.is_empty() {
            failures.push(format!("{id}: no invalid: example"));
        }
        let is_tree = languages(rules, id).len() == 1;
        for language in languages(rules, id) {
            for (expect_hit, examples) in [(true, &test.invalid), (false, &test.valid)] {
                for example in examples.iter() {
                    let findings = validator.inspect(&Script::new(language, example.clone()));
                    if is_tree && let Some(f) = findings.iter().find(|f| f.layer == Layer::Syntax) {
                        failures.push(format!(
                            "{id}: example has a syntax error ({}): {example:?}",
                            f.message
                        ));
                        continue;
                    }
                    let hit = findings.iter().any(|f| &f.rule == id);
                    if hit != expect_hit {
                        let what = if expect_hit {
                            "missed invalid"
                        } else {
                            "flagged valid"
                        };
                        failures.push(format!("{id} [{language}]: {what} example: {example:?}"));
                    }
                }
            }
        }
    }
    for orphan in tests.keys() {
        failures.push(format!(
            "{orphan}: test file for a rule that does not exist"
        ));
    }
    assert!(
        failures.is_empty(),
        "{} rule test failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_tree_rule_is_indexed_or_builtin() {
    let rules = RuleSet::embedded().expect("embedded rules compile");
    for language in Language::ALL {
        let tree = rules.tree(language);
        for (idx, rule) in tree.rules.iter().enumerate() {
            let parts: Vec<_> = tree.parts.iter().filter(|p| p.rule == idx).collect();
            assert!(
                rule.builtin || !parts.is_empty(),
                "{} has no parts",
                rule.meta.id
            );
            assert!(
                parts.iter().all(|p| !p.kinds.is_empty()),
                "{} matches no kind",
                rule.meta.id
            );
        }
    }
}

#[test]
fn malformed_rules_stop_loading_with_their_file_name() {
    let mut files: Vec<(String, String)> = Vec::new();
    fn collect(dir: &include_dir::Dir<'_>, out: &mut Vec<(String, String)>) {
        for f in dir.files() {
            out.push((
                f.path().to_string_lossy().into_owned(),
                f.contents_utf8().unwrap_or("").to_string(),
            ));
        }
        for d in dir.dirs() {
            collect(d, out);
        }
    }
    collect(&EMBEDDED, &mut files);
    let cases = [
        (
            "python/python-broken.yml",
            "id: python-broken\nlanguage: python\nmessage: m\nrule:\n  kind: no_such_kind\n",
            "unknown node kind",
        ),
        (
            "python/python-broken.yml",
            "id: python-broken\nlanguage: python\nmessage: m\nrule:\n  regex: x\n",
            "constrain the node kind",
        ),
        (
            "bash/bash-broken.yml",
            "id: bash-broken\nlanguage: bash\nmessage: m\nrule:\n  call:\n    callee: [x]\n",
            "rule.call: `call` is not available in bash rules",
        ),
        (
            "secrets/broken.yml",
            "id: broken\nmessage: m\nkeywords: [k]\nregex: '(a'\n",
            "regex",
        ),
        (
            "python/python-broken.yml",
            "id: python-broken\nlanguage: python\nmessage: m\nrule:\n  kind: call\n  bogus: 1\n",
            "unknown field `bogus`",
        ),
        (
            "python/python-broken.yml",
            "id: python-broken\nlanguage: python\nmessage: m\nrule:\n  any:\n    - kind: call\n      has:\n        regex: '(x'\n",
            "rule.any[0].has.regex: invalid regex",
        ),
        (
            "python/python-broken.yml",
            "id: python-broken\nlanguage: python\nmessage: m\nrule:\n  kind: call\n  has:\n    kind: call\n    stopBy: far\n",
            "rule.has.stopBy: unknown variant `far`",
        ),
        (
            "python/python-broken.yml",
            "id: python-broken\nlanguage: python\nmessage: m\nrule:\n  kind: call\n  stopBy: end\n",
            "rule.stopBy: `stopBy` is only allowed inside `has` or `inside`",
        ),
        (
            "python/python-broken.yml",
            "id: python-broken\nlanguage: python\nmessage: m\nrule:\n  kind: call\n  has:\n    kind: call\n    all:\n      - kind: call\n        bogus: 1\n",
            "line 10",
        ),
    ];
    for (path, text, expected) in cases {
        let mut with_bad = files.clone();
        with_bad.push((path.to_string(), text.to_string()));
        let err = RuleSet::from_files(with_bad).expect_err(path).report();
        assert!(err.contains(path), "error names the file: {err}");
        assert!(err.contains(expected), "{expected:?} in: {err}");
    }
}

/// `patterns/rule.schema.json` is generated from the types the loader reads; regenerate it with
/// `UPDATE_RULE_SCHEMA=1 cargo test --lib rules::rule_tests::rule_schema`.
#[test]
fn rule_schema_is_fresh() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/patterns/rule.schema.json");
    let mut generated =
        serde_json::to_string_pretty(&super::tree::schema()).expect("schema serialises");
    generated.push('\n');
    if std::env::var_os("UPDATE_RULE_SCHEMA").is_some() {
        std::fs::write(path, &generated).expect("write schema");
    }
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == generated,
        "patterns/rule.schema.json is stale: rerun with UPDATE_RULE_SCHEMA=1"
    );
    let schema: serde_json::Value = serde_json::from_str(&committed).expect("valid JSON");
    let props = &schema["properties"];
    for key in [
        "id", "language", "severity", "message", "note", "rule", "builtin",
    ] {
        assert!(props.get(key).is_some(), "schema lists `{key}`");
    }
    assert_eq!(
        schema["additionalProperties"],
        serde_json::Value::Bool(false)
    );
}

/// The matcher examples in patterns/README.md compile.
#[test]
fn readme_examples_compile() {
    let readme = include_str!("../../patterns/README.md");
    let section = readme
        .split("## Tree rules")
        .nth(1)
        .and_then(|s| s.split("## Rule tests").next())
        .expect("tree rules section");
    let mut checked = 0;
    for block in section.split("```yaml\n").skip(1) {
        let yaml = block.split("```").next().unwrap_or("");
        let rule = yaml
            .split_once("rule:")
            .map(|(_, r)| format!("rule:{r}"))
            .expect("example has a rule");
        let language = if yaml.contains("command:") || yaml.contains("while_statement") {
            Language::Bash
        } else {
            Language::Python
        };
        let text = format!("id: example\nlanguage: {language}\nmessage: m\n{rule}");
        super::tree::parse_rule("example.yml", &text, language)
            .unwrap_or_else(|e| panic!("{}\n{text}", e.report()));
        checked += 1;
    }
    assert_eq!(checked, 4);
}
