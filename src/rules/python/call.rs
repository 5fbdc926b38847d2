//! A Python call's parts as written: its positional and keyword arguments and the last name of
//! its callee.

use tree_sitter::Node;

use super::{PySem, ident};
use crate::rules::grammar::text;
use crate::rules::matcher::normalized;

impl<'a> PySem<'a> {
    pub fn positional<'t>(&self, call: Node<'t>) -> Vec<Node<'t>> {
        let Some(args) = call.child_by_field_id(self.k.f_arguments) else {
            return Vec::new();
        };
        // `"".join(chr(c) for c in codes)`: a lone generator argument is the call's `arguments`
        // (its children are the generator's body and clauses, not arguments)
        if args.kind_id() == self.k.generator_expression {
            return vec![args];
        }
        crate::rules::grammar::children(args)
            .filter(|c| c.is_named())
            .filter(|a| a.kind_id() != self.k.keyword_argument && a.kind_id() != self.k.comment)
            .collect()
    }

    pub(super) fn keywords<'t>(&self, call: Node<'t>) -> Vec<(String, Node<'t>)> {
        let Some(args) = call.child_by_field_id(self.k.f_arguments) else {
            return Vec::new();
        };
        crate::rules::grammar::children(args)
            .filter(|c| c.is_named())
            .filter(|a| a.kind_id() == self.k.keyword_argument)
            .filter_map(|kw| {
                let name = kw.child_by_field_id(self.k.f_name)?;
                let value = kw.child_by_field_id(self.k.f_value)?;
                Some((ident(name, self.src), value))
            })
            .collect()
    }

    /// The last name of a callee expression (`b` in `a.b`, `f` in `f`), NFKC-normalised.
    pub(super) fn last_segment<'s>(&self, func: Node<'_>) -> std::borrow::Cow<'s, str>
    where
        'a: 's,
    {
        let node = if func.kind_id() == self.k.attribute {
            match func.child_by_field_id(self.k.f_attribute) {
                Some(a) => a,
                None => return std::borrow::Cow::Borrowed(""),
            }
        } else {
            func
        };
        normalized(text(node, self.src))
    }
}
