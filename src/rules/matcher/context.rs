//! What evaluating a matcher on one script needs: the source, the language's semantics and the
//! memo of per-node facts ([`Cx`], [`Sem`]).

use std::cell::RefCell;
use std::rc::Rc;

use rustc_hash::FxHashMap;
use tree_sitter::{Node, TreeCursor};

use super::{LiteralIndex, NameSet};
use crate::rules::bash::{BashSem, Invocation};
use crate::rules::python::PySem;

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
    /// Parents the walk recorded (by child node id), when it did.
    parents: Option<&'a FxHashMap<usize, Node<'a>>>,
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
    /// The same answer for composite matchers (`all`, `any`, `has`, `inside`), keyed by their
    /// address in the compiled rules: asked again for every node a rule is evaluated on.
    composite: RefCell<FxHashMap<usize, bool>>,
    /// Every resolved call/command name in the script, once computed.
    script_names: std::cell::OnceCell<Vec<String>>,
    /// `derived` answers by (matcher address, node id, depth): the loop variables and names many
    /// nodes are bound to lead to the same expressions and function bodies again and again.
    derived: RefCell<FxHashMap<(usize, usize, u8), bool>>,
}

impl<'a> Cx<'a> {
    /// `slots` is the number of leaf slots the rules use ([`super::Matcher::assign_slots`]); `literals`
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
                composite: RefCell::default(),
                script_names: std::cell::OnceCell::new(),
                derived: RefCell::default(),
            },
            cursors: CursorPool::default(),
            parents: None,
        }
    }

    /// Answers [`Cx::parent`] from the parents the walk recorded.
    #[must_use]
    pub fn with_parents(mut self, parents: &'a FxHashMap<usize, Node<'a>>) -> Self {
        self.parents = Some(parents);
        self
    }

    /// The parent of `node`: recorded by the walk, else asked of the tree (which re-descends
    /// from the root).
    pub fn parent(&self, node: Node<'a>) -> Option<Node<'a>> {
        if let Some(p) = self.parents.and_then(|ps| ps.get(&node.id())) {
            return Some(*p);
        }
        node.parent()
    }

    /// A leaf's "possible" answer, decided once per script.
    pub(super) fn leaf_possible(&self, slot: usize, decide: impl FnOnce() -> bool) -> bool {
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

    /// A composite matcher's "possible" answer (`key` is its address), decided once per script.
    pub(super) fn composite_possible(&self, key: usize, decide: impl FnOnce() -> bool) -> bool {
        if let Some(&p) = self.memo.composite.borrow().get(&key) {
            return p;
        }
        let p = decide();
        self.memo.composite.borrow_mut().insert(key, p);
        p
    }

    /// A `derived` answer (`key`: matcher address, node id, depth), computed once per script.
    pub(super) fn derived_memo(
        &self,
        key: (usize, usize, u8),
        decide: impl FnOnce() -> bool,
    ) -> bool {
        if let Some(&d) = self.memo.derived.borrow().get(&key) {
            return d;
        }
        let d = decide();
        self.memo.derived.borrow_mut().insert(key, d);
        d
    }

    /// Whether the script holds one of the texts a leaf needs ([`LiteralIndex`]).
    pub(super) fn has_literal_of(&self, slot: usize) -> bool {
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

    /// The values a non-constant node is known to take (see [`super::Matcher::Folded`]).
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
