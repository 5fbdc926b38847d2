//! Tree rules' matchers: compiled from YAML, evaluated on tree-sitter nodes.
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
use super::grammar::{Grammar, children_in_field, text};
use super::model::{CallSpecRaw, CommandSpecRaw, MatcherSpec, OneOrMany, StopBy};
use super::python::PySem;
use crate::script::Language;

#[derive(Debug)]
pub enum Matcher {
    Kind(Vec<u16>),
    Regex(Regex),
    /// A `regex` of the form `^(lit|lit…)$`: compared as strings.
    Exact(Vec<String>),
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
    Resolves(NameSet),
    MayBe(Regex),
}

#[derive(Debug)]
pub struct Relation {
    pub field: Option<u16>,
    pub stop_by_end: bool,
    pub inner: Matcher,
}

/// A set of dotted names with `*` wildcards (`os.exec*`, `subprocess.*`), matched whole.
#[derive(Debug)]
pub struct NameSet {
    regex: Regex,
    patterns: Vec<String>,
}

impl NameSet {
    pub fn new(names: &[String]) -> Result<Self, NameSetError> {
        if names.is_empty() {
            return Err(NameSetError::Empty);
        }
        let alternatives: Vec<String> = names
            .iter()
            .map(|n| regex::escape(n).replace(r"\*", r"[\w.\-]*"))
            .collect();
        let regex = Regex::new(&format!("^(?:{})$", alternatives.join("|")))?;
        Ok(NameSet {
            regex,
            patterns: names.to_vec(),
        })
    }

    pub fn contains(&self, name: &str) -> bool {
        self.regex.is_match(name)
    }

    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }
}

#[derive(Debug)]
pub struct CallSpec {
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
    pub name: NameSet,
    /// Any of these options must be present (`-r` also matches inside `-rf`).
    pub flags: Vec<String>,
    pub arg: Option<Matcher>,
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
pub struct Cx<'a, 't> {
    pub src: &'a str,
    pub sem: Sem<'a>,
    names: &'a NameSet,
    /// The calls (Python) or commands (Bash) of the script: what name conditions can ever match.
    sites: &'a [Node<'t>],
    memo: Memo<'t>,
    /// Tree cursors to reuse: tree-sitter allocates for every new cursor, and relations such as
    /// `has` need one per evaluation (nested relations take another from the pool).
    cursors: CursorPool<'t>,
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

#[derive(Debug, Default)]
struct Memo<'t> {
    callee: Memoized<String>,
    invocations: Memoized<Invocation<'t>>,
    folds: RefCell<FxHashMap<usize, Option<Rc<str>>>>,
    /// Whether a matcher (by address) can match anywhere in this script.
    possible: RefCell<FxHashMap<usize, bool>>,
    /// Every resolved call/command name in the script, once computed.
    script_names: std::cell::OnceCell<Vec<String>>,
    /// The NFKC form of a non-ASCII script, for exact-text prefilters.
    normalized_src: std::cell::OnceCell<String>,
}

