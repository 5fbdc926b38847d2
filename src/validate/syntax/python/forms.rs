//! Python forms tree-sitter-python accepts but CPython rejects: some always (`def f(*, **kw)`,
//! `f"{x!z}"`, `del f()`), some only before the version that introduced them (PEP 695 generics and
//! `type` aliases, PEP 701 f-strings). The target is the interpreter the runner ships, a parameter
//! ([`PythonVersion`]) so that a profile with another interpreter can be checked against its own.

use std::fmt;

use tree_sitter::{Node, TreeCursor};

use super::{escapes, symbols, targets};
use crate::rules::grammar::{Grammar, text};

/// A CPython minor version (`3.11`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct PythonVersion {
    pub major: u8,
    pub minor: u8,
}

impl PythonVersion {
    pub const fn new(major: u8, minor: u8) -> Self {
        PythonVersion { major, minor }
    }
}

impl fmt::Display for PythonVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The interpreter of the runner image (Debian bookworm's python3).
pub const RUNNER_PYTHON: PythonVersion = PythonVersion::new(3, 11);

const PY312: PythonVersion = PythonVersion::new(3, 12);

/// A rejected form: rule id and message.
pub type Problem = (&'static str, String);

#[derive(Debug, Clone)]
pub struct Forms {
    target: PythonVersion,
    parameters: u16,
    lambda_parameters: u16,
    keyword_separator: u16,
    dictionary_splat_pattern: u16,
    type_conversion: u16,
    delete_statement: u16,
    interpolation: u16,
    string: u16,
    format_specifier: u16,
    comment: u16,
    type_alias_statement: u16,
    function_definition: u16,
    class_definition: u16,
    f_type_parameters: u16,
    deletable: [u16; 3],
    sequences: [u16; 4],
    augmented_assignment: u16,
    assignment: u16,
    argument_list: u16,
    await_: u16,
    for_in_clause: u16,
    /// `global_statement`, `nonlocal_statement`.
    declarations: [u16; 2],
    as_pattern: u16,
    case_clause: u16,
    list_splat: u16,
    list_splat_pattern: u16,
    constrained_type: u16,
    splat_type: u16,
    except_clause: u16,
    try_statement: u16,
    concatenated_string: u16,
    future_import_statement: u16,
    import_statement: u16,
}

impl Forms {
    pub fn new(g: &Grammar, target: PythonVersion) -> Self {
        let k = |n| g.known_kind(n);
        Forms {
            target,
            parameters: k("parameters"),
            lambda_parameters: k("lambda_parameters"),
            keyword_separator: k("keyword_separator"),
            dictionary_splat_pattern: k("dictionary_splat_pattern"),
            type_conversion: k("type_conversion"),
            delete_statement: k("delete_statement"),
            interpolation: k("interpolation"),
            string: k("string"),
            format_specifier: k("format_specifier"),
            comment: k("comment"),
            type_alias_statement: k("type_alias_statement"),
            function_definition: k("function_definition"),
            class_definition: k("class_definition"),
            f_type_parameters: g.known_field("type_parameters"),
            deletable: [k("identifier"), k("attribute"), k("subscript")],
            augmented_assignment: k("augmented_assignment"),
            assignment: k("assignment"),
            argument_list: k("argument_list"),
            await_: k("await"),
            for_in_clause: k("for_in_clause"),
            declarations: [k("global_statement"), k("nonlocal_statement")],
            as_pattern: k("as_pattern"),
            case_clause: k("case_clause"),
            list_splat: k("list_splat"),
            list_splat_pattern: k("list_splat_pattern"),
            constrained_type: k("constrained_type"),
            splat_type: k("splat_type"),
            except_clause: k("except_clause"),
            try_statement: k("try_statement"),
            concatenated_string: k("concatenated_string"),
            future_import_statement: k("future_import_statement"),
            import_statement: k("import_statement"),
            sequences: [
                k("tuple"),
                k("list"),
                k("parenthesized_expression"),
                k("expression_list"),
            ],
        }
    }

    pub fn target(&self) -> PythonVersion {
        self.target
    }

    pub fn kinds(&self) -> Vec<u16> {
        vec![
            self.parameters,
            self.lambda_parameters,
            self.type_conversion,
            self.delete_statement,
            self.interpolation,
            self.string,
            self.type_alias_statement,
            self.function_definition,
            self.class_definition,
            self.augmented_assignment,
            self.assignment,
            self.argument_list,
            self.await_,
            self.for_in_clause,
            self.declarations[0],
            self.declarations[1],
            self.as_pattern,
            self.case_clause,
            self.list_splat,
            self.list_splat_pattern,
            self.constrained_type,
            self.splat_type,
            self.except_clause,
            self.try_statement,
            self.concatenated_string,
            self.future_import_statement,
            self.import_statement,
        ]
    }

    /// The problem with `node`, if it is one of the forms above. `parent` is its parent node.
    pub fn check<'t>(
        &self,
        node: Node<'t>,
        parent: Option<Node<'t>>,
        scratch: &mut TreeCursor<'t>,
        src: &str,
    ) -> Option<Problem> {
        let kind = node.kind_id();
        if kind == self.parameters || kind == self.lambda_parameters {
            self.bare_star(node, scratch)
                .or_else(|| symbols::parameters(node, src))
        } else if kind == self.argument_list {
            symbols::arguments(node, src)
        } else if kind == self.augmented_assignment {
            symbols::augmented_target(node)
        } else if kind == self.assignment {
            symbols::assignment(node, src).or_else(|| targets::annotated_assignment(node, parent))
        } else if kind == self.list_splat {
            targets::starred_expression(node, parent)
        } else if kind == self.list_splat_pattern {
            targets::starred_target(node, parent)
        } else if kind == self.constrained_type {
            targets::constrained_type(node)
        } else if kind == self.splat_type {
            targets::splat_type(node, src)
        } else if kind == self.await_ {
            symbols::await_outside(node, src)
        } else if kind == self.for_in_clause {
            symbols::comprehension_clause(node, src)
        } else if self.declarations.contains(&kind) {
            symbols::declaration(node, src)
        } else if kind == self.type_conversion {
            conversion(text(node, src))
        } else if kind == self.delete_statement {
            self.delete_targets(node)
        } else if kind == self.interpolation {
            self.f_string_field(node, parent, scratch, src)
        } else if kind == self.string {
            symbols::string_prefix(node, src)
                .or_else(|| line_break_in_string(node, src))
                .or_else(|| escapes::literal(node, src))
        } else if kind == self.concatenated_string {
            escapes::mixed_bytes(node, src)
        } else if kind == self.future_import_statement {
            future_features(node, src)
        } else if kind == self.import_statement {
            trailing_comma(node, src)
        } else if kind == self.except_clause {
            bare_except_not_last(node).or_else(|| except_star(node))
        } else if kind == self.try_statement {
            try_without_handler(node)
        } else if kind == self.as_pattern {
            targets::as_target(node)
        } else if kind == self.case_clause {
            targets::repeated_capture(node, src)
        } else if kind == self.type_alias_statement {
            self.newer("type aliases (`type X = …`, PEP 695)", PY312)
        } else if (kind == self.function_definition || kind == self.class_definition)
            && node.child_by_field_id(self.f_type_parameters).is_some()
        {
            self.newer("type parameter lists (`def f[T]`, PEP 695)", PY312)
        } else {
            None
        }
    }

    fn newer(&self, what: &str, needs: PythonVersion) -> Option<Problem> {
        (self.target < needs).then(|| {
            (
                "newer-python",
                format!(
                    "{what} require Python {needs}; the runner has {}",
                    self.target
                ),
            )
        })
    }

    /// A bare `*` must be followed by at least one named parameter (`**kw` does not count).
    fn bare_star<'t>(&self, params: Node<'t>, scratch: &mut TreeCursor<'t>) -> Option<Problem> {
        let mut after_star = false;
        for p in params
            .named_children(scratch)
            .filter(|p| p.kind_id() != self.comment)
        {
            if p.kind_id() == self.keyword_separator {
                after_star = true;
            } else if after_star {
                if p.kind_id() == self.dictionary_splat_pattern {
                    break;
                }
                return None;
            }
        }
        after_star.then(|| {
            (
                "invalid-syntax",
                "named arguments must follow bare *".to_string(),
            )
        })
    }

    fn delete_targets(&self, del: Node<'_>) -> Option<Problem> {
        let mut stack: Vec<Node<'_>> = del
            .named_children(&mut del.walk())
            .filter(|c| c.kind_id() != self.comment)
            .collect();
        while let Some(target) = stack.pop() {
            let k = target.kind_id();
            if self.deletable.contains(&k) {
                continue;
            }
            if self.sequences.contains(&k) {
                stack.extend(
                    target
                        .named_children(&mut target.walk())
                        .filter(|c| c.kind_id() != self.comment),
                );
                continue;
            }
            let what = match target.kind() {
                "call" => "function call",
                "string"
                | "integer"
                | "float"
                | "true"
                | "false"
                | "none"
                | "concatenated_string" => "literal",
                _ => "expression",
            };
            return Some(("invalid-syntax", format!("cannot delete {what}")));
        }
        None
    }

    /// One `{…}` replacement field of an f-string. Before 3.12 (PEP 701) its expression may not hold
    /// a backslash, a comment, or the quote that delimits the f-string.
    fn f_string_field<'t>(
        &self,
        field: Node<'t>,
        string: Option<Node<'t>>,
        scratch: &mut TreeCursor<'t>,
        src: &str,
    ) -> Option<Problem> {
        if self.target >= PY312 {
            return None;
        }
        let expression_end = field
            .children(scratch)
            .find(|c| c.kind_id() == self.format_specifier)
            .map_or(field.end_byte(), |c| c.start_byte());
        let expression = src.get(field.start_byte()..expression_end).unwrap_or("");
        let quote = string
            .and_then(|s| s.child(0))
            .map(|start| text(start, src).trim_start_matches(|c: char| c.is_ascii_alphabetic()))
            .unwrap_or("");
        let what = if expression.contains('\\') {
            "a backslash in an f-string expression"
        } else if field.children(scratch).any(|c| c.kind_id() == self.comment) {
            "a comment in an f-string expression"
        } else if !quote.is_empty() && expression.contains(quote) {
            "reusing the f-string's quote inside its expression"
        } else {
            return None;
        };
        Some((
            "newer-python",
            format!(
                "{what} requires Python {PY312} (PEP 701); the runner has {}",
                self.target
            ),
        ))
    }
}

