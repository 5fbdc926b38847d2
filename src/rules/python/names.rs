//! Name resolution: the qualified names a Python expression may stand for, through import and
//! assignment aliases, `getattr`/`__import__`/`importlib`, `globals()` and dispatch tables.

use tree_sitter::Node;

use super::{Binding, MAX_FOLD_DEPTH, MAX_NAMES, PySem, function_of, ident};
use crate::rules::grammar::text;
use crate::rules::matcher::NameSet;

/// The name `globals()`, `locals()` and `vars()` resolve to: the module namespace, whose keys are
/// the script's names.
const GLOBALS: &str = "<globals>";

impl PySem<'_> {
    /// The qualified names an expression may stand for (`sp.call` → `subprocess.call`).
    pub fn names(&self, node: Node<'_>) -> Vec<String> {
        let mut out = self.names_at(node, 0);
        for name in &mut out {
            for prefix in ["builtins.", "__builtins__."] {
                if let Some(rest) = name.strip_prefix(prefix) {
                    *name = rest.to_string();
                }
            }
        }
        out.truncate(MAX_NAMES);
        out
    }

    pub(super) fn names_at(&self, node: Node<'_>, depth: u8) -> Vec<String> {
        if depth > MAX_FOLD_DEPTH {
            return Vec::new();
        }
        let k = self.k;
        let d = depth + 1;
        let kind = node.kind_id();
        if kind == k.identifier {
            let name = ident(node, self.src);
            if let Some(targets) = self.facts.aliases.get(&name) {
                return targets.clone();
            }
            // `for f in [os.system, …]: f(…)`: each element.
            if let Some(Binding::Item(items, None)) = self.facts.bindings.get(&name).copied()
                && (items.kind_id() == k.list || items.kind_id() == k.tuple)
            {
                return crate::rules::grammar::children(items)
                    .filter(|c| c.is_named())
                    .flat_map(|item| self.names_at(item, d))
                    .collect();
            }
            let mut out = vec![name.clone()];
            out.extend(
                self.facts
                    .star_modules
                    .iter()
                    .map(|m| format!("{m}.{name}")),
            );
            out
        } else if kind == k.attribute {
            let (Some(object), Some(attr)) = (
                node.child_by_field_id(k.f_object),
                node.child_by_field_id(k.f_attribute),
            ) else {
                return Vec::new();
            };
            let attr = ident(attr, self.src);
            self.names_at(object, d)
                .into_iter()
                .map(|base| format!("{base}.{attr}"))
                .collect()
        } else if kind == k.parenthesized_expression {
            node.named_child(0)
                .map(|n| self.names_at(n, d))
                .unwrap_or_default()
        } else if kind == k.conditional_expression {
            // `a if cond else b`: either value
            [node.named_child(0), node.named_child(2)]
                .into_iter()
                .flatten()
                .flat_map(|n| self.names_at(n, d))
                .collect()
        } else if kind == k.call {
            self.names_of_call_result(node, d)
        } else if kind == k.subscript {
            self.names_of_subscript(node, d)
        } else {
            Vec::new()
        }
    }

    /// What a call returns, when it is a name: an instance of a module's class (`requests.Session()`
    /// → `requests.Session`), `__import__('os')` → `os`, `getattr(os, 'system')`
    /// → `os.system`, `operator.attrgetter('system')(os)` → `os.system`, `functools.partial(f, …)`
    /// (and `staticmethod(f)`) → `f`, `globals()` → the module namespace, `vars(m)` →
    /// `m.__dict__`.
    fn names_of_call_result(&self, node: Node<'_>, d: u8) -> Vec<String> {
        let Some(func) = function_of(node) else {
            return Vec::new();
        };
        let args = self.positional(node);
        if func.kind_id() == self.k.call {
            return self.names_of_getter_call(func, &args, d);
        }
        let last = self.last_segment(func);
        if last.starts_with(|c: char| c.is_ascii_uppercase()) {
            // `requests.Session()`, `ftplib.FTP(host)`: an instance of a module's class, whose
            // methods are named after it (`s.delete` → `requests.Session.delete`)
            return self
                .names_at(func, d)
                .into_iter()
                .filter(|n| n.contains('.'))
                .collect();
        }
        if !matches!(
            last.as_ref(),
            "__import__"
                | "import_module"
                | "getattr"
                | "partial"
                | "partialmethod"
                | "staticmethod"
                | "classmethod"
                | "globals"
                | "locals"
                | "vars"
        ) && !self.facts.aliases.contains_key(last.as_ref())
        {
            return Vec::new();
        }
        let callee = self.names_at(func, d);
        let mut out = Vec::new();
        for name in callee {
            match name.as_str() {
                "__import__" | "importlib.import_module" | "builtins.__import__" => {
                    if let Some(m) = args.first().and_then(|a| self.fold_at(*a, d)) {
                        out.push(m);
                    }
                }
                "getattr" | "builtins.getattr" => {
                    if let (Some(obj), Some(attr)) =
                        (args.first(), args.get(1).and_then(|a| self.fold_at(*a, d)))
                    {
                        out.extend(
                            self.names_at(*obj, d)
                                .into_iter()
                                .map(|base| format!("{base}.{attr}")),
                        );
                    }
                }
                "functools.partial"
                | "functools.partialmethod"
                | "staticmethod"
                | "classmethod" => {
                    if let Some(f) = args.first() {
                        out.extend(self.names_at(*f, d));
                    }
                }
                "globals" | "locals" | "vars" if args.is_empty() => out.push(GLOBALS.into()),
                "vars" => {
                    if let Some(obj) = args.first() {
                        out.extend(
                            self.names_at(*obj, d)
                                .into_iter()
                                .map(|base| format!("{base}.__dict__")),
                        );
                    }
                }
                _ => {}
            }
        }
        out
    }

    /// `operator.attrgetter('a')(obj)` → `obj.a`: `getter` is the inner call, `args` the outer's.
    fn names_of_getter_call(&self, getter: Node<'_>, args: &[Node<'_>], d: u8) -> Vec<String> {
        let Some(func) = function_of(getter) else {
            return Vec::new();
        };
        if !self
            .names_at(func, d)
            .iter()
            .any(|n| n == "operator.attrgetter")
        {
            return Vec::new();
        }
        let (Some(attr), Some(obj)) = (
            self.positional(getter)
                .first()
                .and_then(|a| self.fold_at(*a, d)),
            args.first(),
        ) else {
            return Vec::new();
        };
        self.names_at(*obj, d)
            .into_iter()
            .map(|base| format!("{base}.{attr}"))
            .collect()
    }

    /// `globals()['eval']`, `sys.modules['os']`, `__builtins__.__dict__['exec']`.
    fn names_of_subscript(&self, node: Node<'_>, d: u8) -> Vec<String> {
        let (Some(value), Some(key)) = (
            node.child_by_field_id(self.k.f_value),
            node.child_by_field_id(self.k.f_subscript),
        ) else {
            return Vec::new();
        };
        let dispatch = self.dispatch_names(value, key, d);
        if !dispatch.is_empty() {
            return dispatch;
        }
        let Some(key) = self.fold_at(key, d) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for base in self.names_at(value, d) {
            match base.as_str() {
                // `vars(builtins)` is `builtins.__dict__`, which [`Self::names`] shortens
                "sys.modules" | "__builtins__" | "builtins" | "__dict__" => out.push(key.clone()),
                GLOBALS => out.extend(
                    self.facts
                        .aliases
                        .get(&key)
                        .cloned()
                        .unwrap_or_else(|| vec![key.clone()]),
                ),
                _ => {
                    if let Some(owner) = base.strip_suffix(".__dict__") {
                        out.push(format!("{owner}.{key}"));
                    }
                }
            }
        }
        out
    }

    /// `{"run": os.system, …}[key]` (or a name bound to such a dict): the value under a constant
    /// key, or every value when the key is only known at run time.
    fn dispatch_names(&self, value: Node<'_>, key: Node<'_>, d: u8) -> Vec<String> {
        let k = self.k;
        let dict = match value.kind_id() {
            kind if kind == k.dictionary => value,
            kind if kind == k.identifier => match self.binding(&ident(value, self.src)) {
                Some(Binding::Value(v)) if v.kind_id() == k.dictionary => v,
                _ => return Vec::new(),
            },
            _ => return Vec::new(),
        };
        let wanted = self.fold_at(key, d);
        crate::rules::grammar::children(dict)
            .filter(|c| c.kind_id() == k.pair)
            .filter(|pair| {
                wanted.is_none()
                    || pair
                        .child_by_field_id(k.f_key)
                        .and_then(|key| self.fold_at(key, d))
                        == wanted
            })
            .filter_map(|pair| pair.child_by_field_id(k.f_value))
            .flat_map(|v| self.names_at(v, d))
            .collect()
    }

    /// Whether a call's resolved names can be in `names`, decided from the callee's text: a plain
    /// dotted chain (after its first name's import or assignment aliases) whose last segment and
    /// prefix fit no name of `names` cannot. Anything computed (`getattr(…)(…)`, `d["k"](…)`),
    /// non-ASCII or through `builtins` might.
    pub fn may_call(&self, call: Node<'_>, names: &NameSet) -> bool {
        function_of(call).is_some_and(|func| self.may_name(func, names))
    }

    /// Whether an expression may stand for one of `names`, decided from its text and the script's
    /// aliases without resolving it: most expressions are plain dotted names nobody aliased.
    pub fn may_name(&self, func: Node<'_>, names: &NameSet) -> bool {
        let t = text(func, self.src);
        if !t
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
        {
            return true;
        }
        let (root, rest) = t.split_at(t.find('.').unwrap_or(t.len()));
        if matches!(root, "builtins" | "__builtins__")
            || (rest.is_empty() && !self.facts.star_modules.is_empty())
        {
            return true;
        }
        // a loop variable over a list of callables
        if matches!(self.facts.bindings.get(root), Some(Binding::Item(..))) {
            return true;
        }
        let last = t.rsplit('.').next().unwrap_or(t);
        if super::deferred::may_defer(last) {
            return true;
        }
        match self.facts.aliases.get(root) {
            None => names.may_contain(t, last),
            Some(targets) => targets.iter().any(|target| {
                let full = format!("{target}{rest}");
                let last = full.rsplit('.').next().unwrap_or(&full);
                names.may_contain(&full, last)
            }),
        }
    }

    /// The resolved names of a call's callee; `operator.methodcaller('m', …)(obj)` calls `obj.m`
    /// (also through a name bound to the method caller: `wipe = methodcaller(…)`, `wipe(obj)`),
    /// and a scheduler (`threading.Timer(t, f)`) also calls `f`.
    pub fn callee_names(&self, call: Node<'_>) -> Vec<String> {
        let Some(func) = function_of(call) else {
            return Vec::new();
        };
        if let Some(caller) = self.methodcaller_of(call)
            && let (Some(method), Some(obj)) = (
                self.positional(caller).first().and_then(|m| self.fold(*m)),
                self.positional(call).first().copied(),
            )
        {
            return self
                .names(obj)
                .into_iter()
                .map(|base| format!("{base}.{method}"))
                .collect();
        }
        let mut out = self.names(func);
        // A scheduler stands for the callable it runs as well (its arguments are that callable's:
        // see `effective_positional`).
        if let Some(deferred) = self.deferred(call) {
            out.extend(self.names(deferred.target));
        }
        out
    }
}
