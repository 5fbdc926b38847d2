//! The Python matcher keys: `call:` (a call's resolved callee, positional and keyword arguments)
//! and `recursive:` (a function that calls itself).

use tree_sitter::Node;

use super::{PySem, function_of, ident};
use crate::rules::grammar::text;
use crate::rules::matcher::{CallSpec, Cx};

impl<'a> PySem<'a> {
    pub fn call_matches(&self, node: Node<'a>, spec: &CallSpec, cx: &Cx<'a>) -> bool {
        let (names, hot) = cx.callee(node, || self.callee_names(node));
        if !hot || !names.iter().any(|n| spec.callee.contains(n)) {
            return false;
        }
        if let Some(arg) = &spec.arg {
            let args = self.effective_positional(node);
            let hit = match arg.index {
                Some(i) => args.get(i).is_some_and(|a| arg.inner.matches(*a, cx)),
                None => args.iter().any(|a| arg.inner.matches(*a, cx)),
            };
            if !hit {
                return false;
            }
        }
        if let Some(kw) = &spec.keyword {
            let hit = self
                .effective_keywords(node)
                .into_iter()
                .any(|(name, value)| {
                    kw.name.is_match(&name)
                        && kw.value.as_ref().is_none_or(|m| m.matches(value, cx))
                });
            if !hit {
                return false;
            }
        }
        true
    }

    pub fn is_recursive(&self, node: Node<'_>) -> bool {
        let (Some(name), Some(body)) = (
            node.child_by_field_id(self.k.f_name),
            node.child_by_field_id(self.k.f_body),
        ) else {
            return false;
        };
        let name = ident(name, self.src);
        // A call of the function names it (NFKC-equal names aside: those take the long way).
        if self.src.is_ascii() && !text(body, self.src).contains(name.as_str()) {
            return false;
        }
        let mut stack = vec![body];
        while let Some(n) = stack.pop() {
            if n.kind_id() == self.k.call
                && function_of(n)
                    .is_some_and(|f| f.kind_id() == self.k.identifier && ident(f, self.src) == name)
            {
                return true;
            }
            stack.extend(crate::rules::grammar::children(n).filter(|c| c.is_named()));
        }
        false
    }
}
