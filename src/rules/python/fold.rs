//! Constant folding of Python expressions: string literals, concatenation, `%`/`format`/f-strings,
//! joins, slices, `chr`/`bytes`, decoders and constant containers.

use tree_sitter::Node;

use super::super::codec::{apply_codec, decode_base32, decode_base64, decode_escapes, decode_hex};
use super::function_of;
use super::ops::{
    dirname, join_paths, parent_path, parse_int, percent_format, py_repr, py_slice, resolve_dots,
    str_format,
};
use super::*;

/// Functions (last name segment) whose result can be a constant when their arguments are.
const FOLDING_FUNCTIONS: &[&str] = &[
    "expanduser",
    "resolve",
    "absolute",
    "abspath",
    "realpath",
    "normpath",
    "dirname",
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
    "int",
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
    "mkdtemp",
    "gettempdir",
];

impl<'a> PySem<'a> {
    /// The constant string value of an expression, if it has one.
    pub fn fold(&self, node: Node<'_>) -> Option<String> {
        self.fold_at(node, 0).filter(|v| v.len() <= MAX_FOLD_LEN)
    }

    pub(super) fn fold_at(&self, node: Node<'_>, depth: u8) -> Option<String> {
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
            for part in crate::rules::grammar::children(node).filter(|c| c.is_named()) {
                out.push_str(&self.fold_at(part, d)?);
            }
            Some(out)
        } else if kind == k.parenthesized_expression {
            self.fold_at(node.named_child(0)?, d)
        } else if kind == k.identifier {
            let name = ident(node, self.src);
            let constant = self.facts.consts.get(&name);
            if let Some(Some(value)) = constant {
                return Some(value.clone());
            }
            if let Some((var, item)) = self.bound
                && ident(var, self.src) == name
            {
                return self.fold_at(item, d);
            }
            if self.bound.is_none() && !self.quoting {
                // a parameter of a function the script calls once: that call's argument
                // (`def install(rc: Path): rc.open("a")` … `install(home / ".bashrc")`)
                return if self.facts.shadowed_by_parameter(&name, node.start_byte()) {
                    match self.facts.parameter_binding(k, &name, self.src)? {
                        Binding::Value(value) => self.fold_at(value, d),
                        _ => None,
                    }
                } else {
                    None
                };
            }
            // enumerating a loop (`p = Path(d)` folds through its value for each `d`), or a
            // command string built earlier from quoted parts (`cmd = "grep {}".format(quote(x))`)
            match self.binding(&name)? {
                Binding::Value(value) => self.fold_at(value, d),
                _ => None,
            }
        } else if kind == k.attribute
            && node
                .child_by_field_id(k.f_attribute)
                .is_some_and(|a| text(a, self.src) == "parent")
        {
            // pathlib's `.parent` of a known path: `(Path.home() / ".cache").parent` is `~`
            Some(parent_path(
                &self.fold_at(node.child_by_field_id(k.f_object)?, d)?,
            ))
        } else if kind == k.attribute
            && node
                .child_by_field_id(k.f_attribute)
                .is_some_and(|a| text(a, self.src) == "__name__")
        {
            // `plugins_pkg.__name__` of an imported module: the name it was imported by
            let object = node.child_by_field_id(k.f_object)?;
            let names = self.names(object);
            match names.as_slice() {
                [only] if self.facts.aliases.contains_key(&ident(object, self.src)) => {
                    Some(only.clone())
                }
                _ => None,
            }
        } else if kind == k.attribute
            && node
                .child_by_field_id(k.f_attribute)
                .is_some_and(|a| matches!(text(a, self.src), "sep" | "curdir" | "pardir"))
        {
            // the path constants of `os`/`os.path` on the runner (POSIX): `relax(os.sep)` is `/`
            let names = self.names(node);
            match names.first().map(String::as_str) {
                Some("os.sep" | "os.path.sep" | "posixpath.sep") => Some("/".into()),
                Some("os.curdir" | "os.path.curdir") => Some(".".into()),
                Some("os.pardir" | "os.path.pardir") => Some("..".into()),
                _ => None,
            }
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

    pub(super) fn fold_string(&self, node: Node<'_>, d: u8) -> Option<String> {
        let k = self.k;
        let start = node.child(0)?;
        let prefix = text(start, self.src)
            .trim_end_matches(['"', '\''])
            .to_ascii_lowercase();
        let raw = prefix.contains('r');
        let fstring = prefix.contains('f') || prefix.contains('t');
        let mut out = String::new();
        for part in crate::rules::grammar::children(node) {
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
                let value = self.fold_at(expr, d)?;
                // `{x!r}` (and `!a`) interpolates the value's repr: a string is quoted
                match part
                    .child_by_field_name("type_conversion")
                    .map(|c| text(c, self.src))
                {
                    Some("!r" | "!a") => out.push_str(&py_repr(&value)),
                    _ => out.push_str(&value),
                }
            } else if kind == k.escape_interpolation {
                out.push_str(&text(part, self.src)[..1]);
            }
        }
        Some(out)
    }

