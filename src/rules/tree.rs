//! Tree rules of one language: parsed from YAML, split into parts, indexed by node kind and by name.
//!
//! A rule whose top-level matcher is `any` is split into its alternatives ("parts"), each indexed on
//! its own: a node of a kind only runs the alternatives that can match that kind. Parts that need a
//! call/command of given names are indexed by those names instead, so a call only runs the rules for
//! what it actually calls. Whether a part can match at all in a script is decided once per script
//! ([`super::matcher::Matcher::possible`]).

use rustc_hash::FxHashMap;
use serde::Deserialize;

use super::grammar::Grammar;
use schemars::JsonSchema;

use super::matcher::{LiteralIndex, Matcher, MatcherCompiler, NameSet, NameSetError};
use super::model::MatcherSpec;
use super::{RuleError, RuleMeta, embed};
use crate::domain::script::Language;
use crate::domain::verdict::Severity;

/// A tree rule file (`patterns/python/*.yml`, `patterns/bash/*.yml`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawTreeRule {
    /// Kebab-case, equal to the file name without `.yml`.
    pub id: String,
    /// `python` or `bash`, equal to the rule's folder.
    #[schemars(with = "LanguageName")]
    pub language: Language,
    /// `block` (the default) or `warn`.
    #[serde(default)]
    #[schemars(with = "Option<SeverityName>")]
    pub severity: Option<Severity>,
    /// What the finding says.
    pub message: String,
    /// How to fix it.
    #[serde(default)]
    pub note: Option<String>,
    /// The matcher; absent only for builtin rules.
    #[serde(default)]
    pub rule: Option<MatcherSpec>,
    /// Matching is done in code; the file gives id, severity, message and tests.
    #[serde(default)]
    pub builtin: bool,
}

/// Schema stand-in for [`Language`].
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum LanguageName {
    Python,
    Bash,
}

/// Schema stand-in for [`Severity`].
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum SeverityName {
    Block,
    Warn,
}

/// The JSON Schema of tree rule files, generated from the types the loader reads.
pub fn schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(RawTreeRule)).unwrap_or_default()
}

/// A rule file, compiled: its metadata and its parts (none for builtin rules).
#[derive(Debug)]
pub struct ParsedRule {
    meta: RuleMeta,
    builtin: bool,
    parts: Vec<ParsedPart>,
}

#[derive(Debug)]
struct ParsedPart {
    matcher: Matcher,
    kinds: Vec<u16>,
    names: Option<Vec<String>>,
}

pub(super) fn parse_rule(file: &str, text: &str, dir: Language) -> Result<ParsedRule, RuleError> {
    let raw: RawTreeRule =
        serde_path_to_error::deserialize(serde_norway::Deserializer::from_str(text))
            .map_err(|e| RuleError::with(file, e))?;
    if raw.language != dir {
        return Err(RuleError::new(
            file,
            format!("language `{}` does not match its folder", raw.language),
        ));
    }
    let parts = match (raw.rule, raw.builtin) {
        (Some(spec), false) => {
            let grammar = Grammar::new(raw.language);
            let matcher = MatcherCompiler::new(&grammar)
                .compile(&spec, "rule")
                .map_err(|e| RuleError::with(file, e))?;
            split(matcher)
                .into_iter()
                .map(|matcher| {
                    let kinds = matcher.root_kinds().ok_or_else(|| {
                        RuleError::new(
                            file,
                            "rule: every top-level alternative must constrain the node kind (kind, call, command or recursive), so it can be indexed",
                        )
                    })?;
                    let names = matcher.name_keys();
                    Ok(ParsedPart { matcher, kinds, names })
                })
                .collect::<Result<Vec<_>, RuleError>>()?
        }
        (None, true) => Vec::new(),
        (Some(_), true) => {
            return Err(RuleError::new(
                file,
                "a builtin rule has no `rule:` matcher",
            ));
        }
        (None, false) => return Err(RuleError::new(file, "missing `rule:` (or `builtin: true`)")),
    };
    Ok(ParsedRule {
        meta: RuleMeta {
            id: raw.id,
            severity: raw.severity.unwrap_or(Severity::Block),
            message: raw.message,
            note: raw.note,
        },
        builtin: raw.builtin,
        parts,
    })
}

impl ParsedRule {
    pub fn id(&self) -> &str {
        &self.meta.id
    }
}

/// A top-level `any` becomes its alternatives.
fn split(matcher: Matcher) -> Vec<Matcher> {
    match matcher {
        Matcher::Any(alternatives) => alternatives,
        other => vec![other],
    }
}

#[derive(Debug)]
pub struct TreeRule {
    pub meta: RuleMeta,
    /// Matching is done in code; the rule file gives id, severity, message and tests.
    pub builtin: bool,
}

/// One indexed alternative of a rule.
#[derive(Debug)]
pub struct Part {
    /// Index of its rule in [`TreeRules::rules`].
    pub rule: usize,
    pub matcher: Matcher,
    pub kinds: Vec<u16>,
    /// Indexed by name ([`TreeRules::by_name`]): only tried on calls or commands of its names.
    pub by_name: bool,
}

