//! Python semantics for rules: import aliases, constant folding and resolved callee names.
//!
//! Rules must see `sp.call` as `subprocess.call`, `getattr(__builtins__, 'ev' + 'al')` as `eval`, and
//! `ｅｘｅｃ` as `exec`. Facts are gathered in the one tree walk ([`PyFacts::observe`]) and are
//! flow-insensitive: a name bound twice keeps every binding, and a name assigned twice is not a constant.

use std::collections::HashMap;

use tree_sitter::Node;

pub use super::codec::decode_base64;
use super::codec::{apply_codec, decode_base32, decode_escapes, decode_hex};

use super::grammar::{Grammar, children_in_field, text};
use super::matcher::{CallSpec, Cx, normalized};

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
];

/// Folding gives up on deeper expressions or longer values (both only occur in hostile input).
const MAX_FOLD_DEPTH: u8 = 40;
const MAX_FOLD_LEN: usize = 64 * 1024;
const MAX_NAMES: usize = 16;

/// Node-kind and field ids this module needs.
#[derive(Debug, Clone)]
pub struct PyKinds {
    pub call: u16,
    attribute: u16,
    identifier: u16,
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
    f_function: u16,
    f_arguments: u16,
    f_argument: u16,
    f_object: u16,
    f_attribute: u16,
    f_name: u16,
    f_alias: u16,
    f_value: u16,
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
            f_function: f("function"),
            f_arguments: f("arguments"),
            f_argument: f("argument"),
            f_object: f("object"),
            f_attribute: f("attribute"),
            f_name: f("name"),
            f_alias: f("alias"),
            f_value: f("value"),
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

/// What one walk learns about names in a script.
#[derive(Debug, Default)]
pub struct PyFacts {
    /// Local name → the qualified names it may stand for (`sp` → `subprocess`).
    aliases: HashMap<String, Vec<String>>,
    /// Modules imported with `from m import *`.
    star_modules: Vec<String>,
    /// Names assigned exactly once to a constant string; `None` once assigned again or non-constant.
    consts: HashMap<String, Option<String>>,
    /// Names assigned exactly once to a dict/list/tuple/set literal of constants: its values.
    containers: HashMap<String, Option<Vec<String>>>,
}

impl PyFacts {
    /// Records what `node` binds, if anything. Called in document order.
    pub fn observe(&mut self, k: &PyKinds, node: Node<'_>, src: &str) {
        let kind = node.kind_id();
        if kind == k.import_statement {
            self.observe_import(k, node, src);
        } else if kind == k.import_from_statement {
            self.observe_from_import(k, node, src);
        } else if kind == k.assignment {
            self.observe_assignment(k, node, src);
        } else if (kind == k.augmented_assignment || kind == k.for_statement)
            && let Some(left) = node.child_by_field_id(k.f_left)
            && left.kind_id() == k.identifier
        {
            self.consts.insert(ident(left, src), None);
        }
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
        let mut cursor = node.walk();
        for child in node.named_children(&mut cursor) {
            if child.kind_id() == k.wildcard_import {
                self.star_modules.push(module.clone());
            }
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

    fn observe_assignment(&mut self, k: &PyKinds, node: Node<'_>, src: &str) {
        let (Some(left), Some(right)) = (
            node.child_by_field_id(k.f_left),
            node.child_by_field_id(k.f_right),
        ) else {
            return;
        };
        if left.kind_id() != k.identifier {
            return;
        }
        let name = ident(left, src);
        let sem = PySem {
            k,
            facts: self,
            src,
        };
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
}

fn is_name_expr(k: &PyKinds, node: Node<'_>) -> bool {
    let kind = node.kind_id();
    kind == k.identifier || kind == k.attribute || kind == k.call || kind == k.subscript
}

fn ident(node: Node<'_>, src: &str) -> String {
    normalized(text(node, src)).into_owned()
}

/// `a . b` (with any spacing) as `a.b`, NFKC-normalised.
fn dotted(node: Node<'_>, src: &str) -> String {
    normalized(text(node, src))
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect()
}

/// Python semantics over one script's facts, as rules evaluate them.
#[derive(Debug, Clone, Copy)]
pub struct PySem<'a> {
    pub k: &'a PyKinds,
    pub facts: &'a PyFacts,
    pub src: &'a str,
}

impl<'a> PySem<'a> {
    /// The constant string value of an expression, if it has one.
    pub fn fold(&self, node: Node<'_>) -> Option<String> {
        self.fold_at(node, 0).filter(|v| v.len() <= MAX_FOLD_LEN)
    }

    fn fold_at(&self, node: Node<'_>, depth: u8) -> Option<String> {
        if depth > MAX_FOLD_DEPTH {
            return None;
        }
        let k = self.k;
        let d = depth + 1;
        let kind = node.kind_id();
        if kind == k.string {
            self.fold_string(node, d)
        } else if kind == k.concatenated_string {
            let mut out = String::new();
            for part in node.named_children(&mut node.walk()) {
                out.push_str(&self.fold_at(part, d)?);
            }
            Some(out)
        } else if kind == k.parenthesized_expression {
            self.fold_at(node.named_child(0)?, d)
        } else if kind == k.identifier {
            self.facts.consts.get(&ident(node, self.src))?.clone()
        } else if kind == k.binary_operator {
            self.fold_binary(node, d)
        } else if kind == k.call {
            self.fold_call(node, d)
        } else if kind == k.subscript {
            self.fold_subscript(node, d)
        } else {
            None
        }
    }

    fn fold_string(&self, node: Node<'_>, d: u8) -> Option<String> {
        let k = self.k;
        let start = node.child(0)?;
        let prefix = text(start, self.src)
            .trim_end_matches(['"', '\''])
            .to_ascii_lowercase();
        let raw = prefix.contains('r');
        let fstring = prefix.contains('f') || prefix.contains('t');
        let mut out = String::new();
        for part in node.children(&mut node.walk()) {
            let kind = part.kind_id();
            if kind == k.string_content {
                let t = text(part, self.src);
                if raw {
                    out.push_str(t);
                } else {
                    out.push_str(&decode_escapes(t));
                }
            } else if kind == k.interpolation {
                if !fstring {
                    out.push_str(text(part, self.src));
                    continue;
                }
                let expr = part.child_by_field_id(k.f_expression)?;
                out.push_str(&self.fold_at(expr, d)?);
            } else if kind == k.escape_interpolation {
                out.push_str(&text(part, self.src)[..1]);
            }
        }
        Some(out)
    }

    fn fold_binary(&self, node: Node<'_>, d: u8) -> Option<String> {
        let k = self.k;
        let op = text(node.child_by_field_id(k.f_operator)?, self.src);
        let left = node.child_by_field_id(k.f_left)?;
        let right = node.child_by_field_id(k.f_right)?;
        match op {
            "+" => Some(self.fold_at(left, d)? + &self.fold_at(right, d)?),
            // `str / str` is a TypeError in Python, so a constant `/` can only be pathlib's join.
            "/" => Some(join_paths(&[
                self.fold_at(left, d)?,
                self.fold_at(right, d)?,
            ])),
            "*" => {
                let (s, n) = match (self.fold_at(left, d), self.fold_int(right)) {
                    (Some(s), Some(n)) => (s, n),
                    _ => (self.fold_at(right, d)?, self.fold_int(left)?),
                };
                let n = usize::try_from(n).ok()?;
                (s.len().saturating_mul(n) <= MAX_FOLD_LEN).then(|| s.repeat(n))
            }
            "%" => {
                let template = self.fold_at(left, d)?;
                let values: Vec<String> = if right.kind_id() == k.tuple {
                    right
                        .named_children(&mut right.walk())
                        .map(|v| self.fold_at(v, d))
                        .collect::<Option<_>>()?
                } else {
                    vec![self.fold_at(right, d)?]
                };
                percent_format(&template, &values)
            }
            _ => None,
        }
    }

    fn fold_int(&self, node: Node<'_>) -> Option<i64> {
        let k = self.k;
        let kind = node.kind_id();
        if kind == k.integer {
            parse_int(text(node, self.src))
        } else if kind == k.unary_operator {
            let t = text(node, self.src).trim_start();
            let v = self.fold_int(node.child_by_field_id(k.f_argument)?)?;
            if t.starts_with('-') {
                Some(-v)
            } else {
                Some(v)
            }
        } else if kind == k.parenthesized_expression {
            self.fold_int(node.named_child(0)?)
        } else {
            None
        }
    }

    pub fn positional<'t>(&self, call: Node<'t>) -> Vec<Node<'t>> {
        let Some(args) = call.child_by_field_id(self.k.f_arguments) else {
            return Vec::new();
        };
        let mut cursor = args.walk();
        args.named_children(&mut cursor)
            .filter(|a| a.kind_id() != self.k.keyword_argument && a.kind_id() != self.k.comment)
            .collect()
    }

