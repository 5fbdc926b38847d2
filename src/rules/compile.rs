//! Compiling typed matchers ([`super::model::MatcherSpec`]) into [`Matcher`]s for one grammar.

use regex::Regex;

use super::grammar::Grammar;
use super::matcher::{
    ArgSpec, CallSpec, CommandSpec, KeywordSpec, Matcher, NameSet, NameSetError, Relation,
    RequiredLiterals, TextRegex, Words,
};
use super::model::{CallSpecRaw, CommandSpecRaw, MatcherSpec, OneOrMany, StopBy};
use crate::domain::script::Language;

/// Why a matcher does not compile; every variant names the path of the key in the rule file.
#[derive(Debug, thiserror::Error)]
pub enum MatcherError {
    #[error("{path}: invalid regex")]
    Regex {
        path: String,
        #[source]
        source: regex::Error,
    },
    #[error("{path}: invalid name list")]
    Names {
        path: String,
        #[source]
        source: NameSetError,
    },
    #[error("{path}: unknown node kind `{kind}` for {language}")]
    UnknownKind {
        path: String,
        kind: String,
        language: Language,
    },
    #[error("{path}: unknown field `{field}` for {language}")]
    UnknownField {
        path: String,
        field: String,
        language: Language,
    },
    #[error(
        "{path}: `{key}` is not available in {language} rules (python has `call`, bash has `command`)"
    )]
    WrongLanguage {
        path: String,
        key: &'static str,
        language: Language,
    },
    #[error("{path}: `{key}` is only allowed {place}")]
    Misplaced {
        path: String,
        key: &'static str,
        place: &'static str,
    },
    #[error("{path}: `field` and `stopBy: end` do not combine")]
    FieldWithStopBy { path: String },
    #[error("{path}: `{flag}` must start with `-`")]
    Flag { path: String, flag: String },
    #[error("{path}: empty matcher")]
    Empty { path: String },
    #[error("{path}: empty list")]
    EmptyList { path: String },
    #[error("{language} grammar has no `{kind}` nodes")]
    ImpliedKind {
        kind: &'static str,
        language: Language,
    },
}

/// Where a matcher sits: which of the context-only keys it may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Plain,
    Relation,
    Arg,
}

/// Compiles typed matchers ([`MatcherSpec`]) for one grammar.
#[derive(Debug)]
pub struct MatcherCompiler<'g> {
    grammar: &'g Grammar,
}

impl<'g> MatcherCompiler<'g> {
    pub fn new(grammar: &'g Grammar) -> Self {
        MatcherCompiler { grammar }
    }

    pub fn compile(&self, spec: &MatcherSpec, path: &str) -> Result<Matcher, MatcherError> {
        self.compile_at(spec, path, Place::Plain)
    }

