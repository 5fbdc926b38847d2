//! The items of constant containers: list and tuple literals (directly or through a name bound
//! to one), comprehensions over constants, `map(chr, …)`, and the values a container or a
//! subscript of one may take; and the argv lists a function's callers hand it (a parameter run
//! as a command, `*args` spliced into an argv).

use tree_sitter::Node;

use super::ops::parse_int;
use super::*;

impl<'a> PySem<'a> {
    /// Items of a list/tuple of constants, a constant string (its characters) or `reversed(...)`.
    pub(super) fn fold_items(&self, node: Node<'_>, d: u8) -> Option<Vec<String>> {
        let k = self.k;
        if node.kind_id() == k.list || node.kind_id() == k.tuple {
            return crate::rules::grammar::children(node)
                .filter(|c| c.is_named())
                .map(|item| {
                    self.fold_at(item, d)
                        .or_else(|| self.fold_int(item).map(|i| i.to_string()))
                })
                .collect();
        }
        if node.kind_id() == k.generator_expression || node.kind_id() == k.list_comprehension {
            return self.fold_comprehension(node, d);
        }
        // `parts = ["ghp_", "…"]; "".join(parts)`: a name bound once to a list or tuple literal.
        if node.kind_id() == k.identifier
            && d > 0
            && let Some(Binding::Value(value)) = self.binding_of(node)
            && (value.kind_id() == k.list || value.kind_id() == k.tuple)
        {
            return self.fold_items(value, d - 1);
        }
        // `map(chr, [103, 108, …])`, `map(str, parts)`: each item through the function
        if node.kind_id() == k.call
            && d > 0
            && let Some(func) = function_of(node)
            && text(func, self.src) == "map"
            && let [f, items] = self.positional(node)[..]
            && matches!(text(f, self.src), "chr" | "str")
        {
            // The same depth: `items` is inside this call, and a name in it spends its own.
            let values = self.fold_items(items, d)?;
            if text(f, self.src) == "str" {
                return Some(values);
            }
            return values
                .iter()
                .map(|v| {
                    let code = parse_int(v)?;
                    char::from_u32(u32::try_from(code).ok()?).map(String::from)
                })
                .collect();
        }
        let s = self.fold_at(node, d)?;
        Some(s.chars().map(String::from).collect())
    }

    /// `chr(c) for c in (115, 121, …)` and `p for p in parts`: one loop over constant items whose
    /// body is the variable or `chr` of it (how names are spelt out to hide them).
    fn fold_comprehension(&self, node: Node<'_>, d: u8) -> Option<Vec<String>> {
        let k = self.k;
        let body = node.child_by_field_id(k.f_body)?;
        let mut clauses =
            crate::rules::grammar::children(node).filter(|c| c.is_named() && c.id() != body.id());
        let clause = clauses.next().filter(|c| c.kind_id() == k.for_in_clause)?;
        if clauses.next().is_some() {
            return None; // a second `for` or an `if`
        }
        let var = clause.child_by_field_id(k.f_left)?;
        let items = clause.child_by_field_id(k.f_right)?;
        let is_var =
            |n: Node<'_>| n.kind_id() == k.identifier && text(n, self.src) == text(var, self.src);
        let as_chr = function_of(body)
            .filter(|f| text(*f, self.src) == "chr")
            .and_then(|_| self.positional(body).first().copied())
            .is_some_and(is_var);
        if var.kind_id() != k.identifier {
            return None;
        }
        // a shell command's words each passed through shlex.quote (`" ".join(quote(p) for p in
        // paths)`): each is a quoted word, however many there are
        if self.quoting && !is_var(body) && !as_chr {
            return self.fold_at(body, d).map(|v| vec![v]);
        }
        if !(is_var(body) || as_chr) {
            return None;
        }
        let values = self.fold_items(items, d)?;
        if !as_chr {
            return Some(values);
        }
        values
            .iter()
            .map(|v| {
                let code = parse_int(v)?;
                char::from_u32(u32::try_from(code).ok()?).map(String::from)
            })
            .collect()
    }

