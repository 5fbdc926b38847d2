//! Python syntax checks beyond tree-sitter's ERROR nodes.
//!
//! tree-sitter-python accepts several programs CPython rejects (measured with tree-sitter-python
//! 0.25): Python 2 `print x` / `exec "…"` (own node kinds), `except E, e:`, backquotes, `<>`, `0777`,
//! an `if x:` whose body is not indented (an empty `block`), over- or under-indented lines (folded
//! into a block or the module), tab/space mixes, `return`/`yield` outside a function, `yield from`
//! in `async def`, a bare `x := 1` statement, and positional arguments after keyword arguments.
//! Each gap is closed by one check below; forms that depend on the target Python version (PEP 695,
//! PEP 701) and other forms CPython's parser or compiler refuses are in [`super::python_forms`],
//! statement boundaries (line breaks the grammar skips, statements glued on one line) in
//! `python_lines`. `async`/`await` taken as names are caught here.

use tree_sitter::{Node, TreeCursor};

use super::python_forms::{Forms, PythonVersion, RUNNER_PYTHON};
use super::python_lines::Lines;
use super::{excerpt, finding, first_token};
use crate::domain::verdict::{Finding, Positions};
use crate::rules::grammar::{Grammar, text};

#[derive(Debug, Clone)]
pub struct PySyntax {
    module: u16,
    block: u16,
    print_statement: u16,
    exec_statement: u16,
    string_start: u16,
    integer: u16,
    comparison_operator: u16,
    except_clause: u16,
    return_statement: u16,
    yield_: u16,
    function_definition: u16,
    lambda: u16,
    class_definition: u16,
    clauses: [u16; 5],
    expression_statement: u16,
    named_expression: u16,
    argument_list: u16,
    keyword_argument: u16,
    list_splat: u16,
    dictionary_splat: u16,
    identifier: u16,
    forms: Forms,
    lines: Lines,
}

impl PySyntax {
    /// Checks against the runner's Python ([`RUNNER_PYTHON`]).
    pub fn new(g: &Grammar) -> Self {
        Self::for_version(g, RUNNER_PYTHON)
    }

    /// Checks against Python `target`: syntax a later version introduced is an error.
    pub fn for_version(g: &Grammar, target: PythonVersion) -> Self {
        let k = |n| g.known_kind(n);
        PySyntax {
            module: k("module"),
            block: k("block"),
            print_statement: k("print_statement"),
            exec_statement: k("exec_statement"),
            string_start: k("string_start"),
            integer: k("integer"),
            comparison_operator: k("comparison_operator"),
            except_clause: k("except_clause"),
            return_statement: k("return_statement"),
            yield_: k("yield"),
            function_definition: k("function_definition"),
            lambda: k("lambda"),
            class_definition: k("class_definition"),
            clauses: [
                k("elif_clause"),
                k("else_clause"),
                k("except_clause"),
                k("finally_clause"),
                k("case_clause"),
            ],
            expression_statement: k("expression_statement"),
            named_expression: k("named_expression"),
            argument_list: k("argument_list"),
            keyword_argument: k("keyword_argument"),
            list_splat: k("list_splat"),
            dictionary_splat: k("dictionary_splat"),
            identifier: k("identifier"),
            forms: Forms::new(g, target),
            lines: Lines::new(g),
        }
    }

    /// The node kinds [`PySyntax::check`] looks at (besides ERROR/MISSING, probed when the tree has
    /// errors).
    pub fn kinds(&self) -> Vec<u16> {
        let mut kinds = vec![
            self.module,
            self.block,
            self.print_statement,
            self.exec_statement,
            self.string_start,
            self.integer,
            self.comparison_operator,
            self.except_clause,
            self.return_statement,
            self.yield_,
            self.expression_statement,
            self.argument_list,
        ];
        kinds.extend(self.clauses);
        kinds.extend(self.forms.kinds());
        kinds.push(self.identifier);
        kinds
    }

