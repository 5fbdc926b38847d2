//! The policy as written: the serde model of a policy file (YAML on the host, JSON on the wire).
//!
//! Deserializing checks every value where it stands (a bad glob fails at its own line, a
//! duplicate rule name at the duplicate), so a malformed file is reported with its line; a policy
//! built in code is checked the same way by [`crate::CompiledPolicy::compile`].

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::de;

/// What happens to an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// It proceeds.
    Allow,
    /// It fails (`EACCES`/`EPERM` at run time, `policy_violation` before the run).
    Deny,
    /// It waits for an operator; denial or expiry fails it.
    Approve,
    /// It proceeds and its event is flagged for the operator.
    Log,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Deny => "deny",
            Decision::Approve => "approve",
            Decision::Log => "log",
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A file operation being decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    Read,
    Write,
    Create,
    Delete,
    List,
    Stat,
    Exec,
}

impl Operation {
    pub const ALL: [Operation; 7] = [
        Operation::Read,
        Operation::Write,
        Operation::Create,
        Operation::Delete,
        Operation::List,
        Operation::Stat,
        Operation::Exec,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Read => "read",
            Operation::Write => "write",
            Operation::Create => "create",
            Operation::Delete => "delete",
            Operation::List => "list",
            Operation::Stat => "stat",
            Operation::Exec => "exec",
        }
    }

    pub(crate) fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Operation {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Operation::ALL
            .into_iter()
            .find(|op| op.as_str() == s)
            .ok_or_else(|| {
                format!("unknown operation `{s}`: read, write, create, delete, list, stat or exec")
            })
    }
}

/// An entry of a file rule's `operations`: one operation, or `"*"` for all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OperationSpec {
    Read,
    Write,
    Create,
    Delete,
    List,
    Stat,
    Exec,
    #[serde(rename = "*")]
    All,
}

impl OperationSpec {
    /// The operations it stands for, as a bit set.
    pub(crate) fn bits(self) -> u8 {
        let one = |op: Operation| op.bit();
        match self {
            OperationSpec::Read => one(Operation::Read),
            OperationSpec::Write => one(Operation::Write),
            OperationSpec::Create => one(Operation::Create),
            OperationSpec::Delete => one(Operation::Delete),
            OperationSpec::List => one(Operation::List),
            OperationSpec::Stat => one(Operation::Stat),
            OperationSpec::Exec => one(Operation::Exec),
            OperationSpec::All => Operation::ALL.iter().fold(0, |b, op| b | op.bit()),
        }
    }
}

/// What a validation rule can raise a static finding to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Raise {
    /// Hold the execution for an operator.
    Approve,
    /// Refuse the execution.
    Deny,
}

impl From<Raise> for Decision {
    fn from(r: Raise) -> Decision {
        match r {
            Raise::Approve => Decision::Approve,
            Raise::Deny => Decision::Deny,
        }
    }
}

/// The sections of a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Section {
    File,
    Network,
    Command,
    Validation,
}

impl Section {
    /// The section's key in a policy file.
    pub fn key(self) -> &'static str {
        match self {
            Section::File => "file_rules",
            Section::Network => "network_rules",
            Section::Command => "command_rules",
            Section::Validation => "validation_rules",
        }
    }
}

/// A port or an inclusive range of ports: `443` or `"8000-8099"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortSpec {
    One(u16),
    Range(u16, u16),
}

impl PortSpec {
    pub(crate) fn contains(self, port: u16) -> bool {
        match self {
            PortSpec::One(p) => p == port,
            PortSpec::Range(lo, hi) => lo <= port && port <= hi,
        }
    }

    pub(crate) fn parse(s: &str) -> Option<PortSpec> {
        let port = |t: &str| t.trim().parse::<u16>().ok().filter(|&p| p != 0);
        match s.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (port(lo)?, port(hi)?);
                (lo <= hi).then_some(PortSpec::Range(lo, hi))
            }
            None => port(s).map(PortSpec::One),
        }
    }
}