    fn compile_at(
        &self,
        spec: &MatcherSpec,
        path: &str,
        place: Place,
    ) -> Result<Matcher, MatcherError> {
        let at = |key: &str| format!("{path}.{key}");
        if place != Place::Relation {
            for (present, key) in [
                (spec.field.is_some(), "field"),
                (spec.stop_by.is_some(), "stopBy"),
            ] {
                if present {
                    return Err(MatcherError::Misplaced {
                        path: at(key),
                        key,
                        place: "inside `has` or `inside`",
                    });
                }
            }
        }
        if place != Place::Arg && spec.index.is_some() {
            return Err(MatcherError::Misplaced {
                path: at("index"),
                key: "index",
                place: "in a call's `arg`",
            });
        }
        if spec.call.is_some() {
            self.require(Language::Python, "call", &at("call"))?;
        }
        if spec.command.is_some() {
            self.require(Language::Bash, "command", &at("command"))?;
        }
        let mut parts = Vec::new();
        if let Some(kind) = &spec.kind {
            parts.push(Matcher::Kind(self.kinds(kind, &at("kind"))?));
        }
        if spec.recursive.is_some() {
            parts.push(Matcher::Kind(vec![
                self.implied_kind("function_definition")?,
            ]));
        }
        if spec.call.is_some() {
            parts.push(Matcher::Kind(vec![self.implied_kind("call")?]));
        }
        if spec.command.is_some() {
            parts.push(Matcher::Kind(vec![self.implied_kind("command")?]));
        }
        if let Some(re) = &spec.regex {
            parts.push(text_matcher(regex(re, &at("regex"))?));
        }
        if let Some(re) = &spec.folded {
            parts.push(Matcher::Folded(regex(re, &at("folded"))?));
        }
        if let Some(re) = &spec.may_be {
            parts.push(Matcher::MayBe(regex(re, &at("may_be"))?));
        }
        if let Some(want) = spec.dynamic {
            parts.push(Matcher::Dynamic(want));
        }
        if let Some(want) = spec.plain {
            parts.push(Matcher::Plain(want));
        }
        if let Some(re) = &spec.prefix {
            parts.push(Matcher::Prefix(regex(re, &at("prefix"))?));
        }
        if let Some(want) = spec.quoted {
            parts.push(Matcher::Quoted(want));
        }
        if let Some(inner) = &spec.derived {
            let path = at("derived");
            self.require(Language::Python, "derived", &path)?;
            parts.push(Matcher::Derived(Box::new(self.compile(inner, &path)?)));
        }
        if let Some(names) = &spec.resolves {
            let path = at("resolves");
            self.require(Language::Python, "resolves", &path)?;
            parts.push(Matcher::Resolves(name_set(names, &path)?, 0));
        }
        if let Some(call) = &spec.call {
            parts.push(Matcher::Call(Box::new(self.call(call, &at("call"))?)));
        }
        if let Some(command) = &spec.command {
            parts.push(Matcher::Command(Box::new(
                self.command(command, &at("command"))?,
            )));
        }
        if let Some(want) = spec.recursive {
            parts.push(Matcher::Recursive(want));
        }
        if let Some(inner) = &spec.has {
            parts.push(Matcher::Has(Box::new(self.relation(inner, &at("has"))?)));
        }
        if let Some(inner) = &spec.inside {
            parts.push(Matcher::Inside(Box::new(
                self.relation(inner, &at("inside"))?,
            )));
        }
        if let Some(inner) = &spec.not {
            parts.push(Matcher::Not(Box::new(self.compile(inner, &at("not"))?)));
        }
        if let Some(list) = &spec.all {
            let mut all = self.list(list, &at("all"))?;
            all.sort_by_key(Matcher::cost);
            parts.push(Matcher::All(all));
        }
        if let Some(list) = &spec.any {
            let mut any = self.list(list, &at("any"))?;
            any.sort_by_key(Matcher::cost);
            parts.push(Matcher::Any(any));
        }
        match parts.len() {
            0 => Err(MatcherError::Empty {
                path: path.to_string(),
            }),
            1 => Ok(parts.remove(0)),
            _ => {
                parts.sort_by_key(Matcher::cost);
                Ok(Matcher::All(parts))
            }
        }
    }

    fn require(
        &self,
        language: Language,
        key: &'static str,
        path: &str,
    ) -> Result<(), MatcherError> {
        if self.grammar.language == language {
            Ok(())
        } else {
            Err(MatcherError::WrongLanguage {
                path: path.to_string(),
                key,
                language: self.grammar.language,
            })
        }
    }

    fn implied_kind(&self, kind: &'static str) -> Result<u16, MatcherError> {
        self.grammar.kind(kind).ok_or(MatcherError::ImpliedKind {
            kind,
            language: self.grammar.language,
        })
    }

    fn kinds(&self, kinds: &OneOrMany, path: &str) -> Result<Vec<u16>, MatcherError> {
        kinds
            .clone()
            .into_vec()
            .into_iter()
            .map(|k| {
                self.grammar
                    .kind(&k)
                    .ok_or_else(|| MatcherError::UnknownKind {
                        path: path.to_string(),
                        kind: k,
                        language: self.grammar.language,
                    })
            })
            .collect()
    }

