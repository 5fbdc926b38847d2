//! Python semantics for rules: import aliases, constant folding and resolved callee names.
//!
//! Rules must see `sp.call` as `subprocess.call`, `getattr(__builtins__, 'ev' + 'al')` as `eval`, and
//! `ｅｘｅｃ` as `exec`. Facts are gathered in the one tree walk ([`PyFacts::observe`]) and are
//! flow-insensitive: a name bound twice keeps every binding, and a name assigned twice is not a constant.
//! Folding lives in `fold`. (Just over 500 lines: kinds, facts and name resolution share the facts.)

use tree_sitter::Node;

pub use super::codec::decode_base64;

mod facts;
mod flow;
mod fold;
pub use facts::{Binding, PyFacts};

use super::grammar::{Grammar, text};
use super::matcher::{CallSpec, Cx, NameSet, normalized};

/// Functions (last name segment) whose result can be a constant when their arguments are.
const FOLDING_FUNCTIONS: &[&str] = &[
    "expanduser",
    "abspath",
    "realpath",
    "normpath",
    "Path",
    "PosixPath",
    "home",
    "getenv",
    "get",
    "join",
    "decode",
    "encode",
    "lower",
    "casefold",
    "upper",
    "strip",
    "lstrip",
    "rstrip",
    "replace",
    "format",
    "fromhex",
    "chr",
    "str",
    "bytes",
    "bytearray",
    "b64decode",
    "standard_b64decode",
    "decodebytes",
    "decodestring",
    "a2b_base64",
    "urlsafe_b64decode",
    "b32decode",
    "b16decode",
    "unhexlify",
    "a2b_hex",
    "reversed",
    "quote",
    "list2cmdline",
];

/// Folding gives up on deeper expressions or longer values (both only occur in hostile input).
const MAX_FOLD_DEPTH: u8 = 40;
const MAX_FOLD_LEN: usize = 64 * 1024;
const MAX_NAMES: usize = 16;
/// The name `globals()`, `locals()` and `vars()` resolve to: the module namespace, whose keys are
/// the script's names.
const GLOBALS: &str = "<globals>";

/// Node-kind and field ids this module needs.
#[derive(Debug, Clone)]
pub struct PyKinds {
    pub call: u16,
    attribute: u16,
    pub(crate) identifier: u16,
    string: u16,
    concatenated_string: u16,
    binary_operator: u16,
    parenthesized_expression: u16,
    subscript: u16,
    slice: u16,
    integer: u16,
    unary_operator: u16,
    keyword_argument: u16,
    list: u16,
    tuple: u16,
    dictionary: u16,
    set: u16,
    pair: u16,
    pub(super) dictionary_splat: u16,
    pub(super) as_pattern: u16,
    string_content: u16,
    interpolation: u16,
    escape_interpolation: u16,
    import_statement: u16,
    import_from_statement: u16,
    aliased_import: u16,
    dotted_name: u16,
    wildcard_import: u16,
    assignment: u16,
    augmented_assignment: u16,
    for_statement: u16,
    comment: u16,
    f_arguments: u16,
    f_argument: u16,
    f_object: u16,
    f_attribute: u16,
    f_name: u16,
    f_alias: u16,
    f_value: u16,
    f_key: u16,
    f_left: u16,
    f_right: u16,
    f_module_name: u16,
    f_subscript: u16,
    f_operator: u16,
    f_expression: u16,
    f_body: u16,
}

