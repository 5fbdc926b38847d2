//! Compiling typed matchers ([`super::model::MatcherSpec`]) into [`Matcher`]s for one grammar.

use regex::Regex;

use super::grammar::Grammar;
use super::matcher::{
    ArgSpec, CallSpec, CommandSpec, KeywordSpec, Matcher, NameSet, NameSetError, Relation,
    TextRegex, Words,
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
        if let Some(re) = &spec.every_prefix {
            parts.push(Matcher::EveryPrefix(regex(re, &at("every_prefix"))?));
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
        if let Some(inner) = &spec.after {
            parts.push(Matcher::After(Box::new(self.compile(inner, &at("after"))?)));
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
            literals: super::matcher::required_literals(re.as_str()),
            regex: re,
            slot: 0,
        }),
    }
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
