//! Tree rules' matchers: compiled from YAML ([`super::compile`]), evaluated on tree-sitter nodes.
//! (Over 500 lines: the matcher, its per-script evaluation context and its evaluation are one unit.)
//!
//! A matcher is a YAML mapping; each key is a condition and all keys must hold (as in ast-grep):
//!
//! | key | holds when |
//! |---|---|
//! | `kind: K` or `[K, …]` | the node is of a named kind |
//! | `regex: R` | the node's text (NFKC-normalised when not ASCII) matches R |
//! | `has: {…}` | a child matches; with `field: F` the (first) child in that field; with `stopBy: end` any descendant |
//! | `inside: {…}` | the parent matches; with `field: F` the node sits in that field; with `stopBy: end` any ancestor |
//! | `not`, `all`, `any` | boolean combinations |
//! | `folded: R` | the node is a constant string expression whose value matches R (see `python`/`bash` folding) |
//! | `dynamic: true` | the node is *not* a constant: its value is only known at run time |
//! | `may_be: R` | the node may evaluate to a string matching R: its value is unknown, or one of its possible values (a constant, or an element of a constant container it indexes) matches |
//! | `call: {callee, arg, keyword}` | Python: a call whose resolved callee name matches (aliases followed) |
//! | `resolves: [names]` | Python: the expression stands for one of these qualified names (`sp` → `subprocess`) |
//! | `command: {name, flag, arg, stdin_program}` | Bash: a command whose effective name matches (through sudo, env, quoting) |
//! | `recursive: true` | a function definition whose body calls the function itself |

use std::borrow::Cow;
use std::cell::RefCell;
use std::rc::Rc;

use regex::Regex;
use rustc_hash::FxHashMap;
use tree_sitter::{Node, TreeCursor};
use unicode_normalization::UnicodeNormalization;

use super::bash::{BashSem, Invocation};
pub use super::compile::{MatcherCompiler, MatcherError};
use super::grammar::{children_in_field, text};
use super::python::{Binding, PySem};

#[derive(Debug)]
pub enum Matcher {
    Kind(Vec<u16>),
    Regex(TextRegex),
    /// A `regex` of the form `^(lit|lit…)$`: compared as strings.
    Exact(Words),
    Has(Box<Relation>),
    Inside(Box<Relation>),
    Not(Box<Matcher>),
    All(Vec<Matcher>),
    Any(Vec<Matcher>),
    Folded(Regex),
    Dynamic(bool),
    Call(Box<CallSpec>),
    Command(Box<CommandSpec>),
    Recursive(bool),
    /// The names and the leaf slot (see [`Matcher::assign_slots`]).
    Resolves(NameSet, usize),
    MayBe(Regex),
    Prefix(Regex),
    Derived(Box<Matcher>),
    Quoted(bool),
}

/// A `regex` condition, with the literals one of which every match contains (when the regex has
/// such a finite set): a script without any of them cannot match, which one search decides.
#[derive(Debug)]
pub struct TextRegex {
    pub regex: Regex,
    pub literals: Option<Vec<String>>,
    /// Index of this leaf's per-script "possible" answer (see [`Matcher::assign_slots`]).
    pub slot: usize,
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

/// Words of the Python constructs that compute a name from strings (see [`NameSet::texts`]).
const COMPUTED_NAMES: &[&str] = &[
    "getattr",
    "__import__",
    "import_module",
    "globals",
    "locals",
    "vars",
    "__dict__",
    "modules",
    "attrgetter",
    "methodcaller",
    "builtins",
];

/// A set of dotted names with `*` wildcards (`os.exec*`, `subprocess.*`), matched whole. Plain
/// names are a hash lookup; only the wildcard patterns need a regex.
#[derive(Debug)]
pub struct NameSet {
    exact: rustc_hash::FxHashSet<String>,
    wildcard: Option<Regex>,
    patterns: Vec<String>,
    /// The last dotted segment of every plain name (`os.system` → `system`).
    last_segments: rustc_hash::FxHashSet<String>,
    /// The text before the first `*` of every wildcard pattern (`os.exec*` → `os.exec`).
    wild_prefixes: Vec<String>,
}

impl NameSet {
    pub fn new(names: &[String]) -> Result<Self, NameSetError> {
        if names.is_empty() {
            return Err(NameSetError::Empty);
        }
        let (wild, exact): (Vec<&String>, Vec<&String>) =
            names.iter().partition(|n| n.contains('*'));
        let alternatives: Vec<String> = wild
            .iter()
            .map(|n| regex::escape(n).replace(r"\*", r"[\w.\-]*"))
            .collect();
        let wildcard = if alternatives.is_empty() {
            None
        } else {
            Some(Regex::new(&format!("^(?:{})$", alternatives.join("|")))?)
        };
        Ok(NameSet {
            last_segments: exact
                .iter()
                .map(|n| n.rsplit('.').next().unwrap_or(n).to_string())
                .collect(),
            wild_prefixes: wild
                .iter()
                .map(|n| n.split('*').next().unwrap_or("").to_string())
                .collect(),
            exact: exact.into_iter().cloned().collect(),
            wildcard,
            patterns: names.to_vec(),
        })
    }

