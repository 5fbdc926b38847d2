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
use serde_norway::{Mapping, Value};
use tree_sitter::{Node, TreeCursor};
use unicode_normalization::UnicodeNormalization;

use super::bash::{BashSem, Invocation};
use super::grammar::{Grammar, children_in_field, text};
use super::python::PySem;
use crate::domain::script::Language;

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
    pub fn new(names: &[String]) -> Result<Self, String> {
        if names.is_empty() {
            return Err("needs at least one name".into());
        }
        let alternatives: Vec<String> = names
            .iter()
            .map(|n| regex::escape(n).replace(r"\*", r"[\w.\-]*"))
            .collect();
        let regex =
            Regex::new(&format!("^(?:{})$", alternatives.join("|"))).map_err(|e| e.to_string())?;
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

/// Compiles YAML matchers for one grammar.
#[derive(Debug)]
pub struct MatcherCompiler<'g> {
    grammar: &'g Grammar,
}

const KEYS: &str =
    "kind, regex, has, inside, not, all, any, folded, dynamic, resolves, call, command, recursive";

impl<'g> MatcherCompiler<'g> {
    pub fn new(grammar: &'g Grammar) -> Self {
        MatcherCompiler { grammar }
    }

    pub fn compile(&self, value: &Value, path: &str) -> Result<Matcher, String> {
        let map = value
            .as_mapping()
            .ok_or_else(|| format!("{path}: expected a mapping of conditions"))?;
        self.compile_map(map, path, false)
    }

    fn compile_map(&self, map: &Mapping, path: &str, relation: bool) -> Result<Matcher, String> {
        let mut parts = Vec::new();
        for (key, value) in map {
            let key = key
                .as_str()
                .ok_or_else(|| format!("{path}: keys must be strings"))?;
            let at = format!("{path}.{key}");
            let part = match key {
                "field" | "stopBy" if relation => continue,
                "field" | "stopBy" => {
                    return Err(format!("{at}: only allowed inside `has` or `inside`"));
                }
                "kind" => Matcher::Kind(self.kinds(value, &at)?),
                "regex" => text_matcher(regex(value, &at)?),
                "has" => Matcher::Has(Box::new(self.relation(value, &at)?)),
                "inside" => Matcher::Inside(Box::new(self.relation(value, &at)?)),
                "not" => Matcher::Not(Box::new(self.compile(value, &at)?)),
                "all" => Matcher::All(self.list(value, &at)?),
                "any" => Matcher::Any(self.list(value, &at)?),
                "folded" => Matcher::Folded(regex(value, &at)?),
                "may_be" => Matcher::MayBe(regex(value, &at)?),
                "resolves" => {
                    if self.grammar.language != Language::Python {
                        return Err(format!("{at}: `resolves` is for python rules"));
                    }
                    Matcher::Resolves(
                        NameSet::new(&strings(value, &at)?).map_err(|e| format!("{at}: {e}"))?,
                    )
                }
                "dynamic" => Matcher::Dynamic(boolean(value, &at)?),
                "recursive" => {
                    parts.push(Matcher::Kind(vec![
                        self.implied_kind("function_definition")?,
                    ]));
                    Matcher::Recursive(boolean(value, &at)?)
                }
                "call" => {
                    let spec = self.call(value, &at)?;
                    parts.push(Matcher::Kind(vec![self.implied_kind("call")?]));
                    Matcher::Call(Box::new(spec))
                }
                "command" => {
                    let spec = self.command(value, &at)?;
                    parts.push(Matcher::Kind(vec![self.implied_kind("command")?]));
                    Matcher::Command(Box::new(spec))
                }
                other => {
                    return Err(format!(
                        "{path}: unknown key `{other}` (expected one of: {KEYS})"
                    ));
                }
            };
            parts.push(part);
        }
        match parts.len() {
            0 => Err(format!("{path}: empty matcher")),
            1 => Ok(parts.pop().expect("one part")),
            _ => Ok(Matcher::All(parts)),
        }
    }

    fn implied_kind(&self, name: &str) -> Result<u16, String> {
        self.grammar
            .kind(name)
            .ok_or_else(|| format!("{} grammar has no `{name}` nodes", self.grammar.language))
    }

    fn kinds(&self, value: &Value, at: &str) -> Result<Vec<u16>, String> {
        strings(value, at)?
            .iter()
            .map(|k| {
                self.grammar.kind(k).ok_or_else(|| {
                    format!(
                        "{at}: unknown node kind `{k}` for {}",
                        self.grammar.language
                    )
                })
            })
            .collect()
    }

    fn relation(&self, value: &Value, at: &str) -> Result<Relation, String> {
        let map = value
            .as_mapping()
            .ok_or_else(|| format!("{at}: expected a mapping"))?;
        let field = match map.get("field") {
            None => None,
            Some(f) => {
                let name = f
                    .as_str()
                    .ok_or_else(|| format!("{at}.field: expected a string"))?;
                Some(self.grammar.field(name).ok_or_else(|| {
                    format!(
                        "{at}.field: unknown field `{name}` for {}",
                        self.grammar.language
                    )
                })?)
            }
        };
        let stop_by_end = match map.get("stopBy").map(|v| v.as_str()) {
            None | Some(Some("neighbor")) => false,
            Some(Some("end")) => true,
            _ => return Err(format!("{at}.stopBy: expected `neighbor` or `end`")),
        };
        if field.is_some() && stop_by_end {
            return Err(format!("{at}: `field` and `stopBy: end` do not combine"));
        }
        Ok(Relation {
            field,
            stop_by_end,
            inner: self.compile_map(map, at, true)?,
        })
    }

