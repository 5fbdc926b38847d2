//! Where a name's binding holds: inside one `for` loop (or comprehension) over it, or inside one
//! function that assigns it once. A name bound in several places is `Many` for the script as a
//! whole, but each loop's or function's own binding inside it.

use tree_sitter::Node;

use super::facts::{Binding, PyFacts};

impl<'t> PyFacts<'t> {
    pub(super) fn record_loop(
        &mut self,
        name: String,
        binding: Binding<'t>,
        scope: (usize, usize),
    ) {
        self.record(name.clone(), binding);
        self.consts.insert(name.clone(), None);
        self.loop_scopes
            .entry(name)
            .or_default()
            .push((scope.0, scope.1, binding));
    }

    /// Notes an assignment of `name` inside `function`, the innermost function holding it.
    pub(super) fn record_local(&mut self, function: Node<'t>, name: &str, binding: Binding<'t>) {
        let range = (function.start_byte(), function.end_byte());
        let scopes = self.local_scopes.entry(name.to_string()).or_default();
        match scopes.iter_mut().find(|(s, e, _)| (*s, *e) == range) {
            Some(entry) => entry.2 = None,
            None => scopes.push((range.0, range.1, Some(binding))),
        }
    }

    /// The one assignment of `name` in the innermost function holding the byte `at`, if that
    /// function assigns it exactly once.
    pub(super) fn local_binding_at(&self, name: &str, at: usize) -> Option<Binding<'t>> {
        innermost(self.local_scopes.get(name)?, at).and_then(|b| *b)
    }

    /// Each loop over `name` holding the byte `at` binds it as `binding` from now on.
    pub(super) fn rebind_in_loop(&mut self, name: &str, at: usize, binding: Binding<'t>) {
        if let Some(scopes) = self.loop_scopes.get_mut(name) {
            for scope in scopes.iter_mut().filter(|(s, e, _)| *s <= at && at < *e) {
                scope.2 = binding;
            }
        }
    }

    /// The binding of the innermost `for` loop over `name` that holds the byte `at`.
    pub(super) fn loop_binding_at(&self, name: &str, at: usize) -> Option<Binding<'t>> {
        innermost(self.loop_scopes.get(name)?, at).copied()
    }
}

/// The value of the narrowest byte range `(start, end, value)` holding `at`.
fn innermost<T>(scopes: &[(usize, usize, T)], at: usize) -> Option<&T> {
    scopes
        .iter()
        .filter(|(start, end, _)| *start <= at && at < *end)
        .min_by_key(|(start, end, _)| end - start)
        .map(|(_, _, value)| value)
}
