//! Values a loop gives an expression: a name a `for` loop binds to each item of a constant
//! list, tuple or set (directly or through a name bound to one), and the expressions built from
//! it, folded once per item.

use tree_sitter::Node;

use super::{Binding, PySem, ident};

impl<'a> PySem<'a> {
    /// The values of an expression built from one loop variable over constant items
    /// (`for d in DIRS: shutil.rmtree(Path(d))`, `for rc in RC_FILES: p = Path.home() / rc`): the
    /// expression folded once per item; `None` unless it folds for every item.
    pub(super) fn loop_values(&self, node: Node<'a>) -> Option<Vec<String>> {
        if self.bound.is_some() {
            return None;
        }
        let (var, items) = self.loop_variable(node, 0)?;
        items
            .into_iter()
            .map(|item| {
                PySem {
                    bound: Some((var, item)),
                    ..*self
                }
                .fold(node)
            })
            .collect()
    }

    /// The first name in an expression (or in the values of the names it uses) that a `for`
    /// loop binds to each item of a constant list, tuple or set, with those items.
    fn loop_variable(&self, node: Node<'a>, depth: u8) -> Option<(Node<'a>, Vec<Node<'a>>)> {
        const MAX_ITEMS: usize = 64;
        if depth > 4 {
            return None;
        }
        if node.kind_id() == self.k.identifier {
            return match self.binding(&ident(node, self.src))? {
                Binding::Item(iterable, None) | Binding::Refined(_, iterable, None) => {
                    let items = self.literal_items(iterable, 0)?;
                    (items.len() <= MAX_ITEMS).then_some((node, items))
                }
                Binding::Value(value) => self.loop_variable(value, depth + 1),
                _ => None,
            };
        }
        let mut cursor = node.walk();
        let children: Vec<Node<'a>> = node.named_children(&mut cursor).collect();
        children
            .into_iter()
            .find_map(|c| self.loop_variable(c, depth + 1))
    }

    /// The list or tuple literals a loop variable goes through (`for argv in ([…], […])`).
    pub(crate) fn loop_argv_lists(&self, node: Node<'a>) -> Option<Vec<Node<'a>>> {
        if node.kind_id() != self.k.identifier {
            return None;
        }
        let Some(Binding::Item(iterable, None)) = self.binding(&ident(node, self.src)) else {
            return None;
        };
        let items = self.literal_items(iterable, 0)?;
        items
            .iter()
            .all(|i| i.kind_id() == self.k.list || i.kind_id() == self.k.tuple)
            .then_some(items)
    }

    /// The items of a list, tuple or set literal, directly or through a name bound to one.
    pub(crate) fn literal_items(&self, node: Node<'a>, depth: u8) -> Option<Vec<Node<'a>>> {
        let k = self.k;
        let kind = node.kind_id();
        if kind == k.list || kind == k.tuple || kind == k.set {
            let mut cursor = node.walk();
            return Some(node.named_children(&mut cursor).collect());
        }
        if kind == k.identifier
            && depth < 4
            && let Some(Binding::Value(value)) = self.binding(&ident(node, self.src))
        {
            return self.literal_items(value, depth + 1);
        }
        None
    }
}