    /// Checks one node (`ancestors` ends with its parent); pushes findings. Returns false when the
    /// walk should not descend further.
    #[allow(clippy::too_many_arguments)]
    pub fn check<'t>(
        &self,
        node: Node<'t>,
        ancestors: &[Node<'t>],
        scratch: &mut TreeCursor<'t>,
        has_errors: bool,
        src: &str,
        pos: &Positions<'_>,
        out: &mut Vec<Finding>,
    ) -> bool {
        if has_errors && node.is_error() {
            out.push(error_message(node, src, pos));
            return false;
        }
        if has_errors && node.is_missing() {
            out.push(missing_message(node, pos));
            return false;
        }
        let kind = node.kind_id();
        let at = node.start_byte();
        // The most frequent kind by far: decided first and cheaply. `async` and `await` are
        // keywords since 3.7; the grammar still takes them as names (`[async for x in y]`).
        if kind == self.identifier {
            let name = &src.as_bytes()[node.byte_range()];
            if name == b"async" || name == b"await" {
                out.push(finding(
                    pos,
                    at,
                    "invalid-syntax",
                    format!(
                        "invalid syntax: `{}` is a keyword",
                        String::from_utf8_lossy(name)
                    ),
                ));
            }
            return true;
        }
        if let Some((rule, message)) = self.forms.check(node, ancestors.last().copied(), src) {
            out.push(finding(pos, at, rule, message));
            return true;
        }
        let mut bad =
            |rule: &str, message: &str| out.push(finding(pos, at, rule, message.to_string()));
        if kind == self.print_statement {
            bad(
                "python2-print",
                "Missing parentheses in call to 'print'. Did you mean print(...)?",
            );
        } else if kind == self.exec_statement {
            bad(
                "python2-exec",
                "exec is a function in Python 3: use exec(...)",
            );
        } else if kind == self.string_start && text(node, src).starts_with('`') {
            bad(
                "python2-backquote",
                "backquotes are not valid in Python 3: use repr(...)",
            );
        } else if kind == self.integer && has_leading_zero(text(node, src)) {
            bad(
                "leading-zero",
                "leading zeros in decimal integer literals are not permitted; use an 0o prefix for octal integers",
            );
        } else if kind == self.comparison_operator && has_child_text(node, src, "<>") {
            bad(
                "python2-not-equal",
                "'<>' is not valid in Python 3: use '!='",
            );
        } else if kind == self.except_clause && has_child_text(node, src, ",") {
            bad(
                "python2-except",
                "multiple exception types must be parenthesized",
            );
        } else if kind == self.return_statement && !self.in_function(ancestors) {
            bad("return-outside-function", "'return' outside function");
        } else if kind == self.yield_ && !self.in_function(ancestors) {
            bad("yield-outside-function", "'yield' outside function");
        } else if kind == self.yield_
            && text(node, src).starts_with("yield from")
            && self.in_async_function(ancestors, src)
        {
            bad("yield-from-in-async", "'yield from' inside async function");
        } else if kind == self.expression_statement
            && node
                .named_child(0)
                .is_some_and(|c| c.kind_id() == self.named_expression)
        {
            bad(
                "invalid-syntax",
                "invalid syntax: an assignment expression (:=) must be parenthesized here",
            );
        } else if kind == self.argument_list {
            if let Some(message) = self.argument_order(node) {
                bad("argument-order", message);
            }
        } else if kind == self.block {
            self.check_block(node, ancestors.last().copied(), scratch, src, pos, out);
            self.check_lines(node, scratch, src, pos, out);
        } else if kind == self.module {
            check_siblings(node, scratch, src, pos, Some((0, 0)), out);
            self.check_lines(node, scratch, src, pos, out);
        } else if self.clauses.contains(&kind) {
            self.check_clause(node, ancestors.last().copied(), src, pos, out);
        }
        true
    }

    /// The Python version this checks against.
    pub fn target(&self) -> PythonVersion {
        self.forms.target()
    }

