//! What the one walk learns about the names of a Python script: import aliases, constants, and
//! the expression each name is bound to (for values that flow through names: paths, callables,
//! keyword dictionaries).
//!
//! Flow-insensitive: a name bound twice keeps every alias, is not a constant, and has no single
//! bound expression ([`Binding::Many`]).

use rustc_hash::FxHashMap as HashMap;
use tree_sitter::Node;

use super::params::ParameterSite;
use super::{MAX_NAMES, PyKinds, PySem, dotted, ident, is_name_expr, parameter_name};
use crate::rules::grammar::{children, children_in_field};

/// What a name is bound to.
#[derive(Debug, Clone, Copy)]
pub enum Binding<'t> {
    /// Bound once: `x = value`, `with value as x`.
    Value(Node<'t>),
    /// The variable of `for x in iterable`, bound to each item; in `for a, b in iterable` the
    /// position of the name in the target.
    Item(Node<'t>, Option<u8>),
    /// A loop variable rebound from itself in the loop (`for p in paths: p = expanduser(p)`): the
    /// value, in which the name stands for each item of the iterable (as in [`Binding::Item`]).
    Refined(Node<'t>, Node<'t>, Option<u8>),
    /// Bound more than once, or in a way the walk does not follow.
    Many,
}

/// What one walk learns about names in a script.
#[derive(Debug, Default)]
pub struct PyFacts<'t> {
    /// Local name → the qualified names it may stand for (`sp` → `subprocess`).
    pub(super) aliases: HashMap<String, Vec<String>>,
    /// Modules imported with `from m import *`.
    pub(super) star_modules: Vec<String>,
    /// Names assigned exactly once to a constant string (then extended by `+=` constants);
    /// `None` once assigned again or non-constant.
    pub(super) consts: HashMap<String, Option<String>>,
    /// Names assigned exactly once to a dict/list/tuple/set literal of constants: its values.
    pub(super) containers: HashMap<String, Option<Vec<String>>>,
    /// The expression each name is bound to.
    pub(super) bindings: HashMap<String, Binding<'t>>,
    /// Entries put into a name's dict after it was bound (`opts["shell"] = True`,
    /// `opts.update(shell=True)`, `opts.setdefault("shell", True)`): key and value.
    pub(super) dict_updates: HashMap<String, Vec<(String, Node<'t>)>>,
    /// What a list, set or tuple bound to a name grows by afterwards (`paths += […]`,
    /// `paths.append(p)`, `paths.extend(more)`), with the literal it was first bound to when a
    /// `+=` made the name `Many`: every one of them is among its items.
    pub(super) grown: HashMap<String, Vec<Growth<'t>>>,
    /// Parameters of the script's functions and lambdas: the function and the position; `None`
    /// when two functions share the name.
    pub(super) params: HashMap<String, Option<(Node<'t>, u8)>>,
    /// [`PyFacts::parameter_bindings`], found on first use.
    /// (with the number of calls known when they were found)
    pub(super) parameter_cache: std::cell::RefCell<HashMap<String, (usize, Vec<ParameterSite>)>>,
    /// Calls of the script's own functions and of `map`/`filter` (`prune("/etc")`,
    /// `map(wipe, paths)`), where parameters get values.
    pub(super) calls: Vec<Node<'t>>,
    /// Each `for` loop's binding of its variables, with the loop's byte range: a name two loops
    /// use (`for f in glob(…)` … `for f in (…)`) is `Many` as a whole but each loop's own inside it.
    pub(super) loop_scopes: HashMap<String, Vec<(usize, usize, Binding<'t>)>>,
    /// Names assigned inside a function, with the function's byte range: a name several
    /// functions each assign once (`rc = Path.home() / ".npmrc"` in one, `rc = … ".pypirc"` in
    /// another) is `Many` as a whole but each function's own inside it. `None` when the function
    /// assigns it more than once.
    pub(super) local_scopes: HashMap<String, Vec<(usize, usize, Option<Binding<'t>>)>>,
    /// Names of the functions defined so far (`def f`, `f = lambda …`).
    functions: rustc_hash::FxHashSet<String>,
    /// The `def` statements by name, at any depth (a call finds its function without climbing
    /// the tree).
    defs: HashMap<String, Vec<Node<'t>>>,
    /// Names of the classes defined so far (their calls run `__init__`).
    pub(super) classes: rustc_hash::FxHashSet<String>,
    /// Whether the script's text names `methodcaller` or `operator` ([`PyFacts::may_use_methodcaller`]).
    methodcaller: std::cell::OnceCell<bool>,
}

/// What a list grew by ([`PyFacts::grown`]): a sequence whose items it took (`+= […]`,
/// `extend(…)`, and the literal first bound), or one item (`append`, `insert`, `add`).
#[derive(Debug, Clone, Copy)]
pub struct Growth<'t> {
    pub node: Node<'t>,
    pub sequence: bool,
}

impl<'t> PyFacts<'t> {
    /// Records what `node` binds, if anything. Called in document order; `function` finds the
    /// innermost function definition holding `node`, if any (asked only for assignments, the one
    /// binding that depends on it).
    pub fn observe(
        &mut self,
        k: &PyKinds,
        node: Node<'t>,
        function: impl FnOnce() -> Option<Node<'t>>,
        src: &str,
    ) {
        let kind = node.kind_id();
        if kind == k.import_statement {
            self.observe_import(k, node, src);
        } else if kind == k.import_from_statement {
            self.observe_from_import(k, node, src);
        } else if kind == k.assignment {
            self.observe_assignment(k, node, function(), src);
        } else if kind == k.augmented_assignment {
            self.observe_augmented(k, node, src);
        } else if kind == k.for_statement || kind == k.for_in_clause {
            self.observe_for(k, node, src);
        } else if kind == k.call {
            self.observe_dict_update(k, node, src);
            self.observe_growth(k, node, src);
            if let Some(f) = super::function_of(node) {
                let callee = &src[f.byte_range()];
                let own = if f.kind_id() == k.identifier {
                    matches!(callee, "map" | "filter")
                        || self.functions.contains(callee)
                        || self.classes.contains(callee)
                } else {
                    // `self.push(p)`, `job.run()`: a method of the script's own
                    f.kind_id() == k.attribute
                        && f.child_by_field_id(k.f_attribute)
                            .is_some_and(|a| self.functions.contains(&src[a.byte_range()]))
                };
                if own {
                    self.calls.push(node);
                }
            }
        } else if kind == k.function_definition || kind == k.lambda {
            self.observe_parameters(k, node, src);
        } else if kind == k.class_definition {
            if let Some(name) = node.child_by_field_id(k.f_name) {
                self.classes.insert(src[name.byte_range()].to_string());
            }
        } else if kind == k.as_pattern {
            // `with value as name` (and `except E as name`)
            if let (Some(value), Some(alias)) = (node.child(0), node.child_by_field_id(k.f_alias))
                && let Some(name) = alias.named_child(0).filter(|n| n.kind_id() == k.identifier)
            {
                self.record(ident(name, src), Binding::Value(value));
                self.consts.insert(ident(name, src), None);
            }
        }
    }

    /// Whether a call in the script can go through `operator.methodcaller`: its text names
    /// `methodcaller` or the `operator` module. Decided once per script, so the calls of a
    /// script without it skip the callee's binding lookup.
    pub(super) fn may_use_methodcaller(&self, src: &str) -> bool {
        *self.methodcaller.get_or_init(|| {
            let b = src.as_bytes();
            memchr::memmem::find(b, b"methodcaller").is_some()
                || memchr::memmem::find(b, b"operator").is_some()
        })
    }

    /// Whether the script defines a function or method of this name (`def name`, `name = lambda`).
    pub(super) fn defines_function(&self, name: &str) -> bool {
        self.functions.contains(name)
    }

    /// The `def` statements of this name, in document order.
    pub(super) fn defs_named(&self, name: &str) -> &[Node<'t>] {
        self.defs.get(name).map_or(&[], Vec::as_slice)
    }

    /// Whether `name` is bound once to a dict literal or a `dict(…)` call.
    fn is_dict(&self, k: &PyKinds, name: &str, src: &str) -> bool {
        match self.bindings.get(name) {
            Some(Binding::Value(v)) if v.kind_id() == k.dictionary => true,
            Some(Binding::Value(v)) if v.kind_id() == k.call => super::function_of(*v)
                .is_some_and(|f| f.kind_id() == k.identifier && text_of(f, src) == "dict"),
            _ => false,
        }
    }

    /// Whether a name is bound to a list, set or tuple (a literal or a comprehension), or has
    /// grown like one.
    fn is_sequence(&self, k: &PyKinds, name: &str, src: &str) -> bool {
        self.grown.contains_key(name)
            || matches!(self.bindings.get(name), Some(Binding::Value(v))
                if [k.list, k.set, k.tuple, k.list_comprehension].contains(&v.kind_id())
                    || is_list_call(k, *v, src))
    }

    /// `paths.append(p)`, `paths.extend(more)`, `paths.insert(0, p)`, `seen.add(p)` on a name
    /// bound to a list or set: what it holds grows (see [`PyFacts::grown`]).
    fn observe_growth(&mut self, k: &PyKinds, call: Node<'t>, src: &str) {
        let Some((object, method)) = super::method_call(k, call) else {
            return;
        };
        if object.kind_id() != k.identifier
            || !matches!(text_of(method, src), "append" | "extend" | "insert" | "add")
        {
            return;
        }
        let name = ident(object, src);
        if !self.is_sequence(k, &name, src) {
            return;
        }
        if let Some(node) = PySem::new(k, self, src).positional(call).last().copied() {
            let sequence = text_of(method, src) == "extend";
            self.grown
                .entry(name)
                .or_default()
                .push(Growth { node, sequence });
        }
    }

    /// `opts.update(shell=True)`, `opts.setdefault("shell", True)` on a name bound to a dict.
    fn observe_dict_update(&mut self, k: &PyKinds, call: Node<'t>, src: &str) {
        let Some((object, method)) = super::method_call(k, call) else {
            return;
        };
        let method = text_of(method, src);
        if (method != "update" && method != "setdefault")
            || object.kind_id() != k.identifier
            || !self.is_dict(k, &ident(object, src), src)
        {
            return;
        }
        let name = ident(object, src);
        let sem = PySem::new(k, self, src);
        let mut entries = sem.keywords(call);
        if method == "setdefault"
            && let [key, value] = sem.positional(call)[..]
            && let Some(key) = sem.fold(key)
        {
            entries.push((key, value));
        }
        self.dict_updates.entry(name).or_default().extend(entries);
    }

    /// `def f(a, b: Path, c=1)`, `lambda p: …`: positional parameters (not `*args` or `**kw`),
    /// by position.
    fn observe_parameters(&mut self, k: &PyKinds, function: Node<'t>, src: &str) {
        if let Some(name) = function_name(function, src) {
            self.functions.insert(name.to_string());
            if function.kind_id() == k.function_definition {
                self.defs
                    .entry(name.to_string())
                    .or_default()
                    .push(function);
            }
        }
        let Some(parameters) = function.child_by_field_id(k.f_parameters) else {
            return;
        };
        let mut cursor = parameters.walk();
        for (i, p) in parameters.named_children(&mut cursor).enumerate() {
            let Some(p) = parameter_name(k, p) else {
                continue;
            };
            let name = ident(p, src);
            let entry = (!self.params.contains_key(&name))
                .then_some((function, u8::try_from(i).unwrap_or(u8::MAX)));
            self.params.insert(name, entry);
        }
    }

    pub(super) fn record(&mut self, name: String, binding: Binding<'t>) {
        // a name bound again inside a loop over it is no longer just the loop's items there
        let at = match binding {
            Binding::Value(n) | Binding::Item(n, _) | Binding::Refined(n, _, _) => n.start_byte(),
            Binding::Many => usize::MAX,
        };
        self.rebind_in_loop(&name, at, Binding::Many);
        self.bindings
            .entry(name)
            .and_modify(|b| *b = Binding::Many)
            .or_insert(binding);
    }

    fn bind(&mut self, local: String, qualified: String) {
        let targets = self.aliases.entry(local).or_default();
        if !targets.contains(&qualified) && targets.len() < MAX_NAMES {
            targets.push(qualified);
        }
    }

    fn observe_import(&mut self, k: &PyKinds, node: Node<'_>, src: &str) {
        for name in children_in_field(node, k.f_name) {
            if name.kind_id() == k.aliased_import {
                let (Some(module), Some(alias)) = (
                    name.child_by_field_id(k.f_name),
                    name.child_by_field_id(k.f_alias),
                ) else {
                    continue;
                };
                self.bind(ident(alias, src), dotted(module, src));
            } else {
                // `import os.path` binds `os`.
                let full = dotted(name, src);
                let first = full.split('.').next().unwrap_or("").to_string();
                self.bind(first.clone(), first);
            }
        }
    }

    fn observe_from_import(&mut self, k: &PyKinds, node: Node<'_>, src: &str) {
        let Some(module) = node.child_by_field_id(k.f_module_name) else {
            return;
        };
        let module = dotted(module, src);
        if children(node).any(|c| c.kind_id() == k.wildcard_import) {
            self.star_modules.push(module.clone());
        }
        for name in children_in_field(node, k.f_name) {
            if name.kind_id() == k.aliased_import {
                let (Some(orig), Some(alias)) = (
                    name.child_by_field_id(k.f_name),
                    name.child_by_field_id(k.f_alias),
                ) else {
                    continue;
                };
                self.bind(ident(alias, src), format!("{module}.{}", dotted(orig, src)));
            } else if name.kind_id() == k.dotted_name {
                let local = dotted(name, src);
                self.bind(local.clone(), format!("{module}.{local}"));
            }
        }
    }

    fn observe_assignment(
        &mut self,
        k: &PyKinds,
        node: Node<'t>,
        function: Option<Node<'t>>,
        src: &str,
    ) {
        let (Some(left), Some(right)) = (
            node.child_by_field_id(k.f_left),
            node.child_by_field_id(k.f_right),
        ) else {
            return;
        };
        if left.kind_id() == k.subscript
            && let (Some(object), Some(key)) = (
                left.child_by_field_id(k.f_value),
                left.child_by_field_id(k.f_subscript),
            )
            && object.kind_id() == k.identifier
            && self.is_dict(k, &ident(object, src), src)
        {
            // `opts["shell"] = True`: one more entry of a dict
            let name = ident(object, src);
            if let Some(key) = PySem::new(k, self, src).fold(key) {
                self.dict_updates
                    .entry(name.clone())
                    .or_default()
                    .push((key, right));
            }
            self.consts.insert(name.clone(), None);
            self.containers.insert(name, None);
            return;
        }
        if left.kind_id() == k.attribute
            && left
                .child_by_field_id(k.f_object)
                .is_some_and(|o| o.kind_id() == k.identifier && &src[o.byte_range()] == "self")
        {
            // `self.base = Path(base)`: what the attribute holds, like a name's binding
            self.record(src[left.byte_range()].to_string(), Binding::Value(right));
        }
        if left.kind_id() == k.subscript || left.kind_id() == k.attribute {
            // `table[key] = …`, `obj.attr = …`: the object changes; the key is only read.
            let mut object = left;
            while let Some(inner) = object.child_by_field_id(if object.kind_id() == k.subscript {
                k.f_value
            } else {
                k.f_object
            }) {
                object = inner;
            }
            if object.kind_id() == k.identifier {
                self.record(ident(object, src), Binding::Many);
                self.consts.insert(ident(object, src), None);
            }
            return;
        }
        if left.kind_id() != k.identifier {
            if self.observe_unpacking(k, left, right, src) {
                return;
            }
            // `a, b = f()`: each name is bound, to nothing the walk follows.
            for name in children(left).filter(|n| n.kind_id() == k.identifier) {
                self.record(ident(name, src), Binding::Many);
                self.consts.insert(ident(name, src), None);
            }
            return;
        }
        let name = ident(left, src);
        let refines = matches!(self.bindings.get(&name), Some(Binding::Item(..)))
            && mentions(k, right, &name, src);
        match self.bindings.get(&name).copied() {
            Some(Binding::Item(iterable, at)) if refines => {
                let refined = Binding::Refined(right, iterable, at);
                self.rebind_in_loop(&name, right.start_byte(), refined);
                self.bindings.insert(name.clone(), refined);
            }
            // `batch = studies()` before a loop and again at its end: the same value again
            Some(Binding::Value(before)) if src[before.byte_range()] == src[right.byte_range()] => {
            }
            _ => self.record(name.clone(), Binding::Value(right)),
        }
        if let Some(function) = function {
            self.record_local(function, &name, Binding::Value(right));
        }
        let sem = PySem::new(k, self, src);
        let folded = sem.fold(right);
        let names = if folded.is_none() && is_name_expr(k, right) {
            sem.names(right)
        } else {
            Vec::new()
        };
        let items = if self.containers.contains_key(&name) {
            None
        } else {
            sem.container_values(right)
        };
        for target in names {
            self.bind(name.clone(), target);
        }
        let value = if self.consts.contains_key(&name) {
            None
        } else {
            folded
        };
        self.consts.insert(name.clone(), value);
        self.containers.insert(name, items);
    }

    /// `a, b, c = "…", "…", "…"`: as many names as values, each name bound to its value (and
    /// folded, when it is bound once). False when the two sides do not pair up (a call, a
    /// starred name, a nested pattern), so the caller binds the names to nothing.
    fn observe_unpacking(
        &mut self,
        k: &PyKinds,
        left: Node<'t>,
        right: Node<'t>,
        src: &str,
    ) -> bool {
        let names: Vec<Node<'t>> = children(left).filter(|n| n.is_named()).collect();
        let values: Vec<Node<'t>> = if matches!(right.kind(), "expression_list" | "tuple") {
            children(right).filter(|n| n.is_named()).collect()
        } else {
            return false;
        };
        if names.len() != values.len()
            || names.iter().any(|n| n.kind_id() != k.identifier)
            || values.iter().any(|v| v.kind_id() == k.list_splat)
        {
            return false;
        }
        for (name, value) in names.into_iter().zip(values) {
            let name = ident(name, src);
            self.record(name.clone(), Binding::Value(value));
            let folded = if self.consts.contains_key(&name) {
                None
            } else {
                PySem::new(k, self, src).fold(value)
            };
            self.consts.insert(name.clone(), folded);
            self.containers.insert(name, None);
        }
        true
    }

    /// `x += "…"` after `x = "…"`: still a constant, the concatenation (in document order).
    fn observe_augmented(&mut self, k: &PyKinds, node: Node<'t>, src: &str) {
        let Some(left) = node.child_by_field_id(k.f_left) else {
            return;
        };
        if left.kind_id() != k.identifier {
            return;
        }
        let name = ident(left, src);
        if self.is_sequence(k, &name, src)
            && let Some(right) = node.child_by_field_id(k.f_right)
        {
            // `paths += [...]`: the first literal and each addition are among its items
            let grown = self.grown.entry(name.clone()).or_default();
            if let Some(Binding::Value(first)) = self.bindings.get(&name).copied() {
                grown.push(Growth {
                    node: first,
                    sequence: true,
                });
            }
            grown.push(Growth {
                node: right,
                sequence: true,
            });
        }
        self.record(name.clone(), Binding::Many);
        let plus = node
            .child_by_field_id(k.f_operator)
            .is_some_and(|op| text_of(op, src) == "+=");
        let sem = PySem::new(k, self, src);
        let appended = node
            .child_by_field_id(k.f_right)
            .filter(|_| plus)
            .and_then(|r| sem.fold(r));
        let value = match (self.consts.get(&name), appended) {
            (Some(Some(v)), Some(a)) => Some(format!("{v}{a}")),
            _ => None,
        };
        self.consts.insert(name, value);
    }

    fn observe_for(&mut self, k: &PyKinds, node: Node<'t>, src: &str) {
        let (Some(left), Some(right)) = (
            node.child_by_field_id(k.f_left),
            node.child_by_field_id(k.f_right),
        ) else {
            return;
        };
        // a comprehension's clause binds its variable in the whole comprehension, the body
        // before the clause included (`[open(rc, "a") for rc in glob("/home/*/.bashrc")]`)
        let whole = if node.kind_id() == k.for_in_clause {
            node.parent().unwrap_or(node)
        } else {
            node
        };
        let scope = (whole.start_byte(), whole.end_byte());
        if left.kind_id() == k.identifier {
            self.record_loop(ident(left, src), Binding::Item(right, None), scope);
            return;
        }
        let names = children(left).filter(|c| c.is_named());
        for (i, name) in names.enumerate() {
            if name.kind_id() == k.identifier {
                let at = u8::try_from(i).ok();
                self.record_loop(ident(name, src), Binding::Item(right, at), scope);
            }
        }
    }
}

fn text_of<'s>(node: Node<'_>, src: &'s str) -> &'s str {
    src.get(node.byte_range()).unwrap_or("")
}

/// The name a function is called by: `def f`, or the name a lambda is assigned to
/// (`wipe = lambda p: …`).
pub(super) fn function_name<'s>(function: Node<'_>, src: &'s str) -> Option<&'s str> {
    let name = function.child_by_field_name("name").or_else(|| {
        let parent = function.parent()?;
        (parent.kind() == "assignment")
            .then(|| parent.child_by_field_name("left"))
            .flatten()
    })?;
    Some(&src[name.byte_range()])
}

/// Whether the expression `node` uses the name `name` (`expanduser(p)` uses `p`).
fn mentions(k: &PyKinds, node: Node<'_>, name: &str, src: &str) -> bool {
    if node.kind_id() == k.identifier {
        return ident(node, src) == name;
    }
    let mut cursor = node.walk();
    node.named_children(&mut cursor)
        .any(|c| mentions(k, c, name, src))
}

/// The class a `def` is a method of (directly in the class body).
pub(super) fn enclosing_class<'t>(k: &PyKinds, function: Node<'t>) -> Option<Node<'t>> {
    let mut parent = function.parent()?;
    if parent.kind() == "decorated_definition" {
        parent = parent.parent()?;
    }
    // function_definition → block → class_definition
    let class = parent.parent()?;
    (class.kind_id() == k.class_definition).then_some(class)
}

/// A call that makes a new list: `text.splitlines()`, `f.readlines()`, `s.split(",")`,
/// `list(…)`, `sorted(…)`. What is appended to or inserted into its name later is among its items.
fn is_list_call(k: &PyKinds, node: Node<'_>, src: &str) -> bool {
    if node.kind_id() != k.call {
        return false;
    }
    if let Some((_, method)) = super::method_call(k, node) {
        return matches!(text_of(method, src), "splitlines" | "readlines" | "split");
    }
    super::function_of(node).is_some_and(|f| matches!(text_of(f, src), "list" | "sorted"))
}
