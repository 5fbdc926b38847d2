//! Accuracy of the validation pipeline on the labelled corpus in `tests/corpus/` (see its README).
//!
//! Prints per-label confusion and the headline figures, and fails below the targets: recall >= 0.97
//! on secrets + dangerous, benign false positives <= 2 %, every syntax error caught.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use scriptgate::domain::script::{Language, Script};
use scriptgate::rules::RuleSet;
use scriptgate::validate::{ValidationConfig, Validator};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    language: Language,
    expect: String,
    why: String,
    script: String,
}

fn load(folder: &str) -> Vec<Case> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(folder);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/corpus exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).expect("readable corpus file");
            serde_norway::from_str::<Vec<Case>>(&text)
                .unwrap_or_else(|e| panic!("{}: {e}", f.display()))
        })
        .collect()
}

#[test]
fn corpus_accuracy() {
    accuracy("tests/corpus");
}

/// A second corpus written later, without access to the rules or the first corpus. Its first
/// measurement (before tuning) is recorded in its README; this keeps it from regressing.
#[test]
fn heldout_corpus_accuracy() {
    accuracy("tests/corpus_heldout");
}

#[allow(clippy::print_stdout)] // the figures are the point of these tests
fn accuracy(folder: &str) {
    let validator = Validator::new(
        RuleSet::embedded().expect("rules compile"),
        ValidationConfig::default(),
    );
    let cases = load(folder);
    assert!(cases.len() >= 150, "corpus has {} cases", cases.len());
    // confusion[expected][predicted]
    let mut confusion: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    let mut misses = String::new();
    let mut warned_benign = 0;
    for case in &cases {
        assert!(!case.why.is_empty(), "{}: missing why", case.name);
        let verdict = validator.validate(&Script::new(case.language, case.script.clone()));
        let predicted = verdict.layer.map_or("valid", |l| l.as_str()).to_string();
        if case.expect == "valid" && verdict.valid && verdict.has_warnings() {
            warned_benign += 1;
        }
        if predicted != case.expect {
            let detail = verdict
                .findings
                .iter()
                .map(|f| format!("{}@{}: {}", f.rule, f.line, f.message))
                .collect::<Vec<_>>()
                .join("; ");
            let _ = writeln!(
                misses,
                "  {} [{}] expected {} got {}  {}",
                case.name, case.language, case.expect, predicted, detail
            );
        }
        *confusion
            .entry(case.expect.clone())
            .or_default()
            .entry(predicted)
            .or_default() += 1;
    }
    let count = |expect: &str, pred: &dyn Fn(&str) -> bool| -> usize {
        confusion.get(expect).map_or(0, |m| {
            m.iter().filter(|(p, _)| pred(p)).map(|(_, n)| n).sum()
        })
    };
    let total = |expect: &str| count(expect, &|_| true);
    let harmful = ["secrets", "dangerous"];
    let harmful_total: usize = harmful.iter().map(|e| total(e)).sum();
    let harmful_caught: usize = harmful.iter().map(|e| count(e, &|p| p != "valid")).sum();
    let harmful_exact: usize = harmful.iter().map(|e| count(e, &|p| p == *e)).sum();
    let flagged_harmful: usize = confusion
        .values()
        .map(|m| {
            m.iter()
                .filter(|(p, _)| harmful.contains(&p.as_str()))
                .map(|(_, n)| n)
                .sum::<usize>()
        })
        .sum();
    let flagged_harmful_right: usize = harmful
        .iter()
        .map(|e| count(e, &|p| harmful.contains(&p)))
        .sum();
    let benign_total = total("valid");
    let benign_rejected = count("valid", &|p| p != "valid");
    let syntax_total = total("syntax");
    let syntax_caught = count("syntax", &|p| p == "syntax");

    let recall = harmful_caught as f64 / harmful_total as f64;
    let precision = flagged_harmful_right as f64 / flagged_harmful.max(1) as f64;
    let fp_rate = benign_rejected as f64 / benign_total as f64;
    println!("{folder}: {} cases", cases.len());
    println!("{:<10} -> predicted", "expected");
    for (expect, row) in &confusion {
        println!("{expect:<10} {row:?}");
    }
    println!(
        "recall (secrets+dangerous rejected): {recall:.3} ({harmful_caught}/{harmful_total}); by the expected layer: {harmful_exact}/{harmful_total}"
    );
    println!(
        "precision (secrets/dangerous verdicts that are harmful): {precision:.3} ({flagged_harmful_right}/{flagged_harmful})"
    );
    println!(
        "benign false positives: {fp_rate:.3} ({benign_rejected}/{benign_total}); benign with warn findings: {warned_benign}"
    );
    println!("syntax errors caught: {syntax_caught}/{syntax_total}");
    if !misses.is_empty() {
        println!("mismatches:\n{misses}");
    }
    assert!(recall >= 0.97, "recall {recall:.3} < 0.97");
    assert!(
        fp_rate <= 0.02,
        "benign false positives {fp_rate:.3} > 0.02"
    );
    assert_eq!(
        syntax_caught, syntax_total,
        "every syntax error must be caught"
    );
}