    /// Texts one of which a script naming a member of the set holds: each name's last segment
    /// (or the text before a wildcard), and the words of the ways Python computes a name
    /// (`getattr`, `__import__`, `globals`, …), which may hide it.
    pub fn texts(&self) -> Vec<String> {
        let mut out: Vec<String> = self.last_segments.iter().cloned().collect();
        for p in &self.wild_prefixes {
            let last = p.rsplit('.').next().unwrap_or(p);
            let piece = if last.is_empty() {
                p.trim_end_matches('.').rsplit('.').next().unwrap_or(p)
            } else {
                last
            };
            out.push(piece.to_string());
        }
        out.extend(COMPUTED_NAMES.iter().map(|s| s.to_string()));
        out.retain(|t| !t.is_empty());
        out.sort();
        out.dedup();
        out
    }

    /// A necessary condition for `full` (a dotted name whose last segment is `last`) to be in the
    /// set, without the regex: a plain name with that last segment, or a wildcard with that prefix.
    pub fn may_contain(&self, full: &str, last: &str) -> bool {
        self.last_segments.contains(last)
            || self
                .wild_prefixes
                .iter()
                .any(|p| full.starts_with(p.as_str()))
    }

    pub fn contains(&self, name: &str) -> bool {
        self.exact.contains(name)
            || (self
                .wild_prefixes
                .iter()
                .any(|p| name.starts_with(p.as_str()))
                && self.wildcard.as_ref().is_some_and(|w| w.is_match(name)))
    }

    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }
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

/// What evaluating a matcher needs: the source, the language's semantics for the script, and a
/// memo of the costly per-node facts (every rule indexed under a kind asks the same question of the
/// same node, one after the other, so one remembered answer per question is enough).
///
/// `names` is the union of every callee/command name any rule of the language cares about: a call
/// or command whose names are all outside it can match no name-based rule, which one test decides.
#[derive(Debug)]
pub struct Cx<'a> {
    pub src: &'a str,
    pub sem: Sem<'a>,
    names: &'a NameSet,
    /// The calls (Python) or commands (Bash) of the script: what name conditions can ever match.
    sites: &'a [Node<'a>],
    literals: &'a LiteralIndex,
    /// Which of `literals`' texts the script holds ([`LiteralIndex::scan`]).
    present: &'a [bool],
    memo: Memo<'a>,
    /// Tree cursors to reuse: tree-sitter allocates for every new cursor, and relations such as
    /// `has` need one per evaluation (nested relations take another from the pool).
    cursors: CursorPool<'a>,
}

#[derive(Default)]
struct CursorPool<'t>(RefCell<Vec<TreeCursor<'t>>>);

impl std::fmt::Debug for CursorPool<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CursorPool({})", self.0.borrow().len())
    }
}

/// Per-node answers (keyed by node id) and whether any of their names is of interest.
type Memoized<T> = RefCell<FxHashMap<usize, (Rc<[T]>, bool)>>;

#[derive(Debug)]
struct Memo<'t> {
    /// The shared empty answer for calls and commands no rule can care about.
    no_names: Rc<[String]>,
    no_invocations: Rc<[Invocation<'t>]>,
    callee: Memoized<String>,
    invocations: Memoized<Invocation<'t>>,
    folds: RefCell<FxHashMap<usize, Option<Rc<str>>>>,
    /// Per leaf slot: whether it can match anywhere in this script (0 = not decided yet, 1 = no,
    /// 2 = yes).
    possible: Vec<std::cell::Cell<u8>>,
    /// Every resolved call/command name in the script, once computed.
    script_names: std::cell::OnceCell<Vec<String>>,
}

