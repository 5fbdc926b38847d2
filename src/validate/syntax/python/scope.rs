//! Where a Python statement sits: inside a function, an `async def` or the body of a loop, as
//! `return`, `yield`, `await`, `nonlocal`, `break` and `continue` require.

use super::PySyntax;
use crate::rules::grammar::text;
use crate::validate::walk::Frame;

impl PySyntax {
    /// Inside an `async def` (the innermost function).
    pub(super) fn in_async_function(&self, frames: &[Frame<'_>], src: &str) -> bool {
        frames
            .iter()
            .rev()
            .find(|p| p.kind == self.function_definition || p.kind == self.lambda)
            .is_some_and(|f| text(f.node, src).starts_with("async"))
    }

    /// Inside the body of a `for`/`while` of the innermost function or class: a loop's `else:`
    /// is outside it, and a `def`/`class`/`lambda` starts a new scope with no loop around it.
    pub(super) fn in_loop(&self, frames: &[Frame<'_>]) -> bool {
        let mut came_from = None;
        for p in frames.iter().rev() {
            let k = p.kind;
            if self.loops.contains(&k) && came_from != Some(self.else_clause) {
                return true;
            }
            if k == self.function_definition || k == self.lambda || k == self.class_definition {
                return false;
            }
            came_from = Some(k);
        }
        false
    }

    pub(super) fn in_function(&self, frames: &[Frame<'_>]) -> bool {
        for p in frames.iter().rev() {
            let k = p.kind;
            if k == self.function_definition || k == self.lambda {
                return true;
            }
            if k == self.class_definition {
                return false;
            }
        }
        false
    }
}