    fn relation(&self, spec: &MatcherSpec, path: &str) -> Result<Relation, MatcherError> {
        let field = match &spec.field {
            None => None,
            Some(name) => {
                Some(
                    self.grammar
                        .field(name)
                        .ok_or_else(|| MatcherError::UnknownField {
                            path: format!("{path}.field"),
                            field: name.clone(),
                            language: self.grammar.language,
                        })?,
                )
            }
        };
        let stop_by_end = spec.stop_by.unwrap_or_default() == StopBy::End;
        if field.is_some() && stop_by_end {
            return Err(MatcherError::FieldWithStopBy {
                path: path.to_string(),
            });
        }
        Ok(Relation {
            field,
            stop_by_end,
            inner: self.compile_at(spec, path, Place::Relation)?,
        })
    }

    fn list(&self, specs: &[MatcherSpec], path: &str) -> Result<Vec<Matcher>, MatcherError> {
        if specs.is_empty() {
            return Err(MatcherError::EmptyList {
                path: path.to_string(),
            });
        }
        specs
            .iter()
            .enumerate()
            .map(|(i, s)| self.compile(s, &format!("{path}[{i}]")))
            .collect()
    }

    fn call(&self, spec: &CallSpecRaw, path: &str) -> Result<CallSpec, MatcherError> {
        self.require(Language::Python, "call", path)?;
        let callee = name_set(&spec.callee, &format!("{path}.callee"))?;
        let arg = match &spec.arg {
            None => None,
            Some(arg) => {
                let at = format!("{path}.arg");
                Some(ArgSpec {
                    index: arg.index,
                    inner: self.compile_at(arg, &at, Place::Arg)?,
                })
            }
        };
        let keyword = match &spec.keyword {
            None => None,
            Some(k) => {
                let at = format!("{path}.keyword");
                Some(KeywordSpec {
                    name: regex(&k.name, &format!("{at}.name"))?,
                    value: match &k.value {
                        None => None,
                        Some(v) => Some(self.compile(v, &format!("{at}.value"))?),
                    },
                })
            }
        };
        Ok(CallSpec {
            slot: 0,
            callee,
            arg,
            keyword,
        })
    }

    fn command(&self, spec: &CommandSpecRaw, path: &str) -> Result<CommandSpec, MatcherError> {
        self.require(Language::Bash, "command", path)?;
        let name = name_set(&spec.name, &format!("{path}.name"))?;
        let flags = spec
            .flag
            .clone()
            .map(OneOrMany::into_vec)
            .unwrap_or_default();
        if let Some(bad) = flags.iter().find(|f| !f.starts_with('-')) {
            return Err(MatcherError::Flag {
                path: format!("{path}.flag"),
                flag: bad.clone(),
            });
        }
        let arg = match &spec.arg {
            None => None,
            Some(v) => Some(self.compile(v, &format!("{path}.arg"))?),
        };
        let last_arg = match &spec.last_arg {
            None => None,
            Some(v) => Some(self.compile(v, &format!("{path}.last_arg"))?),
        };
        Ok(CommandSpec {
            slot: 0,
            name,
            flags,
            arg,
            last_arg,
            stdin_program: spec.stdin_program,
        })
    }
}

/// `^(a|b|c)$` over plain words becomes an exact-match list (no regex engine per node).
fn text_matcher(re: Regex) -> Matcher {
    let pattern = re.as_str();
    let inner = pattern
        .strip_prefix('^')
        .and_then(|p| p.strip_suffix('$'))
        .map(|p| {
            p.strip_prefix('(')
                .and_then(|p| p.strip_suffix(')'))
                .unwrap_or(p)
        });
    let is_word =
        |w: &str| !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    match inner {
        Some(alternatives)
            if !alternatives.contains(['(', ')']) && alternatives.split('|').all(is_word) =>
        {
            Matcher::Exact(Words {
                words: alternatives.split('|').map(str::to_string).collect(),
                slot: 0,
            })
        }
        _ => Matcher::Regex(TextRegex {
            literals: required_literals(re.as_str()),
            regex: re,
            slot: 0,
        }),
    }
}

