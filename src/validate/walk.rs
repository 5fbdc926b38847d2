//! The one tree walk: everything later layers need from the tree is gathered in a single pass.
//!
//! Per node it runs the syntax checks, records the facts rules rely on (imports, assignments),
//! queues the node for every rule indexed under its kind, and notes inline-program sites and long
//! string literals (for secret decoding). Rules are evaluated after the walk, when all facts are known.
//!
//! What the walk does with a node is one lookup in a table indexed by node kind ([`interest`]),
//! narrowed per script before the walk starts ([`super::kinds`]): checks and rules whose texts are
//! absent from the script are switched off, and children that cannot hold anything of interest are
//! not visited. Checks that relate a node to its siblings (statements of a block, arguments of a
//! call) see each child as the walk reaches it, with a [`Frame`] of state for the parent, instead of
//! iterating the parent's children again.

use tree_sitter::{Node, Tree};

use super::Kinds;
use super::syntax::{self, MAX_DEPTH, MAX_FINDINGS};
use super::verdict::{Finding, Positions};
use crate::domain::script::Language;
use crate::rules::TreeRules;
use crate::rules::bash::BashFacts;
use crate::rules::python::PyFacts;

/// String literals shorter than this are not worth decoding (base64 of a secret is longer).
const MIN_BLOB_BYTES: usize = 20;

#[derive(Debug)]
pub(crate) enum Facts<'t> {
    Python(PyFacts<'t>),
    Bash(BashFacts),
}

#[derive(Debug)]
pub(crate) struct Walk<'t> {
    pub(crate) syntax: Vec<Finding>,
    /// Nodes with rules indexed under their kind, to evaluate once all facts are known.
    pub(crate) candidates: Vec<Node<'t>>,
    /// Calls (Python) or commands (Bash) that may start an inline program.
    pub(crate) sites: Vec<Node<'t>>,
    /// Long string literals, to decode and scan for secrets.
    pub(crate) strings: Vec<Node<'t>>,
    /// Expressions that may assemble a string from literals (`"a" + "b"`, `"$a$b"`), in document order.
    pub(crate) folds: Vec<Node<'t>>,
    pub(crate) facts: Facts<'t>,
    /// Byte ranges hidden from the tree by the Bash heredoc grammar gap, to check on their own.
    pub(crate) regions: Vec<(usize, usize)>,
    /// Which texts the rules' leaves need the script holds ([`crate::rules::matcher::LiteralIndex`]).
    pub(crate) present: Vec<bool>,
    /// The parent of every node the walk descended into and of every candidate, by node id:
    /// `inside` relations climb from candidates, and tree-sitter's `Node::parent()` re-descends
    /// from the root each time.
    pub(crate) parents: Parents<'t>,
}

/// Parents by child node id (see [`Walk::parents`]).
pub(crate) type Parents<'t> = rustc_hash::FxHashMap<usize, Node<'t>>;

/// A node on the path from the root to the node being visited, with the state checks keep about
/// the children seen so far.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Frame<'t> {
    pub(crate) node: Node<'t>,
    pub(crate) kind: u16,
    /// The previous child a check recorded (for Python statements: the previous statement).
    pub(crate) prev: Option<Node<'t>>,
    /// Check-specific bits, zero when the frame is entered.
    pub(crate) bits: u8,
    /// Check-specific indentation widths (tab stops 1 and 8), when recorded.
    pub(crate) indent: Option<(usize, usize)>,
    /// Children of `node` after the one being visited: at zero the walk climbs to the parent
    /// without asking the cursor for a next sibling, which on the last child costs a climb
    /// through every hidden node (repetitions are balanced trees of them) to find none.
    siblings_left: u32,
}

impl<'t> Frame<'t> {
    fn new(node: Node<'t>, kind: u16) -> Self {
        Frame {
            node,
            kind,
            prev: None,
            bits: 0,
            indent: None,
            siblings_left: node.child_count().saturating_sub(1),
        }
    }
}

/// What the walk does with nodes of a kind (a bit set, one entry per kind id).
pub(crate) mod interest {
    pub(crate) const CANDIDATE: u8 = 1;
    pub(crate) const FACT: u8 = 2;
    pub(crate) const SYNTAX: u8 = 4;
    pub(crate) const SITE: u8 = 8;
    pub(crate) const STRING: u8 = 16;
    pub(crate) const FOLD: u8 = 32;
    /// Syntax checks see each child of nodes of this kind (with the parent's [`super::Frame`]).
    pub(crate) const CHILDREN: u8 = 64;
    /// Syntax checks see the frame of nodes of this kind once all its children were visited.
    pub(crate) const EXIT: u8 = 128;
}