    pub(super) fn fold_binary(&self, node: Node<'_>, d: u8) -> Option<String> {
        let k = self.k;
        let op = text(node.child_by_field_id(k.f_operator)?, self.src);
        let left = node.child_by_field_id(k.f_left)?;
        let right = node.child_by_field_id(k.f_right)?;
        match op {
            "+" => Some(self.fold_at(left, d)? + &self.fold_at(right, d)?),
            // `str / str` is a TypeError in Python, so a constant `/` can only be pathlib's join.
            "/" => Some(resolve_dots(join_paths(&[
                self.fold_at(left, d)?,
                self.fold_at(right, d)?,
            ]))),
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
                let values: Vec<String> = if right.kind_id() == k.tuple || self.names_tuple(right) {
                    self.fold_items(right, d)?
                } else {
                    vec![self.fold_at(right, d)?]
                };
                percent_format(&template, &values)
            }
            _ => None,
        }
    }

    /// Whether `node` is a name bound once to a tuple literal (`"%s-%s" % parts`).
    fn names_tuple(&self, node: Node<'_>) -> bool {
        node.kind_id() == self.k.identifier
            && matches!(self.binding(&ident(node, self.src)),
                Some(Binding::Value(value)) if value.kind_id() == self.k.tuple)
    }

    pub(super) fn fold_int(&self, node: Node<'_>) -> Option<i64> {
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

    pub(super) fn fold_call(&self, node: Node<'_>, d: u8) -> Option<String> {
        let k = self.k;
        let func = function_of(node)?;
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
        if let Some(quoted) = self.fold_quoting(&names) {
            return Some(quoted);
        }
        if self.quoting
            && names
                .iter()
                .any(|n| matches!(n.as_str(), "tempfile.mkdtemp" | "tempfile.gettempdir"))
        {
            return self.fold_temp_dir(node, d);
        }
        let arg0 = args.first().copied();
        for name in &names {
            let value = match name.as_str() {
                "chr" => {
                    char::from_u32(u32::try_from(self.fold_int(arg0?)?).ok()?).map(String::from)
                }
                // `int("-1")`: a number spelt as a string
                "int" if args.len() == 1 => {
                    let v = self.fold_at(arg0?, d)?;
                    Some(v.trim().replace('_', "").parse::<i64>().ok()?.to_string())
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
                | "pathlib.Path.expanduser" => self.fold_at(arg0?, d).map(resolve_dots),
                "os.path.dirname" | "posixpath.dirname" => Some(dirname(&self.fold_at(arg0?, d)?)),
                "pathlib.Path.home" | "pathlib.PosixPath.home" => Some("~".into()),
                // (`os.path.join(*parts)` of a constant list: its items)
                "os.path.join" | "posixpath.join" => Some(join_paths(&self.fold_args(&args, d)?)),
                "os.getenv" | "os.environ.get"
                    if arg0.and_then(|a| self.fold_at(a, d)).as_deref() == Some("HOME") =>
                {
                    Some("~".into())
                }
                // `os.environ.get("XDG_CACHE_HOME", "~/.cache")`: the default, the value whenever
                // the caller leaves the variable unset (the case a rule must assume, as Bash's
                // `${X:-default}` folds)
                "os.getenv" | "os.environ.get" if args.len() == 2 => self.fold_at(args[1], d),
                _ => None,
            };
            if value.is_some() {
                return value;
            }
        }
        None
    }

    pub(super) fn fold_method(
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
            "format" => str_format(&self.fold_at(object, d)?, &self.fold_args(args, d)?, &[]),
            "fromhex" => decode_hex(&arg(0)?),
            // pathlib: `Path("~/.bashrc").expanduser()` keeps `~`, as path rules compare with it
            // (`resolve()` and `absolute()` likewise: the same place, as the rules name it)
            "expanduser" | "resolve" | "absolute" if args.is_empty() => self.fold_at(object, d),
            _ => None,
        }
    }

    /// The values of positional arguments, a `*parts` splat of a constant list or tuple (or of a
    /// name bound once to one) standing for its items: `"xoxb-{}-{}".format(*parts)`.
    pub(crate) fn fold_args(&self, args: &[Node<'_>], d: u8) -> Option<Vec<String>> {
        let mut values = Vec::with_capacity(args.len());
        for arg in args {
            if arg.kind() == "list_splat" {
                values.extend(self.fold_items(arg.named_child(0)?, d)?);
            } else {
                values.push(self.fold_at(*arg, d)?);
            }
        }
        Some(values)
    }

    pub(super) fn fold_byte_list(&self, list: Node<'_>) -> Option<String> {
        crate::rules::grammar::children(list)
            .filter(|c| c.is_named())
            .map(|item| {
                let v = self.fold_int(item)?;
                char::from_u32(u32::try_from(v).ok()?)
            })
            .collect()
    }

    /// The list or tuple literal `node` is, or a name is bound to once (four names deep at most).
    fn constant_sequence<'n>(&self, node: Node<'n>) -> Option<Node<'n>>
    where
        'a: 'n,
    {
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
        (node.kind_id() == self.k.list || node.kind_id() == self.k.tuple).then_some(node)
    }

    pub(super) fn fold_subscript(&self, node: Node<'_>, d: u8) -> Option<String> {
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
        let index = node.child_by_field_id(k.f_subscript)?;
        // an item of a constant list or tuple (`parts = ["", "~", "srv"]` … `parts[1]`)
        let sequence = node.child_by_field_id(k.f_value)?;
        if index.kind_id() != k.slice
            && let Some(list) = self.constant_sequence(sequence)
        {
            let mut cursor = list.walk();
            let items: Vec<Node<'_>> = list
                .named_children(&mut cursor)
                .filter(|n| n.kind() != "comment")
                .collect();
            let len = i64::try_from(items.len()).ok()?;
            let i = self.fold_int(index)?;
            let i = if i < 0 { len + i } else { i };
            // (folded one level deeper: `a = [a[0]]` must not recurse without end)
            return self.fold_at(*items.get(usize::try_from(i).ok()?)?, d);
        }
        let value: Vec<char> = self.fold_at(sequence, d)?.chars().collect();
        let len = i64::try_from(value.len()).ok()?;
        if index.kind_id() != k.slice {
            let i = self.fold_int(index)?;
            let i = if i < 0 { len + i } else { i };
            return value.get(usize::try_from(i).ok()?).map(|c| c.to_string());
        }
        // slice: up to three optional integers separated by ':'
        let mut parts: [Option<i64>; 3] = [None, None, None];
        let mut slot = 0;
        for child in crate::rules::grammar::children(index) {
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
}
