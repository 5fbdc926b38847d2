//! Values that flow through names and wrappers: the known leading part of a path built at run
//! time (`os.path.join(home, ".ssh", name)` starts with `~/.ssh/`), the items a loop variable takes
//! (`for f in glob.glob("/var/log/*")`), keyword dictionaries (`**opts`), `functools.partial`'s
//! bound arguments, and command strings whose run-time parts are all shell-quoted.

use tree_sitter::Node;

use super::facts::{Binding, Growth};
use super::ops::join_paths;
use super::{PySem, function_of, ident};
use crate::rules::grammar::{children, text};

/// Flow is followed this many names deep (`a = b; b = c; …`), and at most this many prefixes are
/// kept per expression.
pub(super) const MAX_FLOW_DEPTH: u8 = 8;

/// Reads of an environment variable with a default (`os.environ.get(NAME, default)`).
const ENV_LOOKUPS: &[&str] = &["os.getenv", "os.environ.get"];

/// Calls whose value is the path they are given, as a rule reads it (`Path(p)`, `str(p)`).
const PATH_WRAPPERS: &[&str] = &[
    "pathlib.Path",
    "pathlib.PosixPath",
    "pathlib.PurePath",
    "os.path.expanduser",
    "os.path.abspath",
    "os.path.realpath",
    "os.path.normpath",
    "os.fspath",
    "str",
];
const MAX_PREFIXES: usize = 8;

/// What `shlex.quote(x)` folds to when only shell safety matters: one quoted word.
const QUOTED: &str = "'…'";