pub(crate) fn run<'t>(
    kinds: &Kinds,
    rules: &TreeRules,
    tree: &'t Tree,
    src: &str,
    pos: &Positions<'_>,
) -> Walk<'t> {
    let language = rules.grammar.language;
    let mut walk = Walk {
        syntax: Vec::new(),
        candidates: Vec::new(),
        sites: Vec::new(),
        strings: Vec::new(),
        folds: Vec::new(),
        facts: match language {
            Language::Python => Facts::Python(PyFacts::default()),
            Language::Bash => Facts::Bash(BashFacts::default()),
        },
        regions: Vec::new(),
        present: rules.literals.scan(src),
        // about one node in three is entered or queued, and a node takes ten bytes or more
        parents: Parents::with_capacity_and_hasher(src.len() / 32, Default::default()),
    };
    let script = kinds.script_table(language, src, rules, &walk.present);
    let table = &script.flags;
    let has_errors = tree.root_node().has_error();
    let mut cursor = tree.walk();
    // The path from the root to the current node's parent (tree-sitter's Node::parent() re-descends
    // from the root).
    let mut frames: Vec<Frame<'t>> = Vec::with_capacity(64);
    // For checks that look at a node's children (one allocation per walk, not per node).
    let mut scratch = tree.walk();
    'nodes: loop {
        let node = cursor.node();
        let kind = node.kind_id();
        let flags = flags_of(table, kind);
        if let Some(parent) = frames.last()
            && flags_of(table, parent.kind) & interest::CHILDREN != 0
            && walk.syntax.len() < MAX_FINDINGS
        {
            walk.child(kinds, node, &mut frames, src, pos);
        }
        let mut descend = if flags & !(interest::CHILDREN | interest::EXIT) != 0 || has_errors {
            walk.visit(
                kinds,
                node,
                flags,
                &frames,
                &mut scratch,
                has_errors,
                src,
                pos,
            )
        } else {
            true
        };
        if descend && !has_errors && script.skip_children(node, src) {
            descend = false;
        }
        if descend && frames.len() < MAX_DEPTH && cursor.goto_first_child() {
            if let Some(parent) = frames.last() {
                walk.parents.insert(node.id(), parent.node);
            }
            frames.push(Frame::new(node, kind));
            continue;
        }
        if descend && frames.len() >= MAX_DEPTH && node.child_count() > 0 {
            walk.syntax.push(syntax::too_deep(pos, node));
        }
        loop {
            let more = frames.last_mut().is_none_or(|parent| {
                let more = parent.siblings_left > 0;
                parent.siblings_left = parent.siblings_left.saturating_sub(1);
                more
            });
            if more && cursor.goto_next_sibling() {
                continue 'nodes;
            }
            if !cursor.goto_parent() {
                break 'nodes;
            }
            let Some(frame) = frames.pop() else {
                break 'nodes;
            };
            if flags_of(table, frame.kind) & interest::EXIT != 0 {
                walk.exit(kinds, &frame, &frames, src, pos);
            }
        }
    }
    // Checks report in walk order; the interpreters report the first problem in the text.
    walk.syntax.sort_by_key(|f| (f.line, f.column));
    walk.syntax.truncate(MAX_FINDINGS);
    walk
}

/// A kind's entry; ERROR nodes (kind id `u16::MAX`) are outside the table.
fn flags_of(table: &[u8], kind: u16) -> u8 {
    table.get(usize::from(kind)).copied().unwrap_or(0)
}