impl<'a> Cx<'a> {
    /// `slots` is the number of leaf slots the rules use ([`Matcher::assign_slots`]); `literals`
    /// the index of the texts their exact-word and regex leaves need.
    pub fn new(
        src: &'a str,
        sem: Sem<'a>,
        names: &'a NameSet,
        sites: &'a [Node<'a>],
        slots: usize,
        literals: &'a LiteralIndex,
        present: &'a [bool],
    ) -> Self {
        Cx {
            src,
            sem,
            names,
            sites,
            literals,
            present,
            memo: Memo {
                no_names: Rc::from(Vec::new()),
                no_invocations: Rc::from(Vec::new()),
                callee: RefCell::new(FxHashMap::with_capacity_and_hasher(
                    sites.len(),
                    Default::default(),
                )),
                invocations: RefCell::new(FxHashMap::with_capacity_and_hasher(
                    sites.len(),
                    Default::default(),
                )),
                folds: RefCell::default(),
                possible: vec![std::cell::Cell::new(0); slots],
                script_names: std::cell::OnceCell::new(),
            },
            cursors: CursorPool::default(),
        }
    }

    /// A leaf's "possible" answer, decided once per script.
    fn leaf_possible(&self, slot: usize, decide: impl FnOnce() -> bool) -> bool {
        let Some(cell) = self.memo.possible.get(slot) else {
            return decide();
        };
        match cell.get() {
            0 => {
                let p = decide();
                cell.set(1 + u8::from(p));
                p
            }
            v => v == 2,
        }
    }

    /// Whether the script holds one of the texts a leaf needs ([`LiteralIndex`]).
    fn has_literal_of(&self, slot: usize) -> bool {
        self.literals.slot_present(self.present, slot)
    }

    /// The constant value of a node, folded once per node.
    pub fn fold(&self, node: Node<'a>) -> Option<Rc<str>> {
        if let Some(v) = self.memo.folds.borrow().get(&node.id()) {
            return v.clone();
        }
        let v: Option<Rc<str>> = self.sem.fold(node).map(Into::into);
        self.memo.folds.borrow_mut().insert(node.id(), v.clone());
        v
    }

    /// Every resolved call (Python) or command (Bash) name in the script: sorted, deduplicated, memoized.
    pub fn script_names(&self) -> &[String] {
        self.memo.script_names.get_or_init(|| {
            let mut names = Vec::new();
            for &site in self.sites {
                match &self.sem {
                    Sem::Python(py) => names.extend(
                        self.callee(site, || py.callee_names(site))
                            .0
                            .iter()
                            .cloned(),
                    ),
                    Sem::Bash(sh) => names.extend(
                        self.bash_invocations(sh, site)
                            .0
                            .iter()
                            .map(|i| i.name.clone()),
                    ),
                }
            }
            names.sort();
            names.dedup();
            names
        })
    }

    /// The memoized invocations of a Bash command, computed with a pooled cursor.
    pub fn bash_invocations(
        &self,
        sh: &BashSem<'_>,
        node: Node<'a>,
    ) -> (Rc<[Invocation<'a>]>, bool) {
        self.invocations(node, || {
            self.with_cursor(node, |c| sh.invocations_with(node, c))
        })
    }

    /// Runs `f` with a cursor positioned on `node`, taken from (and returned to) the pool.
    pub fn with_cursor<R>(&self, node: Node<'a>, f: impl FnOnce(&mut TreeCursor<'a>) -> R) -> R {
        let pooled = self.cursors.0.borrow_mut().pop();
        let mut cursor = match pooled {
            Some(mut c) => {
                c.reset(node);
                c
            }
            None => node.walk(),
        };
        let result = f(&mut cursor);
        self.cursors.0.borrow_mut().push(cursor);
        result
    }

    /// The resolved callee names of a Python call, computed once per node, and whether any rule
    /// could care about them.
    pub fn callee(
        &self,
        node: Node<'a>,
        compute: impl FnOnce() -> Vec<String>,
    ) -> (Rc<[String]>, bool) {
        if let Some((names, hot)) = self.memo.callee.borrow().get(&node.id()) {
            return (names.clone(), *hot);
        }
        // Most calls name nothing any rule cares about; their text says so without resolving.
        let names: Rc<[String]> = match &self.sem {
            Sem::Python(py) if !py.may_call(node, self.names) => self.memo.no_names.clone(),
            _ => compute().into(),
        };
        let hot = names.iter().any(|n| self.names.contains(n));
        self.memo
            .callee
            .borrow_mut()
            .insert(node.id(), (names.clone(), hot));
        (names, hot)
    }

    /// The programs a Bash command runs, computed once per node, and whether any rule could care.
    pub fn invocations(
        &self,
        node: Node<'a>,
        compute: impl FnOnce() -> Vec<Invocation<'a>>,
    ) -> (Rc<[Invocation<'a>]>, bool) {
        if let Some((invs, hot)) = self.memo.invocations.borrow().get(&node.id()) {
            return (invs.clone(), *hot);
        }
        let invs: Rc<[Invocation<'a>]> = match &self.sem {
            Sem::Bash(sh) if !sh.may_run(node, self.names) => self.memo.no_invocations.clone(),
            _ => compute().into(),
        };
        let hot = invs.iter().any(|i| self.names.contains(&i.name));
        self.memo
            .invocations
            .borrow_mut()
            .insert(node.id(), (invs.clone(), hot));
        (invs, hot)
    }
}