impl PyKinds {
    pub fn new(g: &Grammar) -> Self {
        let k = |n| g.known_kind(n);
        let f = |n| g.known_field(n);
        PyKinds {
            call: k("call"),
            attribute: k("attribute"),
            identifier: k("identifier"),
            string: k("string"),
            concatenated_string: k("concatenated_string"),
            binary_operator: k("binary_operator"),
            parenthesized_expression: k("parenthesized_expression"),
            subscript: k("subscript"),
            slice: k("slice"),
            integer: k("integer"),
            unary_operator: k("unary_operator"),
            keyword_argument: k("keyword_argument"),
            list: k("list"),
            tuple: k("tuple"),
            dictionary: k("dictionary"),
            set: k("set"),
            pair: k("pair"),
            dictionary_splat: k("dictionary_splat"),
            as_pattern: k("as_pattern"),
            string_content: k("string_content"),
            interpolation: k("interpolation"),
            escape_interpolation: k("escape_interpolation"),
            import_statement: k("import_statement"),
            import_from_statement: k("import_from_statement"),
            aliased_import: k("aliased_import"),
            dotted_name: k("dotted_name"),
            wildcard_import: k("wildcard_import"),
            assignment: k("assignment"),
            augmented_assignment: k("augmented_assignment"),
            for_statement: k("for_statement"),
            comment: k("comment"),
            f_arguments: f("arguments"),
            f_argument: f("argument"),
            f_object: f("object"),
            f_attribute: f("attribute"),
            f_name: f("name"),
            f_alias: f("alias"),
            f_value: f("value"),
            f_key: f("key"),
            f_left: f("left"),
            f_right: f("right"),
            f_module_name: f("module_name"),
            f_subscript: f("subscript"),
            f_operator: f("operator"),
            f_expression: f("expression"),
            f_body: f("body"),
        }
    }
}

/// A call's callee: always its first child (`call: function arguments`), which is cheaper to
/// reach than by field.
pub(crate) fn function_of(call: Node<'_>) -> Option<Node<'_>> {
    call.child(0).filter(|c| c.is_named())
}

pub(super) fn is_name_expr(k: &PyKinds, node: Node<'_>) -> bool {
    let kind = node.kind_id();
    kind == k.identifier || kind == k.attribute || kind == k.call || kind == k.subscript
}

pub(super) fn ident(node: Node<'_>, src: &str) -> String {
    normalized(text(node, src)).into_owned()
}

/// `a . b` (with any spacing) as `a.b`, NFKC-normalised.
pub(super) fn dotted(node: Node<'_>, src: &str) -> String {
    normalized(text(node, src))
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect()
}

/// Python semantics over one script's facts, as rules evaluate them.
#[derive(Debug, Clone, Copy)]
pub struct PySem<'a> {
    pub k: &'a PyKinds,
    pub facts: &'a PyFacts<'a>,
    pub src: &'a str,
    /// Fold `shlex.quote(x)` to a quoted placeholder (see [`PySem::fold_shell`]).
    pub(super) quoting: bool,
}

impl<'a> PySem<'a> {
    pub fn new(k: &'a PyKinds, facts: &'a PyFacts<'a>, src: &'a str) -> Self {
        PySem {
            k,
            facts,
            src,
            quoting: false,
        }
    }

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

    fn names_at(&self, node: Node<'_>, depth: u8) -> Vec<String> {
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
        } else if kind == k.call {
            self.names_of_call_result(node, d)
        } else if kind == k.subscript {
            self.names_of_subscript(node, d)
        } else {
            Vec::new()
        }
    }

    /// What a call returns, when it is a name: `__import__('os')` → `os`, `getattr(os, 'system')`
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
                "sys.modules" | "__builtins__" | "builtins" => out.push(key.clone()),
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
        let Some(func) = function_of(call) else {
            return false;
        };
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
        match self.facts.aliases.get(root) {
            None => names.may_contain(t, last),
            Some(targets) => targets.iter().any(|target| {
                let full = format!("{target}{rest}");
                let last = full.rsplit('.').next().unwrap_or(&full);
                names.may_contain(&full, last)
            }),
        }
    }

    /// The resolved names of a call's callee; `operator.methodcaller('m', …)(obj)` calls `obj.m`.
    pub fn callee_names(&self, call: Node<'_>) -> Vec<String> {
        let Some(func) = function_of(call) else {
            return Vec::new();
        };
        if func.kind_id() == self.k.call
            && let Some(inner) = function_of(func)
            && self
                .names(inner)
                .iter()
                .any(|n| n == "operator.methodcaller")
            && let (Some(method), Some(obj)) = (
                self.positional(func).first().and_then(|m| self.fold(*m)),
                self.positional(call).first().copied(),
            )
        {
            return self
                .names(obj)
                .into_iter()
                .map(|base| format!("{base}.{method}"))
                .collect();
        }
        self.names(func)
    }

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

    /// The constant items of a list or tuple literal; `None` for an item that is not constant.
    pub fn list_items<'t>(&self, node: Node<'t>) -> Option<Vec<(Node<'t>, Option<String>)>> {
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
