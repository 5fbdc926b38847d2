//! Tree rules' matchers: the compiled model of a rule's conditions (compiled from YAML by
//! [`super::compile`], evaluated on tree-sitter nodes in a per-script [`Cx`]).
//!
//! A matcher is a YAML mapping; each key is a condition and all keys must hold (as in ast-grep):
//!
//! | key | holds when |
//! |---|---|
//! | `kind: K` or `[K, …]` | the node is of a named kind |
//! | `regex: R` | the node's text (NFKC-normalised when not ASCII) matches R |
//! | `has: {…}` | a child matches; with `field: F` the (first) child in that field; with `stopBy: end` any descendant |
//! | `inside: {…}` | the parent matches; with `field: F` the node sits in that field; with `stopBy: end` any ancestor |
//! | `after: {…}` | the previous named sibling matches (`-i` before the path it gives) |
//! | `not`, `all`, `any` | boolean combinations |
//! | `folded: R` | the node is a constant string expression whose value matches R (see `python`/`bash` folding) |
//! | `dynamic: true` | the node is *not* a constant: its value is only known at run time |
//! | `plain: true` | the value is written out: a literal without interpolations, or a name bound once to one |
//! | `prefix: R` | a known leading part of the value matches R (any of them, for a loop variable) |
//! | `every_prefix: R` | every known leading part matches R (for exemptions) |
//! | `may_be: R` | the node may evaluate to a string matching R: its value is unknown, or one of its possible values (a constant, or an element of a constant container it indexes) matches |
//! | `call: {callee, arg, keyword}` | Python: a call whose resolved callee name matches (aliases followed) |
//! | `resolves: [names]` | Python: the expression stands for one of these qualified names (`sp` → `subprocess`) |
//! | `command: {name, flag, arg, stdin_program}` | Bash: a command whose effective name matches (through sudo, env, quoting) |
//! | `recursive: true` | a function definition whose body calls the function itself |

mod analysis;
mod context;
mod eval;
mod literals;
mod names;

use regex::Regex;

pub use super::compile::{MatcherCompiler, MatcherError};
pub use context::{Cx, Sem};
pub use eval::normalized;
pub use literals::{Leaf, LiteralIndex, required_literals};
pub use names::{NameSet, NameSetError};

#[derive(Debug)]
pub enum Matcher {
    Kind(Vec<u16>),
    Regex(TextRegex),
    /// A `regex` of the form `^(lit|lit…)$`: compared as strings.
    Exact(Words),
    Has(Box<Relation>),
    Inside(Box<Relation>),
    Not(Box<Matcher>),
    /// The previous named sibling matches.
    After(Box<Matcher>),
    All(Vec<Matcher>),
    Any(Vec<Matcher>),
    Folded(Regex),
    Dynamic(bool),
    Plain(bool),
    Call(Box<CallSpec>),
    Command(Box<CommandSpec>),
    Recursive(bool),
    /// The names and the leaf slot (see [`Matcher::assign_slots`]).
    Resolves(NameSet, usize),
    MayBe(Regex),
    Prefix(Regex),
    /// Every known leading part matches (and there is one).
    EveryPrefix(Regex),
    Derived(Box<Matcher>),
    Quoted(bool),
}

/// A `regex` condition, with the literals one of which every match contains (when the regex has
/// such a finite set): a script without any of them cannot match, which one search decides.
#[derive(Debug)]
pub struct TextRegex {
    pub regex: Regex,
    pub literals: Option<RequiredLiterals>,
    /// Index of this leaf's per-script "possible" answer (see [`Matcher::assign_slots`]).
    pub slot: usize,
}

/// Texts one of which every match of a regex contains.
#[derive(Debug, Clone)]
pub struct RequiredLiterals {
    pub texts: Vec<String>,
    /// Compared without regard to ASCII case (the regex is case-insensitive; `texts` are in lower
    /// case).
    pub caseless: bool,
}

/// Exact words (a `regex` of the form `^(a|b)$`).
#[derive(Debug)]
pub struct Words {
    pub words: Vec<String>,
    pub slot: usize,
}

#[derive(Debug)]
pub struct Relation {
    pub field: Option<u16>,
    pub stop_by_end: bool,
    pub inner: Matcher,
}

#[derive(Debug)]
pub struct CallSpec {
    pub slot: usize,
    pub callee: NameSet,
    pub arg: Option<ArgSpec>,
    pub keyword: Option<KeywordSpec>,
}

#[derive(Debug)]
pub struct ArgSpec {
    pub index: Option<usize>,
    pub inner: Matcher,
}

#[derive(Debug)]
pub struct KeywordSpec {
    pub name: Regex,
    pub value: Option<Matcher>,
}

#[derive(Debug)]
pub struct CommandSpec {
    pub slot: usize,
    pub name: NameSet,
    /// Any of these options must be present (`-r` also matches inside `-rf`).
    pub flags: Vec<String>,
    pub arg: Option<Matcher>,
    /// The last argument matches.
    pub last_arg: Option<Matcher>,
    /// The command reads its program from standard input (a shell or interpreter with no script).
    pub stdin_program: bool,
}