    /// The constant values of a dict (its values), list, tuple or set literal.
    pub(super) fn container_values(&self, node: Node<'_>) -> Option<Vec<String>> {
        let k = self.k;
        let kind = node.kind_id();
        if kind != k.dictionary && kind != k.list && kind != k.tuple && kind != k.set {
            return None;
        }
        crate::rules::grammar::children(node)
            .filter(|c| c.is_named())
            .filter(|c| !c.is_extra())
            .map(|item| {
                let item = if item.kind_id() == k.pair {
                    item.child_by_field_id(k.f_value)?
                } else {
                    item
                };
                self.fold(item)
            })
            .collect()
    }

    /// Every constant value the expression can have, when that is known: a constant, or an
    /// element of a constant container it indexes (`FORMATS[fmt]`, `ALLOWED.get(name)`), through
    /// a name bound once to such an expression.
    pub fn possible_values(&self, node: Node<'_>) -> Option<Vec<String>> {
        self.possible_values_at(node, 0)
    }

    fn possible_values_at(&self, node: Node<'_>, depth: u8) -> Option<Vec<String>> {
        if let Some(v) = self.fold(node) {
            return Some(vec![v]);
        }
        if depth >= MAX_VALUE_DEPTH {
            return None;
        }
        // `module_path = ALLOWED.get(name)`: the values of what the name was bound to
        if node.kind_id() == self.k.identifier
            && let Some(Binding::Value(value)) = self.binding_of(node)
            && value.kind_id() != self.k.identifier
        {
            return self.possible_values_at(value, depth + 1);
        }
        // `ALLOWED.get(name)`, `ALLOWED.get(name, "default")` of a constant dict: one of its
        // values, or the default
        if node.kind_id() == self.k.call
            && let Some((table, method)) = method_call(self.k, node)
            && text(method, self.src) == "get"
            && table.kind_id() == self.k.identifier
            && let Some(Some(values)) = self.facts.containers.get(&ident(table, self.src))
        {
            let mut out = values.clone();
            let args = self.positional(node);
            match args.get(1) {
                Some(default) => out.extend(self.possible_values_at(*default, depth + 1)?),
                None if args.len() != 1 => return None,
                None => {}
            }
            return Some(out);
        }
        // `for p in ["/etc", "/usr"]`: the loop variable takes each constant item.
        if node.kind_id() == self.k.identifier
            && let Some(Binding::Item(items, None)) = self.binding_of(node)
            && (items.kind_id() == self.k.list || items.kind_id() == self.k.tuple)
        {
            return crate::rules::grammar::children(items)
                .filter(|c| c.is_named())
                .map(|item| self.fold(item))
                .collect();
        }
        // `"cls" if os.name == "nt" else "clear"`: either branch's values
        if node.kind_id() == self.k.conditional_expression {
            let mut out = Vec::new();
            for branch in [node.named_child(0), node.named_child(2)] {
                out.extend(self.possible_values_at(branch?, depth + 1)?);
            }
            return Some(out);
        }
        // (a slice of a loop variable, `spec[::-1]`, is that variable's values sliced)
        if node.kind_id() != self.k.subscript
            || node
                .child_by_field_id(self.k.f_subscript)
                .is_some_and(|i| i.kind_id() == self.k.slice)
        {
            return self.loop_values(node);
        }
        let container = node.child_by_field_id(self.k.f_value)?;
        if container.kind_id() == self.k.identifier {
            return self
                .facts
                .containers
                .get(&ident(container, self.src))?
                .clone();
        }
        self.container_values(container)
    }

