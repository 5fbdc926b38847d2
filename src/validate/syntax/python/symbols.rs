//! Errors CPython's compiler reports from signatures and scopes, which tree-sitter-python parses
//! without complaint: duplicate or misordered parameters, repeated keyword arguments, an
//! unparenthesized generator beside other arguments, illegal augmented-assignment targets, a
//! starred expression as a whole right-hand side, `await` and async comprehensions outside
//! `async def`, and `global`/`nonlocal` declarations that name a parameter, come after a use of
//! the name, or (`nonlocal`) have no enclosing function to bind in.
//!
//! Each check looks at one node and, for declarations, the function around it; messages are
//! CPython 3.11's. Where a check would need a full symbol table, it reports only what is certain
//! (a `nonlocal` name that no enclosing function mentions at all), so valid code is never refused.

use tree_sitter::Node;

use super::forms::Problem;
use crate::rules::grammar::text;

fn invalid(message: String) -> Option<Problem> {
    Some(("invalid-syntax", message))
}

/// The name a parameter binds, and its shape.
enum Param<'s> {
    Plain(&'s str),
    Default(&'s str),
    /// `*args` or a bare `*`.
    Star(Option<&'s str>),
    DoubleStar(&'s str),
    Slash,
}

fn param<'s>(p: Node<'_>, src: &'s str) -> Option<Param<'s>> {
    let name_of = |n: Node<'_>| -> &'s str {
        let mut c = n.walk();
        n.named_children(&mut c)
            .find(|c| c.kind() == "identifier")
            .map_or("", |i| text(i, src))
    };
    Some(match p.kind() {
        "identifier" => Param::Plain(text(p, src)),
        "default_parameter" | "typed_default_parameter" => {
            Param::Default(p.child_by_field_name("name").map_or("", |n| text(n, src)))
        }
        "typed_parameter" => {
            let first = p.named_child(0)?;
            match first.kind() {
                "list_splat_pattern" => Param::Star(Some(name_of(first))),
                "dictionary_splat_pattern" => Param::DoubleStar(name_of(first)),
                _ => Param::Plain(text(first, src)),
            }
        }
        "list_splat_pattern" => Param::Star(Some(name_of(p))),
        "dictionary_splat_pattern" => Param::DoubleStar(name_of(p)),
        "keyword_separator" => Param::Star(None),
        "positional_separator" => Param::Slash,
        _ => return None,
    })
}

/// `def f(a, a)`, `def f(a=1, b)`, `def f(**kw, x)`, `def f(*a, *b)`; `lambda` alike.
pub(super) fn parameters(params: Node<'_>, src: &str) -> Option<Problem> {
    let mut names: Vec<&str> = Vec::new();
    let (mut seen_default, mut seen_star, mut seen_double_star) = (false, false, false);
    let mut cursor = params.walk();
    for p in params.named_children(&mut cursor) {
        let Some(shape) = param(p, src) else { continue };
        if seen_double_star {
            return invalid("arguments cannot follow var-keyword argument".into());
        }
        let name = match shape {
            Param::Plain(n) => {
                if seen_default && !seen_star {
                    return invalid("non-default argument follows default argument".into());
                }
                Some(n)
            }
            Param::Default(n) => {
                seen_default |= !seen_star;
                Some(n)
            }
            Param::Star(n) => {
                if seen_star {
                    return invalid("* argument may appear only once".into());
                }
                seen_star = true;
                n
            }
            Param::DoubleStar(n) => {
                seen_double_star = true;
                Some(n)
            }
            Param::Slash => None,
        };
        if let Some(n) = name.filter(|n| !n.is_empty()) {
            if names.contains(&n) {
                return invalid(format!("duplicate argument '{n}' in function definition"));
            }
            names.push(n);
        }
    }
    None
}

/// `f(a=1, a=2)`; `f(x for x in y, 1)`.
pub(super) fn arguments(args: Node<'_>, src: &str) -> Option<Problem> {
    let mut keywords: Vec<&str> = Vec::new();
    let mut count = 0;
    let mut commas = 0;
    let mut generator = false;
    // one pass over the children, named and not (the commas)
    for a in crate::rules::grammar::children(args) {
        if !a.is_named() {
            commas += usize::from(a.kind() == ",");
            continue;
        }
        match a.kind() {
            "comment" => continue,
            "keyword_argument" => {
                let name = a.child_by_field_name("name").map_or("", |n| text(n, src));
                if keywords.contains(&name) {
                    return invalid(format!("keyword argument repeated: {name}"));
                }
                keywords.push(name);
            }
            "generator_expression" if !text(a, src).starts_with('(') => generator = true,
            _ => {}
        }
        count += 1;
    }
    if count == 0 && commas > 0 {
        return invalid("invalid syntax".into());
    }
    (generator && count > 1).then(|| {
        (
            "invalid-syntax",
            "Generator expression must be parenthesized".into(),
        )
    })
}

/// `a, b += 1`, `[a] += x`: only a name, attribute or subscript can be augmented.
pub(super) fn augmented_target(node: Node<'_>) -> Option<Problem> {
    // `x += a = b`: an assignment is a statement, not the value of one
    if node
        .child_by_field_name("right")
        .is_some_and(|r| matches!(r.kind(), "assignment" | "augmented_assignment"))
    {
        return invalid("invalid syntax".to_string());
    }
    let left = node.child_by_field_name("left")?;
    let what = match left.kind() {
        "pattern_list" | "tuple_pattern" | "tuple" | "expression_list" => "tuple",
        "list_pattern" | "list" => "list",
        "list_splat_pattern" | "list_splat" => "starred",
        _ => return None,
    };
    invalid(format!(
        "'{what}' is an illegal expression for augmented assignment"
    ))
}

/// A string prefix Python 3.11 does not know (`T"…"`, `x'…'`): only `r`, `u`, `b`, `f` and the
/// pairs `br`, `rb`, `fr`, `rf`, in either case.
pub(super) fn string_prefix(string: Node<'_>, src: &str) -> Option<Problem> {
    let start = string.child(0)?;
    let prefix = text(start, src)
        .trim_end_matches(['"', '\''])
        .to_ascii_lowercase();
    let known = matches!(
        prefix.as_str(),
        "" | "r" | "u" | "b" | "f" | "br" | "rb" | "fr" | "rf"
    );
    (!known).then(|| {
        (
            "invalid-syntax",
            "invalid syntax: unknown string prefix".into(),
        )
    })
}

/// `x = *a` (a starred expression alone on the right) and `__debug__ = 1`.
pub(super) fn assignment(node: Node<'_>, src: &str) -> Option<Problem> {
    if node
        .child_by_field_name("left")
        .is_some_and(|l| text(l, src) == "__debug__")
    {
        return invalid("cannot assign to __debug__".into());
    }
    let right = node.child_by_field_name("right")?;
    (right.kind() == "list_splat").then(|| {
        (
            "invalid-syntax",
            "can't use starred expression here".to_string(),
        )
    })
}

/// The function or lambda `node` is in, if any (classes do not count: their body runs in the
/// function or module around them).
fn enclosing_function(node: Node<'_>) -> Option<Node<'_>> {
    let mut at = node.parent();
    while let Some(n) = at {
        if matches!(n.kind(), "function_definition" | "lambda") {
            return Some(n);
        }
        at = n.parent();
    }
    None
}

fn is_async(function: Node<'_>, src: &str) -> bool {
    function.kind() == "function_definition" && text(function, src).starts_with("async")
}

/// `await` outside an `async def`.
pub(super) fn await_outside(node: Node<'_>, src: &str) -> Option<Problem> {
    match enclosing_function(node) {
        None => invalid("'await' outside function".into()),
        Some(f) if !is_async(f, src) => invalid("'await' outside async function".into()),
        Some(_) => None,
    }
}

/// `[x for x in a, b]` (the iterable of a comprehension cannot be a bare tuple) and
/// `[x async for x in y]` outside an `async def` (an async generator expression is allowed
/// anywhere: it makes an async generator).
pub(super) fn comprehension_clause(clause: Node<'_>, src: &str) -> Option<Problem> {
    let mut cursor = clause.walk();
    let trailing_comma = clause
        .child(clause.child_count().saturating_sub(1))
        .is_some_and(|c| c.kind() == ",");
    if trailing_comma || clause.children_by_field_name("right", &mut cursor).count() > 1 {
        return invalid("invalid syntax: a comprehension's iterable must be parenthesized".into());
    }
    if !text(clause, src).starts_with("async") {
        return None;
    }
    let comprehension = clause.parent()?;
    if comprehension.kind() == "generator_expression" {
        return None;
    }
    match enclosing_function(comprehension) {
        Some(f) if is_async(f, src) => None,
        _ => invalid("asynchronous comprehension outside of an asynchronous function".into()),
    }
}

/// Node kinds that start a scope of their own: names inside them are not the function's.
fn new_scope(kind: &str) -> bool {
    matches!(
        kind,
        "function_definition"
            | "class_definition"
            | "lambda"
            | "list_comprehension"
            | "set_comprehension"
            | "dictionary_comprehension"
            | "generator_expression"
    )
}

/// Names used in `scope` before byte `until`, its nested scopes left out; an attribute's name and
/// a keyword argument's name are not uses.
fn names_before<'s>(scope: Node<'_>, until: usize, src: &'s str, out: &mut Vec<&'s str>) {
    let mut cursor = scope.walk();
    let children: Vec<Node<'_>> = scope.named_children(&mut cursor).collect();
    for c in children {
        if c.start_byte() >= until {
            return;
        }
        match c.kind() {
            "identifier" => {
                let field = scope
                    .child_by_field_name("attribute")
                    .filter(|a| a.id() == c.id())
                    .or_else(|| {
                        scope
                            .child_by_field_name("name")
                            .filter(|n| n.id() == c.id() && scope.kind() == "keyword_argument")
                    });
                if field.is_none() {
                    out.push(text(c, src));
                }
            }
            "global_statement" | "nonlocal_statement" => {}
            k if new_scope(k) => {
                // A nested def or class binds its own name in this scope.
                if let Some(name) = c.child_by_field_name("name") {
                    out.push(text(name, src));
                }
            }
            _ => names_before(c, until, src, out),
        }
    }
}

fn parameter_names<'s>(function: Node<'_>, src: &'s str) -> Vec<&'s str> {
    let Some(params) = function.child_by_field_name("parameters") else {
        return Vec::new();
    };
    let mut cursor = params.walk();
    params
        .named_children(&mut cursor)
        .filter_map(|p| match param(p, src)? {
            Param::Plain(n) | Param::Default(n) | Param::DoubleStar(n) => Some(n),
            Param::Star(n) => n,
            Param::Slash => None,
        })
        .collect()
}

/// Whether an identifier `name` appears anywhere in `node`, the subtree `skip` left out.
fn mentions(node: Node<'_>, skip: Node<'_>, name: &str, src: &str) -> bool {
    if node.id() == skip.id() {
        return false;
    }
    if node.kind() == "identifier" {
        return text(node, src) == name;
    }
    let mut cursor = node.walk();
    let children: Vec<Node<'_>> = node.named_children(&mut cursor).collect();
    children.into_iter().any(|c| mentions(c, skip, name, src))
}

/// `global x` / `nonlocal x` inside a function: after a use of `x`, naming a parameter, or (for
/// `nonlocal`) with no enclosing function that mentions `x`.
pub(super) fn declaration(statement: Node<'_>, src: &str) -> Option<Problem> {
    let mut scope = statement.parent();
    while let Some(s) = scope.filter(|s| {
        !matches!(
            s.kind(),
            "function_definition" | "class_definition" | "lambda" | "module"
        )
    }) {
        scope = s.parent();
    }
    let function = scope.filter(|f| f.kind() == "function_definition")?;
    let kind = if statement.kind() == "global_statement" {
        "global"
    } else {
        "nonlocal"
    };
    let mut cursor = statement.walk();
    let declared: Vec<&str> = statement
        .named_children(&mut cursor)
        .filter(|c| c.kind() == "identifier")
        .map(|c| text(c, src))
        .collect();
    let params = parameter_names(function, src);
    let mut used = Vec::new();
    if let Some(body) = function.child_by_field_name("body") {
        names_before(body, statement.start_byte(), src, &mut used);
    }
    for name in &declared {
        if params.contains(name) {
            return invalid(format!("name '{name}' is parameter and {kind}"));
        }
        if used.contains(name) {
            return invalid(format!("name '{name}' is used prior to {kind} declaration"));
        }
    }
    if kind == "nonlocal" {
        let outer = enclosing_function(function).filter(|f| f.kind() == "function_definition");
        for name in &declared {
            let bound = outer.is_some_and(|o| {
                let mut top = o;
                while let Some(up) = enclosing_function(top) {
                    top = up;
                }
                mentions(top, function, name, src)
            });
            if !bound {
                return invalid(format!("no binding for nonlocal '{name}' found"));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    /// The messages the syntax layer gives `src` (empty when it passes); every row below was
    /// checked with CPython 3.11 `compile()`.
    fn problems(src: &str) -> Vec<String> {
        crate::validate::syntax::python_problems(src)
    }

    #[test]
    fn compile_errors_in_signatures_and_calls() {
        for bad in [
            "def f(a, a):\n    return a\n",
            "def f(a=1, b):\n    return a\n",
            "def g(**kw, *a):\n    pass\n",
            "def f(a, *, a): pass\n",
            "lambda x, x: 1\n",
            "f(a=1, a=2)\n",
            "f(x for x in y, 1)\n",
            "f(x for x in y,)\n",
            "f(,)\n",
            "[x for x in a, b]\n",
            "[x for x in a,]\n",
            "a, b += 1\n",
            "x = *a\n",
            "__debug__ = 1\n",
            "with Timer() as t. working_directory(\"/tmp\"):\n    pass\n",
            "with (open(a) as f,\n      )(bopen as g):\n    pass\n",
            "print(T\"x\")\n",
        ] {
            assert!(!problems(bad).is_empty(), "{bad:?} passed");
        }
    }

    #[test]
    fn compile_errors_in_scopes() {
        for bad in [
            "await x\n",
            "def h():\n    await x\n",
            "def f():\n    return [x async for x in y]\n",
            "def h():\n    print(x)\n    global x\n",
            "def h(x):\n    global x\n",
            "def h():\n    if c:\n        x = 1\n    global x\n",
            "def h():\n    nonlocal z\n",
            "def h():\n    x = 1\n    def k():\n        print(x)\n        nonlocal x\n",
            "def h():\n    def k():\n        nonlocal q\n",
        ] {
            assert!(!problems(bad).is_empty(), "{bad:?} passed");
        }
    }

    #[test]
    fn valid_code_that_looks_close_passes() {
        for good in [
            "def f(a, b=1, *args, c, d=2, **kw):\n    return a\n",
            "def f(a, /, b, *, c):\n    return a\n",
            "f(a=1, b=2, *args, **kw)\n",
            "f((x for x in y), 1)\n",
            "f(x for x in y)\n",
            "[x for x in (a, b)]\n",
            "a += 1\nobj.x += 1\nd[k] += 1\n",
            "x = *a, b\n",
            "async def f():\n    await g()\n    return [x async for x in y]\n",
            "def f():\n    return (x async for x in y)\n",
            "async def f():\n    g = lambda: 1\n    await h(g)\n",
            "def h():\n    global x\n    x = 1\n    print(x)\n",
            "def h():\n    obj.x = 1\n    f(x=2)\n    global x\n",
            "def h():\n    x = 1\n    def k():\n        nonlocal x\n        x += 1\n    k()\n",
            "def h():\n    x = 1\n    class C:\n        def m(self):\n            nonlocal x\n            return x\n",
            "def h():\n    [x for x in y]\n    global x\n",
            "with open(a) as f, open(b) as g:\n    pass\n",
            "with (open(a) as f, open(b) as g):\n    pass\n",
            "with ctx() as (a, b), ctx() as self.x, ctx() as d[0]:\n    pass\n",
            "try:\n    pass\nexcept ValueError as e:\n    pass\n",
            "match p:\n    case Point(x=0) as q:\n        pass\n    case [1, *rest] as r:\n        pass\n",
            "s = rb'a' + Rb'b' + BR'c' + f'd' + Fr'e' + u'f' + r'g' + b'h'\n",
        ] {
            assert_eq!(problems(good), Vec::<String>::new(), "{good:?}");
        }
    }
}