/// Literals one of which every match of `pattern` contains (its prefixes, when they form a small
/// finite set of non-empty strings); `None` when there is no such set.
///
/// A case-insensitive pattern (`(?i)drop`) would list every spelling (`DROP`, `DROp`, …) and soon
/// exceed the limit: its letters are folded to lower case first, and the literals it yields are
/// then searched without regard to ASCII case ([`RequiredLiterals::caseless`]).
fn required_literals(pattern: &str) -> Option<RequiredLiterals> {
    use regex_syntax::hir::literal::Extractor;
    let hir = regex_syntax::Parser::new().parse(pattern).ok()?;
    let caseless = has_case_flag(pattern);
    let hir = if caseless { fold_case(&hir) } else { hir };
    let mut extractor = Extractor::new();
    extractor.limit_total(64);
    let seq = extractor.extract(&hir);
    let prefixes: Option<Vec<Vec<u8>>> = seq
        .literals()
        .filter(|ls| !ls.is_empty() && ls.iter().all(|l| !l.as_bytes().is_empty()))
        .map(|ls| ls.iter().map(|l| l.as_bytes().to_vec()).collect());
    // Prefixes, unless a literal inside the pattern is more telling (`^\s*-?\s*privileged:` has
    // no prefix but needs `privileged`).
    let literals = match (prefixes, required_factors(&hir)) {
        (Some(p), Some(f)) if shortest(&f) > shortest(&p) => f,
        (Some(p), _) => p,
        (None, f) => f?,
    };
    let mut texts: Vec<String> = literals
        .into_iter()
        .map(|l| String::from_utf8(l).ok())
        .collect::<Option<_>>()?;
    if caseless {
        texts.sort();
        texts.dedup();
    }
    Some(RequiredLiterals { texts, caseless })
}

/// Texts one of which every match of `hir` contains somewhere (not only at its start): a
/// literal's, each alternative's, and of a sequence the most telling of its parts'. At most 64.
fn required_factors(hir: &regex_syntax::hir::Hir) -> Option<Vec<Vec<u8>>> {
    use regex_syntax::hir::{HirKind, Literal};
    const MAX: usize = 64;
    match hir.kind() {
        HirKind::Literal(Literal(bytes)) => Some(vec![bytes.to_vec()]),
        HirKind::Capture(c) => required_factors(&c.sub),
        HirKind::Repetition(r) if r.min >= 1 => required_factors(&r.sub),
        HirKind::Alternation(subs) => {
            let mut out = Vec::new();
            for sub in subs {
                out.extend(required_factors(sub)?);
                if out.len() > MAX {
                    return None;
                }
            }
            out.sort();
            out.dedup();
            Some(out)
        }
        HirKind::Concat(subs) => subs
            .iter()
            .filter_map(required_factors)
            .max_by_key(|f| shortest(f)),
        _ => None,
    }
}

/// The length of the shortest text of a set (what a search for any of them can rule out).
fn shortest(texts: &[Vec<u8>]) -> usize {
    texts.iter().map(Vec::len).min().unwrap_or(0)
}

/// Whether a pattern turns case-insensitive matching on anywhere (`(?i)`, `(?si:…)`).
fn has_case_flag(pattern: &str) -> bool {
    pattern.match_indices("(?").any(|(at, _)| {
        pattern[at + 2..]
            .chars()
            .take_while(|c| c.is_ascii_alphabetic() || *c == '-')
            .take_while(|c| *c != '-')
            .any(|c| c == 'i')
    })
}