impl<'a> PySem<'a> {
    /// What a name is bound to (see [`Binding`]).
    pub fn binding(&self, name: &str) -> Option<Binding<'a>> {
        self.facts
            .bindings
            .get(name)
            .copied()
            .or_else(|| self.facts.parameter_binding(self.k, name, self.src))
    }

    /// What the name `node` is bound to where it is used: inside a `for` loop over it, that
    /// loop's binding even when other loops or assignments bind the same name elsewhere.
    pub fn binding_of(&self, node: Node<'a>) -> Option<Binding<'a>> {
        let name = ident(node, self.src);
        if self.facts.shadowed_by_parameter(&name, node.start_byte()) {
            // a parameter: another scope's binding of the name does not reach it; the argument
            // of the one call of its function does
            return self
                .facts
                .parameter_binding(self.k, &name, self.src)
                .or(Some(Binding::Many));
        }
        match self.binding(&name) {
            Some(Binding::Many) => self
                .facts
                .loop_binding_at(&name, node.start_byte())
                .or_else(|| self.facts.local_binding_at(&name, node.start_byte()))
                .or(Some(Binding::Many)),
            other => other,
        }
    }

    /// What the list or set a name holds grew by (`+=`, `append`, `extend` after it was bound).
    pub fn grown(&self, node: Node<'a>) -> &[Growth<'a>] {
        self.facts
            .grown
            .get(&ident(node, self.src))
            .map_or(&[], Vec::as_slice)
    }

    /// Whether a value is written out in the script: a string literal without interpolations,
    /// literals glued together, or a name bound once to one.
    pub fn is_plain(&self, node: Node<'a>, depth: u8) -> bool {
        let k = self.k;
        let kind = node.kind_id();
        if kind == k.string {
            return !children(node).any(|c| c.kind_id() == k.interpolation);
        }
        if kind == k.concatenated_string || kind == k.parenthesized_expression {
            return children(node)
                .filter(|c| c.is_named())
                .all(|c| self.is_plain(c, depth));
        }
        if kind == k.identifier && depth < 2 {
            return matches!(
                self.binding_of(node),
                Some(Binding::Value(v)) if self.is_plain(v, depth + 1)
            );
        }
        false
    }

    /// `self.base`, `self.SOURCES`, `Job.SOURCES`: what an attribute of the object or its class
    /// was bound to (`self.base = …` in a method, `SOURCES = […]` in the class body).
    pub(super) fn attribute_binding(&self, node: Node<'a>) -> Option<Binding<'a>> {
        if node.kind_id() != self.k.attribute {
            return None;
        }
        let object = node.child_by_field_id(self.k.f_object)?;
        let owner = text(object, self.src);
        if object.kind_id() != self.k.identifier
            || (owner != "self" && owner != "cls" && !self.facts.classes.contains(owner))
        {
            return None;
        }
        let attribute = node.child_by_field_id(self.k.f_attribute)?;
        self.facts
            .bindings
            .get(text(node, self.src))
            .or_else(|| self.facts.bindings.get(text(attribute, self.src)))
            .copied()
    }

    /// The known leading parts of the values an expression can take: its value when it is a
    /// constant, or the constant text before the first part only known at run time. Paths fold
    /// as the interpreter would join them (`~` for the home directory).
    pub fn prefixes(&self, node: Node<'a>) -> Vec<String> {
        let mut out: Vec<String> = self
            .prefixes_at(node, 0)
            .into_iter()
            .map(super::ops::resolve_dots)
            .collect();
        out.retain(|p| !p.is_empty());
        out.sort();
        out.dedup();
        out.truncate(MAX_PREFIXES);
        out
    }

    pub(super) fn prefixes_at(&self, node: Node<'a>, depth: u8) -> Vec<String> {
        if depth > MAX_FLOW_DEPTH {
            return Vec::new();
        }
        if let Some(v) = self.fold(node) {
            return vec![v];
        }
        let k = self.k;
        let d = depth + 1;
        let kind = node.kind_id();
        if kind == k.string {
            self.string_prefix(node).into_iter().collect()
        } else if kind == k.parenthesized_expression {
            node.named_child(0)
                .map(|n| self.prefixes_at(n, d))
                .unwrap_or_default()
        } else if kind == k.identifier {
            let name = ident(node, self.src);
            match self.binding_of(node) {
                Some(Binding::Value(v)) => self.prefixes_at(v, d),
                Some(Binding::Item(iterable, at)) => self.item_prefixes(iterable, at, d),
                Some(Binding::Refined(value, iterable, at)) => {
                    self.refined_prefixes(node, value, iterable, at, d)
                }
                // a parameter of a function called several times: what each call passes
                Some(Binding::Many)
                    if self.facts.shadowed_by_parameter(&name, node.start_byte()) =>
                {
                    self.facts
                        .parameter_bindings(k, &name, self.src)
                        .into_iter()
                        .flat_map(|b| match b {
                            Binding::Value(v) => self.prefixes_at(v, d),
                            Binding::Item(iterable, at) => self.item_prefixes(iterable, at, d),
                            _ => Vec::new(),
                        })
                        .collect()
                }
                _ => Vec::new(),
            }
        } else if kind == k.attribute {
            match self.attribute_binding(node) {
                Some(Binding::Value(v)) => self.prefixes_at(v, d),
                _ => Vec::new(),
            }
        } else if kind == k.binary_operator {
            self.binary_prefixes(node, d)
        } else if kind == k.call {
            self.call_prefixes(node, d)
        } else if kind == k.subscript {
            self.possible_values(node).unwrap_or_default()
        } else if kind == k.conditional_expression {
            // `Path(sys.argv[1]) if … else Path("/etc/shadow")`: either branch
            [node.named_child(0), node.named_child(2)]
                .into_iter()
                .flatten()
                .flat_map(|branch| self.prefixes_at(branch, d))
                .collect()
        } else {
            Vec::new()
        }
    }

    /// An f-string up to its first interpolation that does not fold.
    fn string_prefix(&self, node: Node<'a>) -> Option<String> {
        let mut out = String::new();
        for part in children(node) {
            let kind = part.kind_id();
            if kind == self.k.string_content {
                out.push_str(text(part, self.src));
            } else if kind == self.k.interpolation {
                let value = part
                    .child_by_field_id(self.k.f_expression)
                    .and_then(|e| self.fold(e));
                match value {
                    Some(v) => out.push_str(&v),
                    None => break,
                }
            }
        }
        Some(out)
    }

    fn binary_prefixes(&self, node: Node<'a>, d: u8) -> Vec<String> {
        let k = self.k;
        let (Some(op), Some(left), Some(right)) = (
            node.child_by_field_id(k.f_operator),
            node.child_by_field_id(k.f_left),
            node.child_by_field_id(k.f_right),
        ) else {
            return Vec::new();
        };
        let op = text(op, self.src);
        match op {
            "+" | "/" => {
                let Some(whole) = self.fold(left).or_else(|| self.unset_default(left, d)) else {
                    return self.prefixes_at(left, d);
                };
                let rest = self.prefixes_at(right, d);
                let join = |r: &str| {
                    if op == "/" {
                        join_paths(&[whole.clone(), r.to_string()])
                    } else {
                        format!("{whole}{r}")
                    }
                };
                if rest.is_empty() {
                    vec![if op == "/" { join("") } else { whole.clone() }]
                } else {
                    rest.iter().map(|r| join(r)).collect()
                }
            }
            "%" => self
                .fold(left)
                .map(|t| t[..t.find('%').unwrap_or(t.len())].to_string())
                .into_iter()
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The whole value of `os.environ.get("DOCKER_CONFIG", Path.home() / ".docker")` (also inside
    /// `Path(…)`, or bound to a name) when the variable is unset, the case a rule must assume:
    /// its default, so that what is joined to it is known too (`… / "config.json"`).
    fn unset_default(&self, node: Node<'a>, d: u8) -> Option<String> {
        if d > MAX_FLOW_DEPTH {
            return None;
        }
        let k = self.k;
        let kind = node.kind_id();
        if kind == k.parenthesized_expression {
            return self.unset_default(node.named_child(0)?, d + 1);
        }
        if kind == k.identifier {
            return match self.binding_of(node) {
                Some(Binding::Value(v)) => self.unset_default(v, d + 1),
                _ => None,
            };
        }
        if kind != k.call {
            return None;
        }
        let names = self.names(function_of(node)?);
        let named = |wanted: &[&str]| names.iter().any(|n| wanted.contains(&n.as_str()));
        let args = self.positional(node);
        if named(ENV_LOOKUPS) {
            let default = *args.get(1)?;
            return self
                .fold(default)
                .or_else(|| self.unset_default(default, d + 1));
        }
        if named(PATH_WRAPPERS)
            && let [only] = args.as_slice()
        {
            return self.unset_default(*only, d + 1);
        }
        None
    }

    fn call_prefixes(&self, node: Node<'a>, d: u8) -> Vec<String> {
        let Some(func) = function_of(node) else {
            return Vec::new();
        };
        let args = self.positional(node);
        // methods of a path or string object
        if func.kind_id() == self.k.attribute
            && let (Some(object), Some(method)) = (
                func.child_by_field_id(self.k.f_object),
                func.child_by_field_id(self.k.f_attribute),
            )
        {
            match text(method, self.src) {
                // `Path(p).expanduser()`; `os.path.expanduser(p)` is a function of its argument
                "expanduser" | "resolve" | "absolute" | "as_posix" if args.is_empty() => {
                    return self.prefixes_at(object, d);
                }
                "joinpath" => {
                    return self.join_prefixes(Some(object), &args, d);
                }
                "format" => {
                    return self
                        .fold(object)
                        .map(|t| t[..t.find('{').unwrap_or(t.len())].to_string())
                        .into_iter()
                        .collect();
                }
                _ => {}
            }
        }
        let names = self.names(func);
        let named = |wanted: &[&str]| names.iter().any(|n| wanted.contains(&n.as_str()));
        if named(&["os.path.join", "posixpath.join"]) {
            return self.join_prefixes(None, &args, d);
        }
        // `next(p for p in glob.glob("/dev/input/*"))`: one of the items
        // (a lone generator argument is the call's `arguments` itself, without parentheses of its own)
        if named(&["next"])
            && let Some(generator) = node
                .child_by_field_id(self.k.f_arguments)
                .filter(|g| g.kind_id() == self.k.generator_expression)
                .or_else(|| {
                    args.first()
                        .copied()
                        .filter(|g| g.kind_id() == self.k.list_comprehension)
                })
            && let Some(clause) = children(generator).find(|c| c.kind_id() == self.k.for_in_clause)
            && let Some(iterable) = clause.child_by_field_id(self.k.f_right)
        {
            return self.item_prefixes(iterable, None, d);
        }
        // `os.environ.get("CACHE_ROOT", "/")`: the default, the value whenever the caller leaves
        // the variable unset (the case a rule must assume)
        if named(ENV_LOOKUPS)
            && let Some(default) = args.get(1)
        {
            return self.prefixes_at(*default, d);
        }
        // a function of this script: what it returns
        if names.is_empty() || names.iter().all(|n| !n.contains('.')) {
            let returned = self.returned_prefixes(func, d);
            if !returned.is_empty() {
                return returned;
            }
        }
        if named(PATH_WRAPPERS) {
            return match args.len() {
                0 => Vec::new(),
                1 => self.prefixes_at(args[0], d),
                _ => self.join_prefixes(None, &args, d),
            };
        }
        Vec::new()
    }

    /// `os.path.join(a, b, …)` (or `object.joinpath(…)`): the known parts, up to and including
    /// the known prefix of the first part that is not a constant.
    fn join_prefixes(&self, object: Option<Node<'a>>, args: &[Node<'a>], d: u8) -> Vec<String> {
        let mut parts: Vec<Node<'a>> = object.into_iter().collect();
        parts.extend_from_slice(args);
        let mut known: Vec<String> = Vec::new();
        for part in parts {
            match self.fold(part) {
                Some(v) => known.push(v),
                None => {
                    let base = join_paths(&known);
                    let tails = self.prefixes_at(part, d);
                    if tails.is_empty() {
                        return vec![if known.is_empty() {
                            String::new()
                        } else {
                            join_paths(&[base, String::new()])
                        }];
                    }
                    return tails
                        .iter()
                        .map(|t| join_paths(&[base.clone(), t.clone()]))
                        .collect();
                }
            }
        }
        vec![join_paths(&known)]
    }

    /// The value of a command string when every part only known at run time is passed through
    /// `shlex.quote` (each such part folds to a quoted placeholder): what a shell would parse,
    /// as far as injection goes. `None` when some run-time part is not quoted.
    pub fn fold_shell(&self, node: Node<'_>) -> Option<String> {
        PySem {
            quoting: true,
            ..*self
        }
        .fold(node)
    }

    /// `shlex.quote(x)` and friends while folding a shell command ([`PySem::fold_shell`]).
    pub(super) fn fold_quoting(&self, names: &[String]) -> Option<String> {
        (self.quoting
            && names.iter().any(|n| {
                matches!(
                    n.as_str(),
                    "shlex.quote" | "pipes.quote" | "shlex.join" | "subprocess.list2cmdline"
                )
            }))
        .then(|| QUOTED.to_string())
    }

    /// `tempfile.mkdtemp(prefix="release-")` while folding a shell command: a directory whose
    /// name the shell reads as one word (the module adds letters, digits and `_`), when the
    /// prefix, suffix and parent it is given are such words too.
    pub(super) fn fold_temp_dir(&self, call: Node<'_>, depth: u8) -> Option<String> {
        let args = call.child_by_field_id(self.k.f_arguments)?;
        for arg in children(args).filter(|a| a.is_named() && a.kind_id() != self.k.comment) {
            let value = if arg.kind_id() == self.k.keyword_argument {
                arg.child_by_field_id(self.k.f_value)?
            } else {
                arg
            };
            let word = self.fold_at(value, depth + 1)?;
            if !word
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._+-/".contains(c))
            {
                return None;
            }
        }
        Some("/tmp/tmpXXXXXXXX".to_string())
    }

    /// The positional arguments a call passes to what it calls: those `functools.partial` bound
    /// first (`run = partial(subprocess.run, "id")`), then its own; for a scheduler
    /// (`threading.Timer(t, f, args=…)`), those it passes to the callable it runs.
    pub fn effective_positional(&self, call: Node<'a>) -> Vec<Node<'a>> {
        if let Some(deferred) = self.deferred(call) {
            return deferred.args;
        }
        // `methodcaller("rmtree", path)(shutil)` is `shutil.rmtree(path)`: the object is the
        // call's argument, the method's arguments are the method caller's after the name
        if let Some(caller) = self.methodcaller_of(call) {
            return self.positional(caller).into_iter().skip(1).collect();
        }
        let mut out = match self.partial_of(call) {
            Some(partial) => self.positional(partial).into_iter().skip(1).collect(),
            None => Vec::new(),
        };
        out.extend(self.positional(call));
        out
    }

    /// The keyword arguments a call passes: its own, those of `**mapping` arguments whose mapping
    /// is a literal or a name bound to one (`opts = {"shell": True}`), and those a
    /// `functools.partial` bound.
    pub fn effective_keywords(&self, call: Node<'a>) -> Vec<(String, Node<'a>)> {
        if let Some(deferred) = self.deferred(call) {
            return deferred.keywords;
        }
        if let Some(caller) = self.methodcaller_of(call) {
            return self.keywords_with_splats(caller, 0);
        }
        let mut out = self.keywords_with_splats(call, 0);
        if let Some(partial) = self.partial_of(call) {
            out.extend(self.keywords_with_splats(partial, 0));
        }
        out
    }

    fn keywords_with_splats(&self, call: Node<'a>, depth: u8) -> Vec<(String, Node<'a>)> {
        let mut out = self.keywords(call);
        let Some(args) = call.child_by_field_id(self.k.f_arguments) else {
            return out;
        };
        for splat in children(args).filter(|c| c.kind_id() == self.k.dictionary_splat) {
            if let Some(mapping) = splat.named_child(0) {
                let pairs = self.mapping_pairs(mapping, depth + 1);
                if pairs.is_empty() && depth < MAX_FLOW_DEPTH {
                    // `def run(cmd, **kw): subprocess.run(cmd, **kw)`: what its callers pass
                    for call in self.keyword_rest_calls(mapping) {
                        out.extend(self.keywords_with_splats(call, depth + 1));
                    }
                } else {
                    out.extend(pairs);
                }
            }
        }
        out
    }

    /// The constant-keyed pairs of a dict literal, a `dict(k=v)` call, or a name bound to either.
    pub(super) fn mapping_pairs(&self, node: Node<'a>, depth: u8) -> Vec<(String, Node<'a>)> {
        if depth > MAX_FLOW_DEPTH {
            return Vec::new();
        }
        let k = self.k;
        let kind = node.kind_id();
        if kind == k.identifier {
            let name = ident(node, self.src);
            let mut pairs = match self.binding(&name) {
                Some(Binding::Value(v)) => self.mapping_pairs(v, depth + 1),
                _ => Vec::new(),
            };
            if let Some(updates) = self.facts.dict_updates.get(&name) {
                pairs.extend(updates.iter().cloned());
            }
            return pairs;
        }
        if kind == k.dictionary {
            return children(node)
                .filter(|c| c.kind_id() == k.pair)
                .filter_map(|pair| {
                    let key = self.fold(pair.child_by_field_id(k.f_key)?)?;
                    Some((key, pair.child_by_field_id(k.f_value)?))
                })
                .collect();
        }
        if kind == k.call
            && function_of(node).is_some_and(|f| self.names(f).iter().any(|n| n == "dict"))
        {
            return self.keywords_with_splats(node, depth + 1);
        }
        Vec::new()
    }

    /// A call's callee, or the value of the name it is bound to (`run = partial(…)`, `run(…)`).
    fn callee_through_binding(&self, call: Node<'a>) -> Option<Node<'a>> {
        let func = function_of(call)?;
        if func.kind_id() == self.k.identifier
            && let Some(Binding::Value(v)) = self.binding(&ident(func, self.src))
        {
            return Some(v);
        }
        Some(func)
    }

    /// The `functools.partial(f, …)` call a call goes through: its callee is one, or a name
    /// bound to one.
    fn partial_of(&self, call: Node<'a>) -> Option<Node<'a>> {
        let func = self.callee_through_binding(call)?;
        (func.kind_id() == self.k.call && self.is_partial(func)).then_some(func)
    }

    /// The `operator.methodcaller(…)` call whose result `call` calls: its callee, or the value
    /// of the name its callee is bound to.
    pub(super) fn methodcaller_of(&self, call: Node<'a>) -> Option<Node<'a>> {
        if !self.facts.may_use_methodcaller(self.src) {
            return None;
        }
        let func = self.callee_through_binding(call)?;
        if func.kind_id() != self.k.call {
            return None;
        }
        let inner = function_of(func)?;
        self.names(inner)
            .iter()
            .any(|n| n == "operator.methodcaller")
            .then_some(func)
    }

    /// A call of `functools.partial` (or `partialmethod`).
    pub(super) fn is_partial(&self, call: Node<'_>) -> bool {
        function_of(call).is_some_and(|f| {
            self.names(f).iter().any(|n| {
                matches!(
                    n.as_str(),
                    "functools.partial" | "functools.partialmethod" | "partial"
                )
            })
        })
    }
}
