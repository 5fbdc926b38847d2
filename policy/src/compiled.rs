//! A policy compiled for deciding: every pattern parsed once, every rule checked.

use std::collections::HashSet;

use crate::check;
use crate::error::{PolicyError, Problem};
use crate::glob::Glob;
use crate::limits::{MAX_ENTRIES, MAX_PATTERNS, MAX_RULES};
use crate::model::{
    CommandRule, Decision, FileRule, NetworkRule, Policy, PortSpec, Raise, Section, ValidationRule,
};
use crate::net::{Cidr, DomainPattern};
use crate::template::Template;

/// A compiled policy: [`CompiledPolicy::decide_file`], [`CompiledPolicy::decide_command`],
/// [`CompiledPolicy::decide_network`] and [`CompiledPolicy::decide_finding`] answer from it.
///
/// Built by [`CompiledPolicy::compile`] (any [`Policy`]) or [`crate::WirePolicy::compile`]; the
/// source it keeps ([`CompiledPolicy::policy`]) has its domain names normalised.
#[derive(Debug, Clone)]
pub struct CompiledPolicy {
    pub(crate) source: Policy,
    pub(crate) files: Box<[FileRuleC]>,
    pub(crate) commands: Box<[CommandRuleC]>,
    pub(crate) network: Box<[NetworkRuleC]>,
    pub(crate) raises: Box<[RaiseC]>,
    pub(crate) defaults: Defaults,
}

/// What a verdict names: the rule's name (none for a section's default) and its message.
#[derive(Debug, Clone)]
pub(crate) struct RuleInfo {
    pub(crate) name: Option<Box<str>>,
    pub(crate) message: Option<Template>,
}

/// The fail-closed answer of each section when no rule matches.
#[derive(Debug, Clone)]
pub(crate) struct Defaults {
    pub(crate) file: RuleInfo,
    pub(crate) command: RuleInfo,
    pub(crate) network: RuleInfo,
}

#[derive(Debug, Clone)]
pub(crate) struct FileRuleC {
    pub(crate) operations: u8,
    pub(crate) globs: Box<[Glob]>,
    pub(crate) decision: Decision,
    pub(crate) info: RuleInfo,
}

#[derive(Debug, Clone)]
pub(crate) struct CommandRuleC {
    /// Matched against the program's file name.
    pub(crate) names: Box<[Glob]>,
    /// Matched against the program's path.
    pub(crate) paths: Box<[Glob]>,
    pub(crate) args: Option<Box<[Glob]>>,
    pub(crate) decision: Decision,
    pub(crate) info: RuleInfo,
}

#[derive(Debug, Clone)]
pub(crate) struct NetworkRuleC {
    pub(crate) domains: Option<Box<[DomainPattern]>>,
    pub(crate) cidrs: Option<Box<[Cidr]>>,
    pub(crate) ports: Option<Box<[PortSpec]>>,
    pub(crate) decision: Decision,
    pub(crate) info: RuleInfo,
}

#[derive(Debug, Clone)]
pub(crate) struct RaiseC {
    pub(crate) ids: Box<[IdPattern]>,
    pub(crate) raise: Raise,
    pub(crate) info: RuleInfo,
}

#[derive(Debug, Clone)]
pub(crate) enum IdPattern {
    Exact(Box<str>),
    Prefix(Box<str>),
}

impl IdPattern {
    pub(crate) fn matches(&self, id: &str) -> bool {
        match self {
            IdPattern::Exact(e) => **e == *id,
            IdPattern::Prefix(p) => id.starts_with(&**p),
        }
    }
}

