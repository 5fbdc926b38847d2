//! Values a loop gives an expression: a name a `for` loop binds to each item of a constant
//! list, tuple or set (directly or through a name bound to one), and the expressions built from
//! it, folded once per item; and the known leading parts of the items an iterable yields (a
//! literal's elements, the files of a glob or a walk, through `sorted`, `filter` and `map`).

use tree_sitter::Node;

use super::flow::MAX_FLOW_DEPTH;
use super::ops::join_paths;
use super::{Binding, PySem, function_of, ident};
use crate::rules::grammar::{children, text};

impl<'a> PySem<'a> {
    /// The values of an expression built from one loop variable over constant items
    /// (`for d in DIRS: shutil.rmtree(Path(d))`, `for rc in RC_FILES: p = Path.home() / rc`): the
    /// expression folded once per item; `None` unless it folds for every item.
    pub(super) fn loop_values(&self, node: Node<'a>) -> Option<Vec<String>> {
        if self.bound.is_some() {
            return None;
        }
        let (var, items) = self.loop_variable(node, 0)?;
        items
            .into_iter()
            .map(|item| {
                PySem {
                    bound: Some((var, item)),
                    ..*self
                }
                .fold(node)
            })
            .collect()
    }

    /// The first name in an expression (or in the values of the names it uses) that a `for`
    /// loop binds to each item of a constant list, tuple or set, with those items.
    fn loop_variable(&self, node: Node<'a>, depth: u8) -> Option<(Node<'a>, Vec<Node<'a>>)> {
        const MAX_ITEMS: usize = 64;
        // (deep enough for `(home / rel).resolve()`: call, attribute, parentheses, operator)
        if depth > 6 {
            return None;
        }
        if node.kind_id() == self.k.identifier {
            return match self.binding_of(node)? {
                Binding::Item(iterable, at) | Binding::Refined(_, iterable, at) => {
                    let items = self.loop_items(iterable, at)?;
                    (items.len() <= MAX_ITEMS).then_some((node, items))
                }
                Binding::Value(value) => self.loop_variable(value, depth + 1),
                _ => None,
            };
        }
        let mut cursor = node.walk();
        let children: Vec<Node<'a>> = node.named_children(&mut cursor).collect();
        children
            .into_iter()
            .find_map(|c| self.loop_variable(c, depth + 1))
    }

