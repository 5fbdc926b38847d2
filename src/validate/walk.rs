//! The one tree walk: everything later layers need from the tree is gathered in a single pass.
//!
//! Per node it runs the syntax checks, records the facts rules rely on (imports, assignments),
//! queues the node for every rule indexed under its kind, and notes inline-program sites and long
//! string literals (for secret decoding). Rules are evaluated after the walk, when all facts are known.

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
pub enum Facts {
    Python(PyFacts),
    Bash(BashFacts),
}

#[derive(Debug)]
pub struct Walk<'t> {
    pub syntax: Vec<Finding>,
    /// Nodes with rules indexed under their kind, to evaluate once all facts are known.
    pub candidates: Vec<Node<'t>>,
    /// Calls (Python) or commands (Bash) that may start an inline program.
    pub sites: Vec<Node<'t>>,
    /// Long string literals, to decode and scan for secrets.
    pub strings: Vec<Node<'t>>,
    /// Expressions that may assemble a string from literals (`"a" + "b"`, `"$a$b"`), in document order.
    pub folds: Vec<Node<'t>>,
    pub facts: Facts,
    /// Byte ranges hidden from the tree by the Bash heredoc grammar gap, to check on their own.
    pub regions: Vec<(usize, usize)>,
}

/// What the walk does with nodes of a kind (a bit set, one entry per kind id).
pub mod interest {
    pub const CANDIDATE: u8 = 1;
    pub const FACT: u8 = 2;
    pub const SYNTAX: u8 = 4;
    pub const SITE: u8 = 8;
    pub const STRING: u8 = 16;
    pub const FOLD: u8 = 32;
}

pub fn run<'t>(
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
    };
    let table = kinds.interest(language);
    let has_errors = tree.root_node().has_error();
    let mut cursor = tree.walk();
    // The path from the root to the current node's parent: parents without Node::parent(), which
    // re-descends from the root in tree-sitter.
    let mut ancestors: Vec<Node<'t>> = Vec::with_capacity(64);
    // For checks that look at a node's children (one allocation per walk, not per node).
    let mut scratch = tree.walk();
    'nodes: loop {
        let node = cursor.node();
        // ERROR nodes have kind id u16::MAX, outside the table.
        let flags = table.get(usize::from(node.kind_id())).copied().unwrap_or(0);
        let descend = if flags != 0 || has_errors {
            walk.visit(
                kinds,
                node,
                flags,
                &ancestors,
                &mut scratch,
                has_errors,
                src,
                pos,
            )
        } else {
            true
        };
        if descend && ancestors.len() < MAX_DEPTH && cursor.goto_first_child() {
            ancestors.push(node);
            continue;
        }
        if descend && ancestors.len() >= MAX_DEPTH && node.child_count() > 0 {
            walk.syntax.push(syntax::too_deep(pos, node));
        }
        loop {
            if cursor.goto_next_sibling() {
                continue 'nodes;
            }
            if !cursor.goto_parent() {
                break 'nodes;
            }
            ancestors.pop();
        }
    }
    walk.syntax.truncate(MAX_FINDINGS);
    walk
}

impl<'t> Walk<'t> {
    #[allow(clippy::too_many_arguments)]
    fn visit(
        &mut self,
        kinds: &Kinds,
        node: Node<'t>,
        flags: u8,
        ancestors: &[Node<'t>],
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
                    ancestors,
                    scratch,
                    has_errors,
                    src,
                    pos,
                    &mut self.syntax,
                ),
                Facts::Bash(_) => kinds.sh_syntax.check(
                    node,
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
        }
        if flags & interest::FACT != 0 {
            match &mut self.facts {
                Facts::Python(facts) => facts.observe(&kinds.py, node, src),
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
}