/// The features `from __future__ import …` knows in Python 3.11 (`braces` gets its own answer).
const FUTURE_FEATURES: [&str; 10] = [
    "nested_scopes",
    "generators",
    "division",
    "absolute_import",
    "with_statement",
    "print_function",
    "unicode_literals",
    "barry_as_FLUFL",
    "generator_stop",
    "annotations",
];

/// `from __future__ import lines`: the compiler refuses a feature it does not know.
fn future_features(statement: Node<'_>, src: &str) -> Option<Problem> {
    let names = crate::rules::grammar::children(statement).filter_map(|c| match c.kind() {
        "dotted_name" => Some(c),
        "aliased_import" => c.child_by_field_name("name"),
        _ => None,
    });
    for name in names {
        let feature = text(name, src);
        if feature == "braces" {
            return Some(("invalid-syntax", "not a chance".to_string()));
        }
        if !FUTURE_FEATURES.contains(&feature) {
            return Some((
                "invalid-syntax",
                format!("future feature {feature} is not defined"),
            ));
        }
    }
    None
}

/// `except:` catches everything, so CPython refuses another `except` clause after it.
/// `try:` and its block with neither an `except` nor a `finally` clause (the grammar takes the
/// statements after it as the next ones).
fn try_without_handler(node: Node<'_>) -> Option<Problem> {
    let handled = crate::rules::grammar::children(node).any(|c| {
        matches!(
            c.kind(),
            "except_clause" | "except_group_clause" | "finally_clause"
        )
    });
    (!handled).then(|| {
        (
            "invalid-syntax",
            "expected 'except' or 'finally' block".to_string(),
        )
    })
}