#[derive(Debug)]
pub enum Sem<'a> {
    Python(PySem<'a>),
    Bash(BashSem<'a>),
}

impl<'a> Sem<'a> {
    pub fn fold(&self, node: Node<'_>) -> Option<String> {
        match self {
            Sem::Python(s) => s.fold(node),
            Sem::Bash(s) => s.fold(node),
        }
    }

    /// The values a non-constant node is known to take (see [`Matcher::Folded`]).
    pub fn possible_values(&self, node: Node<'_>) -> Option<Vec<String>> {
        match self {
            Sem::Python(s) => s.possible_values(node),
            Sem::Bash(s) => s.possible_values(node),
        }
    }

    /// The known leading parts of a node's values (see `prefix:`).
    pub fn prefixes(&self, node: Node<'a>) -> Vec<String> {
        match self {
            Sem::Python(s) => s.prefixes(node),
            Sem::Bash(s) => s.prefixes(node),
        }
    }

    /// A cheap necessary condition for [`Sem::fold`] to succeed (Bash: every expansion names a
    /// constant variable).
    pub fn may_fold(&self, node: Node<'_>) -> bool {
        match self {
            Sem::Python(_) => true,
            Sem::Bash(s) => s.may_fold(node),
        }
    }

    /// Whether a node is a constant by its kind alone (a literal word), without folding it.
    pub fn is_literal(&self, node: Node<'_>) -> bool {
        match self {
            Sem::Python(_) => false,
            Sem::Bash(s) => s.is_literal(node),
        }
    }
}

/// Text compared by `regex`: NFKC-normalised, because Python treats `ｅｘｅｃ` as `exec` (PEP 3131).
pub fn normalized(s: &str) -> Cow<'_, str> {
    if s.is_ascii() {
        Cow::Borrowed(s)
    } else {
        Cow::Owned(s.nfkc().collect())
    }
}

/// NFKC of the non-ASCII runs only, ASCII copied as is: a superset of the ASCII words whole-text
/// NFKC produces (composition only ever turns ASCII into non-ASCII), at a fraction of the cost.
fn normalized_runs(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while !rest.is_empty() {
        let ascii = rest
            .bytes()
            .position(|b| !b.is_ascii())
            .unwrap_or(rest.len());
        out.push_str(&rest[..ascii]);
        rest = &rest[ascii..];
        let run = rest.find(|c: char| c.is_ascii()).unwrap_or(rest.len());
        out.extend(rest[..run].nfkc());
        rest = &rest[run..];
    }
    out
}