/// Tree rules of one language, indexed.
#[derive(Debug)]
pub struct TreeRules {
    pub grammar: Grammar,
    pub rules: Vec<TreeRule>,
    pub parts: Vec<Part>,
    /// `by_kind[kind_id]`: the parts to try on nodes of that kind.
    pub by_kind: Vec<Vec<usize>>,
    /// Parts that need a call (Python) or command (Bash) of given names, indexed by those names.
    pub by_name: ByName,
    /// Every callee/command name any rule or the inline-program extractor tests (see [`super::matcher::Cx`]).
    pub names: NameSet,
    /// How many leaf slots the matchers use ([`Matcher::assign_slots`]).
    pub slots: usize,
    /// The texts the leaves need, for the per-script prefilter.
    pub literals: LiteralIndex,
}

impl TreeRules {
    pub(super) fn new(
        language: Language,
        parsed: Vec<ParsedRule>,
        interpreters: &embed::Interpreters,
    ) -> Result<Self, RuleError> {
        let grammar = Grammar::new(language);
        let at = |id: &str| format!("patterns/{language}/{id}.yml");
        let mut names = interpreters.names(language);
        let mut by_kind: Vec<Vec<usize>> = vec![Vec::new(); grammar.kind_count()];
        let mut by_name = ByName {
            kind: grammar.known_kind(match language {
                Language::Python => "call",
                Language::Bash => "command",
            }),
            exact: FxHashMap::default(),
            wildcard: Vec::new(),
        };
        let mut rules = Vec::new();
        let mut parts = Vec::new();
        let mut slots = 0;
        for (rule, r) in parsed.into_iter().enumerate() {
            for mut part in r.parts {
                part.matcher.assign_slots(&mut slots);
                let index = parts.len();
                part.matcher.collect_names(&mut names);
                match &part.names {
                    Some(keys) => by_name
                        .add(index, keys)
                        .map_err(|e| RuleError::with(at(&r.meta.id), e))?,
                    None => {
                        for &k in &part.kinds {
                            let entry = &mut by_kind[usize::from(k)];
                            if !entry.contains(&index) {
                                entry.push(index);
                            }
                        }
                    }
                }
                parts.push(Part {
                    rule,
                    by_name: part.names.is_some(),
                    matcher: part.matcher,
                    kinds: part.kinds,
                });
            }
            rules.push(TreeRule {
                meta: r.meta,
                builtin: r.builtin,
            });
        }
        let mut leaves = Vec::new();
        for part in &parts {
            part.matcher.collect_literals(&mut leaves);
        }
        let literals = LiteralIndex::new(slots, &leaves)
            .map_err(|e| RuleError::new(format!("patterns/{language}"), e.to_string()))?;
        names.sort();
        names.dedup();
        let names =
            NameSet::new(&names).map_err(|e| RuleError::with(format!("patterns/{language}"), e))?;
        Ok(TreeRules {
            grammar,
            rules,
            parts,
            by_kind,
            by_name,
            names,
            slots,
            literals,
        })
    }

    /// A builtin rule's metadata (its matching is done in code).
    pub fn builtin(&self, id: &str) -> Option<&RuleMeta> {
        self.rules
            .iter()
            .find(|r| r.meta.id == id && r.builtin)
            .map(|r| &r.meta)
    }

    /// Whether nodes of `kind` can match a rule in a script whose texts are `present`
    /// ([`LiteralIndex::scan`]): some part indexed under the kind is possible from the text alone.
    pub fn kind_possible(&self, kind: usize, present: &[bool]) -> bool {
        let has = |slot| self.literals.slot_present(present, slot);
        let by_kind = self.by_kind[kind]
            .iter()
            .any(|&p| self.parts[p].matcher.lexically_possible(&has));
        by_kind
            || (kind == usize::from(self.by_name.kind)
                && self
                    .by_name
                    .all_parts()
                    .any(|p| self.parts[p].matcher.lexically_possible(&has)))
    }

    /// Whether the walk must queue nodes of `kind` for rule evaluation.
    pub fn indexes_kind(&self, kind: usize) -> bool {
        !self.by_kind[kind].is_empty()
            || (kind == usize::from(self.by_name.kind) && !self.by_name.is_empty())
    }
}

/// Name-keyed parts (see [`TreeRules::by_name`]).
#[derive(Debug)]
pub struct ByName {
    /// The node kind name-keyed parts match (`call` or `command`).
    pub kind: u16,
    exact: FxHashMap<String, Vec<usize>>,
    wildcard: Vec<(NameSet, usize)>,
}

impl ByName {
    fn add(&mut self, part: usize, names: &[String]) -> Result<(), NameSetError> {
        for name in names {
            if name.contains('*') {
                self.wildcard
                    .push((NameSet::new(std::slice::from_ref(name))?, part));
            } else {
                let parts = self.exact.entry(name.clone()).or_default();
                if !parts.contains(&part) {
                    parts.push(part);
                }
            }
        }
        Ok(())
    }

    fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.wildcard.is_empty()
    }

    /// Every name-keyed part (with repeats).
    fn all_parts(&self) -> impl Iterator<Item = usize> + '_ {
        self.exact
            .values()
            .flatten()
            .copied()
            .chain(self.wildcard.iter().map(|(_, p)| *p))
    }

    /// The parts to evaluate for a node that calls `names`, in order, without repeats.
    pub fn parts_for<'n>(&self, names: impl Iterator<Item = &'n str>, out: &mut Vec<usize>) {
        for name in names {
            if let Some(parts) = self.exact.get(name) {
                out.extend(parts);
            }
            out.extend(
                self.wildcard
                    .iter()
                    .filter(|(set, _)| set.contains(name))
                    .map(|(_, p)| *p),
            );
        }
        out.sort_unstable();
        out.dedup();
    }
}
