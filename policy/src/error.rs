//! What is wrong with a policy: one leaf [`Problem`] and where it is ([`PolicyError`]).

use crate::glob::GlobError;
use crate::limits::{
    MAX_DESCRIPTION_BYTES, MAX_MESSAGE_BYTES, MAX_NAME_BYTES, MAX_PATTERN_BYTES, MAX_PATTERNS,
};
use crate::template::TemplateError;

/// A policy that does not compile: where (`file_rules[2] (name).paths[0]`) and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{at}: {problem}")]
pub struct PolicyError {
    /// The key path of the offending value, with the rule's name where there is one.
    pub at: String,
    pub problem: Problem,
}

/// One thing wrong with one value of a policy. Deserialization reports the same problems (with
/// the line, from the YAML parser) as compiling an in-memory policy does (with the key path).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("version {0} is not supported: this build reads `version: 1`")]
    Version(u64),
    #[error("bad name `{0}`: 1 to {MAX_NAME_BYTES} bytes of letters, digits, `-`, `_` or `.`")]
    Name(String),
    #[error("duplicate rule name `{0}`: rule names are unique within a policy")]
    Duplicate(String),
    #[error(
        "an empty list matches nothing: give at least one entry (optional keys can be left out)"
    )]
    EmptyList,
    #[error("more than {max} entries")]
    TooMany { max: usize },
    #[error(
        "more than {MAX_PATTERNS} patterns in one policy (counting each `{{a,b}}` alternative)"
    )]
    TooManyPatterns,
    #[error("bad glob `{glob}`: {error}")]
    Glob { glob: String, error: GlobError },
    #[error("bad domain `{domain}`: {reason}")]
    Domain { domain: String, reason: String },
    #[error("bad CIDR `{cidr}`: {reason}")]
    Cidr { cidr: String, reason: String },
    #[error("bad port `{0}`: a number 1-65535 or a range `low-high`")]
    Port(String),
    #[error("bad message: {0}")]
    Message(TemplateError),
    #[error(
        "bad rule id `{0}`: a validation rule id (kebab-case), or a prefix of ids ending in `*`"
    )]
    RuleId(String),
    #[error("longer than {MAX_PATTERN_BYTES} bytes")]
    PatternTooLong,
    #[error("longer than {MAX_MESSAGE_BYTES} bytes")]
    MessageTooLong,
    #[error("longer than {MAX_DESCRIPTION_BYTES} bytes")]
    DescriptionTooLong,
}

impl PolicyError {
    pub(crate) fn new(at: impl Into<String>, problem: Problem) -> Self {
        PolicyError {
            at: at.into(),
            problem,
        }
    }
}