    fn keywords<'t>(&self, call: Node<'t>) -> Vec<(String, Node<'t>)> {
        let Some(args) = call.child_by_field_id(self.k.f_arguments) else {
            return Vec::new();
        };
        let mut cursor = args.walk();
        args.named_children(&mut cursor)
            .filter(|a| a.kind_id() == self.k.keyword_argument)
            .filter_map(|kw| {
                let name = kw.child_by_field_id(self.k.f_name)?;
                let value = kw.child_by_field_id(self.k.f_value)?;
                Some((ident(name, self.src), value))
            })
            .collect()
    }

    fn fold_call(&self, node: Node<'_>, d: u8) -> Option<String> {
        let k = self.k;
        let func = node.child_by_field_id(k.f_function)?;
        // Only a few functions turn constants into constants; everything else is not worth resolving.
        if !FOLDING_FUNCTIONS.contains(&self.last_segment(func).as_ref())
            && !self
                .facts
                .aliases
                .contains_key(self.last_segment(func).as_ref())
        {
            return None;
        }
        let args = self.positional(node);
        if func.kind_id() == k.attribute {
            let method = ident(func.child_by_field_id(k.f_attribute)?, self.src);
            let object = func.child_by_field_id(k.f_object)?;
            if let Some(v) = self.fold_method(&method, object, &args, d) {
                return Some(v);
            }
        }
        let names = self.names(func);
        let arg0 = args.first().copied();
        for name in &names {
            let value = match name.as_str() {
                "chr" => {
                    char::from_u32(u32::try_from(self.fold_int(arg0?)?).ok()?).map(String::from)
                }
                "str" | "bytes" | "bytearray" if arg0.is_some_and(|a| a.kind_id() == k.list) => {
                    self.fold_byte_list(arg0?)
                }
                "str" | "bytes" | "bytearray" => self.fold_at(arg0?, d),
                "base64.b64decode"
                | "base64.standard_b64decode"
                | "base64.decodebytes"
                | "base64.decodestring"
                | "binascii.a2b_base64" => decode_base64(&self.fold_at(arg0?, d)?, false),
                "base64.urlsafe_b64decode" => decode_base64(&self.fold_at(arg0?, d)?, true),
                "base64.b32decode" => decode_base32(&self.fold_at(arg0?, d)?),
                "base64.b16decode" | "binascii.unhexlify" | "binascii.a2b_hex"
                | "bytes.fromhex" | "bytearray.fromhex" => decode_hex(&self.fold_at(arg0?, d)?),
                "codecs.decode" | "codecs.encode" => {
                    let value = self.fold_at(arg0?, d)?;
                    let codec = args
                        .get(1)
                        .and_then(|c| self.fold_at(*c, d))
                        .or_else(|| {
                            self.keywords(node)
                                .into_iter()
                                .find(|(n, _)| n == "encoding")
                                .and_then(|(_, v)| self.fold_at(v, d))
                        })
                        .unwrap_or_else(|| "utf-8".into());
                    apply_codec(&value, &codec)
                }
                "reversed" => Some(self.fold_at(arg0?, d)?.chars().rev().collect()),
                // Paths: the home directory folds to `~`, joins to `/`-joined strings.
                "os.path.expanduser"
                | "posixpath.expanduser"
                | "os.path.abspath"
                | "os.path.realpath"
                | "os.path.normpath"
                | "pathlib.Path"
                | "pathlib.PosixPath"
                | "pathlib.Path.expanduser" => self.fold_at(arg0?, d),
                "pathlib.Path.home" | "pathlib.PosixPath.home" => Some("~".into()),
                "os.path.join" | "posixpath.join" => {
                    let parts: Option<Vec<String>> =
                        args.iter().map(|a| self.fold_at(*a, d)).collect();
                    Some(join_paths(&parts?))
                }
                "os.getenv" | "os.environ.get"
                    if arg0.and_then(|a| self.fold_at(a, d)).as_deref() == Some("HOME") =>
                {
                    Some("~".into())
                }
                _ => None,
            };
            if value.is_some() {
                return value;
            }
        }
        None
    }