    fn list(&self, value: &Value, at: &str) -> Result<Vec<Matcher>, String> {
        let seq = value
            .as_sequence()
            .ok_or_else(|| format!("{at}: expected a list of matchers"))?;
        if seq.is_empty() {
            return Err(format!("{at}: empty list"));
        }
        seq.iter()
            .enumerate()
            .map(|(i, v)| self.compile(v, &format!("{at}[{i}]")))
            .collect()
    }

    fn call(&self, value: &Value, at: &str) -> Result<CallSpec, String> {
        if self.grammar.language != Language::Python {
            return Err(format!(
                "{at}: `call` is for python rules; bash has `command`"
            ));
        }
        let map = mapping(value, at, &["callee", "arg", "keyword"])?;
        let callee = map
            .get("callee")
            .ok_or_else(|| format!("{at}: `callee` is required"))?;
        let callee = NameSet::new(&strings(callee, &format!("{at}.callee"))?)
            .map_err(|e| format!("{at}.callee: {e}"))?;
        let arg = match map.get("arg") {
            None => None,
            Some(v) => Some(self.arg(v, &format!("{at}.arg"))?),
        };
        let keyword = match map.get("keyword") {
            None => None,
            Some(v) => {
                let kat = format!("{at}.keyword");
                let kmap = mapping(v, &kat, &["name", "value"])?;
                let name = regex(
                    kmap.get("name")
                        .ok_or_else(|| format!("{kat}: `name` is required"))?,
                    &format!("{kat}.name"),
                )?;
                let value = match kmap.get("value") {
                    None => None,
                    Some(v) => Some(self.compile(v, &format!("{kat}.value"))?),
                };
                Some(KeywordSpec { name, value })
            }
        };
        Ok(CallSpec {
            callee,
            arg,
            keyword,
        })
    }

    fn arg(&self, value: &Value, at: &str) -> Result<ArgSpec, String> {
        let map = value
            .as_mapping()
            .ok_or_else(|| format!("{at}: expected a mapping"))?;
        let index = match map.get("index") {
            None => None,
            Some(v) => Some(
                v.as_u64()
                    .and_then(|i| usize::try_from(i).ok())
                    .ok_or_else(|| format!("{at}.index: expected a non-negative integer"))?,
            ),
        };
        let mut rest = map.clone();
        rest.remove("index");
        Ok(ArgSpec {
            index,
            inner: self.compile_map(&rest, at, false)?,
        })
    }

    fn command(&self, value: &Value, at: &str) -> Result<CommandSpec, String> {
        if self.grammar.language != Language::Bash {
            return Err(format!(
                "{at}: `command` is for bash rules; python has `call`"
            ));
        }
        let map = mapping(value, at, &["name", "flag", "arg", "stdin_program"])?;
        let name = map
            .get("name")
            .ok_or_else(|| format!("{at}: `name` is required"))?;
        let name = NameSet::new(&strings(name, &format!("{at}.name"))?)
            .map_err(|e| format!("{at}.name: {e}"))?;
        let flags = match map.get("flag") {
            None => Vec::new(),
            Some(v) => {
                let flags = strings(v, &format!("{at}.flag"))?;
                if let Some(bad) = flags.iter().find(|f| !f.starts_with('-')) {
                    return Err(format!("{at}.flag: `{bad}` must start with `-`"));
                }
                flags
            }
        };
        let arg = match map.get("arg") {
            None => None,
            Some(v) => Some(self.compile(v, &format!("{at}.arg"))?),
        };
        let stdin_program = match map.get("stdin_program") {
            None => false,
            Some(v) => boolean(v, &format!("{at}.stdin_program"))?,
        };
        Ok(CommandSpec {
            name,
            flags,
            arg,
            stdin_program,
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

fn mapping<'v>(value: &'v Value, at: &str, allowed: &[&str]) -> Result<&'v Mapping, String> {
    let map = value
        .as_mapping()
        .ok_or_else(|| format!("{at}: expected a mapping"))?;
    for key in map.keys() {
        let key = key.as_str().unwrap_or("");
        if !allowed.contains(&key) {
            return Err(format!(
                "{at}: unknown key `{key}` (expected one of: {})",
                allowed.join(", ")
            ));
        }
    }
    Ok(map)
}

fn strings(value: &Value, at: &str) -> Result<Vec<String>, String> {
    match value {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Sequence(seq) => seq
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("{at}: expected strings"))
            })
            .collect(),
        _ => Err(format!("{at}: expected a string or a list of strings")),
    }
}

fn regex(value: &Value, at: &str) -> Result<Regex, String> {
    let pattern = value
        .as_str()
        .ok_or_else(|| format!("{at}: expected a regex string"))?;
    Regex::new(pattern).map_err(|e| format!("{at}: {e}"))
}

fn boolean(value: &Value, at: &str) -> Result<bool, String> {
    value
        .as_bool()
        .ok_or_else(|| format!("{at}: expected true or false"))
}