fn bare_except_not_last(clause: Node<'_>) -> Option<Problem> {
    let bare = crate::rules::grammar::children(clause)
        .filter(|c| c.is_named())
        .all(|c| matches!(c.kind(), "block" | "comment"));
    let next = clause.next_named_sibling();
    (bare && next.is_some_and(|n| n.kind() == clause.kind())).then(|| {
        (
            "invalid-syntax",
            "default 'except:' must be last".to_string(),
        )
    })
}

/// `except*` needs exception types (`except*:` is refused), and one `try` has either `except`
/// clauses or `except*` clauses, never both.
fn except_star(clause: Node<'_>) -> Option<Problem> {
    let star = |c: Node<'_>| c.child(1).is_some_and(|t| t.kind() == "*");
    if star(clause) && clause.child_by_field_name("value").is_none() {
        return Some((
            "invalid-syntax",
            "expected one or more exception types".to_string(),
        ));
    }
    let first = clause
        .parent()?
        .named_children(&mut clause.walk())
        .find(|c| c.kind() == clause.kind())?;
    (first.id() != clause.id() && star(first) != star(clause)).then(|| {
        (
            "invalid-syntax",
            "cannot have both 'except' and 'except*' on the same 'try'".to_string(),
        )
    })
}

fn conversion(t: &str) -> Option<Problem> {
    (!matches!(t, "!r" | "!s" | "!a")).then(|| {
        (
            "invalid-syntax",
            "f-string: invalid conversion character: expected 's', 'r', or 'a'".to_string(),
        )
    })
}

