//! Rules as data: `patterns/**.yml` compiled once into secret rules and tree rules.
//!
//! Secret rules ([`secret`]) are regexes over the raw text behind one keyword automaton. Tree rules
//! ([`matcher`]) match tree-sitter nodes by kind, field, text and relations (`has`, `inside`, `not`,
//! `all`, `any`), plus semantic keys that understand each language ([`python`], [`bash`]): resolved
//! call names through import aliases, constant folding of string-building code, and the effective
//! command behind `sudo`/`env`/quoting. Inline programs (`python3 -c`, `bash -c`, heredocs) are
//! extracted by [`embed`] and checked with their own language's rules. A malformed rule stops start-up
//! with its file name.

pub mod bash;
pub mod codec;
pub mod compile;
pub mod embed;
pub mod grammar;
pub mod matcher;
pub mod model;
pub mod python;
pub mod secret;
pub mod tree;

use std::collections::HashSet;
use std::path::Path;

use include_dir::{Dir, include_dir};

use crate::domain::script::Language;
use crate::domain::verdict::Severity;
use secret::SecretRules;
pub use tree::{ByName, Part, TreeRule, TreeRules};

static EMBEDDED: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/patterns");

/// A rule that stops start-up, with the file it came from.
///
/// Displays as `file: what`; [`std::error::Error::source`] continues with the cause of `what`
/// (a regex or YAML parser error), so a chain printer shows each part once.
#[derive(Debug)]
pub struct RuleError {
    pub file: String,
    pub kind: RuleErrorKind,
}

impl std::fmt::Display for RuleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.file, self.kind)
    }
}

impl std::error::Error for RuleError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.kind)
    }
}