    /// Statement boundaries of a module or block (see `python_lines`).
    fn check_lines<'t>(
        &self,
        parent: Node<'t>,
        scratch: &mut TreeCursor<'t>,
        src: &str,
        pos: &Positions<'_>,
        out: &mut Vec<Finding>,
    ) {
        scratch.reset(parent);
        let mut prev = None;
        for stmt in parent.named_children(scratch).filter(|c| !c.is_extra()) {
            if let Some((at, message)) = self.lines.check(stmt, prev, src) {
                out.push(finding(pos, at, "invalid-syntax", message.to_string()));
                return;
            }
            prev = Some(stmt);
        }
    }

    /// CPython's rules for argument order: no positional argument after a keyword argument or
    /// `**` unpacking, no `*` unpacking after `**` unpacking.
    fn argument_order(&self, args: Node<'_>) -> Option<&'static str> {
        let (mut keyword, mut double_star) = (false, false);
        for arg in args
            .named_children(&mut args.walk())
            .filter(|a| !a.is_extra())
        {
            let k = arg.kind_id();
            if k == self.keyword_argument {
                keyword = true;
            } else if k == self.dictionary_splat {
                double_star = true;
            } else if k == self.list_splat {
                if double_star {
                    return Some("iterable argument unpacking follows keyword argument unpacking");
                }
            } else if double_star {
                return Some("positional argument follows keyword argument unpacking");
            } else if keyword {
                return Some("positional argument follows keyword argument");
            }
        }
        None
    }

    /// Inside an `async def` (the innermost function).
    fn in_async_function(&self, ancestors: &[Node<'_>], src: &str) -> bool {
        ancestors
            .iter()
            .rev()
            .find(|p| p.kind_id() == self.function_definition || p.kind_id() == self.lambda)
            .is_some_and(|f| text(*f, src).starts_with("async"))
    }

    fn in_function(&self, ancestors: &[Node<'_>]) -> bool {
        for p in ancestors.iter().rev() {
            let k = p.kind_id();
            if k == self.function_definition || k == self.lambda {
                return true;
            }
            if k == self.class_definition {
                return false;
            }
        }
        false
    }

    fn check_block<'t>(
        &self,
        block: Node<'t>,
        parent: Option<Node<'t>>,
        scratch: &mut TreeCursor<'t>,
        src: &str,
        pos: &Positions<'_>,
        out: &mut Vec<Finding>,
    ) {
        scratch.reset(block);
        let has_statement = block.named_children(scratch).any(|c| !c.is_extra());
        if !has_statement {
            let header = parent.map_or(block.start_byte(), |p| p.start_byte());
            out.push(finding(
                pos,
                header,
                "expected-indented-block",
                "expected an indented block".into(),
            ));
            return;
        }
        // The block must be indented deeper than the line of its header (`if x:`, `else:` …).
        let header_indent = parent.map(|p| indent_of(src, p));
        let deeper_than = header_indent.map(|(w1, w8)| (w1 + 1, w8 + 1));
        check_siblings_from(block, scratch, src, pos, deeper_than, out);
    }

    /// `else:`/`elif`/`except`/`finally` must line up with the statement they belong to.
    fn check_clause(
        &self,
        clause: Node<'_>,
        parent: Option<Node<'_>>,
        src: &str,
        pos: &Positions<'_>,
        out: &mut Vec<Finding>,
    ) {
        let Some(parent) = parent else { return };
        if parent.kind_id() == self.block || !starts_line(src, clause) {
            return;
        }
        if indent_of(src, clause) != indent_of(src, parent) {
            out.push(finding(
                pos,
                clause.start_byte(),
                "indentation",
                "unindent does not match any outer indentation level".into(),
            ));
        }
    }
}

fn has_leading_zero(t: &str) -> bool {
    let digits: String = t.chars().filter(|c| *c != '_').collect();
    digits.len() > 1
        && digits.starts_with('0')
        && digits.chars().all(|c| c.is_ascii_digit())
        && digits.chars().any(|c| c != '0')
}

fn has_child_text(node: Node<'_>, src: &str, wanted: &str) -> bool {
    node.children(&mut node.walk())
        .any(|c| !c.is_named() && text(c, src) == wanted)
}

/// The text between the start of a node's line and the node (tree-sitter knows the byte column).
fn line_prefix<'s>(src: &'s str, node: Node<'_>) -> &'s str {
    let start = node.start_byte();
    let column = node.start_position().column.min(start);
    src.get(start - column..start).unwrap_or("")
}

/// Indentation width of the line where `node` starts, with tabs to the next multiple of 1 and of 8
/// (CPython compares both and reports a TabError when they disagree).
fn indent_of(src: &str, node: Node<'_>) -> (usize, usize) {
    let mut w1 = 0;
    let mut w8 = 0;
    for b in line_prefix(src, node).bytes() {
        match b {
            b' ' => {
                w1 += 1;
                w8 += 1;
            }
            b'\t' => {
                w1 += 1;
                w8 = (w8 / 8 + 1) * 8;
            }
            b'\x0c' => {
                w1 = 0;
                w8 = 0;
            }
            _ => break,
        }
    }
    (w1, w8)
}

fn starts_line(src: &str, node: Node<'_>) -> bool {
    line_prefix(src, node)
        .bytes()
        .all(|b| matches!(b, b' ' | b'\t' | b'\x0c'))
}

fn check_siblings<'t>(
    node: Node<'t>,
    cursor: &mut TreeCursor<'t>,
    src: &str,
    pos: &Positions<'_>,
    exact: Option<(usize, usize)>,
    out: &mut Vec<Finding>,
) {
    let mut reference = exact;
    cursor.reset(node);
    for stmt in node.named_children(cursor) {
        if stmt.is_extra() || !starts_line(src, stmt) {
            continue;
        }
        let indent = indent_of(src, stmt);
        match reference {
            None => reference = Some(indent),
            Some(r) if r == indent => {}
            Some(r) => {
                out.push(indent_finding(pos, stmt, r, indent));
                return;
            }
        }
    }
}