    fn fold_method(
        &self,
        method: &str,
        object: Node<'_>,
        args: &[Node<'_>],
        d: u8,
    ) -> Option<String> {
        let arg = |i: usize| args.get(i).and_then(|a| self.fold_at(*a, d));
        match method {
            "join" => {
                let sep = self.fold_at(object, d)?;
                let items = self.fold_items(*args.first()?, d)?;
                Some(items.join(&sep))
            }
            "decode" | "encode" => {
                let value = self.fold_at(object, d)?;
                match arg(0) {
                    Some(codec) => apply_codec(&value, &codec),
                    None => Some(value),
                }
            }
            "lower" | "casefold" => Some(self.fold_at(object, d)?.to_lowercase()),
            "upper" => Some(self.fold_at(object, d)?.to_uppercase()),
            "strip" => Some(self.fold_at(object, d)?.trim().to_string()),
            "lstrip" => Some(self.fold_at(object, d)?.trim_start().to_string()),
            "rstrip" => Some(self.fold_at(object, d)?.trim_end().to_string()),
            "replace" => Some(self.fold_at(object, d)?.replace(&arg(0)?, &arg(1)?)),
            "format" if args.is_empty() => self.fold_at(object, d),
            "fromhex" => decode_hex(&arg(0)?),
            _ => None,
        }
    }

    /// Items of a list/tuple of constants, a constant string (its characters) or `reversed(...)`.
    fn fold_items(&self, node: Node<'_>, d: u8) -> Option<Vec<String>> {
        let k = self.k;
        if node.kind_id() == k.list || node.kind_id() == k.tuple {
            let mut cursor = node.walk();
            return node
                .named_children(&mut cursor)
                .map(|item| {
                    self.fold_at(item, d)
                        .or_else(|| self.fold_int(item).map(|i| i.to_string()))
                })
                .collect();
        }
        let s = self.fold_at(node, d)?;
        Some(s.chars().map(String::from).collect())
    }

    fn fold_byte_list(&self, list: Node<'_>) -> Option<String> {
        let mut cursor = list.walk();
        list.named_children(&mut cursor)
            .map(|item| {
                let v = self.fold_int(item)?;
                char::from_u32(u32::try_from(v).ok()?)
            })
            .collect()
    }

    fn fold_subscript(&self, node: Node<'_>, d: u8) -> Option<String> {
        let k = self.k;
        if let Some(value) = node.child_by_field_id(k.f_value)
            && self.names_at(value, d).iter().any(|n| n == "os.environ")
            && node
                .child_by_field_id(k.f_subscript)
                .and_then(|key| self.fold_at(key, d))
                .as_deref()
                == Some("HOME")
        {
            return Some("~".into());
        }
        let value: Vec<char> = self
            .fold_at(node.child_by_field_id(k.f_value)?, d)?
            .chars()
            .collect();
        let index = node.child_by_field_id(k.f_subscript)?;
        let len = i64::try_from(value.len()).ok()?;
        if index.kind_id() != k.slice {
            let i = self.fold_int(index)?;
            let i = if i < 0 { len + i } else { i };
            return value.get(usize::try_from(i).ok()?).map(|c| c.to_string());
        }
        // slice: up to three optional integers separated by ':'
        let mut parts: [Option<i64>; 3] = [None, None, None];
        let mut slot = 0;
        for child in index.children(&mut index.walk()) {
            if text(child, self.src) == ":" {
                slot += 1;
                if slot > 2 {
                    return None;
                }
            } else {
                parts[slot] = Some(self.fold_int(child)?);
            }
        }
        let step = parts[2].unwrap_or(1);
        if step == 0 {
            return None;
        }
        Some(
            py_slice(&value, parts[0], parts[1], step)
                .into_iter()
                .collect(),
        )
    }

    /// The last name of a callee expression (`b` in `a.b`, `f` in `f`), NFKC-normalised.
    fn last_segment<'s>(&self, func: Node<'_>) -> std::borrow::Cow<'s, str>
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

