//! The validation benchmark's breakdown: how long each step of [`Validator::validate`] takes on one
//! script (`cargo bench --bench validation -- --phases`).

use std::hint::black_box;
use std::time::Instant;

use super::verdict::Positions;
use super::{Validator, dangerous, language, limits, parse_text, walk};
use crate::domain::script::Script;

pub(super) fn times(v: &Validator, script: &Script, n: u32) -> Vec<(&'static str, f64)> {
    let text = script.text.as_str();
    let language = script.language;
    let mut out: Vec<(&'static str, f64)> = Vec::new();
    let mut t = |name: &'static str, f: &mut dyn FnMut()| {
        let s = Instant::now();
        for _ in 0..n {
            f();
        }
        out.push((name, s.elapsed().as_secs_f64() / f64::from(n) * 1e6));
    };
    t("limits", &mut || {
        black_box(limits::check(text, v.inner.config.max_chars));
    });
    t("normalize", &mut || {
        black_box(parse_text(language, text));
    });
    let parsed = parse_text(language, text);
    t("parse", &mut || {
        black_box(v.inner.rules.tree(language).grammar.parse(&parsed));
    });
    let tree = v.inner.rules.tree(language).grammar.parse(&parsed);
    t("positions", &mut || {
        black_box(Positions::new(text));
    });
    let pos = Positions::new(text);
    t("walk", &mut || {
        black_box(walk::run(
            &v.inner.kinds,
            v.inner.rules.tree(language),
            &tree,
            &parsed,
            &pos,
        ));
    });
    let walk = walk::run(
        &v.inner.kinds,
        v.inner.rules.tree(language),
        &tree,
        &parsed,
        &pos,
    );
    t("language", &mut || {
        black_box(language::check(language, text));
    });
    t("secrets", &mut || {
        black_box(v.secrets(&walk, &parsed, &pos));
    });
    t("dangerous", &mut || {
        black_box(v.dangerous(language, &walk, &parsed, &pos));
    });
    t("validate", &mut || {
        black_box(v.validate(script));
    });
    out
}

/// Mean time in microseconds each tree rule part (`rule#n[kinds]`: the rule's n-th `any` branch
/// after ordering by cost, and the node kinds it is tried on) of the
/// script's language takes over `n` runs of the dangerous-pattern layer (top level only, nested
/// programs excluded), most costly first.
pub(super) fn rule_costs(v: &Validator, script: &Script, n: u32) -> Vec<(String, f64)> {
    let text = script.text.as_str();
    let language = script.language;
    let parsed = parse_text(language, text);
    let rules = v.inner.rules.tree(language);
    let tree = rules.grammar.parse(&parsed);
    let pos = Positions::new(text);
    let walk = walk::run(&v.inner.kinds, rules, &tree, &parsed, &pos);
    let mut costs = dangerous::RuleCosts::new();
    for _ in 0..n {
        black_box(dangerous::hits_costed(
            v,
            language,
            &parsed,
            &walk,
            0,
            Some(&mut costs),
        ));
    }
    let mut ordinal = vec![0usize; rules.rules.len()];
    let mut out: Vec<(String, f64)> = costs
        .iter()
        .zip(&rules.parts)
        .map(|(d, part)| {
            ordinal[part.rule] += 1;
            let kinds: Vec<&str> = part
                .kinds
                .iter()
                .filter_map(|&k| rules.grammar.ts().node_kind_for_id(k))
                .collect();
            (
                format!(
                    "{}#{}[{}]",
                    rules.rules[part.rule].meta.id,
                    ordinal[part.rule],
                    kinds.join(",")
                ),
                d.as_secs_f64() / f64::from(n) * 1e6,
            )
        })
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out
}