impl Matcher {
    pub fn matches<'t>(&self, node: Node<'t>, cx: &Cx<'t>) -> bool {
        match self {
            Matcher::Kind(kinds) => kinds.contains(&node.kind_id()),
            Matcher::Regex(re) => re.regex.is_match(&normalized(text(node, cx.src))),
            Matcher::Exact(Words { words, .. }) => {
                let t = text(node, cx.src);
                words.iter().any(|w| w.len() == t.len() && w == t)
                    || (!t.is_ascii() && {
                        let n = normalized(t);
                        words.iter().any(|w| *w == *n)
                    })
            }
            Matcher::Has(rel) => rel.has(node, cx),
            Matcher::Inside(rel) => rel.inside(node, cx),
            Matcher::Not(m) => !m.matches(node, cx),
            Matcher::All(ms) => ms.iter().all(|m| m.matches(node, cx)),
            Matcher::Any(ms) => ms.iter().any(|m| m.possible(cx) && m.matches(node, cx)),
            Matcher::Folded(re) => match cx.fold(node) {
                Some(v) => re.is_match(&v),
                // not a constant: one of the values it is known to take (a loop over constants,
                // an element of a constant container)
                None => cx
                    .sem
                    .possible_values(node)
                    .is_some_and(|vs| vs.iter().any(|v| re.is_match(v))),
            },
            Matcher::Prefix(re) => cx.sem.prefixes(node).iter().any(|p| re.is_match(p)),
            Matcher::Quoted(want) => {
                let quoted = match &cx.sem {
                    Sem::Python(py) => py.fold_shell(node).is_some(),
                    Sem::Bash(_) => cx.fold(node).is_some(),
                };
                quoted == *want
            }
            Matcher::Derived(inner) => derived(node, inner, cx, 0),
            Matcher::Dynamic(want) => {
                let constant = cx.sem.is_literal(node) || cx.fold(node).is_some();
                constant != *want
            }
            Matcher::Call(spec) => match &cx.sem {
                Sem::Python(py) => py.call_matches(node, spec, cx),
                Sem::Bash(_) => false,
            },
            Matcher::Command(spec) => match &cx.sem {
                Sem::Bash(sh) => sh.command_matches(node, spec, cx),
                Sem::Python(_) => false,
            },
            Matcher::MayBe(re) => {
                let values = match &cx.sem {
                    Sem::Python(py) => py.possible_values(node),
                    Sem::Bash(_) => cx.fold(node).map(|v| vec![v.to_string()]),
                };
                values.is_none_or(|vs| vs.iter().any(|v| re.is_match(v)))
            }
            Matcher::Resolves(set, _) => match &cx.sem {
                Sem::Python(py) => py.names(node).iter().any(|n| set.contains(n)),
                Sem::Bash(_) => false,
            },
            Matcher::Recursive(want) => {
                let is = match &cx.sem {
                    Sem::Python(py) => py.is_recursive(node),
                    Sem::Bash(sh) => sh.is_recursive(node, cx),
                };
                is == *want
            }
        }
    }

    /// Whether this matcher can match any node of the script (decided once per script): exact text
    /// needs its word in the source, a call/command condition needs a call/command of that name
    /// somewhere. Everything else is assumed possible.
    pub fn possible(&self, cx: &Cx<'_>) -> bool {
        match self {
            // Identifiers compare after NFKC, so a non-ASCII script is searched in its NFKC form
            // (NFKC does not compose across the ASCII punctuation and spaces that delimit words).
            Matcher::Exact(w) => cx.leaf_possible(w.slot, || cx.has_literal_of(w.slot)),
            Matcher::Resolves(_, slot) => cx.leaf_possible(*slot, || cx.has_literal_of(*slot)),
            Matcher::Regex(TextRegex {
                literals: Some(_),
                slot,
                ..
            }) => cx.leaf_possible(*slot, || cx.has_literal_of(*slot)),
            Matcher::Call(spec) => cx.leaf_possible(spec.slot, || {
                cx.script_names().iter().any(|n| spec.callee.contains(n))
            }),
            Matcher::Command(spec) => cx.leaf_possible(spec.slot, || {
                cx.script_names().iter().any(|n| spec.name.contains(n))
            }),
            Matcher::All(ms) => ms.iter().all(|m| m.possible(cx)),
            Matcher::Any(ms) => ms.iter().any(|m| m.possible(cx)),
            Matcher::Has(rel) | Matcher::Inside(rel) => rel.inner.possible(cx),
            _ => true,
        }
    }

    /// [`Matcher::possible`] from the script's text alone, before the walk: calls and commands are
    /// assumed to be there. `has(slot)` tells whether a leaf's texts are in the script.
    pub fn lexically_possible(&self, has: &dyn Fn(usize) -> bool) -> bool {
        match self {
            Matcher::Exact(w) => has(w.slot),
            Matcher::Resolves(_, slot) => has(*slot),
            Matcher::Regex(TextRegex {
                literals: Some(_),
                slot,
                ..
            }) => has(*slot),
            Matcher::All(ms) => ms.iter().all(|m| m.lexically_possible(has)),
            Matcher::Any(ms) => ms.iter().any(|m| m.lexically_possible(has)),
            Matcher::Has(rel) | Matcher::Inside(rel) => rel.inner.lexically_possible(has),
            _ => true,
        }
    }

    /// The texts this matcher's leaves need, by slot (see [`LiteralIndex`]).
    pub fn collect_literals(&self, out: &mut Vec<(usize, Vec<String>)>) {
        match self {
            Matcher::Exact(w) => out.push((w.slot, w.words.clone())),
            Matcher::Resolves(set, slot) => out.push((*slot, set.texts())),
            Matcher::Regex(TextRegex {
                literals: Some(l),
                slot,
                ..
            }) => out.push((*slot, l.clone())),
            Matcher::Call(spec) => {
                if let Some(a) = &spec.arg {
                    a.inner.collect_literals(out);
                }
                if let Some(m) = spec.keyword.as_ref().and_then(|k| k.value.as_ref()) {
                    m.collect_literals(out);
                }
            }
            Matcher::Command(spec) => {
                if let Some(m) = &spec.arg {
                    m.collect_literals(out);
                }
                if let Some(m) = &spec.last_arg {
                    m.collect_literals(out);
                }
            }
            Matcher::Derived(m) => m.collect_literals(out),
            Matcher::Has(rel) | Matcher::Inside(rel) => rel.inner.collect_literals(out),
            Matcher::Not(m) => m.collect_literals(out),
            Matcher::All(ms) | Matcher::Any(ms) => ms.iter().for_each(|m| m.collect_literals(out)),
            _ => {}
        }
    }

    /// A rough evaluation cost, so that conjunctions try cheap conditions first and alternatives
    /// the cheap ones first (the order of `all` and `any` items does not change what they match).
    pub fn cost(&self) -> u8 {
        match self {
            Matcher::Kind(_) => 0,
            Matcher::Exact(_) => 1,
            Matcher::Regex(_) => 2,
            Matcher::Call(_) | Matcher::Command(_) => 3,
            Matcher::Folded(_)
            | Matcher::Dynamic(_)
            | Matcher::MayBe(_)
            | Matcher::Resolves(..)
            | Matcher::Prefix(_)
            | Matcher::Quoted(_) => 4,
            Matcher::Derived(m) => 8 + m.cost() / 4,
            Matcher::Not(m) => m.cost(),
            Matcher::Has(rel) | Matcher::Inside(rel) if !rel.stop_by_end => {
                5 + rel.inner.cost() / 4
            }
            Matcher::Has(rel) | Matcher::Inside(rel) => 8 + rel.inner.cost() / 4,
            Matcher::All(ms) | Matcher::Any(ms) => ms.iter().map(Matcher::cost).max().unwrap_or(0),
            // A function whose body does not name it is decided from the text.
            Matcher::Recursive(_) => 6,
        }
    }

    /// Numbers the leaves whose "possible" answer is decided per script (exact words, regexes with
    /// literals, calls, commands), from `*next` on.
    pub fn assign_slots(&mut self, next: &mut usize) {
        let mut take = |slot: &mut usize| {
            *slot = *next;
            *next += 1;
        };
        match self {
            Matcher::Exact(w) => take(&mut w.slot),
            Matcher::Regex(r) => take(&mut r.slot),
            Matcher::Resolves(_, slot) => take(slot),
            Matcher::Call(spec) => {
                take(&mut spec.slot);
                if let Some(a) = &mut spec.arg {
                    a.inner.assign_slots(next);
                }
                if let Some(m) = spec.keyword.as_mut().and_then(|k| k.value.as_mut()) {
                    m.assign_slots(next);
                }
            }
            Matcher::Command(spec) => {
                take(&mut spec.slot);
                if let Some(m) = &mut spec.arg {
                    m.assign_slots(next);
                }
                if let Some(m) = &mut spec.last_arg {
                    m.assign_slots(next);
                }
            }
            Matcher::Derived(m) => m.assign_slots(next),
            Matcher::Has(rel) | Matcher::Inside(rel) => rel.inner.assign_slots(next),
            Matcher::Not(m) => m.assign_slots(next),
            Matcher::All(ms) | Matcher::Any(ms) => ms.iter_mut().for_each(|m| m.assign_slots(next)),
            _ => {}
        }
    }

    /// Adds every callee/command name pattern this matcher tests to `out`.
    pub fn collect_names(&self, out: &mut Vec<String>) {
        match self {
            Matcher::Call(spec) => {
                out.extend_from_slice(spec.callee.patterns());
                if let Some(a) = &spec.arg {
                    a.inner.collect_names(out);
                }
                if let Some(m) = spec.keyword.as_ref().and_then(|k| k.value.as_ref()) {
                    m.collect_names(out);
                }
            }
            Matcher::Command(spec) => {
                out.extend_from_slice(spec.name.patterns());
                if let Some(m) = &spec.arg {
                    m.collect_names(out);
                }
                if let Some(m) = &spec.last_arg {
                    m.collect_names(out);
                }
            }
            Matcher::Derived(m) => m.collect_names(out),
            Matcher::Has(rel) | Matcher::Inside(rel) => rel.inner.collect_names(out),
            Matcher::Not(m) => m.collect_names(out),
            Matcher::All(ms) | Matcher::Any(ms) => ms.iter().for_each(|m| m.collect_names(out)),
            _ => {}
        }
    }

    /// When every match requires a call/command with one of these names, the names (patterns);
    /// such rules are indexed by name instead of node kind.
    pub fn name_keys(&self) -> Option<Vec<String>> {
        match self {
            Matcher::Call(spec) => Some(spec.callee.patterns().to_vec()),
            Matcher::Command(spec) => Some(spec.name.patterns().to_vec()),
            Matcher::All(ms) => ms.iter().find_map(Matcher::name_keys),
            Matcher::Any(ms) => {
                let mut all = Vec::new();
                for m in ms {
                    all.extend(m.name_keys()?);
                }
                Some(all)
            }
            _ => None,
        }
    }

    /// The node kinds this matcher can match at all, when that is a finite set (used for indexing).
    pub fn root_kinds(&self) -> Option<Vec<u16>> {
        match self {
            Matcher::Kind(k) => Some(k.clone()),
            Matcher::All(ms) => ms
                .iter()
                .filter_map(Matcher::root_kinds)
                .min_by_key(Vec::len),
            Matcher::Any(ms) => {
                let mut all = Vec::new();
                for m in ms {
                    all.extend(m.root_kinds()?);
                }
                all.sort_unstable();
                all.dedup();
                Some(all)
            }
            _ => None,
        }
    }
}