    /// The constant values of a dict (its values), list, tuple or set literal.
    fn container_values(&self, node: Node<'_>) -> Option<Vec<String>> {
        let k = self.k;
        let kind = node.kind_id();
        if kind != k.dictionary && kind != k.list && kind != k.tuple && kind != k.set {
            return None;
        }
        let mut cursor = node.walk();
        node.named_children(&mut cursor)
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
    /// element of a constant container it indexes (`FORMATS[fmt]`).
    pub fn possible_values(&self, node: Node<'_>) -> Option<Vec<String>> {
        if let Some(v) = self.fold(node) {
            return Some(vec![v]);
        }
        if node.kind_id() != self.k.subscript {
            return None;
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

    /// `__import__('os')` → `os`; `getattr(os, 'system')` → `os.system`.
    fn names_of_call_result(&self, node: Node<'_>, d: u8) -> Vec<String> {
        let Some(func) = node.child_by_field_id(self.k.f_function) else {
            return Vec::new();
        };
        let last = self.last_segment(func);
        if !matches!(last.as_ref(), "__import__" | "import_module" | "getattr")
            && !self.facts.aliases.contains_key(last.as_ref())
        {
            return Vec::new();
        }
        let args = self.positional(node);
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
                _ => {}
            }
        }
        out
    }

    /// `globals()['eval']`, `sys.modules['os']`, `__builtins__.__dict__['exec']`.
    fn names_of_subscript(&self, node: Node<'_>, d: u8) -> Vec<String> {
        let (Some(value), Some(key)) = (
            node.child_by_field_id(self.k.f_value),
            node.child_by_field_id(self.k.f_subscript),
        ) else {
            return Vec::new();
        };
        let Some(key) = self.fold_at(key, d) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for base in self.names_at(value, d) {
            match base.as_str() {
                "sys.modules" | "__builtins__" | "builtins" => out.push(key.clone()),
                _ => {
                    if let Some(owner) = base.strip_suffix(".__dict__") {
                        out.push(format!("{owner}.{key}"));
                    }
                }
            }
        }
        // globals()/locals()/vars() without arguments: the key names a module-level binding.
        if value.kind_id() == self.k.call && self.positional(value).is_empty() {
            let callee = value
                .child_by_field_id(self.k.f_function)
                .map(|f| self.names_at(f, d))
                .unwrap_or_default();
            if callee
                .iter()
                .any(|c| matches!(c.as_str(), "globals" | "locals" | "vars"))
            {
                let key_names = self
                    .facts
                    .aliases
                    .get(&key)
                    .cloned()
                    .unwrap_or_else(|| vec![key.clone()]);
                out.extend(key_names);
            }
        }
        out
    }

    /// The resolved names of a call's callee.
    pub fn callee_names(&self, call: Node<'_>) -> Vec<String> {
        call.child_by_field_id(self.k.f_function)
            .map(|f| self.names(f))
            .unwrap_or_default()
    }

    pub fn call_matches<'t>(&self, node: Node<'t>, spec: &CallSpec, cx: &Cx<'_, 't>) -> bool {
        let (names, hot) = cx.callee(node, || self.callee_names(node));
        if !hot || !names.iter().any(|n| spec.callee.contains(n)) {
            return false;
        }
        if let Some(arg) = &spec.arg {
            let args = self.positional(node);
            let hit = match arg.index {
                Some(i) => args.get(i).is_some_and(|a| arg.inner.matches(*a, cx)),
                None => args.iter().any(|a| arg.inner.matches(*a, cx)),
            };
            if !hit {
                return false;
            }
        }
        if let Some(kw) = &spec.keyword {
            let hit = self.keywords(node).into_iter().any(|(name, value)| {
                kw.name.is_match(&name) && kw.value.as_ref().is_none_or(|m| m.matches(value, cx))
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
        let mut stack = vec![body];
        while let Some(n) = stack.pop() {
            if n.kind_id() == self.k.call
                && n.child_by_field_id(self.k.f_function)
                    .is_some_and(|f| f.kind_id() == self.k.identifier && ident(f, self.src) == name)
            {
                return true;
            }
            stack.extend(n.named_children(&mut n.walk()));
        }
        false
    }
}

/// Python slice semantics on characters.
fn py_slice(v: &[char], start: Option<i64>, stop: Option<i64>, step: i64) -> Vec<char> {
    let len = i64::try_from(v.len()).unwrap_or(i64::MAX);
    let clamp = |i: i64, lo: i64, hi: i64| i.max(lo).min(hi);
    let norm = |i: i64| if i < 0 { i + len } else { i };
    let mut out = Vec::new();
    if step > 0 {
        let mut i = clamp(start.map_or(0, norm), 0, len);
        let end = clamp(stop.map_or(len, norm), 0, len);
        while i < end {
            out.push(v[usize::try_from(i).unwrap_or(0)]);
            i += step;
        }
    } else {
        let mut i = clamp(start.map_or(len - 1, norm), -1, len - 1);
        let end = clamp(stop.map_or(-1, norm), -1, len - 1);
        while i > end {
            out.push(v[usize::try_from(i).unwrap_or(0)]);
            i += step;
        }
    }
    out
}

/// `os.path.join` semantics: an absolute part restarts the path.
fn join_paths(parts: &[String]) -> String {
    let mut out = String::new();
    for part in parts {
        if part.starts_with('/') || out.is_empty() {
            out = part.clone();
        } else {
            if !out.ends_with('/') {
                out.push('/');
            }
            out.push_str(part);
        }
    }
    out
}

fn parse_int(t: &str) -> Option<i64> {
    let t = t.replace('_', "").to_ascii_lowercase();
    let t = t.trim_end_matches('l');
    if let Some(h) = t.strip_prefix("0x") {
        i64::from_str_radix(h, 16).ok()
    } else if let Some(o) = t.strip_prefix("0o") {
        i64::from_str_radix(o, 8).ok()
    } else if let Some(b) = t.strip_prefix("0b") {
        i64::from_str_radix(b, 2).ok()
    } else {
        t.parse().ok()
    }
}

fn percent_format(template: &str, values: &[String]) -> Option<String> {
    let mut out = String::new();
    let mut values = values.iter();
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            '%' => out.push('%'),
            's' | 'r' | 'd' => out.push_str(values.next()?),
            _ => return None,
        }
    }
    values.next().is_none().then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_follow_python_semantics() {
        let v: Vec<char> = "abcdef".chars().collect();
        let s = |a, b, c| py_slice(&v, a, b, c).into_iter().collect::<String>();
        assert_eq!(s(None, None, -1), "fedcba");
        assert_eq!(s(Some(1), Some(4), 1), "bcd");
        assert_eq!(s(None, None, 2), "ace");
        assert_eq!(s(Some(-2), None, 1), "ef");
    }

    #[test]
    fn percent_format_folds() {
        assert_eq!(
            percent_format("%s%s", &["ev".into(), "al".into()]).as_deref(),
            Some("eval")
        );
    }
}