impl<'a, 't> Cx<'a, 't> {
    pub fn new(src: &'a str, sem: Sem<'a>, names: &'a NameSet, sites: &'a [Node<'t>]) -> Self {
        Cx {
            src,
            sem,
            names,
            sites,
            memo: Memo::default(),
            cursors: CursorPool::default(),
        }
    }

    /// The constant value of a node, folded once per node.
    pub fn fold(&self, node: Node<'t>) -> Option<Rc<str>> {
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
        node: Node<'t>,
    ) -> (Rc<[Invocation<'t>]>, bool) {
        self.invocations(node, || {
            self.with_cursor(node, |c| sh.invocations_with(node, c))
        })
    }

    /// Runs `f` with a cursor positioned on `node`, taken from (and returned to) the pool.
    pub fn with_cursor<R>(&self, node: Node<'t>, f: impl FnOnce(&mut TreeCursor<'t>) -> R) -> R {
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
        node: Node<'t>,
        compute: impl FnOnce() -> Vec<String>,
    ) -> (Rc<[String]>, bool) {
        if let Some((names, hot)) = self.memo.callee.borrow().get(&node.id()) {
            return (names.clone(), *hot);
        }
        let names: Rc<[String]> = compute().into();
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
        node: Node<'t>,
        compute: impl FnOnce() -> Vec<Invocation<'t>>,
    ) -> (Rc<[Invocation<'t>]>, bool) {
        if let Some((invs, hot)) = self.memo.invocations.borrow().get(&node.id()) {
            return (invs.clone(), *hot);
        }
        let invs: Rc<[Invocation<'t>]> = compute().into();
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

impl Sem<'_> {
    pub fn fold(&self, node: Node<'_>) -> Option<String> {
        match self {
            Sem::Python(s) => s.fold(node),
            Sem::Bash(s) => s.fold(node),
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
    pub fn matches<'t>(&self, node: Node<'t>, cx: &Cx<'_, 't>) -> bool {
        match self {
            Matcher::Kind(kinds) => kinds.contains(&node.kind_id()),
            Matcher::Regex(re) => re.is_match(&normalized(text(node, cx.src))),
            Matcher::Exact(words) => {
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
            Matcher::Folded(re) => cx.fold(node).is_some_and(|v| re.is_match(&v)),
            Matcher::Dynamic(want) => cx.fold(node).is_none() == *want,
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
            Matcher::Resolves(set) => match &cx.sem {
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
    pub fn possible(&self, cx: &Cx<'_, '_>) -> bool {
        let key = self as *const Matcher as usize;
        if let Some(&p) = cx.memo.possible.borrow().get(&key) {
            return p;
        }
        let p = match self {
            // Identifiers compare after NFKC, so a non-ASCII script is searched in its NFKC form
            // (NFKC does not compose across the ASCII punctuation and spaces that delimit words).
            Matcher::Exact(words) => {
                let haystack = if cx.src.is_ascii() {
                    cx.src
                } else {
                    cx.memo
                        .normalized_src
                        .get_or_init(|| normalized_runs(cx.src))
                        .as_str()
                };
                words
                    .iter()
                    .any(|w| memchr::memmem::find(haystack.as_bytes(), w.as_bytes()).is_some())
            }
            Matcher::Call(spec) => cx.script_names().iter().any(|n| spec.callee.contains(n)),
            Matcher::Command(spec) => cx.script_names().iter().any(|n| spec.name.contains(n)),
            Matcher::All(ms) => ms.iter().all(|m| m.possible(cx)),
            Matcher::Any(ms) => ms.iter().any(|m| m.possible(cx)),
            Matcher::Has(rel) | Matcher::Inside(rel) => rel.inner.possible(cx),
            _ => true,
        };
        cx.memo.possible.borrow_mut().insert(key, p);
        p
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
            }
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
    fn has<'t>(&self, node: Node<'t>, cx: &Cx<'_, 't>) -> bool {
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

    fn has_with<'t>(&self, cursor: &mut TreeCursor<'t>, cx: &Cx<'_, 't>) -> bool {
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

    fn inside<'t>(&self, node: Node<'t>, cx: &Cx<'_, 't>) -> bool {
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

/// Why a [`NameSet`] cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum NameSetError {
    #[error("needs at least one name")]
    Empty,
    #[error(transparent)]
    Regex(#[from] regex::Error),
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
        if let Some(names) = &spec.resolves {
            let path = at("resolves");
            self.require(Language::Python, "resolves", &path)?;
            parts.push(Matcher::Resolves(name_set(names, &path)?));
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
        if let Some(inner) = &spec.not {
            parts.push(Matcher::Not(Box::new(self.compile(inner, &at("not"))?)));
        }
        if let Some(list) = &spec.all {
            parts.push(Matcher::All(self.list(list, &at("all"))?));
        }
        if let Some(list) = &spec.any {
            parts.push(Matcher::Any(self.list(list, &at("any"))?));
        }
        match parts.len() {
            0 => Err(MatcherError::Empty {
                path: path.to_string(),
            }),
            1 => Ok(parts.remove(0)),
            _ => Ok(Matcher::All(parts)),
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
        Ok(CommandSpec {
            name,
            flags,
            arg,
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
            Matcher::Exact(alternatives.split('|').map(str::to_string).collect())
        }
        _ => Matcher::Regex(re),
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
