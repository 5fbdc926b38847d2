//! Deserialization of the model with every value checked where it stands.
//!
//! Checks run inside the visitor of the scalar they concern, so the YAML parser attaches that
//! scalar's line and column to the error. Lists stop at their limit without reading further, and
//! one [`Scope`] per policy (a thread-local, entered by `Policy`'s `Deserialize`) sees every rule
//! name and counts every compiled glob, so a duplicate name fails at the duplicate and the pattern
//! limit at the pattern that crosses it.

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, SeqAccess, Visitor};

use crate::check;
use crate::error::Problem;
use crate::limits::{MAX_ENTRIES, MAX_PATTERNS, MAX_RULES};
use crate::model::{PortSpec, Section};

#[derive(Debug, Default)]
struct ScopeState {
    names: HashSet<String>,
    patterns: usize,
}

thread_local! {
    static SCOPE: RefCell<Option<ScopeState>> = const { RefCell::new(None) };
}

/// The policy being deserialized on this thread; leaving restores the enclosing one.
#[derive(Debug)]
pub(crate) struct Scope {
    previous: Option<ScopeState>,
}

impl Scope {
    pub(crate) fn enter() -> Scope {
        Scope {
            previous: SCOPE.with(|s| s.replace(Some(ScopeState::default()))),
        }
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        let previous = self.previous.take();
        SCOPE.with(|s| *s.borrow_mut() = previous);
    }
}

fn note_name(name: &str) -> Result<(), Problem> {
    SCOPE.with(|s| match s.borrow_mut().as_mut() {
        Some(state) => {
            let fresh = state.names.insert(name.to_string());
            fresh
                .then_some(())
                .ok_or_else(|| Problem::Duplicate(name.to_string()))
        }
        None => Ok(()),
    })
}

fn note_patterns(n: usize) -> Result<(), Problem> {
    SCOPE.with(|s| match s.borrow_mut().as_mut() {
        Some(state) => {
            state.patterns += n;
            (state.patterns <= MAX_PATTERNS)
                .then_some(())
                .ok_or(Problem::TooManyPatterns)
        }
        None => Ok(()),
    })
}

/// A kind of checked string: what it must look like and its canonical form.
trait Kind {
    const EXPECTING: &'static str;
    /// Rule names are unique within a policy.
    const UNIQUE: bool = false;
    /// The canonical text and how many globs it compiles to.
    fn check(s: &str) -> Result<(String, usize), Problem>;
}

macro_rules! kind {
    ($name:ident, $expecting:literal, $unique:literal, |$s:ident| $body:expr) => {
        struct $name;
        impl Kind for $name {
            const EXPECTING: &'static str = $expecting;
            const UNIQUE: bool = $unique;
            fn check($s: &str) -> Result<(String, usize), Problem> {
                $body
            }
        }
    };
}

kind!(PolicyName, "a policy name", false, |s| check::name(s)
    .map(|()| (s.to_string(), 0)));
kind!(RuleName, "a rule name", true, |s| check::name(s)
    .map(|()| (s.to_string(), 0)));
kind!(Description, "a description", false, |s| check::description(
    s
)
.map(|()| (s.to_string(), 0)));
kind!(PathGlob, "a path glob", false, |s| check::path_glob(s)
    .map(|g| (s.to_string(), g.alternatives())));
kind!(Command, "a program name or path glob", false, |s| {
    check::command(s).map(|(g, _)| (s.to_string(), g.alternatives()))
});
kind!(ArgsGlob, "a glob over the arguments", false, |s| {
    check::args_glob(s).map(|g| (s.to_string(), g.alternatives()))
});
kind!(Domain, "a domain name or wildcard", false, |s| {
    check::domain(s).map(|d| (d, 1))
});
kind!(CidrText, "a CIDR block", false, |s| check::cidr(s)
    .map(|_| (s.to_string(), 1)));
kind!(RuleId, "a validation rule id", false, |s| check::rule_id(s)
    .map(|()| (s.to_string(), 1)));
kind!(FileMessage, "a message", false, |s| check::message(
    s,
    Section::File
)
.map(|_| (s.to_string(), 0)));
kind!(NetworkMessage, "a message", false, |s| check::message(
    s,
    Section::Network
)
.map(|_| (s.to_string(), 0)));
kind!(CommandMessage, "a message", false, |s| check::message(
    s,
    Section::Command
)
.map(|_| (s.to_string(), 0)));
kind!(ValidationMessage, "a message", false, |s| check::message(
    s,
    Section::Validation
)
.map(|_| (s.to_string(), 0)));

/// A string of kind `K`, checked in its own visitor (so errors carry its position).
struct Checked<K>(String, PhantomData<K>);

impl<'de, K: Kind> Deserialize<'de> for Checked<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(CheckedVisitor::<K>(PhantomData))
    }
}

struct CheckedVisitor<K>(PhantomData<K>);

