//! Layer 5, dangerous patterns: tree rules evaluated on the nodes the walk queued, plus inline
//! programs (checked recursively with their own language's rules).

use super::Validator;
use super::verdict::{Positions, Severity};
use super::walk::{self, Facts, Walk};
use crate::domain::script::Language;
use crate::rules::RuleMeta;
use crate::rules::bash::BashSem;
use crate::rules::embed::{
    self, BASH_BIDI, BASH_DOWNLOAD_RUN, BASH_DYNAMIC, Embedded, PYTHON_BIDI, PYTHON_DYNAMIC,
};
use crate::rules::matcher::{Cx, Sem};
use crate::rules::python::PySem;

/// Inline programs nest at most this deep (`bash -c "python3 -c '…'"` is two levels).
const MAX_NESTING: u8 = 4;

/// Candidates are unique (rule, node) pairs: the walk visits a node once and the index lists a rule
/// once per kind.
///
/// A rule that matched, at a byte offset of the outermost script.
#[derive(Debug, Clone)]
pub struct Hit {
    pub rule: String,
    pub severity: Severity,
    pub message: String,
    pub at: usize,
}

impl Hit {
    fn new(meta: &RuleMeta, message: String, at: usize) -> Self {
        Hit {
            rule: meta.id.clone(),
            severity: meta.severity,
            message,
            at,
        }
    }
}

/// The semantics rules evaluate against, for one walked script.
pub fn semantics<'a>(v: &'a Validator, walk: &'a Walk<'_>, src: &'a str) -> Sem<'a> {
    match &walk.facts {
        Facts::Python(facts) => Sem::Python(PySem::new(&v.kinds().py, facts, src)),
        Facts::Bash(facts) => Sem::Bash(BashSem {
            k: &v.kinds().sh,
            facts,
            src,
            interpreters: Some(&v.rules().interpreters),
        }),
    }
}

pub fn hits(
    v: &Validator,
    language: Language,
    src: &str,
    walk: &Walk<'_>,
    nesting: u8,
) -> Vec<Hit> {
    hits_costed(v, language, src, walk, nesting, None)
}

/// Time spent per rule part (by index in the language's parts), for the benchmark's breakdown.
pub type RuleCosts = Vec<std::time::Duration>;

/// [`hits`], adding each rule part's evaluation time to `costs` when given (deciding which parts
/// can match, then evaluating them on the candidates).
pub fn hits_costed(
    v: &Validator,
    language: Language,
    src: &str,
    walk: &Walk<'_>,
    nesting: u8,
    mut costs: Option<&mut RuleCosts>,
) -> Vec<Hit> {
    let rules = v.rules().tree(language);
    if let Some(c) = costs.as_deref_mut() {
        c.resize(rules.parts.len(), std::time::Duration::ZERO);
    }
    let mut timed = |part: usize, f: &mut dyn FnMut() -> bool| -> bool {
        match costs.as_deref_mut() {
            None => f(),
            Some(c) => {
                let start = std::time::Instant::now();
                let r = f();
                c[part] += start.elapsed();
                r
            }
        }
    };
    let cx = Cx::new(
        src,
        semantics(v, walk, src),
        &rules.names,
        &walk.sites,
        rules.slots,
        &rules.literals,
        &walk.present,
    )
    .with_parents(&walk.parents);
    let mut out = Vec::new();
    // Which parts can match anywhere in this script, decided once. Name-keyed parts only run on
    // calls or commands of their names, which is the same question asked per node.
    let active: Vec<bool> = rules
        .parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            timed(i, &mut || {
                if p.by_name {
                    p.matcher.lexically_possible(&|slot| {
                        rules.literals.slot_present(&walk.present, slot)
                    })
                } else {
                    p.matcher.possible(&cx)
                }
            })
        })
        .collect();
    let mut keyed = Vec::new();
    let mut matched: Vec<usize> = Vec::new();
    for &node in &walk.candidates {
        let kind = node.kind_id();
        keyed.clear();
        if kind == rules.by_name.kind {
            named_parts(&cx, node, &rules.by_name, &mut keyed);
        }
        matched.clear();
        for &p in rules.by_kind[usize::from(kind)].iter().chain(&keyed) {
            let part = &rules.parts[p];
            if active[p]
                && !matched.contains(&part.rule)
                && timed(p, &mut || part.matcher.matches(node, &cx))
            {
                matched.push(part.rule);
                let meta = &rules.rules[part.rule].meta;
                out.push(Hit::new(meta, meta.message.clone(), node.start_byte()));
            }
        }
    }
    if nesting == 0 {
        out.extend(bidi(v, language, src));
    }
    // Only scripts that run a downloader can run what it downloaded: one that names it, or one
    // that could spell the name in pieces (quotes, escapes), whose commands are then resolved.
    if let Sem::Bash(sh) = &cx.sem
        && let Some(meta) = rules.builtin(BASH_DOWNLOAD_RUN)
        && may_name_downloader(src)
        && cx.script_names().iter().any(|n| n == "curl" || n == "wget")
    {
        for run in crate::rules::bash::downloaded_then_run(sh, &cx, &walk.sites) {
            out.push(Hit::new(meta, meta.message.clone(), run.start_byte()));
        }
    }
    for site in &walk.sites {
        let programs = match &cx.sem {
            Sem::Python(py) => embed::python_embedded(py, &cx, &v.rules().interpreters, *site),
            Sem::Bash(sh) => embed::bash_embedded(sh, &cx, *site),
        };
        for program in programs {
            out.extend(inline_hits(v, language, &program, nesting));
        }
    }
    for &(start, end) in &walk.regions {
        if nesting < MAX_NESTING {
            out.extend(
                nested(v, Language::Bash, &src[start..end], nesting + 1)
                    .into_iter()
                    .map(|mut h| {
                        h.at += start;
                        h
                    }),
            );
        }
    }
    out
}

