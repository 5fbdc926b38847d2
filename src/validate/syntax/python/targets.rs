//! Where starred expressions, annotations and `as` may stand: tree-sitter-python takes `*a`, an
//! annotated assignment and `x as y` as expressions almost anywhere, CPython 3.11 only in a few
//! places (`*a` in a call, a display, a tuple or a subscript; `*a` as a target only inside a tuple
//! or list, once; an annotation only on a single simple target of the whole statement; `as` only
//! in a `with` item, an `except` clause or a case pattern). Each check looks at one node and its
//! parents; messages are CPython 3.11's.

use tree_sitter::Node;

use super::forms::Problem;

fn invalid(message: &str) -> Option<Problem> {
    Some(("invalid-syntax", message.to_string()))
}

/// `*a` as an expression (`list_splat`) outside the places that unpack it: `*a` alone as a
/// statement or a right-hand side, `(*a)`, `f"{*a}"`, `return *a`, `-*a`, `f(x=*a)`, `a[1:*b]`.
pub(super) fn starred_expression(node: Node<'_>, parent: Option<Node<'_>>) -> Option<Problem> {
    let parent = parent?;
    match parent.kind() {
        // `print(a, *f(b))`, `x = *f(b)`: the grammar can nest the star inside the call, as the
        // called function (`(*f)(b)`, which needs parentheses in Python and so never is what was
        // written); the place the starred call stands in decides.
        "call" if parent.child(0).is_some_and(|f| f.id() == node.id()) => {
            starred_expression(parent, parent.parent())
        }
        // `(*a)` without a comma is a tuple to the grammar and a parenthesized `*a` to CPython.
        "tuple" if !has_comma(parent) => invalid("cannot use starred expression here"),
        "argument_list" | "list" | "set" | "tuple" | "expression_list" | "subscript" => None,
        // `a, *b` as a statement: the grammar puts the items directly in the statement.
        "expression_statement" if has_comma(parent) => None,
        "interpolation" => invalid("f-string: cannot use starred expression here"),
        "parenthesized_expression" | "parenthesized_list_splat" => {
            invalid("cannot use starred expression here")
        }
        "as_pattern_target" | "for_statement" | "for_in_clause"
            if parent
                .child_by_field_name("left")
                .is_none_or(|l| l.id() == node.id()) =>
        {
            invalid("starred assignment target must be in a list or tuple")
        }
        "list_comprehension" | "set_comprehension" | "generator_expression" => {
            invalid("iterable unpacking cannot be used in comprehension")
        }
        "delete_statement" => invalid("cannot delete starred"),
        "expression_statement"
        | "assignment"
        | "augmented_assignment"
        | "return_statement"
        | "yield" => invalid("can't use starred expression here"),
        _ => invalid("invalid syntax: cannot use starred expression here"),
    }
}

fn has_comma(node: Node<'_>) -> bool {
    crate::rules::grammar::children(node).any(|c| c.kind() == ",")
}

/// `*a` as a target (`list_splat_pattern`): alone (`*a = b`, `for *a in x`), alone in parentheses
/// (`(*a) = b`), or twice in one target list (`a, *b, *c = x`).
pub(super) fn starred_target(node: Node<'_>, parent: Option<Node<'_>>) -> Option<Problem> {
    let parent = parent?;
    match parent.kind() {
        "parameters" | "lambda_parameters" | "typed_parameter" => None,
        "pattern_list" | "list_pattern" => twice(node),
        "tuple_pattern" => {
            let comma = crate::rules::grammar::children(parent).any(|c| c.kind() == ",");
            if comma {
                twice(node)
            } else {
                invalid("cannot use starred expression here")
            }
        }
        _ => invalid("starred assignment target must be in a list or tuple"),
    }
}

/// A second starred target after `node` in the same target list.
fn twice(node: Node<'_>) -> Option<Problem> {
    let mut next = node.next_named_sibling();
    while let Some(n) = next {
        if n.kind() == "list_splat_pattern" {
            return invalid("multiple starred expressions in assignment");
        }
        next = n.next_named_sibling();
    }
    None
}

/// An annotated assignment (`x: T`, `x: T = v`) must be the whole statement and annotate one
/// simple target: not `a = b: T`, not `a: T = b = c`, not `a, b: T`.
pub(super) fn annotated_assignment(node: Node<'_>, parent: Option<Node<'_>>) -> Option<Problem> {
    node.child_by_field_name("type")?;
    if parent.is_some_and(|p| p.kind() != "expression_statement")
        || node
            .child_by_field_name("right")
            .is_some_and(|r| r.kind() == "assignment")
    {
        return invalid("invalid syntax");
    }
    let left = node.child_by_field_name("left")?;
    match left.kind() {
        "pattern_list" | "expression_list" => {
            invalid("only single target (not tuple) can be annotated")
        }
        "tuple_pattern" | "tuple"
            if crate::rules::grammar::children(left).any(|c| c.kind() == ",") =>
        {
            invalid("only single target (not tuple) can be annotated")
        }
        "list_pattern" | "list" => invalid("only single target (not list) can be annotated"),
        _ => None,
    }
}

