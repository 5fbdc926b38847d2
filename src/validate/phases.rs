//! The validation benchmark's breakdown: how long each step of [`Validator::validate`] takes on one
//! script (`cargo bench --bench validation -- --phases`).

use std::hint::black_box;
use std::time::Instant;

use super::verdict::Positions;
use super::{Validator, language, limits, parse_text, walk};
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