impl Relation {
    fn has<'t>(&self, node: Node<'t>, cx: &Cx<'t>) -> bool {
        if !self.inner.possible(cx) {
            return false;
        }
        // A field names (the first of) its children directly: no iteration.
        if let Some(field) = self.field {
            return node
                .child_by_field_id(field)
                .is_some_and(|child| self.inner.matches(child, cx));
        }
        cx.with_cursor(node, |cursor| self.has_with(cursor, cx))
    }

    fn has_with<'t>(&self, cursor: &mut TreeCursor<'t>, cx: &Cx<'t>) -> bool {
        if !cursor.goto_first_child() {
            return false;
        }
        if !self.stop_by_end {
            loop {
                if self.inner.matches(cursor.node(), cx) {
                    return true;
                }
                if !cursor.goto_next_sibling() {
                    return false;
                }
            }
        }
        // Depth-first over all descendants, iteratively (trees are depth-bounded by the syntax layer).
        let mut depth = 1usize;
        loop {
            if self.inner.matches(cursor.node(), cx) {
                return true;
            }
            if cursor.goto_first_child() {
                depth += 1;
                continue;
            }
            loop {
                if cursor.goto_next_sibling() {
                    break;
                }
                if depth == 1 || !cursor.goto_parent() {
                    return false;
                }
                depth -= 1;
            }
        }
    }

    fn inside<'t>(&self, node: Node<'t>, cx: &Cx<'t>) -> bool {
        if !self.inner.possible(cx) {
            return false;
        }
        if let Some(field) = self.field {
            let Some(parent) = node.parent() else {
                return false;
            };
            let in_field = children_in_field(parent, field)
                .iter()
                .any(|c| c.id() == node.id());
            return in_field && self.inner.matches(parent, cx);
        }
        let mut current = node.parent();
        while let Some(p) = current {
            if self.inner.matches(p, cx) {
                return true;
            }
            if !self.stop_by_end {
                return false;
            }
            current = p.parent();
        }
        false
    }
}