/// `a: int` as a type is a bound of a PEP 695 type parameter (`def f[T: int]`, reported with the
/// definition); anywhere else (`def f(x: a: int)`) CPython has no such syntax.
pub(super) fn constrained_type(node: Node<'_>) -> Option<Problem> {
    let list = node.parent().and_then(|t| t.parent());
    let in_definition = list.is_some_and(|l| {
        l.kind() == "type_parameter"
            && l.parent().is_some_and(|d| {
                matches!(
                    d.kind(),
                    "function_definition" | "class_definition" | "type_alias_statement"
                )
            })
    });
    (!in_definition).then(|| ("invalid-syntax", "invalid syntax".to_string()))
}

/// `*T` as a type: only for `*args: *Ts` and inside a subscript (`tuple[*Ts]`, PEP 646).
pub(super) fn splat_type(node: Node<'_>, src: &str) -> Option<Problem> {
    let double = crate::rules::grammar::text(node, src).starts_with("**");
    let holder = node.parent().and_then(|t| t.parent());
    let allowed = !double
        && holder.is_some_and(|h| match h.kind() {
            "type_parameter" => true,
            "typed_parameter" => h
                .named_child(0)
                .is_some_and(|p| p.kind() == "list_splat_pattern"),
            _ => false,
        });
    (!allowed).then(|| ("invalid-syntax", "invalid syntax".to_string()))
}

/// `with open(a) as f.g():` (the target of `as` is a call or a literal), and `as` anywhere but
/// a `with` item (`with (a as b):` too), an `except` clause or a case pattern: `x = (a as b)`,
/// `f(a as b)`, `with (a as b, c) as d:`.
pub(super) fn as_target(node: Node<'_>) -> Option<Problem> {
    if let Some(target) = node
        .child_by_field_name("alias")
        .and_then(|a| a.named_child(0).or(Some(a)))
    {
        let what = match target.kind() {
            "call" => Some("function call"),
            "string" | "integer" | "float" | "true" | "false" | "none" | "concatenated_string" => {
                Some("literal")
            }
            "binary_operator" | "unary_operator" | "comparison_operator" | "boolean_operator" => {
                Some("expression")
            }
            _ => None,
        };
        if let Some(what) = what {
            return Some(("invalid-syntax", format!("cannot assign to {what}")));
        }
    }
    let mut parens = 0;
    let mut at = node.parent();
    while let Some(n) = at {
        match n.kind() {
            "parenthesized_expression" => parens += 1,
            "with_item" | "with_clause" if parens <= 1 => return None,
            "except_clause" if parens == 0 => return None,
            "case_pattern" | "case_clause" => return None,
            _ => return invalid("invalid syntax"),
        }
        at = n.parent();
    }
    None
}

