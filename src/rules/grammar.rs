//! tree-sitter grammars and the node-kind / field ids that rules and checks refer to by name.

use tree_sitter::{Language as TsLanguage, Node, Parser, Tree};

use crate::domain::script::Language;

/// A grammar with name → id lookups resolved once.
#[derive(Debug, Clone)]
pub struct Grammar {
    pub language: Language,
    ts: TsLanguage,
}

impl Grammar {
    pub fn new(language: Language) -> Self {
        let ts = match language {
            Language::Python => tree_sitter_python::LANGUAGE.into(),
            Language::Bash => tree_sitter_bash::LANGUAGE.into(),
        };
        Grammar { language, ts }
    }

    pub fn ts(&self) -> &TsLanguage {
        &self.ts
    }

    /// The id of a named node kind, or `None` when the grammar has no such kind.
    pub fn kind(&self, name: &str) -> Option<u16> {
        match self.ts.id_for_node_kind(name, true) {
            0 => None,
            id => Some(id),
        }
    }

    /// Like [`Grammar::kind`], for kinds the code itself relies on (a missing one is a grammar bug).
    pub fn known_kind(&self, name: &str) -> u16 {
        self.kind(name)
            .unwrap_or_else(|| panic!("{} grammar has no node kind `{name}`", self.language))
    }

    pub fn field(&self, name: &str) -> Option<u16> {
        self.ts.field_id_for_name(name).map(|f| f.get())
    }

    pub fn known_field(&self, name: &str) -> u16 {
        self.field(name)
            .unwrap_or_else(|| panic!("{} grammar has no field `{name}`", self.language))
    }

    pub fn kind_count(&self) -> usize {
        self.ts.node_kind_count()
    }

    /// Parses `text`. Parsers are cheap to keep but not `Sync`, so each thread keeps one per grammar.
    pub fn parse(&self, text: &str) -> Tree {
        thread_local! {
            static PARSERS: std::cell::RefCell<[Option<Parser>; 2]> = const { std::cell::RefCell::new([None, None]) };
        }
        let slot = match self.language {
            Language::Python => 0,
            Language::Bash => 1,
        };
        PARSERS.with(|cell| {
            let mut parsers = cell.borrow_mut();
            let parser = parsers[slot].get_or_insert_with(|| {
                let mut p = Parser::new();
                p.set_language(&self.ts)
                    .expect("grammar ABI is supported by the linked tree-sitter");
                p
            });
            // `parse` only returns None on cancellation or without a language; neither applies.
            parser
                .parse(text, None)
                .expect("tree-sitter parse without cancellation")
        })
    }
}

/// The node of `node`'s tree that spans exactly `start..end` (a range a walk recorded), if any.
pub fn node_spanning<'t>(node: Node<'t>, start: usize, end: usize) -> Option<Node<'t>> {
    let mut root = node;
    while let Some(parent) = root.parent() {
        root = parent;
    }
    root.descendant_for_byte_range(start, end)
        .filter(|n| n.byte_range() == (start..end))
}

/// The source text of a node.
pub fn text<'s>(node: Node<'_>, src: &'s str) -> &'s str {
    src.get(node.byte_range()).unwrap_or("")
}

/// Nodes with more children than this are iterated with a cursor by [`children`].
const INDEXED_CHILDREN: u32 = 12;

/// The children of `node`, without allocating a cursor for the usual few (`Node::child(i)` starts
/// from the first child, so wide nodes are collected with a cursor instead).
pub fn children<'t>(node: Node<'t>) -> Children<'t> {
    let count = node.child_count();
    if count <= INDEXED_CHILDREN {
        Children::Indexed {
            node,
            next: 0,
            count,
        }
    } else {
        Children::Collected(
            node.children(&mut node.walk())
                .collect::<Vec<_>>()
                .into_iter(),
        )
    }
}

/// See [`children`].
#[derive(Debug)]
pub enum Children<'t> {
    Indexed {
        node: Node<'t>,
        next: u32,
        count: u32,
    },
    Collected(std::vec::IntoIter<Node<'t>>),
}

impl<'t> Iterator for Children<'t> {
    type Item = Node<'t>;

    fn next(&mut self) -> Option<Node<'t>> {
        match self {
            Children::Indexed { node, next, count } => {
                while *next < *count {
                    let i = *next;
                    *next += 1;
                    if let Some(child) = node.child(i) {
                        return Some(child);
                    }
                }
                None
            }
            Children::Collected(it) => it.next(),
        }
    }
}

/// The children of `node` in field `field` (fields such as `argument` repeat).
pub fn children_in_field<'t>(node: Node<'t>, field: u16) -> Vec<Node<'t>> {
    let mut cursor = node.walk();
    let mut out = Vec::new();
    if cursor.goto_first_child() {
        loop {
            if cursor.field_id().map(|f| f.get()) == Some(field) {
                out.push(cursor.node());
            }
            if !cursor.goto_next_sibling() {
                break;
            }
        }
    }
    out
}