    /// The constant items a loop target is bound to: those of a list, tuple or set literal, the
    /// element at the target's place in each (`for path, value in [(…), …]`), or the keys or
    /// values of a dict literal (`for path, value in SETTINGS.items()`).
    fn loop_items(&self, iterable: Node<'a>, at: Option<u8>) -> Option<Vec<Node<'a>>> {
        if let Some((dict, part)) = self.dict_part(iterable, at) {
            return Some(
                children(dict)
                    .filter(|c| c.kind_id() == self.k.pair)
                    .filter_map(|pair| pair.child_by_field_id(part))
                    .collect(),
            );
        }
        let items = self.literal_items(iterable, 0)?;
        match at {
            None => Some(items),
            Some(i) => items
                .into_iter()
                .map(|item| {
                    (item.kind_id() == self.k.tuple || item.kind_id() == self.k.list)
                        .then(|| item.named_child(u32::from(i)))
                        .flatten()
                })
                .collect(),
        }
    }

    /// The list or tuple literals a loop variable goes through (`for argv in ([…], […])`).
    pub(crate) fn loop_argv_lists(&self, node: Node<'a>) -> Option<Vec<Node<'a>>> {
        if node.kind_id() != self.k.identifier {
            return None;
        }
        let Some(Binding::Item(iterable, None)) = self.binding_of(node) else {
            return None;
        };
        let items = self.literal_items(iterable, 0)?;
        items
            .iter()
            .all(|i| i.kind_id() == self.k.list || i.kind_id() == self.k.tuple)
            .then_some(items)
    }

    /// The items of a list, tuple or set literal, directly or through a name bound to one.
    pub(crate) fn literal_items(&self, node: Node<'a>, depth: u8) -> Option<Vec<Node<'a>>> {
        let k = self.k;
        let kind = node.kind_id();
        if kind == k.list || kind == k.tuple || kind == k.set {
            let mut cursor = node.walk();
            return Some(node.named_children(&mut cursor).collect());
        }
        if kind == k.identifier
            && depth < 4
            && let Some(Binding::Value(value)) = self.binding_of(node)
        {
            return self.literal_items(value, depth + 1);
        }
        if depth < 4
            && let Some(Binding::Value(value)) = self.attribute_binding(node)
        {
            return self.literal_items(value, depth + 1);
        }
        // a loop variable over containers (`for cmds in STEPS.values()` with each value a list of
        // argvs): the items of every container it takes
        if kind == k.identifier
            && depth < 4
            && let Some(Binding::Item(iterable, at)) = self.binding_of(node)
        {
            let containers = match self.dict_part(iterable, at) {
                Some((dict, field)) => children(dict)
                    .filter(|p| p.kind_id() == k.pair)
                    .filter_map(|p| p.child_by_field_id(field))
                    .collect(),
                None if at.is_none() => self.literal_items(iterable, depth + 1)?,
                None => return None,
            };
            // (containers that are not literals, such as a comprehension, give nothing)
            let out: Vec<Node<'a>> = containers
                .into_iter()
                .filter_map(|c| self.literal_items(c, depth + 1))
                .flatten()
                .collect();
            return (!out.is_empty()).then_some(out);
        }
        None
    }

    /// `for p in ["~/.netrc", …]: p = os.path.expanduser(p)`: the value once per constant item,
    /// with `var` standing for the item; the items' own prefixes when they are not constants.
    pub(super) fn refined_prefixes(
        &self,
        var: Node<'a>,
        value: Node<'a>,
        iterable: Node<'a>,
        at: Option<u8>,
        d: u8,
    ) -> Vec<String> {
        if at.is_none()
            && let Some(prefixes) = self.per_item_prefixes(var, value, iterable, d)
        {
            return prefixes;
        }
        self.item_prefixes(iterable, at, d)
    }

    /// `value` once per constant item of `iterable`, with `var` standing for the item; `None`
    /// unless the iterable is a literal (or a name bound to one) and no other item is bound.
    fn per_item_prefixes(
        &self,
        var: Node<'a>,
        value: Node<'a>,
        iterable: Node<'a>,
        d: u8,
    ) -> Option<Vec<String>> {
        if self.bound.is_some() {
            return None;
        }
        let items = self.literal_items(iterable, 0)?;
        Some(
            items
                .into_iter()
                .flat_map(|item| {
                    PySem {
                        bound: Some((var, item)),
                        ..*self
                    }
                    .prefixes_at(value, d)
                })
                .collect(),
        )
    }

    /// The prefixes of the items of `iterable` (of the `at`-th element of each item, for
    /// `for a, b in …`): the elements of a literal, the files a glob or a walk yields.
    pub(super) fn item_prefixes(&self, iterable: Node<'a>, at: Option<u8>, d: u8) -> Vec<String> {
        let k = self.k;
        let kind = iterable.kind_id();
        // `(glob.glob(p) + [...])`, written over lines
        if kind == k.parenthesized_expression && d < MAX_FLOW_DEPTH {
            return iterable
                .named_child(0)
                .map(|inner| self.item_prefixes(inner, at, d + 1))
                .unwrap_or_default();
        }
        if kind == k.list || kind == k.tuple || kind == k.set {
            // `for path, value in [("/proc/sys/…", "0"), …]`: the element at the target's place
            return children(iterable)
                .filter(|c| c.is_named())
                .filter_map(|item| match at {
                    None => Some(item),
                    Some(i) => (item.kind_id() == k.tuple || item.kind_id() == k.list)
                        .then(|| item.named_child(u32::from(i)))
                        .flatten(),
                })
                .flat_map(|item| {
                    // `[Path("."), *extra]`: the items of `extra`
                    if item.kind_id() == k.list_splat {
                        item.named_child(0)
                            .map(|inner| self.item_prefixes(inner, at, d + 1))
                            .unwrap_or_default()
                    } else {
                        self.prefixes_at(item, d)
                    }
                })
                .collect();
        }
        // a constant dict: its keys (`for k in d`, `d.keys()`), values (`d.values()`) or both
        // (`for k, v in d.items()`)
        if let Some((dict, part)) = self.dict_part(iterable, at) {
            return children(dict)
                .filter(|c| c.kind_id() == k.pair)
                .filter_map(|pair| pair.child_by_field_id(part))
                .flat_map(|item| self.prefixes_at(item, d))
                .collect();
        }
        if kind == k.identifier {
            let name = ident(iterable, self.src);
            if let Some(Binding::Value(v)) = self.binding(&name) {
                return self.item_prefixes(v, at, d);
            }
            // a list grown after it was bound (`files += glob(…)`, `files.append(p)`)
            let grown = self.grown(iterable);
            if !grown.is_empty() && d < MAX_FLOW_DEPTH {
                return grown
                    .iter()
                    .flat_map(|g| {
                        if g.sequence {
                            self.item_prefixes(g.node, at, d + 1)
                        } else {
                            self.prefixes_at(g.node, d + 1)
                        }
                    })
                    .collect();
            }
        }
        if let Some(Binding::Value(v)) = self.attribute_binding(iterable) {
            return self.item_prefixes(v, at, d);
        }
        // `[p for p in base.iterdir() if p.is_dir()]`: the items of the iterable it filters;
        // `[Path.home() / d for d in ("Documents", …)]`: the body once per constant item
        if (kind == k.list_comprehension || kind == k.generator_expression)
            && let Some(body) = iterable.child_by_field_id(k.f_body)
            && let Some(clause) = children(iterable).find(|c| c.kind_id() == k.for_in_clause)
            && let (Some(var), Some(inner)) = (
                clause.child_by_field_id(k.f_left),
                clause.child_by_field_id(k.f_right),
            )
            && var.kind_id() == k.identifier
            && d < MAX_FLOW_DEPTH
        {
            if body.kind_id() == k.identifier && text(var, self.src) == text(body, self.src) {
                return self.item_prefixes(inner, at, d + 1);
            }
            if at.is_none()
                && let Some(prefixes) = self.per_item_prefixes(var, body, inner, d + 1)
            {
                return prefixes;
            }
        }
        // `glob.glob(p) + ["/etc/passwd"]`: the items of either
        if kind == k.binary_operator
            && iterable
                .child_by_field_id(k.f_operator)
                .is_some_and(|op| text(op, self.src) == "+")
        {
            return [k.f_left, k.f_right]
                .into_iter()
                .filter_map(|f| iterable.child_by_field_id(f))
                .flat_map(|side| self.item_prefixes(side, at, d))
                .collect();
        }
        if kind != k.call {
            return Vec::new();
        }
        let Some(func) = function_of(iterable) else {
            return Vec::new();
        };
        let args = self.positional(iterable);
        let names = self.names(func);
        let named = |wanted: &[&str]| names.iter().any(|n| wanted.contains(&n.as_str()));
        // `Path(p).glob(pattern)`, `.rglob(pattern)`, `.iterdir()` (not the `glob` module's)
        if func.kind_id() == k.attribute
            && !named(&["glob.glob", "glob.iglob"])
            && let (Some(object), Some(method)) = (
                func.child_by_field_id(k.f_object),
                func.child_by_field_id(k.f_attribute),
            )
        {
            let pattern = args
                .first()
                .and_then(|a| self.fold(*a))
                .map(|p| glob_segments(&p))
                .unwrap_or_default();
            let glob = match text(method, self.src) {
                "glob" => Some(pattern),
                "rglob" => Some(format!("**/{pattern}")),
                "iterdir" => Some(String::new()),
                // module functions spelt as attributes (`os.walk`) are looked at below
                _ => None,
            };
            if let Some(glob) = glob {
                return self
                    .prefixes_at(object, d)
                    .into_iter()
                    .map(|base| join_paths(&[base, glob.clone()]))
                    .collect();
            }
        }
        // Wrappers that keep the items: `sorted(paths)`, `list(…)`, `filter(pred, paths)`, and
        // `map(f, paths)` with an `f` that keeps a path's leading part (`os.path.expanduser`,
        // `Path`, `str`: `~` already stands for the home directory).
        if named(&["sorted", "list", "tuple", "set", "reversed", "frozenset"]) && args.len() == 1 {
            return self.item_prefixes(args[0], at, d);
        }
        // `for i, p in enumerate(paths)`: `p` is an item
        if named(&["enumerate"]) && at == Some(1) && !args.is_empty() {
            return self.item_prefixes(args[0], None, d);
        }
        if named(&["filter", "itertools.filterfalse"]) && args.len() == 2 {
            return self.item_prefixes(args[1], at, d);
        }
        if named(&["map"]) && args.len() == 2 && self.keeps_path(args[0]) {
            return self.item_prefixes(args[1], at, d);
        }
        // `for d in cache_dirs():` a function of this script: what it yields or returns
        if d < MAX_FLOW_DEPTH
            && let Some(def) = self.local_function(func)
        {
            return self.produced_prefixes(def, at, d + 1);
        }
        match (at, args.first()) {
            (None, Some(pattern)) if named(&["glob.glob", "glob.iglob"]) => self
                .prefixes_at(*pattern, d)
                .into_iter()
                .map(|p| glob_segments(&p))
                .collect(),
            // `for root, dirs, files in os.walk(top)`: `root` starts with `top`.
            (Some(0), Some(top)) if named(&["os.walk"]) => self.prefixes_at(*top, d),
            _ => Vec::new(),
        }
    }

    /// The body of the script's own function a call runs (`compact(p, key)` → the body of
    /// `def compact`), if it calls one.
    pub fn called_body(&self, call: Node<'a>) -> Option<Node<'a>> {
        let def = self.local_function(super::function_of(call)?)?;
        def.child_by_field_id(self.k.f_body)
    }

    /// The module-level `def` a called name refers to (`cache_dirs` in `cache_dirs()`), or the
    /// method of the enclosing class `self.name()` calls.
    fn local_function(&self, func: Node<'a>) -> Option<Node<'a>> {
        // most calls name no function of the script: the names the walk saw defined say so
        // without climbing the tree
        let last = text(func, self.src).rsplit('.').next().unwrap_or_default();
        if !self.facts.defines_function(last) {
            return None;
        }
        // `cache_dirs()`: the def of that name the walk saw at module level (its parent is the
        // module, or a decorated definition that is)
        if func.kind_id() == self.k.identifier {
            let top_level = |n: Node<'a>| n.parent().is_some_and(|p| p.kind() == "module");
            return self.facts.defs_named(last).iter().copied().find(|def| {
                def.parent().is_some_and(|p| {
                    p.kind() == "module" || (p.kind() == "decorated_definition" && top_level(p))
                })
            });
        }
        // `self.stale_dirs()`: a method of the class it is called in
        if func.kind_id() != self.k.attribute
            || func
                .child_by_field_id(self.k.f_object)
                .is_none_or(|o| text(o, self.src) != "self")
        {
            return None;
        }
        let mut class = func.parent()?;
        while class.kind_id() != self.k.class_definition {
            class = class.parent()?;
        }
        let name = text(func.child_by_field_id(self.k.f_attribute)?, self.src);
        let scope = class.child_by_field_id(self.k.f_body)?;
        children(scope)
            .map(|c| {
                if c.kind() == "decorated_definition" {
                    c.child_by_field_name("definition").unwrap_or(c)
                } else {
                    c
                }
            })
            .find(|c| {
                c.kind() == "function_definition"
                    && c.child_by_field_id(self.k.f_name)
                        .is_some_and(|n| text(n, self.src) == name)
            })
    }

    /// The prefixes of what a function produces: each `yield x` (the items of `yield from xs`) and
    /// the items of each `return [...]`, outside nested functions and classes.
    fn produced_prefixes(&self, def: Node<'a>, at: Option<u8>, d: u8) -> Vec<String> {
        let mut out = Vec::new();
        for (value, how) in self.produced(def) {
            match how {
                Produced::YieldFrom | Produced::Return => {
                    out.extend(self.item_prefixes(value, at, d));
                }
                Produced::Yield if at.is_none() => out.extend(self.prefixes_at(value, d)),
                Produced::Yield => {}
            }
        }
        out
    }

    /// The prefixes of what a call of a function of this script returns (`"/dev/" + name` for
    /// `primary_disk()`), when `func` names one.
    pub(super) fn returned_prefixes(&self, func: Node<'a>, d: u8) -> Vec<String> {
        if d >= MAX_FLOW_DEPTH {
            return Vec::new();
        }
        let Some(def) = self.local_function(func) else {
            return Vec::new();
        };
        self.produced(def)
            .into_iter()
            .filter(|(_, how)| *how == Produced::Return)
            .flat_map(|(value, _)| self.prefixes_at(value, d + 1))
            .collect()
    }

    /// The values a function's body yields and returns, outside nested functions and classes.
    fn produced(&self, def: Node<'a>) -> Vec<(Node<'a>, Produced)> {
        let Some(body) = def.child_by_field_id(self.k.f_body) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut stack = vec![body];
        while let Some(node) = stack.pop() {
            match node.kind() {
                "function_definition" | "class_definition" | "lambda" => continue,
                "yield" => {
                    let from = children(node).any(|c| c.kind() == "from");
                    if let Some(value) = node.named_child(0) {
                        out.push((
                            value,
                            if from {
                                Produced::YieldFrom
                            } else {
                                Produced::Yield
                            },
                        ));
                    }
                    continue;
                }
                "return_statement" => {
                    if let Some(value) = node.named_child(0) {
                        out.push((value, Produced::Return));
                    }
                    continue;
                }
                _ => {}
            }
            stack.extend(children(node).filter(|c| c.is_named()));
        }
        out
    }

    /// The dict literal a loop goes through and the field of its pairs the target gets: `for k in
    /// d` and `d.keys()` the keys, `d.values()` the values, `for k, v in d.items()` either.
    fn dict_part(&self, iterable: Node<'a>, at: Option<u8>) -> Option<(Node<'a>, u16)> {
        let k = self.k;
        let literal = |mut node: Node<'a>| {
            for _ in 0..4 {
                if node.kind_id() == k.dictionary {
                    return Some(node);
                }
                if node.kind_id() != k.identifier {
                    return None;
                }
                match self.binding_of(node)? {
                    Binding::Value(v) => node = v,
                    _ => return None,
                }
            }
            None
        };
        if iterable.kind_id() != k.call {
            return Some((literal(iterable)?, k.f_key)).filter(|_| at.is_none());
        }
        let func = function_of(iterable)?;
        if func.kind_id() != k.attribute || !self.positional(iterable).is_empty() {
            return None;
        }
        let dict = literal(func.child_by_field_id(k.f_object)?)?;
        let part = match (text(func.child_by_field_id(k.f_attribute)?, self.src), at) {
            ("keys", None) | ("items", Some(0)) => k.f_key,
            ("values", None) | ("items", Some(1)) => k.f_value,
            _ => return None,
        };
        Some((dict, part))
    }

    /// Whether `func` (a callable passed by name) keeps the leading part of a path it is given.
    fn keeps_path(&self, func: Node<'a>) -> bool {
        self.names(func).iter().any(|n| {
            matches!(
                n.as_str(),
                "os.path.expanduser"
                    | "os.path.expandvars"
                    | "os.path.abspath"
                    | "os.path.realpath"
                    | "os.path.normpath"
                    | "os.fspath"
                    | "pathlib.Path"
                    | "pathlib.PosixPath"
                    | "str"
            )
        })
    }
}

/// A glob pattern with every path segment that holds a wildcard written as `*`
/// (`/proc/[0-9]*/environ` → `/proc/*/environ`), the form rules name such paths by.
fn glob_segments(pattern: &str) -> String {
    pattern
        .split('/')
        .map(|seg| {
            if seg != "**" && seg.contains(['*', '?', '[']) {
                "*"
            } else {
                seg
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// How a function gives a value back (see `PySem::produced`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Produced {
    Yield,
    YieldFrom,
    Return,
}