impl<'t> Walk<'t> {
    #[allow(clippy::too_many_arguments)]
    fn visit(
        &mut self,
        kinds: &Kinds,
        node: Node<'t>,
        flags: u8,
        frames: &[Frame<'t>],
        scratch: &mut tree_sitter::TreeCursor<'t>,
        has_errors: bool,
        src: &str,
        pos: &Positions<'_>,
    ) -> bool {
        let mut descend = true;
        if (flags & interest::SYNTAX != 0 || has_errors) && self.syntax.len() < MAX_FINDINGS {
            descend = match &self.facts {
                Facts::Python(_) => kinds.py_syntax.check(
                    node,
                    frames,
                    scratch,
                    has_errors,
                    src,
                    pos,
                    &mut self.syntax,
                ),
                Facts::Bash(_) => kinds.sh_syntax.check(
                    node,
                    frames.last(),
                    scratch,
                    has_errors,
                    src,
                    pos,
                    &mut self.syntax,
                    &mut self.regions,
                ),
            };
        }
        if flags & interest::CANDIDATE != 0 {
            self.candidates.push(node);
            if let Some(parent) = frames.last() {
                self.parents.insert(node.id(), parent.node);
            }
        }
        if flags & interest::FACT != 0 {
            match &mut self.facts {
                Facts::Python(facts) => {
                    let function = || {
                        frames
                            .iter()
                            .rev()
                            .find(|f| f.kind == kinds.py.function_definition)
                            .map(|f| f.node)
                    };
                    facts.observe(&kinds.py, node, function, src)
                }
                Facts::Bash(facts) => facts.observe(&kinds.sh, node, src),
            }
        }
        if flags & interest::SITE != 0 {
            self.sites.push(node);
        }
        if flags & interest::STRING != 0 && node.byte_range().len() >= MIN_BLOB_BYTES {
            self.strings.push(node);
        }
        if flags & interest::FOLD != 0 {
            self.folds.push(node);
        }
        descend
    }

    /// A child of a node whose kind has [`interest::CHILDREN`]; its frame is the last of `frames`.
    fn child(
        &mut self,
        kinds: &Kinds,
        node: Node<'t>,
        frames: &mut [Frame<'t>],
        src: &str,
        pos: &Positions<'_>,
    ) {
        if let Facts::Python(_) = self.facts {
            kinds
                .py_syntax
                .child(node, frames, src, pos, &mut self.syntax);
        }
    }

    /// A node of a kind with [`interest::EXIT`], once its children were visited; `frames` holds its
    /// ancestors.
    fn exit(
        &mut self,
        kinds: &Kinds,
        frame: &Frame<'t>,
        frames: &[Frame<'t>],
        src: &str,
        pos: &Positions<'_>,
    ) {
        if let Facts::Python(_) = self.facts
            && self.syntax.len() < MAX_FINDINGS
        {
            kinds
                .py_syntax
                .exit(frame, frames.last(), src, pos, &mut self.syntax);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::domain::script::Language;
    use crate::rules::grammar::Grammar;

    /// Every script of the repository's corpora and the benchmark fixtures, with its language.
    fn corpora() -> Vec<(Language, String)> {
        #[derive(serde::Deserialize)]
        struct Case {
            language: Language,
            script: String,
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut out = Vec::new();
        for folder in ["tests/corpus", "tests/corpus_heldout"] {
            let Ok(dir) = std::fs::read_dir(root.join(folder)) else {
                continue;
            };
            for entry in dir {
                let path = entry.expect("dir entry").path();
                if path.extension().is_some_and(|e| e == "yml") {
                    let text = std::fs::read_to_string(&path).expect("corpus file");
                    let cases: Vec<Case> = serde_norway::from_str(&text).expect("corpus cases");
                    out.extend(cases.into_iter().map(|c| (c.language, c.script)));
                }
            }
        }
        for entry in std::fs::read_dir(root.join("benches/fixtures")).expect("fixtures") {
            let path = entry.expect("dir entry").path();
            let language = match path.extension().and_then(|e| e.to_str()) {
                Some("py") => Language::Python,
                Some("sh") => Language::Bash,
                _ => continue,
            };
            out.push((language, std::fs::read_to_string(&path).expect("fixture")));
        }
        out
    }

    /// The walk climbs to a parent once it has seen `child_count()` children, without asking the
    /// cursor for one more: that count must be what the cursor visits, on every node of every
    /// script (broken ones too), or the walk would skip nodes.
    #[test]
    fn child_counts_are_what_the_cursor_visits() {
        let cases = corpora();
        assert!(cases.len() > 100, "the corpora are found");
        for (language, script) in cases {
            let grammar = Grammar::new(language);
            let tree = grammar.parse(&super::super::parse_text(language, &script));
            let mut nodes = vec![tree.root_node()];
            let mut cursor = tree.walk();
            while let Some(node) = nodes.pop() {
                // Counted with the cursor itself (`Node::children` trusts `child_count()`).
                cursor.reset(node);
                let mut visited = Vec::new();
                if cursor.goto_first_child() {
                    visited.push(cursor.node());
                    while cursor.goto_next_sibling() {
                        visited.push(cursor.node());
                    }
                }
                assert_eq!(
                    u32::try_from(visited.len()).expect("fits"),
                    node.child_count(),
                    "{language}: {} at {:?} in {script:?}",
                    node.kind(),
                    node.start_position()
                );
                nodes.extend(visited);
            }
        }
    }
}
