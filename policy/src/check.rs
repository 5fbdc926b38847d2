//! The checks every value of a policy passes, shared by deserialization (which reports the line)
//! and [`crate::CompiledPolicy::compile`] (which reports the key path).

use crate::error::Problem;
use crate::glob::{Flavor, Glob};
use crate::limits::{MAX_DESCRIPTION_BYTES, MAX_MESSAGE_BYTES, MAX_NAME_BYTES, MAX_PATTERN_BYTES};
use crate::model::Section;
use crate::net::{self, Cidr};
use crate::template::Template;

/// Policy and rule names: what events, audit records and the command line show.
pub(crate) fn name(s: &str) -> Result<(), Problem> {
    let ok = !s.is_empty()
        && s.len() <= MAX_NAME_BYTES
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    ok.then_some(()).ok_or_else(|| Problem::Name(s.to_string()))
}

pub(crate) fn description(s: &str) -> Result<(), Problem> {
    (s.len() <= MAX_DESCRIPTION_BYTES)
        .then_some(())
        .ok_or(Problem::DescriptionTooLong)
}

fn glob(s: &str, flavor: Flavor) -> Result<Glob, Problem> {
    Glob::compile(s, flavor).map_err(|error| Problem::Glob {
        glob: s.to_string(),
        error,
    })
}

pub(crate) fn path_glob(s: &str) -> Result<Glob, Problem> {
    glob(s, Flavor::Path)
}

/// A `commands` entry: a path glob when it has a `/`, else a program name glob.
pub(crate) fn command(s: &str) -> Result<(Glob, bool), Problem> {
    let is_path = s.contains('/');
    glob(s, if is_path { Flavor::Path } else { Flavor::Name }).map(|g| (g, is_path))
}

pub(crate) fn args_glob(s: &str) -> Result<Glob, Problem> {
    glob(s, Flavor::Text)
}

/// The canonical form of a `domains` entry.
pub(crate) fn domain(s: &str) -> Result<String, Problem> {
    net::normalize_pattern(s).map_err(|reason| Problem::Domain {
        domain: s.to_string(),
        reason,
    })
}

pub(crate) fn cidr(s: &str) -> Result<Cidr, Problem> {
    if s.len() > MAX_PATTERN_BYTES {
        return Err(Problem::PatternTooLong);
    }
    Cidr::parse(s).map_err(|reason| Problem::Cidr {
        cidr: s.to_string(),
        reason,
    })
}

/// A validation rule id, or a prefix of ids ending in `*` (`*` alone: every rule).
pub(crate) fn rule_id(s: &str) -> Result<(), Problem> {
    let stem = s.strip_suffix('*').unwrap_or(s);
    let ok = (stem.len() < s.len() || !stem.is_empty())
        && s.len() <= MAX_PATTERN_BYTES
        && stem
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    ok.then_some(())
        .ok_or_else(|| Problem::RuleId(s.to_string()))
}

pub(crate) fn message(s: &str, section: Section) -> Result<Template, Problem> {
    if s.len() > MAX_MESSAGE_BYTES {
        return Err(Problem::MessageTooLong);
    }
    Template::parse(s, section).map_err(Problem::Message)
}