/// `derived:`: `node` or a descendant matches `inner`, or so does an expression a name inside it
/// is bound to (Python; names followed at most four deep).
fn derived<'t>(node: Node<'t>, inner: &Matcher, cx: &Cx<'t>, depth: u8) -> bool {
    if inner.matches(node, cx) {
        return true;
    }
    // The compiler only accepts `derived` in Python rules.
    let Sem::Python(py) = &cx.sem else {
        return false;
    };
    let mut names: Vec<Node<'t>> = Vec::new();
    let found = cx.with_cursor(node, |cursor| {
        let mut level = 0usize;
        if !cursor.goto_first_child() {
            return false;
        }
        level += 1;
        loop {
            let n = cursor.node();
            if inner.matches(n, cx) {
                return true;
            }
            if n.kind_id() == py.k.identifier {
                names.push(n);
            }
            if cursor.goto_first_child() {
                level += 1;
                continue;
            }
            loop {
                if cursor.goto_next_sibling() {
                    break;
                }
                if level <= 1 || !cursor.goto_parent() {
                    return false;
                }
                level -= 1;
            }
        }
    });
    if found {
        return true;
    }
    if node.kind_id() == py.k.identifier {
        names.push(node);
    }
    if depth >= 4 {
        return false;
    }
    names.iter().any(|n| {
        let name = normalized(text(*n, cx.src));
        match py.binding(&name) {
            Some(Binding::Value(v)) | Some(Binding::Item(v, _)) => {
                v.id() != node.id() && derived(v, inner, cx, depth + 1)
            }
            _ => false,
        }
    })
}