    /// A credential-shaped slot given a name: `{"key": name}`, `f(key=name)`, `key = name`, as the
    /// slot's node and the name's.
    pub fn slot_given_a_name<'t>(&self, node: Node<'t>) -> Option<(Node<'t>, Node<'t>)> {
        let k = self.k;
        let kind = node.kind_id();
        let (slot, value) = if kind == k.pair {
            (k.f_key, k.f_value)
        } else if kind == k.keyword_argument {
            (k.f_name, k.f_value)
        } else if kind == k.assignment {
            (k.f_left, k.f_right)
        } else {
            return None;
        };
        let value = node.child_by_field_id(value)?;
        if value.kind_id() != k.identifier {
            return None;
        }
        Some((node.child_by_field_id(slot)?, value))
    }

    /// Values a parameter is known to take at some of its function's call sites (`compact(p)` for
    /// each globbed `p`, then `compact(extra)` for each of a constant tuple, or its default where a
    /// call leaves it out): the ones known, for
    /// rules asking whether a value *may* match; not a proof that the parameter is constant.
    pub fn parameter_values(&self, node: Node<'a>) -> Vec<String> {
        if node.kind_id() != self.k.identifier {
            return Vec::new();
        }
        let name = ident(node, self.src);
        if !self.facts.shadowed_by_parameter(&name, node.start_byte()) {
            return Vec::new();
        }
        self.facts
            .parameter_bindings(self.k, &name, self.src)
            .into_iter()
            .filter_map(|b| match b {
                Binding::Value(value) => self.possible_values(value),
                _ => None,
            })
            .chain(
                self.facts
                    .parameter_default(self.k, &name, self.src)
                    .and_then(|d| self.possible_values(d)),
            )
            .flatten()
            .collect()
    }

    /// The constant items of a list or tuple literal; `None` for an item that is not constant.
    pub fn list_items(&self, node: Node<'a>) -> Option<Vec<(Node<'a>, Option<String>)>> {
        // `cmd = ["rm", "-rf", d]; subprocess.run(cmd)`: a name bound once to the list
        let mut node = node;
        for _ in 0..4 {
            if node.kind_id() != self.k.identifier {
                break;
            }
            match self.binding_of(node) {
                Some(Binding::Value(value)) => node = value,
                _ => return None,
            }
        }
        if node.kind_id() != self.k.list && node.kind_id() != self.k.tuple {
            return None;
        }
        let mut cursor = node.walk();
        Some(
            node.named_children(&mut cursor)
                .map(|item| (item, self.fold(item)))
                .collect(),
        )
    }
}