/// `hir` with every class that stands for one ASCII letter in either case (`[Dd]`, what `(?i)d`
/// compiles to) replaced by the lower-case letter, and literals in lower case: its literals,
/// compared without regard to ASCII case, are needed by every match of `hir`.
fn fold_case(hir: &regex_syntax::hir::Hir) -> regex_syntax::hir::Hir {
    use regex_syntax::hir::{Class, Hir, HirKind, Literal};
    match hir.kind() {
        HirKind::Literal(Literal(bytes)) => Hir::literal(bytes.to_ascii_lowercase()),
        HirKind::Class(class) => {
            let letter = match class {
                Class::Unicode(c) => {
                    case_pair(c.iter().map(|r| (u32::from(r.start()), u32::from(r.end()))))
                }
                Class::Bytes(c) => {
                    case_pair(c.iter().map(|r| (u32::from(r.start()), u32::from(r.end()))))
                }
            };
            match letter {
                Some(b) => Hir::literal([b]),
                None => hir.clone(),
            }
        }
        HirKind::Repetition(r) => {
            let mut r = r.clone();
            r.sub = Box::new(fold_case(&r.sub));
            Hir::repetition(r)
        }
        HirKind::Capture(c) => {
            let mut c = c.clone();
            c.sub = Box::new(fold_case(&c.sub));
            Hir::capture(c)
        }
        HirKind::Concat(subs) => Hir::concat(subs.iter().map(fold_case).collect()),
        HirKind::Alternation(subs) => Hir::alternation(subs.iter().map(fold_case).collect()),
        HirKind::Empty | HirKind::Look(_) => hir.clone(),
    }
}

/// The lower-case letter a class of ranges stands for when it is exactly `[Xx]`, or that with the
/// one non-ASCII letter that folds to it (`ſ` for `s`, the Kelvin sign for `k`): the literal scan
/// searches the NFKC form of non-ASCII text, which turns those two into `s` and `K`.
fn case_pair(ranges: impl Iterator<Item = (u32, u32)>) -> Option<u8> {
    let ranges: Vec<(u32, u32)> = ranges
        .filter(|&r| r != (0x17F, 0x17F) && r != (0x212A, 0x212A))
        .collect();
    let [upper, lower] = ranges.as_slice() else {
        return None;
    };
    let single = |&(a, b): &(u32, u32)| (a == b).then_some(a).and_then(|c| u8::try_from(c).ok());
    let (u, l) = (single(upper)?, single(lower)?);
    (u.is_ascii_uppercase() && l == u.to_ascii_lowercase()).then_some(l)
}

fn name_set(names: &OneOrMany, path: &str) -> Result<NameSet, MatcherError> {
    NameSet::new(&names.clone().into_vec()).map_err(|source| MatcherError::Names {
        path: path.to_string(),
        source,
    })
}

fn regex(pattern: &str, path: &str) -> Result<Regex, MatcherError> {
    Regex::new(pattern).map_err(|source| MatcherError::Regex {
        path: path.to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::required_literals;

    fn texts(pattern: &str) -> Option<(Vec<String>, bool)> {
        required_literals(pattern).map(|l| (l.texts, l.caseless))
    }

    #[test]
    fn case_insensitive_patterns_yield_lower_case_literals() {
        let (words, caseless) = texts(r"(?i)stratum\+(tcp|ssl)://").expect("literals");
        assert!(caseless);
        assert_eq!(words, ["stratum+ssl://", "stratum+tcp://"]);
        // a flag group turns it on for part of the pattern only: still folded (a superset)
        let (words, caseless) = texts(r"(?i:drop)\s+index").expect("literals");
        assert!(caseless);
        assert_eq!(words, ["index"]);
    }

    #[test]
    fn literals_inside_a_pattern_count_when_its_start_has_none() {
        let (words, caseless) =
            texts(r"(?i)(^|\n)\s*-?\s*(privileged|hostPID):\s*true").expect("literals");
        assert!(caseless);
        assert_eq!(words, ["hostpid", "privileged"]);
        // the longer of a prefix and an inner literal
        let (words, _) = texts(r"^\d*<[^<]+\.sock").expect("literals");
        assert_eq!(words, [".sock"]);
        // an optional part is not required
        assert_eq!(texts(r"^\s*(sudo)?\s*$"), None);
    }

    #[test]
    fn case_sensitive_patterns_keep_their_case() {
        let (words, caseless) = texts(r"AKIA[0-9A-Z]{16}").expect("literals");
        assert!(!caseless);
        assert_eq!(words, ["AKIA"]);
        assert!(!super::has_case_flag(r"(?s)a.b(?-i)c"));
        // classes that are not one letter in two cases are kept as classes
        let (words, _) = texts(r"(?i)[a-c]x").expect("literals");
        assert!(words.len() >= 3, "{words:?}");
    }
}