/// A line break inside a string that is not triple-quoted ends it unterminated (unless a backslash
/// continues the line); the grammar lets the string run on.
fn line_break_in_string(string: Node<'_>, src: &str) -> Option<Problem> {
    let t = text(string, src);
    let opening = string.child(0).map(|s| text(s, src)).unwrap_or("");
    if opening.ends_with("\"\"\"") || opening.ends_with("'''") || !t.contains('\n') {
        return None;
    }
    let b = t.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 1,
            b'\n' => {
                return Some((
                    "unterminated-string",
                    "unterminated string literal".to_string(),
                ));
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// `import a, b,`: the grammar takes a trailing comma after the last module, CPython does not.
fn trailing_comma(import: Node<'_>, src: &str) -> Option<Problem> {
    let last = import.child(import.child_count().checked_sub(1)?)?;
    (!last.is_named() && text(last, src) == ",").then(|| {
        (
            "invalid-syntax",
            "invalid syntax: `import` takes no trailing comma".to_string(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::script::Language;

    #[test]
    fn the_target_version_decides_what_is_newer() {
        let g = Grammar::new(Language::Python);
        let src = "type X = int\n";
        let tree = g.parse(src);
        let alias = tree.root_node().child(0).expect("statement");
        let mut scratch = tree.walk();
        let mut at = |v| Forms::new(&g, v).check(alias, None, &mut scratch, src);
        assert!(at(PythonVersion::new(3, 11)).is_some());
        assert!(at(PythonVersion::new(3, 12)).is_none());
        assert!(at(PythonVersion::new(3, 13)).is_none());
    }

    #[test]
    fn an_import_ending_in_a_comma_is_refused() {
        let g = Grammar::new(Language::Python);
        let forms = Forms::new(&g, PythonVersion::new(3, 11));
        for (src, bad) in [
            ("import os, sys,\n", true),
            ("import os, sys  # done,\n", false),
            ("import os.path as p, sys\n", false),
        ] {
            let tree = g.parse(src);
            let import = tree.root_node().child(0).expect("statement");
            let mut scratch = tree.walk();
            assert_eq!(
                forms.check(import, None, &mut scratch, src).is_some(),
                bad,
                "{src:?}"
            );
        }
    }
}