/// Whether a Bash script can run `curl` or `wget`: it names one, or holds quotes, escapes or
/// expansions that could spell one.
fn may_name_downloader(src: &str) -> bool {
    let b = src.as_bytes();
    ["curl", "wget", "''", "\"\"", "$'", "\\", "${", "$("]
        .iter()
        .any(|t| memchr::memmem::find(b, t.as_bytes()).is_some())
}

/// The name-keyed parts for a call/command node: those of the names it calls, if any is of interest.
fn named_parts<'t>(
    cx: &Cx<'t>,
    node: tree_sitter::Node<'t>,
    by_name: &crate::rules::ByName,
    out: &mut Vec<usize>,
) {
    match &cx.sem {
        Sem::Python(py) => {
            let (names, hot) = cx.callee(node, || py.callee_names(node));
            if hot {
                by_name.parts_for(names.iter().map(String::as_str), out);
            }
        }
        Sem::Bash(sh) => {
            let (invocations, hot) = cx.bash_invocations(sh, node);
            if hot {
                by_name.parts_for(invocations.iter().map(|i| i.name.as_str()), out);
            }
        }
    }
}

/// Unicode bidirectional controls anywhere in the text (Trojan Source, CVE-2021-42574): a lexical
/// check, so it is one scan of the text rather than a regex per node.
fn bidi(v: &Validator, language: Language, src: &str) -> Option<Hit> {
    let id = match language {
        Language::Bash => BASH_BIDI,
        Language::Python => PYTHON_BIDI,
    };
    let meta = v.rules().tree(language).builtin(id)?;
    // Every bidi control is U+202A..U+202E or U+2066..U+2069, encoded E2 80 AA..AE / E2 81 A6..A9.
    let at = src
        .char_indices()
        .find(|&(_, c)| matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'))?
        .0;
    Some(Hit::new(meta, meta.message.clone(), at))
}

fn inline_hits(v: &Validator, outer: Language, program: &Embedded<'_>, nesting: u8) -> Vec<Hit> {
    let Some(code) = &program.code else {
        let id = match outer {
            Language::Bash => BASH_DYNAMIC,
            Language::Python => PYTHON_DYNAMIC,
        };
        let Some(meta) = v.rules().tree(outer).builtin(id) else {
            return Vec::new();
        };
        let message = format!("{} ({})", meta.message, program.interpreter);
        return vec![Hit::new(meta, message, program.anchor.start_byte())];
    };
    let Some(language) = program.language else {
        return Vec::new();
    };
    if nesting >= MAX_NESTING {
        return Vec::new();
    }
    nested(v, language, code, nesting + 1)
        .into_iter()
        .filter(|h| {
            program
                .origin
                .keeps(&h.rule, code.get(h.at..).unwrap_or_default())
        })
        .map(|mut h| {
            h.at = program
                .verbatim_at
                .map_or(program.anchor.start_byte(), |base| base + h.at);
            h.message = format!(
                "in inline {language} code run by {}: {}",
                program.interpreter, h.message
            );
            h
        })
        .collect()
}

/// Rule hits inside an inline program (its syntax errors are ignored: the outer script is what runs).
fn nested(v: &Validator, language: Language, code: &str, nesting: u8) -> Vec<Hit> {
    let (code, tree) = super::parse(&v.rules().tree(language).grammar, code);
    let pos = Positions::new(&code);
    let walk = walk::run(v.kinds(), v.rules().tree(language), &tree, &code, &pos);
    hits(v, language, &code, &walk, nesting)
}
