//! Parameters: what a function's parameter takes at the script's calls of that function (its
//! one call site's argument, or each known argument of several), found once per name, and
//! whether every call gives it a constant.

use tree_sitter::Node;

use super::facts::{Binding, PyFacts, enclosing_class, function_name};
use super::{PyKinds, ident};

/// Where a parameter gets a value: the call's index in [`PyFacts::calls`], the argument's
/// position, and whether the parameter takes each item of that argument (`map`/`filter`).
pub(super) type ParameterSite = (usize, usize, bool);

/// The call sites of a function looked at for what a parameter takes.
const MAX_PARAMETER_CALLS: usize = 8;

impl<'t> PyFacts<'t> {
    /// What a parameter takes from its function's one call site: the argument at its position
    /// (`prune("/etc")`), or each item of the iterable `map`/`filter` apply the function to
    /// (`map(wipe, glob.glob("/etc/*"))`, `map(lambda p: os.remove(p), paths)`).
    pub(super) fn parameter_binding(
        &self,
        k: &PyKinds,
        name: &str,
        src: &str,
    ) -> Option<Binding<'t>> {
        match self.parameter_bindings(k, name, src)[..] {
            [] => None,
            [one] => Some(one),
            _ => Some(Binding::Many),
        }
    }

    /// What a parameter takes at each of its function's call sites (at most
    /// [`MAX_PARAMETER_CALLS`]): the argument at its position, or the items `map`/`filter` apply
    /// the function to. Found once per name: rules ask about parameters at every use.
    pub(super) fn parameter_bindings(
        &self,
        k: &PyKinds,
        name: &str,
        src: &str,
    ) -> Vec<Binding<'t>> {
        if !matches!(self.params.get(name), Some(Some(_))) {
            return Vec::new();
        }
        // (found again while the walk is still adding calls: a fold during the walk asks before
        // the calls after it are known)
        let known = self.calls.len();
        let cached = self
            .parameter_cache
            .borrow()
            .get(name)
            .filter(|(calls, _)| *calls == known)
            .map(|(_, sites)| sites.clone());
        let sites = cached.unwrap_or_else(|| {
            let sites = self.parameter_sites(k, name, src);
            self.parameter_cache
                .borrow_mut()
                .insert(name.to_string(), (known, sites.clone()));
            sites
        });
        sites
            .into_iter()
            .filter_map(|(call, arg, item)| {
                let arg = arguments(k, *self.calls.get(call)?).into_iter().nth(arg)?;
                Some(if item {
                    Binding::Item(arg, None)
                } else {
                    Binding::Value(arg)
                })
            })
            .collect()
    }

    /// A parameter's default (`def purge(root="/")`), when a call of its plain function leaves
    /// the argument out (fewer positional arguments, no keyword of its name, no splat): the value
    /// the parameter then takes.
    pub(super) fn parameter_default(&self, k: &PyKinds, name: &str, src: &str) -> Option<Node<'t>> {
        let Some(Some((function, at))) = self.params.get(name).copied() else {
            return None;
        };
        if enclosing_class(k, function).is_some() {
            return None;
        }
        let parameters = function.child_by_field_id(k.f_parameters)?;
        let mut cursor = parameters.walk();
        let param = parameters
            .named_children(&mut cursor)
            .nth(usize::from(at))?;
        if !matches!(
            param.kind(),
            "default_parameter" | "typed_default_parameter"
        ) {
            return None;
        }
        let default = param.child_by_field_id(k.f_value)?;
        let own = function_name(function, src)?;
        let omitted = self.calls.iter().any(|call| {
            if super::function_of(*call).is_none_or(|f| &src[f.byte_range()] != own) {
                return false;
            }
            let args = arguments(k, *call);
            let keyword = |a: &Node<'_>| a.kind() == "keyword_argument";
            let positional = args.iter().filter(|a| !keyword(a)).count();
            positional <= usize::from(at)
                && !args.iter().any(|a| {
                    matches!(a.kind(), "list_splat" | "dictionary_splat")
                        || (keyword(a)
                            && a.child_by_field_id(k.f_name)
                                .is_some_and(|n| &src[n.byte_range()] == name))
                })
        });
        omitted.then_some(default)
    }

    /// The call sites giving a parameter a value: the call's index in `calls`, the argument's
    /// position, and whether the parameter takes each item of that argument (`map`/`filter`).
    fn parameter_sites(&self, k: &PyKinds, name: &str, src: &str) -> Vec<ParameterSite> {
        let Some(Some((function, at))) = self.params.get(name).copied() else {
            return Vec::new();
        };
        let k_name = function_name(function, src);
        // A method's callers pass what follows `self`: `obj.push(p)` and, for `__init__`, the
        // class's own calls (`Job("~")`).
        let class = enclosing_class(k, function);
        if class.is_some() && at == 0 {
            return Vec::new(); // `self`
        }
        let (at, callee_is) = match (class, k_name) {
            (Some(class), Some("__init__")) => {
                let class_name = class
                    .child_by_field_id(k.f_name)
                    .map(|n| &src[n.byte_range()]);
                let Some(class_name) = class_name else {
                    return Vec::new();
                };
                (at - 1, CalleeIs::Class(class_name))
            }
            (Some(_), Some(method)) => (at - 1, CalleeIs::Method(method)),
            _ => (at, CalleeIs::Function(k_name)),
        };
        let mut found = Vec::new();
        for (index, call) in self.calls.iter().enumerate() {
            let Some(callee) = super::function_of(*call).map(|f| &src[f.byte_range()]) else {
                continue;
            };
            let own = callee_is.matches(callee);
            // a call inside the function itself (recursion) passes on what it was given
            if (!own && !matches!(callee, "map" | "filter"))
                || (call.start_byte() >= function.start_byte()
                    && call.end_byte() <= function.end_byte())
            {
                continue;
            }
            let args = arguments(k, *call);
            let binding = if own {
                // a call that does not pass this argument gives it no value of its own
                if args.len() <= usize::from(at) {
                    continue;
                }
                (index, usize::from(at), false)
            } else if matches!(callee, "map" | "filter")
                && at == 0
                && args.len() == 2
                && (args[0].id() == function.id()
                    || k_name.is_some_and(|n| &src[args[0].byte_range()] == n))
            {
                (index, 1, true)
            } else {
                continue;
            };
            found.push(binding);
            if found.len() >= MAX_PARAMETER_CALLS {
                break;
            }
        }
        found
    }

    /// Whether `name` at byte `at` is a parameter of the function around it that no binding inside
    /// that function replaces: a name bound in another function or at the top level
    /// (`path = Path("values") / …` elsewhere) does not reach it.
    /// (Not a comprehension's or another scope's name that happens to be spelled the same.)
    pub(super) fn shadowed_by_parameter(&self, name: &str, at: usize) -> bool {
        let Some(Some((function, _))) = self.params.get(name) else {
            return false;
        };
        let inside = |n: Node<'_>| {
            function.start_byte() <= n.start_byte() && n.end_byte() <= function.end_byte()
        };
        if !(function.start_byte() <= at && at < function.end_byte()) {
            return false;
        }
        match self.bindings.get(name) {
            None => true,
            Some(Binding::Value(v) | Binding::Item(v, _) | Binding::Refined(v, _, _)) => {
                !inside(*v)
            }
            Some(Binding::Many) => false,
        }
    }
}

