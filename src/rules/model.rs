//! The typed form of a tree rule's `rule:` matcher, as written in `patterns/{python,bash}/*.yml`.
//!
//! Deserialised with `deny_unknown_fields` (through `serde_path_to_error`, so an error names the
//! path of the offending key), then compiled once by [`super::matcher::MatcherCompiler`]. The JSON
//! Schema of rule files (`patterns/rule.schema.json`) is generated from these same types.

use schemars::JsonSchema;
use serde::Deserialize;

/// One string or a list of strings (`kind: call` or `kind: [call, attribute]`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

/// How far a relation (`has`, `inside`) looks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StopBy {
    /// Direct children (`has`) or the direct parent (`inside`).
    #[default]
    Neighbor,
    /// Any descendant (`has`) or any ancestor (`inside`).
    End,
}

/// A matcher: every key present must hold for the node (as in ast-grep).
///
/// `field` and `stopBy` are only accepted directly under `has`/`inside`, and `index` only under a
/// call's `arg`; the compiler rejects them elsewhere with the path of the key.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MatcherSpec {
    /// The node is of one of these named kinds.
    pub kind: Option<OneOrMany>,
    /// The node's text (NFKC-normalised when not ASCII) matches this regex.
    pub regex: Option<String>,
    /// A child (or, with `stopBy: end`, a descendant) matches.
    pub has: Option<Box<MatcherSpec>>,
    /// The parent (or, with `stopBy: end`, an ancestor) matches.
    pub inside: Option<Box<MatcherSpec>>,
    /// The inner matcher does not hold.
    pub not: Option<Box<MatcherSpec>>,
    /// The previous named sibling matches (the option a value follows: `-i` before a key's path).
    pub after: Option<Box<MatcherSpec>>,
    /// Every matcher of the list holds.
    pub all: Option<Vec<MatcherSpec>>,
    /// One matcher of the list holds.
    pub any: Option<Vec<MatcherSpec>>,
    /// The node is a constant string expression whose folded value matches this regex.
    pub folded: Option<String>,
    /// The node may evaluate to a string matching this regex (unknown value, or a possible value).
    pub may_be: Option<String>,
    /// `true`: the node is not a constant; `false`: it is.
    pub dynamic: Option<bool>,
    /// `true`: the node's value is written out in the script (a string literal without
    /// interpolations, literals glued together, or a name bound once to one) rather than decoded,
    /// joined or spelt out at run time.
    pub plain: Option<bool>,
    /// The known leading part of the node's value matches this regex: its value when constant,
    /// else the constant text before the first part only known at run time (`"/etc/" + name`
    /// starts with `/etc/`), through names and loop variables.
    pub prefix: Option<String>,
    /// Every known leading part of the node's value (as for `prefix`: each value of a loop
    /// variable over constants) matches this regex: for exemptions, which must hold of whatever
    /// the value turns out to be, where `prefix` holds when any one does.
    pub every_prefix: Option<String>,
    /// Python: the node, or an expression its value comes from (through names bound once, `with`
    /// and `for` targets), or the body of a function of the script it calls, has a descendant
    /// matching this.
    pub derived: Option<Box<MatcherSpec>>,
    /// `true`: the node is a command string whose run-time parts are all shell-quoted
    /// (`shlex.quote`), or a constant.
    pub quoted: Option<bool>,
    /// Python: the expression stands for one of these qualified names (`*` wildcards).
    pub resolves: Option<OneOrMany>,
    /// Python: a call whose resolved callee matches.
    pub call: Option<CallSpecRaw>,
    /// Bash: a command whose effective name matches.
    pub command: Option<CommandSpecRaw>,
    /// A function definition whose body calls (`true`) or does not call (`false`) itself.
    pub recursive: Option<bool>,
    /// Under `has`/`inside`: the child sits in this field of the node (or the node in the parent's).
    pub field: Option<String>,
    /// Under `has`/`inside`: how far to look.
    #[serde(rename = "stopBy")]
    pub stop_by: Option<StopBy>,
    /// Under a call's `arg`: the position of the argument (0-based); any position when absent.
    pub index: Option<usize>,
}

/// `call: {callee, arg, keyword}`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallSpecRaw {
    /// Qualified callee names (`subprocess.*`, `os.system`), aliases followed.
    pub callee: OneOrMany,
    /// A positional argument matches (the matcher may carry `index`).
    pub arg: Option<Box<MatcherSpec>>,
    /// A keyword argument whose name matches `name` (and whose value matches `value`).
    pub keyword: Option<KeywordSpecRaw>,
}

/// `keyword: {name, value}`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KeywordSpecRaw {
    /// A regex over the keyword's name.
    pub name: String,
    pub value: Option<Box<MatcherSpec>>,
}

/// `command: {name, flag, arg, stdin_program}`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommandSpecRaw {
    /// Effective command names (through sudo, env, quoting), `*` wildcards.
    pub name: OneOrMany,
    /// Any of these options is present (`-r` also matches inside `-rf`).
    pub flag: Option<OneOrMany>,
    /// An argument matches.
    pub arg: Option<Box<MatcherSpec>>,
    /// The last argument matches (the destination of `cp`, `mv`, `install`, `ln`).
    pub last_arg: Option<Box<MatcherSpec>>,
    /// The command reads its program from standard input.
    #[serde(default)]
    pub stdin_program: bool,
}