impl<K: Kind> Visitor<'_> for CheckedVisitor<K> {
    type Value = Checked<K>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(K::EXPECTING)
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Checked<K>, E> {
        let (text, patterns) = K::check(s).map_err(E::custom)?;
        if K::UNIQUE {
            note_name(&text).map_err(E::custom)?;
        }
        note_patterns(patterns).map_err(E::custom)?;
        Ok(Checked(text, PhantomData))
    }
}

/// A list of `MIN..=MAX` elements, refused as soon as it grows past `MAX`.
struct Bounded<T, const MIN: usize, const MAX: usize>(Vec<T>);

impl<'de, T: Deserialize<'de>, const MIN: usize, const MAX: usize> Deserialize<'de>
    for Bounded<T, MIN, MAX>
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_seq(BoundedVisitor::<T, MIN, MAX>(PhantomData))
    }
}

struct BoundedVisitor<T, const MIN: usize, const MAX: usize>(PhantomData<T>);

impl<'de, T: Deserialize<'de>, const MIN: usize, const MAX: usize> Visitor<'de>
    for BoundedVisitor<T, MIN, MAX>
{
    type Value = Bounded<T, MIN, MAX>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a list of at most {MAX} entries")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        // No capacity from the size hint: the list may be hostile.
        let mut out = Vec::new();
        while let Some(item) = seq.next_element::<T>()? {
            if out.len() == MAX {
                return Err(de::Error::custom(Problem::TooMany { max: MAX }));
            }
            out.push(item);
        }
        if out.len() < MIN {
            return Err(de::Error::custom(Problem::EmptyList));
        }
        Ok(Bounded(out))
    }
}

type Entries<T> = Bounded<T, 1, MAX_ENTRIES>;

fn strings<'de, D: Deserializer<'de>, K: Kind>(d: D) -> Result<Vec<String>, D::Error> {
    Entries::<Checked<K>>::deserialize(d).map(|b| b.0.into_iter().map(|c| c.0).collect())
}

fn optional_strings<'de, D: Deserializer<'de>, K: Kind>(
    d: D,
) -> Result<Option<Vec<String>>, D::Error> {
    Option::<Entries<Checked<K>>>::deserialize(d)
        .map(|o| o.map(|b| b.0.into_iter().map(|c| c.0).collect()))
}

fn optional_string<'de, D: Deserializer<'de>, K: Kind>(d: D) -> Result<Option<String>, D::Error> {
    Option::<Checked<K>>::deserialize(d).map(|o| o.map(|c| c.0))
}

pub(crate) fn version<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = u32;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("the version number 1")
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u32, E> {
            (v == 1)
                .then_some(1)
                .ok_or_else(|| E::custom(Problem::Version(v)))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u32, E> {
            self.visit_u64(u64::try_from(v).unwrap_or(u64::MAX))
        }
    }
    d.deserialize_u64(V)
}

pub(crate) fn policy_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Checked::<PolicyName>::deserialize(d).map(|c| c.0)
}

pub(crate) fn rule_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Checked::<RuleName>::deserialize(d).map(|c| c.0)
}

pub(crate) fn description<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Checked::<Description>::deserialize(d).map(|c| c.0)
}

/// A section's rules: none (the section then denies everything) up to [`MAX_RULES`].
pub(crate) fn rules<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    Bounded::<T, 0, MAX_RULES>::deserialize(d).map(|b| b.0)
}

pub(crate) fn items<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    Entries::<T>::deserialize(d).map(|b| b.0)
}

pub(crate) fn paths<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    strings::<D, PathGlob>(d)
}

pub(crate) fn commands<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    strings::<D, Command>(d)
}

pub(crate) fn rule_ids<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    strings::<D, RuleId>(d)
}

pub(crate) fn args_pattern<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<String>>, D::Error> {
    optional_strings::<D, ArgsGlob>(d)
}

pub(crate) fn domains<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    optional_strings::<D, Domain>(d)
}

pub(crate) fn cidrs<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    optional_strings::<D, CidrText>(d)
}

pub(crate) fn ports<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<PortSpec>>, D::Error> {
    Option::<Entries<PortSpec>>::deserialize(d).map(|o| o.map(|b| b.0))
}

pub(crate) fn file_message<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    optional_string::<D, FileMessage>(d)
}

pub(crate) fn network_message<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    optional_string::<D, NetworkMessage>(d)
}

pub(crate) fn command_message<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    optional_string::<D, CommandMessage>(d)
}

pub(crate) fn validation_message<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<String>, D::Error> {
    optional_string::<D, ValidationMessage>(d)
}

/// `443` or `"8000-8099"`.
pub(crate) struct PortVisitor;

impl Visitor<'_> for PortVisitor {
    type Value = PortSpec;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a port number or a range `low-high`")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<PortSpec, E> {
        u16::try_from(v)
            .ok()
            .filter(|&p| p != 0)
            .map(PortSpec::One)
            .ok_or_else(|| E::custom(Problem::Port(v.to_string())))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<PortSpec, E> {
        u64::try_from(v)
            .map_err(|_| E::custom(Problem::Port(v.to_string())))
            .and_then(|v| self.visit_u64(v))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<PortSpec, E> {
        PortSpec::parse(s).ok_or_else(|| E::custom(Problem::Port(s.to_string())))
    }
}