/// An argv as list items with their folded values, and the call it comes from.
pub type ForwardedArgv<'a> = (Node<'a>, Vec<(Node<'a>, Option<String>)>);

/// Calls of one function followed, at most: each gives its own command line.
const MAX_CALLS: usize = 32;
/// How many names and branches [`PySem::possible_values`] follows.
const MAX_VALUE_DEPTH: u8 = 4;

impl<'a> PySem<'a> {
    /// `def git(*args): subprocess.run(["git", *args])` and then `git("push", "--force")`: the argv
    /// each call of the function gives a list that splices the function's `*args`, one per call
    /// (anchored at the call; arguments that do not fold are `None`).
    pub fn forwarded_lists(&self, list: Node<'a>) -> Vec<ForwardedArgv<'a>> {
        let mut cursor = list.walk();
        let items: Vec<Node<'a>> = list.named_children(&mut cursor).collect();
        let Some((at, splat)) = items.iter().enumerate().find_map(|(i, item)| {
            (item.kind() == "list_splat")
                .then(|| item.named_child(0))
                .flatten()
                .filter(|n| n.kind_id() == self.k.identifier)
                .map(|n| (i, n))
        }) else {
            return Vec::new();
        };
        let name = ident(splat, self.src);
        let Some(function) = enclosing_function(list) else {
            return Vec::new();
        };
        if self.takes_rest(function, &name) {
            return self.argv_per_call(function, &items, at);
        }
        // `def run(cmd): subprocess.run(["sudo", "-n", *cmd])` and then `run(["nft", "list",
        // "ruleset"])`: the list each call passes, spliced in
        self.forwarded_args(splat)
            .into_iter()
            .filter_map(|(call, passed)| {
                let passed = self.list_items(passed)?;
                let mut argv: Vec<(Node<'a>, Option<String>)> = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    if i == at {
                        argv.extend(passed.iter().cloned());
                    } else {
                        argv.push((*item, self.fold(*item)));
                    }
                }
                Some((call, argv))
            })
            .collect()
    }

    /// `def sh(*args): subprocess.run(args)` and then `sh("git", "push", "--force")`: the argv each
    /// call of the function gives when its `*args` is the argv itself (anchored at the call).
    pub fn forwarded_rest(&self, name: Node<'a>) -> Vec<ForwardedArgv<'a>> {
        if name.kind_id() != self.k.identifier {
            return Vec::new();
        }
        let wanted = ident(name, self.src);
        let Some(function) = enclosing_function(name) else {
            return Vec::new();
        };
        if !self.takes_rest(function, &wanted) {
            return Vec::new();
        }
        self.argv_per_call(function, &[name], 0)
    }

    /// For each call of `function`, the argv `items` make with the item at `at` replaced by the
    /// call's positional arguments (each folded when constant).
    fn argv_per_call(
        &self,
        function: Node<'a>,
        items: &[Node<'a>],
        at: usize,
    ) -> Vec<ForwardedArgv<'a>> {
        self.calls_of(function)
            .into_iter()
            .map(|call| {
                let passed = self.positional(call);
                let mut argv: Vec<(Node<'a>, Option<String>)> = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    if i == at {
                        argv.extend(passed.iter().map(|a| (*a, self.fold(*a))));
                    } else {
                        argv.push((*item, self.fold(*item)));
                    }
                }
                (call, argv)
            })
            .collect()
    }

    /// Whether `function` collects its extra positional arguments in `*name`.
    fn takes_rest(&self, function: Node<'a>, name: &str) -> bool {
        function
            .child_by_field_id(self.k.f_parameters)
            .into_iter()
            .flat_map(|p| crate::rules::grammar::children(p).collect::<Vec<_>>())
            .any(|p| {
                p.kind() == "list_splat_pattern"
                    && p.named_child(0).is_some_and(|n| ident(n, self.src) == name)
            })
    }

    /// `def quiet(cmd): subprocess.run(cmd, …)` and then `quiet(["systemctl", "stop", a])`: the
    /// argument each call of the enclosing function passes for the parameter `name`, with the call
    /// it comes from.
    pub fn forwarded_args(&self, name: Node<'a>) -> Vec<(Node<'a>, Node<'a>)> {
        if name.kind_id() != self.k.identifier {
            return Vec::new();
        }
        let wanted = ident(name, self.src);
        let Some(function) = enclosing_function(name) else {
            return Vec::new();
        };
        let Some(position) = function
            .child_by_field_id(self.k.f_parameters)
            .and_then(|p| {
                let mut cursor = p.walk();
                p.named_children(&mut cursor).position(|param| {
                    parameter_name(self.k, param).is_some_and(|n| ident(n, self.src) == wanted)
                })
            })
        else {
            return Vec::new();
        };
        self.calls_of(function)
            .into_iter()
            .filter_map(|call| Some((call, *self.positional(call).get(position)?)))
            .collect()
    }

    /// `def run(cmd, **kw)`: the script's calls of the function whose `**name` parameter `name`
    /// is (each call's keywords land in it, less those a named parameter takes: a superset).
    pub(super) fn keyword_rest_calls(&self, name: Node<'a>) -> Vec<Node<'a>> {
        if name.kind_id() != self.k.identifier {
            return Vec::new();
        }
        let wanted = ident(name, self.src);
        let Some(function) = enclosing_function(name) else {
            return Vec::new();
        };
        let takes_rest = function
            .child_by_field_id(self.k.f_parameters)
            .into_iter()
            .flat_map(|p| crate::rules::grammar::children(p).collect::<Vec<_>>())
            .any(|p| {
                p.kind() == "dictionary_splat_pattern"
                    && p.named_child(0)
                        .is_some_and(|n| ident(n, self.src) == wanted)
            });
        if takes_rest {
            self.calls_of(function)
        } else {
            Vec::new()
        }
    }

    /// The script's calls of a `def` by its name (at most [`MAX_CALLS`]).
    fn calls_of(&self, function: Node<'a>) -> Vec<Node<'a>> {
        let Some(fname) = function
            .child_by_field_id(self.k.f_name)
            .map(|n| text(n, self.src))
        else {
            return Vec::new();
        };
        self.facts
            .calls
            .iter()
            .filter(|call| function_of(**call).is_some_and(|f| text(f, self.src) == fname))
            .take(MAX_CALLS)
            .copied()
            .collect()
    }
}

/// The `def` a node sits in, if any.
fn enclosing_function(node: Node<'_>) -> Option<Node<'_>> {
    let mut current = node.parent();
    while let Some(n) = current {
        if n.kind() == "function_definition" {
            return Some(n);
        }
        current = n.parent();
    }
    None
}