/// A call's arguments, without comments.
fn arguments<'t>(k: &PyKinds, call: Node<'t>) -> Vec<Node<'t>> {
    call.child_by_field_id(k.f_arguments)
        .map(|a| {
            let mut c = a.walk();
            a.named_children(&mut c)
                .filter(|n| n.kind() != "comment")
                .collect()
        })
        .unwrap_or_default()
}

/// Which calls a parameter's function receives.
#[derive(Debug, Clone, Copy)]
enum CalleeIs<'s> {
    /// `f(…)`
    Function(Option<&'s str>),
    /// `obj.method(…)`
    Method(&'s str),
    /// `Class(…)`, which runs `__init__`
    Class(&'s str),
}

impl CalleeIs<'_> {
    fn matches(self, callee: &str) -> bool {
        match self {
            CalleeIs::Function(name) => Some(callee) == name,
            CalleeIs::Method(name) => callee
                .rsplit_once('.')
                .is_some_and(|(_, method)| method == name),
            CalleeIs::Class(name) => callee == name,
        }
    }
}

impl<'a> super::PySem<'a> {
    /// Whether a parameter of a plain function is given a constant at every call of it
    /// (`def sh(cmd)` called only as `sh("uptime -p")`, `sh("df -h")`): every mention of the
    /// function's name is its `def` or a call passing a constant there, so no other caller can
    /// hand it anything else.
    pub fn parameter_always_constant(&self, node: Node<'a>) -> bool {
        if node.kind_id() != self.k.identifier {
            return false;
        }
        let name = ident(node, self.src);
        if !self.facts.shadowed_by_parameter(&name, node.start_byte()) {
            return false;
        }
        let Some(Some((function, _))) = self.facts.params.get(name.as_str()).copied() else {
            return false;
        };
        let Some(function_name) = function_name(function, self.src) else {
            return false;
        };
        let bindings = self.facts.parameter_bindings(self.k, &name, self.src);
        // (fewer than the most call sites looked at: none was left out)
        if bindings.is_empty() || bindings.len() >= MAX_PARAMETER_CALLS {
            return false;
        }
        let constant = bindings.iter().all(|b| match b {
            Binding::Value(v) => self.possible_values(*v).is_some(),
            _ => false,
        });
        constant && word_count(self.src, function_name) == bindings.len() + 1
    }
}

/// How many times `word` occurs in `src` as a whole identifier.
fn word_count(src: &str, word: &str) -> usize {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    memchr::memmem::find_iter(src.as_bytes(), word.as_bytes())
        .filter(|&at| {
            !src[..at].chars().next_back().is_some_and(is_ident)
                && !src[at + word.len()..].chars().next().is_some_and(is_ident)
        })
        .count()
}