impl CompiledPolicy {
    /// Checks everything (see [`Problem`]) and compiles every pattern once. Bounded whatever the
    /// input: a section past [`MAX_RULES`] is refused before any of its rules is looked at.
    pub fn compile(mut policy: Policy) -> Result<CompiledPolicy, PolicyError> {
        if policy.version != 1 {
            return Err(PolicyError::new(
                "version",
                Problem::Version(policy.version.into()),
            ));
        }
        check::name(&policy.name).map_err(|p| PolicyError::new("name", p))?;
        check::description(&policy.description).map_err(|p| PolicyError::new("description", p))?;
        let mut c = Compiler::default();
        c.count(Section::File, policy.file_rules.len())?;
        c.count(Section::Network, policy.network_rules.len())?;
        c.count(Section::Command, policy.command_rules.len())?;
        c.count(Section::Validation, policy.validation_rules.len())?;
        let files = enumerate(&policy.file_rules, |i, r| c.file_rule(i, r))?;
        let commands = enumerate(&policy.command_rules, |i, r| c.command_rule(i, r))?;
        let network = enumerate(&mut policy.network_rules, |i, r| c.network_rule(i, r))?;
        let raises = enumerate(&policy.validation_rules, |i, r| c.validation_rule(i, r))?;
        Ok(CompiledPolicy {
            source: policy,
            files,
            commands,
            network,
            raises,
            defaults: Defaults::new(),
        })
    }

    /// The policy as compiled (domain names normalised).
    pub fn policy(&self) -> &Policy {
        &self.source
    }

    pub fn name(&self) -> &str {
        &self.source.name
    }
}

fn enumerate<T, U>(
    items: impl IntoIterator<Item = T>,
    mut f: impl FnMut(usize, T) -> Result<U, PolicyError>,
) -> Result<Box<[U]>, PolicyError> {
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| f(i, item))
        .collect()
}

impl Defaults {
    fn new() -> Defaults {
        let info = |text: &str, section| RuleInfo {
            name: None,
            message: Template::parse(text, section).ok(),
        };
        Defaults {
            file: info(
                "no file rule matches {operation} of {path}: denied by default",
                Section::File,
            ),
            command: info(
                "no command rule matches {command}: denied by default",
                Section::Command,
            ),
            network: info(
                "no network rule matches {domain} port {port}: denied by default",
                Section::Network,
            ),
        }
    }
}

/// Compiles rules while tracking what spans the policy: names and the pattern count.
#[derive(Debug, Default)]
struct Compiler {
    names: HashSet<String>,
    patterns: usize,
}

/// Where a problem is: `file_rules[2] (rule-name).paths[0]`.
struct At<'a> {
    section: Section,
    index: usize,
    name: &'a str,
}

impl At<'_> {
    fn rule(&self) -> String {
        format!("{}[{}] ({})", self.section.key(), self.index, self.name)
    }

    fn key(&self, key: &str) -> String {
        format!("{}.{key}", self.rule())
    }

    fn entry(&self, key: &str, i: usize) -> String {
        format!("{}.{key}[{i}]", self.rule())
    }
}

impl Compiler {
    fn count(&self, section: Section, n: usize) -> Result<(), PolicyError> {
        (n <= MAX_RULES)
            .then_some(())
            .ok_or_else(|| PolicyError::new(section.key(), Problem::TooMany { max: MAX_RULES }))
    }

    fn info(&mut self, at: &At<'_>, message: Option<&str>) -> Result<RuleInfo, PolicyError> {
        check::name(at.name).map_err(|p| PolicyError::new(at.key("name"), p))?;
        if !self.names.insert(at.name.to_string()) {
            return Err(PolicyError::new(
                at.key("name"),
                Problem::Duplicate(at.name.to_string()),
            ));
        }
        let message = message
            .map(|m| check::message(m, at.section))
            .transpose()
            .map_err(|p| PolicyError::new(at.key("message"), p))?;
        Ok(RuleInfo {
            name: Some(at.name.into()),
            message,
        })
    }

    /// Checks a list's length, then compiles each entry.
    fn list<T, U>(
        &mut self,
        at: &At<'_>,
        key: &str,
        items: &[T],
        mut f: impl FnMut(&mut Self, &T) -> Result<U, Problem>,
    ) -> Result<Box<[U]>, PolicyError> {
        if items.is_empty() {
            return Err(PolicyError::new(at.key(key), Problem::EmptyList));
        }
        if items.len() > MAX_ENTRIES {
            return Err(PolicyError::new(
                at.key(key),
                Problem::TooMany { max: MAX_ENTRIES },
            ));
        }
        items
            .iter()
            .enumerate()
            .map(|(i, item)| f(self, item).map_err(|p| PolicyError::new(at.entry(key, i), p)))
            .collect()
    }