/// A name a `case` pattern binds twice (`case [rest, *rest]:`, `case {"a": x, **x}:`), which
/// CPython's compiler refuses. The alternatives of `|` bind the same names, so only the first is
/// counted; a class's name, a keyword's name and dotted value patterns bind nothing.
pub(super) fn repeated_capture(clause: Node<'_>, src: &str) -> Option<Problem> {
    use crate::rules::grammar::{children, text};
    let mut names: Vec<&str> = Vec::new();
    let mut stack: Vec<Node<'_>> = children(clause)
        .filter(|c| c.is_named() && !matches!(c.kind(), "block" | "if_clause" | "comment"))
        .collect();
    while let Some(node) = stack.pop() {
        let named = || children(node).filter(|c| c.is_named());
        match node.kind() {
            "identifier" => {
                let name = text(node, src);
                if name != "_" {
                    if names.contains(&name) {
                        return Some((
                            "invalid-syntax",
                            format!("multiple assignments to name '{name}' in pattern"),
                        ));
                    }
                    names.push(name);
                }
            }
            // `Point(x=…)`, `Color.RED`: a name that is looked up, not bound
            "dotted_name" => {
                if named().count() == 1 {
                    stack.extend(named());
                }
            }
            "union_pattern" => stack.extend(named().next()),
            "class_pattern" | "keyword_pattern" => stack.extend(named().skip(1)),
            "string" | "integer" | "float" | "concatenated_string" | "comment" => {}
            _ => stack.extend(named()),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_name_bound_twice_by_a_case_pattern_is_refused() {
        let verdict = |src: &str| crate::validate::syntax::python_problems(src).is_empty();
        assert!(!verdict(
            "match x:\n    case [rest, *rest] if 1:\n        pass\n"
        ));
        assert!(!verdict(
            "match x:\n    case {\"a\": v, **v}:\n        pass\n"
        ));
        assert!(!verdict(
            "match p:\n    case Point(x=a, y=a):\n        pass\n"
        ));
        assert!(verdict(
            "match x:\n    case [a, *rest] | (a, rest):\n        pass\n"
        ));
        assert!(verdict(
            "match p:\n    case Point(x=x, y=_) | Point(x=_, y=x):\n        pass\n"
        ));
        assert!(verdict(
            "match c:\n    case Color.RED | Color.BLUE:\n        pass\n    case [_, _]:\n        pass\n"
        ));
    }

    /// The first message the syntax layer gives `src`, if any.
    fn problem(src: &str) -> Option<String> {
        crate::validate::syntax::python_problems(src)
            .into_iter()
            .next()
    }

    /// (script, CPython 3.11's message, None when `compile()` accepts it).
    const CASES: &[(&str, Option<&str>)] = &[
        // Starred expressions.
        ("*a\n", Some("can't use starred expression here")),
        ("x = *a\n", Some("can't use starred expression here")),
        ("a += *b\n", Some("can't use starred expression here")),
        ("print((*a))\n", Some("cannot use starred expression here")),
        ("print(a, *f(b))\n", None),
        ("print(*t.f(b), sep=s)\n", None),
        ("x = *f(b)\n", Some("can't use starred expression here")),
        (
            "x = ((*a), b)\n",
            Some("cannot use starred expression here"),
        ),
        (
            "f\"{*a}\"\n",
            Some("f-string: cannot use starred expression here"),
        ),
        (
            "def f():\n    return *a\n",
            Some("can't use starred expression here"),
        ),
        (
            "x = -*a\n",
            Some("invalid syntax: cannot use starred expression here"),
        ),
        (
            "f(x=*a)\n",
            Some("invalid syntax: cannot use starred expression here"),
        ),
        (
            "x = a[1:*b]\n",
            Some("invalid syntax: cannot use starred expression here"),
        ),
        (
            "with a as *b:\n    pass\n",
            Some("starred assignment target must be in a list or tuple"),
        ),
        (
            "f = lambda k=1: (* node)\n",
            Some("cannot use starred expression here"),
        ),
        (
            "x = y := 1\n",
            Some("invalid syntax: an assignment expression (:=) must be parenthesized here"),
        ),
        ("x = (y := 1)\n", None),
        (
            "x = *a, b\nprint(*a, *b, **c)\ny = [*a, *b]\nz = {*a}\nt = (*a,)\n",
            None,
        ),
        ("x = a[*b]\nfor x in *a, b:\n    pass\nprint(*(a))\n", None),
        ("def f():\n    return *a, b\n", None),
        ("a, *b, c or d\n*a, b\n", None),
        // Starred targets.
        (
            "*a = b\n",
            Some("starred assignment target must be in a list or tuple"),
        ),
        (
            "for *a in x:\n    pass\n",
            Some("starred assignment target must be in a list or tuple"),
        ),
        (
            "a = *b = c\n",
            Some("starred assignment target must be in a list or tuple"),
        ),
        ("(*a) = b\n", Some("cannot use starred expression here")),
        (
            "a, *b, *c = x\n",
            Some("multiple starred expressions in assignment"),
        ),
        (
            "[*a, *b] = c\n",
            Some("multiple starred expressions in assignment"),
        ),
        (
            "for a, *b, *c in x:\n    pass\n",
            Some("multiple starred expressions in assignment"),
        ),
        (
            "a, *b = c\n[*a] = b\n(*a, b) = c\nfor *a, b in x:\n    pass\n",
            None,
        ),
        ("def f(a, *b, **c):\n    pass\ng = lambda *a: a\n", None),
        // Annotations.
        ("name: str = a = ()\n", Some("invalid syntax")),
        ("df = pd.read: (a, b)\n", Some("invalid syntax")),
        (
            "a, b: int\n",
            Some("only single target (not tuple) can be annotated"),
        ),
        (
            "[a]: int\n",
            Some("only single target (not list) can be annotated"),
        ),
        ("x.y: int\n(x): int = 1\nd[k]: int = 2\n", None),
        (
            "def f(start: a : int) -> int:\n    pass\n",
            Some("invalid syntax"),
        ),
        ("x: *a = 1\n", Some("invalid syntax")),
        ("def f(*args: *Ts):\n    pass\nx: tuple[*Ts]\n", None),
        // `as`.
        ("importpandas as pd\n", Some("invalid syntax")),
        ("x = (a as b)\n", Some("invalid syntax")),
        (
            "with (open(a) as f,\n      b) as g:\n    pass\n",
            Some("invalid syntax"),
        ),
        (
            "with (a as b):\n    pass\nwith (a, b as c):\n    pass\n",
            None,
        ),
        ("try:\n    pass\nexcept* E as e:\n    pass\n", None),
        ("match x:\n    case [1 as b] | [b]:\n        pass\n", None),
    ];

    #[test]
    fn starred_annotated_and_as_targets_match_cpython() {
        for (src, want) in CASES {
            assert_eq!(problem(src).as_deref(), *want, "{src:?}");
        }
    }
}
