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
            "`call` is for python",
        ),
        (
            "secrets/broken.yml",
            "id: broken\nmessage: m\nkeywords: [k]\nregex: '(a'\n",
            "regex",
        ),
        (
            "python/python-broken.yml",
            "id: python-broken\nlanguage: python\nmessage: m\nrule:\n  kind: call\n  bogus: 1\n",
            "unknown key `bogus`",
        ),
    ];
    for (path, text, expected) in cases {
        let mut with_bad = files.clone();
        with_bad.push((path.to_string(), text.to_string()));
        let err = RuleSet::from_files(with_bad).expect_err(path);
        assert!(
            err.to_string().contains(path),
            "error names the file: {err}"
        );
        assert!(err.to_string().contains(expected), "{expected:?} in: {err}");
    }
}