/// Statements of a block share one indentation, deeper than `deeper_than` in both tab widths.
fn check_siblings_from<'t>(
    block: Node<'t>,
    cursor: &mut TreeCursor<'t>,
    src: &str,
    pos: &Positions<'_>,
    deeper_than: Option<(usize, usize)>,
    out: &mut Vec<Finding>,
) {
    let mut reference: Option<(usize, usize)> = None;
    cursor.reset(block);
    for stmt in block.named_children(cursor) {
        if stmt.is_extra() || !starts_line(src, stmt) {
            continue;
        }
        let indent = indent_of(src, stmt);
        if reference.is_none() {
            if let Some((min1, min8)) = deeper_than {
                let deeper1 = indent.0 >= min1;
                let deeper8 = indent.1 >= min8;
                if deeper1 != deeper8 {
                    out.push(finding(
                        pos,
                        stmt.start_byte(),
                        "tab-error",
                        "inconsistent use of tabs and spaces in indentation".into(),
                    ));
                    return;
                }
                if !deeper1 {
                    out.push(finding(
                        pos,
                        stmt.start_byte(),
                        "expected-indented-block",
                        "expected an indented block".into(),
                    ));
                    return;
                }
            }
            reference = Some(indent);
        } else if let Some(r) = reference
            && r != indent
        {
            out.push(indent_finding(pos, stmt, r, indent));
            return;
        }
    }
}

fn indent_finding(
    pos: &Positions<'_>,
    stmt: Node<'_>,
    expected: (usize, usize),
    got: (usize, usize),
) -> Finding {
    let (rule, message) = if (got.0 > expected.0) != (got.1 > expected.1)
        || (got.0 == expected.0) != (got.1 == expected.1)
    {
        (
            "tab-error",
            "inconsistent use of tabs and spaces in indentation",
        )
    } else if got.0 > expected.0 {
        ("indentation", "unexpected indent")
    } else {
        (
            "indentation",
            "unindent does not match any outer indentation level",
        )
    };
    finding(pos, stmt.start_byte(), rule, message.into())
}

fn error_message(node: Node<'_>, src: &str, pos: &Positions<'_>) -> Finding {
    let token = first_token(node).map(|t| text(t, src)).unwrap_or("");
    let body = text(node, src);
    let (rule, message) = if token.ends_with("\"\"\"") || token.ends_with("'''") {
        (
            "unterminated-string",
            "unterminated triple-quoted string literal".to_string(),
        )
    } else if token.ends_with('"') || token.ends_with('\'') || body.starts_with(['"', '\'']) {
        (
            "unterminated-string",
            "unterminated string literal".to_string(),
        )
    } else if let Some(open) = unclosed_bracket(body) {
        ("unclosed-bracket", format!("'{open}' was never closed"))
    } else {
        (
            "invalid-syntax",
            format!("invalid syntax near `{}`", excerpt(node, src)),
        )
    };
    finding(pos, node.start_byte(), rule, message)
}

fn missing_message(node: Node<'_>, pos: &Positions<'_>) -> Finding {
    let what = node.kind();
    let message = match what {
        ")" => "'(' was never closed".to_string(),
        "]" => "'[' was never closed".to_string(),
        "}" => "'{' was never closed".to_string(),
        ":" => "expected ':'".to_string(),
        w if w.chars().all(|c| c.is_ascii_alphabetic() || c == '_') => "invalid syntax".to_string(),
        w => format!("expected '{w}'"),
    };
    finding(pos, node.start_byte(), "missing-token", message)
}

/// The first bracket left open in `text` (strings are not tracked: good enough for a message).
fn unclosed_bracket(text: &str) -> Option<char> {
    let mut stack = Vec::new();
    for c in text.chars() {
        match c {
            '(' | '[' | '{' => stack.push(c),
            ')' | ']' | '}' => {
                stack.pop();
            }
            _ => {}
        }
    }
    stack.first().copied()
}