    fn glob(&mut self, glob: Result<Glob, Problem>) -> Result<Glob, Problem> {
        let glob = glob?;
        self.patterns += glob.alternatives();
        (self.patterns <= MAX_PATTERNS)
            .then_some(glob)
            .ok_or(Problem::TooManyPatterns)
    }

    fn file_rule(&mut self, index: usize, rule: &FileRule) -> Result<FileRuleC, PolicyError> {
        let at = At {
            section: Section::File,
            index,
            name: &rule.name,
        };
        let info = self.info(&at, rule.message.as_deref())?;
        let globs = self.list(&at, "paths", &rule.paths, |c, p| {
            c.glob(check::path_glob(p))
        })?;
        let operations = self.list(&at, "operations", &rule.operations, |_, op| Ok(op.bits()))?;
        Ok(FileRuleC {
            operations: operations.iter().fold(0, |acc, b| acc | b),
            globs,
            decision: rule.decision,
            info,
        })
    }

    fn command_rule(
        &mut self,
        index: usize,
        rule: &CommandRule,
    ) -> Result<CommandRuleC, PolicyError> {
        let at = At {
            section: Section::Command,
            index,
            name: &rule.name,
        };
        let info = self.info(&at, rule.message.as_deref())?;
        let compiled = self.list(&at, "commands", &rule.commands, |c, s| {
            let (glob, is_path) = check::command(s)?;
            c.glob(Ok(glob)).map(|g| (g, is_path))
        })?;
        let (paths, names): (Vec<_>, Vec<_>) = compiled.into_vec().into_iter().partition(|g| g.1);
        let args = match &rule.args_pattern {
            Some(globs) => Some(self.list(&at, "args_pattern", globs, |c, s| {
                c.glob(check::args_glob(s))
            })?),
            None => None,
        };
        Ok(CommandRuleC {
            names: names.into_iter().map(|g| g.0).collect(),
            paths: paths.into_iter().map(|g| g.0).collect(),
            args,
            decision: rule.decision,
            info,
        })
    }

    /// Also rewrites the rule's domains to their canonical form, which the policy keeps.
    fn network_rule(
        &mut self,
        index: usize,
        rule: &mut NetworkRule,
    ) -> Result<NetworkRuleC, PolicyError> {
        let at = At {
            section: Section::Network,
            index,
            name: &rule.name,
        };
        let info = self.info(&at, rule.message.as_deref())?;
        let domains = match &rule.domains {
            Some(d) => Some(self.list(&at, "domains", d, |c, s| {
                c.patterns += 1;
                check::domain(s)
            })?),
            None => None,
        };
        let cidrs = match &rule.cidrs {
            Some(list) => Some(self.list(&at, "cidrs", list, |c, s| {
                c.patterns += 1;
                check::cidr(s)
            })?),
            None => None,
        };
        let ports = match &rule.ports {
            Some(list) => Some(self.list(&at, "ports", list, |_, p| Ok(*p))?),
            None => None,
        };
        if self.patterns > MAX_PATTERNS {
            return Err(PolicyError::new(at.rule(), Problem::TooManyPatterns));
        }
        let patterns = domains.as_ref().map(|d| {
            d.iter()
                .map(|text| DomainPattern::new(text))
                .collect::<Box<[_]>>()
        });
        rule.domains = domains.map(|d| d.into_vec());
        Ok(NetworkRuleC {
            domains: patterns,
            cidrs,
            ports,
            decision: rule.decision,
            info,
        })
    }

    fn validation_rule(
        &mut self,
        index: usize,
        rule: &ValidationRule,
    ) -> Result<RaiseC, PolicyError> {
        let at = At {
            section: Section::Validation,
            index,
            name: &rule.name,
        };
        let info = self.info(&at, rule.message.as_deref())?;
        let ids = self.list(&at, "rules", &rule.rules, |c, s| {
            check::rule_id(s)?;
            c.patterns += 1;
            Ok(match s.strip_suffix('*') {
                Some(prefix) => IdPattern::Prefix(prefix.into()),
                None => IdPattern::Exact(s.as_str().into()),
            })
        })?;
        Ok(RaiseC {
            ids,
            raise: rule.decision,
            info,
        })
    }
}