/// Every text the exact-word and regex leaves of a language's rules need, in one automaton: one
/// pass over a script tells which leaves can match anywhere in it (the keyword prefilter of the
/// tree rules, as secret rules have theirs).
#[derive(Debug)]
pub struct LiteralIndex {
    automaton: Option<aho_corasick::AhoCorasick>,
    patterns: usize,
    /// Per slot, the automaton's pattern ids of that leaf's texts.
    by_slot: Vec<Vec<usize>>,
}

impl LiteralIndex {
    pub fn new(
        slots: usize,
        leaves: &[(usize, Vec<String>)],
    ) -> Result<Self, aho_corasick::BuildError> {
        let mut texts: Vec<String> = Vec::new();
        let mut by_slot = vec![Vec::new(); slots];
        for (slot, words) in leaves {
            for w in words {
                let id = match texts.iter().position(|t| t == w) {
                    Some(id) => id,
                    None => {
                        texts.push(w.clone());
                        texts.len() - 1
                    }
                };
                if let Some(ids) = by_slot.get_mut(*slot) {
                    ids.push(id);
                }
            }
        }
        let automaton = if texts.is_empty() {
            None
        } else {
            Some(
                aho_corasick::AhoCorasickBuilder::new()
                    .kind(Some(aho_corasick::AhoCorasickKind::DFA))
                    .build(&texts)?,
            )
        };
        Ok(LiteralIndex {
            automaton,
            patterns: texts.len(),
            by_slot,
        })
    }

    /// Which texts occur in a script (by pattern id), in one pass. Identifiers compare after NFKC,
    /// so a non-ASCII script is searched in its NFKC form.
    pub fn scan(&self, src: &str) -> Vec<bool> {
        let mut found = vec![false; self.patterns];
        let Some(ac) = &self.automaton else {
            return found;
        };
        let normalized;
        let haystack = if src.is_ascii() {
            src
        } else {
            normalized = normalized_runs(src);
            normalized.as_str()
        };
        for m in ac.find_overlapping_iter(haystack) {
            found[m.pattern().as_usize()] = true;
        }
        found
    }

    /// Whether the script (as [`LiteralIndex::scan`] found it) holds a text the leaf `slot` needs.
    pub fn slot_present(&self, present: &[bool], slot: usize) -> bool {
        self.by_slot
            .get(slot)
            .is_some_and(|ids| ids.iter().any(|&p| present.get(p).copied().unwrap_or(true)))
    }
}

/// Why a [`NameSet`] cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum NameSetError {
    #[error("needs at least one name")]
    Empty,
    #[error(transparent)]
    Regex(#[from] regex::Error),
}