impl Serialize for PortSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            PortSpec::One(p) => s.serialize_u16(*p),
            PortSpec::Range(lo, hi) => s.collect_str(&format_args!("{lo}-{hi}")),
        }
    }
}

impl<'de> Deserialize<'de> for PortSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(de::PortVisitor)
    }
}

/// A policy file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct Policy {
    /// Always `1`.
    #[serde(deserialize_with = "de::version")]
    pub version: u32,
    /// How requests, tokens and the configuration select it.
    #[serde(deserialize_with = "de::policy_name")]
    pub name: String,
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "de::description"
    )]
    pub description: String,
    #[serde(default, deserialize_with = "de::rules")]
    pub file_rules: Vec<FileRule>,
    #[serde(default, deserialize_with = "de::rules")]
    pub network_rules: Vec<NetworkRule>,
    #[serde(default, deserialize_with = "de::rules")]
    pub command_rules: Vec<CommandRule>,
    /// Raises static validation findings (by rule id) to `approve` or `deny`.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "de::rules"
    )]
    pub validation_rules: Vec<ValidationRule>,
}

impl Serialize for Policy {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Policy::serialize(self, s)
    }
}

impl<'de> Deserialize<'de> for Policy {
    /// Within one scope, so rule names are unique and the pattern count is bounded across the
    /// whole policy.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let _scope = de::Scope::enter();
        Policy::deserialize(d)
    }
}

/// A rule of `file_rules`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileRule {
    #[serde(deserialize_with = "de::rule_name")]
    pub name: String,
    /// Path globs (absolute, or starting with `**`).
    #[serde(deserialize_with = "de::paths")]
    pub paths: Vec<String>,
    #[serde(deserialize_with = "de::items")]
    pub operations: Vec<OperationSpec>,
    pub decision: Decision,
    /// May use `{path}` and `{operation}`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "de::file_message"
    )]
    pub message: Option<String>,
}

/// A rule of `network_rules`. A destination matches when it matches one of `domains` or one of
/// `cidrs` (either, when both are given; anything, when neither is), and its port one of `ports`
/// (any, when not given).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkRule {
    #[serde(deserialize_with = "de::rule_name")]
    pub name: String,
    /// `example.com`, `*.example.com` (any name below it) or `*`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "de::domains"
    )]
    pub domains: Option<Vec<String>>,
    /// `10.0.0.0/8`, `2001:db8::/32`, or one address.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "de::cidrs"
    )]
    pub cidrs: Option<Vec<String>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "de::ports"
    )]
    pub ports: Option<Vec<PortSpec>>,
    pub decision: Decision,
    /// May use `{domain}`, `{ip}` and `{port}`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "de::network_message"
    )]
    pub message: Option<String>,
}

/// A rule of `command_rules`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandRule {
    #[serde(deserialize_with = "de::rule_name")]
    pub name: String,
    /// Program name globs (`pip*`, matched against the program's file name) or path globs
    /// (`/usr/bin/*`, matched against the program's path).
    #[serde(deserialize_with = "de::commands")]
    pub commands: Vec<String>,
    /// Globs over the arguments joined by single spaces (`install *`); any may match. Absent:
    /// any arguments.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "de::args_pattern"
    )]
    pub args_pattern: Option<Vec<String>>,
    pub decision: Decision,
    /// May use `{command}` and `{args}`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "de::command_message"
    )]
    pub message: Option<String>,
}

/// A rule of `validation_rules`: static findings of these rule ids (`scriptgate rules` lists them;
/// a prefix ends in `*`) are raised to `decision`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValidationRule {
    #[serde(deserialize_with = "de::rule_name")]
    pub name: String,
    #[serde(deserialize_with = "de::rule_ids")]
    pub rules: Vec<String>,
    pub decision: Raise,
    /// May use `{rule}`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "de::validation_message"
    )]
    pub message: Option<String>,
}