/// What is wrong with a rule file.
#[derive(Debug, thiserror::Error)]
pub enum RuleErrorKind {
    #[error("{0}")]
    Message(String),
    /// The file does not fit the rule model; the path names the key, the line where known.
    #[error(transparent)]
    Shape(#[from] serde_path_to_error::Error<serde_norway::Error>),
    #[error(transparent)]
    Matcher(#[from] matcher::MatcherError),
    #[error(transparent)]
    Names(#[from] matcher::NameSetError),
}

impl RuleError {
    /// The error with its causes, `file: cause: cause…` (what start-up prints).
    pub fn report(&self) -> String {
        let mut out = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(e) = cause {
            out.push_str(": ");
            out.push_str(&e.to_string());
            cause = e.source();
        }
        out
    }

    pub fn new(file: impl Into<String>, message: impl Into<String>) -> Self {
        RuleError {
            file: file.into(),
            kind: RuleErrorKind::Message(message.into()),
        }
    }

    /// A typed error from compiling `file`.
    pub fn with(file: impl Into<String>, source: impl Into<RuleErrorKind>) -> Self {
        RuleError {
            file: file.into(),
            kind: source.into(),
        }
    }
}

/// What every rule says about itself.
#[derive(Debug, Clone)]
pub struct RuleMeta {
    pub id: String,
    pub severity: Severity,
    pub message: String,
    pub note: Option<String>,
}

/// Every compiled rule.
#[derive(Debug)]
pub struct RuleSet {
    pub secrets: SecretRules,
    pub python: TreeRules,
    pub bash: TreeRules,
    pub interpreters: embed::Interpreters,
}

impl RuleSet {
    pub fn tree(&self, language: Language) -> &TreeRules {
        match language {
            Language::Python => &self.python,
            Language::Bash => &self.bash,
        }
    }

    /// The rules built into the binary.
    pub fn embedded() -> Result<RuleSet, RuleError> {
        let mut files = Vec::new();
        collect_embedded(&EMBEDDED, &mut files);
        Self::from_files(files)
    }

    /// The rules under `dir` (laid out like `patterns/`).
    pub fn from_dir(dir: &Path) -> Result<RuleSet, RuleError> {
        let mut files = Vec::new();
        collect_dir(dir, dir, &mut files)?;
        Self::from_files(files)
    }

    /// Compiles rule files given as (path relative to the patterns root, contents).
    pub fn from_files(mut files: Vec<(String, String)>) -> Result<RuleSet, RuleError> {
        files.sort();
        let mut secrets = Vec::new();
        let mut global_allow = Vec::new();
        let mut trees: [Vec<tree::ParsedRule>; 2] = [Vec::new(), Vec::new()];
        let mut interpreters = None;
        let mut ids = HashSet::new();
        let mut secret_regexes = secret::RegexCache::default();
        for (path, text) in &files {
            let file = format!("patterns/{path}");
            if !path.ends_with(".yml") || path.starts_with("tests/") {
                continue;
            }
            match path.split_once('/') {
                Some(("secrets", "_global.yml")) => {
                    global_allow = secret::parse_global(&file, text, &mut secret_regexes)?;
                }
                Some(("secrets", _)) => {
                    let rule = secret::parse_rule(&file, text, &mut secret_regexes)?;
                    check_id(&file, &rule.meta.id, &mut ids)?;
                    secrets.push(rule);
                }
                Some((dir @ ("python" | "bash"), _)) => {
                    let language: Language = dir.parse().map_err(|e| RuleError::new(&file, e))?;
                    let rule = tree::parse_rule(&file, text, language)?;
                    check_id(&file, rule.id(), &mut ids)?;
                    trees[usize::from(language == Language::Bash)].push(rule);
                }
                None if path == "interpreters.yml" => {
                    interpreters = Some(embed::Interpreters::parse(&file, text)?);
                }
                _ => {
                    return Err(RuleError::new(
                        file,
                        "unexpected file: rules live in secrets/, python/ or bash/",
                    ));
                }
            }
        }
        let [python, bash] = trees;
        let interpreters = interpreters.ok_or_else(|| {
            RuleError::new("patterns/interpreters.yml", "missing interpreter table")
        })?;
        let rules = RuleSet {
            secrets: SecretRules::new(secrets, global_allow)?,
            python: TreeRules::new(Language::Python, python, &interpreters)?,
            bash: TreeRules::new(Language::Bash, bash, &interpreters)?,
            interpreters,
        };
        embed::check_builtins(&rules)?;
        Ok(rules)
    }

    /// Every rule id with its metadata, for listings and rule tests.
    pub fn all_meta(&self) -> impl Iterator<Item = &RuleMeta> {
        self.secrets
            .rules
            .iter()
            .map(|r| &r.meta)
            .chain(self.python.rules.iter().map(|r| &r.meta))
            .chain(self.bash.rules.iter().map(|r| &r.meta))
    }
}

fn check_id(file: &str, id: &str, ids: &mut HashSet<String>) -> Result<(), RuleError> {
    let well_formed = !id.is_empty()
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !well_formed {
        return Err(RuleError::new(
            file,
            format!("rule id `{id}` must be kebab-case"),
        ));
    }
    let stem = file
        .rsplit('/')
        .next()
        .unwrap_or("")
        .trim_end_matches(".yml");
    if stem != id {
        return Err(RuleError::new(
            file,
            format!("rule id `{id}` must match its file name"),
        ));
    }
    if !ids.insert(id.to_string()) {
        return Err(RuleError::new(file, format!("duplicate rule id `{id}`")));
    }
    Ok(())
}

fn collect_embedded(dir: &Dir<'_>, out: &mut Vec<(String, String)>) {
    for file in dir.files() {
        if let Some(text) = file.contents_utf8() {
            out.push((file.path().to_string_lossy().into_owned(), text.to_string()));
        }
    }
    for sub in dir.dirs() {
        collect_embedded(sub, out);
    }
}

fn collect_dir(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) -> Result<(), RuleError> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| RuleError::new(dir.display().to_string(), e.to_string()))?;
    for entry in entries {
        let entry = entry.map_err(|e| RuleError::new(dir.display().to_string(), e.to_string()))?;
        let path = entry.path();
        if path.is_dir() {
            collect_dir(root, &path, out)?;
        } else if path.extension().is_some_and(|e| e == "yml") {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| RuleError::new(path.display().to_string(), e.to_string()))?;
            let rel = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            out.push((rel, text));
        }
    }
    Ok(())
}

#[cfg(test)]
mod rule_tests;
