//! Python syntax checks beyond tree-sitter's ERROR nodes.
//!
//! tree-sitter-python accepts several programs CPython rejects (measured with tree-sitter-python
//! 0.25): Python 2 `print x` / `exec "…"` (own node kinds), `except E, e:`, backquotes, `<>`, `0777`,
//! an `if x:` whose body is not indented (an empty `block`), over- or under-indented lines (folded
//! into a block or the module), tab/space mixes, `return`/`yield` outside a function, `yield from`
//! in `async def`, a bare `x := 1` statement, and positional arguments after keyword arguments.
//! Each gap is closed by one check below; forms that depend on the target Python version (PEP 695,
//! PEP 701) and other forms CPython's parser or compiler refuses are in [`forms`], statement
//! boundaries (line breaks the grammar skips, statements glued on one line) in `lines`, the
//! enclosing-scope tests in `scope`, indentation in `indent` and error messages in `messages`.
//! `async`/`await` taken as names are caught here.

use tree_sitter::{Node, TreeCursor};

pub mod brackets;
mod escapes;
pub mod forms;
mod indent;
mod lines;
mod messages;
mod scope;
mod symbols;
mod targets;

use super::{Trigger, finding};
use crate::domain::verdict::{Finding, Positions};
use crate::rules::grammar::{Grammar, text};
use crate::validate::walk::Frame;
use forms::{Forms, PythonVersion, RUNNER_PYTHON};
use indent::{first_statement_indent, indent_finding, indent_of, starts_line};
use lines::Lines;
use messages::{error_message, missing_message, subscripted_annotation};

/// [`Frame::bits`] of a block or module: a statement was seen; an indentation problem, or a line
/// problem, was reported (one of each per block, as before the walk had frames).
const SEEN_STATEMENT: u8 = 1;
const INDENT_REPORTED: u8 = 2;
const LINES_REPORTED: u8 = 4;
/// [`Frame::bits`] of an argument list: a keyword argument, a `**` unpacking was seen; its order
/// problem was reported.
const SEEN_KEYWORD: u8 = 1;
const SEEN_DOUBLE_STAR: u8 = 2;
const ORDER_REPORTED: u8 = 4;

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
    /// `break_statement`, `continue_statement`.
    loop_exits: [u16; 2],
    /// `for_statement`, `while_statement`.
    loops: [u16; 2],
    else_clause: u16,
    nonlocal_statement: u16,
    import_from_statement: u16,
    clauses: [u16; 5],
    named_expression: u16,
    /// Where an assignment expression may stand unparenthesized (see `walrus_allowed_in`).
    walrus_parents: [u16; 15],
    if_clause: u16,
    case_clause: u16,
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
            loop_exits: [k("break_statement"), k("continue_statement")],
            loops: [k("for_statement"), k("while_statement")],
            else_clause: k("else_clause"),
            nonlocal_statement: k("nonlocal_statement"),
            import_from_statement: k("import_from_statement"),
            clauses: [
                k("elif_clause"),
                k("else_clause"),
                k("except_clause"),
                k("finally_clause"),
                k("case_clause"),
            ],
            named_expression: k("named_expression"),
            walrus_parents: [
                k("if_statement"),
                k("elif_clause"),
                k("while_statement"),
                k("argument_list"),
                k("subscript"),
                k("slice"),
                k("list"),
                k("set"),
                k("tuple"),
                k("parenthesized_expression"),
                k("list_comprehension"),
                k("set_comprehension"),
                k("generator_expression"),
                k("match_statement"),
                k("decorator"),
            ],
            if_clause: k("if_clause"),
            case_clause: k("case_clause"),
            argument_list: k("argument_list"),
            keyword_argument: k("keyword_argument"),
            list_splat: k("list_splat"),
            dictionary_splat: k("dictionary_splat"),
            identifier: k("identifier"),
            forms: Forms::new(g, target),
            lines: Lines::new(g),
        }
    }

    /// The node kinds `PySyntax::check` looks at (besides ERROR/MISSING, probed when the tree has
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
            self.named_expression,
            self.argument_list,
        ];
        kinds.extend(self.loop_exits);
        kinds.push(self.nonlocal_statement);
        kinds.push(self.import_from_statement);
        kinds.extend(self.clauses);
        kinds.extend(self.forms.kinds());
        kinds.push(self.identifier);
        kinds
    }

    /// Whether an assignment expression whose ancestors are `frames` stands where CPython takes
    /// one unparenthesized: a condition of `if`/`elif`/`while`, an argument, a subscript, an
    /// element of a display or the element a comprehension computes, a `match` subject, a
    /// decorator, a `case` guard. Not a default, a keyword's value, a right-hand side, a
    /// comprehension's iterable or condition (`[x for x in y if z := f(x)]`).
    fn walrus_allowed_in(&self, frames: &[Frame<'_>]) -> bool {
        let mut up = frames.iter().rev();
        match up.next() {
            Some(parent) if parent.kind == self.if_clause => {
                up.next().is_some_and(|g| g.kind == self.case_clause)
            }
            Some(parent) => self.walrus_parents.contains(&parent.kind),
            None => true,
        }
    }

    /// Kinds whose children `PySyntax::child` checks against their siblings.
    pub fn children_kinds(&self) -> Vec<u16> {
        vec![self.module, self.block, self.argument_list]
    }

    /// Kinds `PySyntax::exit` checks once their children were seen.
    pub fn exit_kinds(&self) -> Vec<u16> {
        vec![self.block]
    }

    /// Checks that only a script holding some text can trigger (see `Trigger`).
    pub fn lexical_kinds(&self) -> Vec<(u16, Trigger)> {
        fn async_or_await(src: &[u8]) -> bool {
            memchr::memmem::find(src, b"async").is_some()
                || memchr::memmem::find(src, b"await").is_some()
        }
        fn leading_zero(src: &[u8]) -> bool {
            memchr::memchr_iter(b'0', src).any(|i| {
                src.get(i + 1)
                    .is_some_and(|b| b.is_ascii_digit() || *b == b'_')
            })
        }
        fn not_equal(src: &[u8]) -> bool {
            memchr::memmem::find(src, b"<>").is_some()
        }
        fn backquote(src: &[u8]) -> bool {
            memchr::memchr(b'`', src).is_some()
        }
        fn walrus(src: &[u8]) -> bool {
            memchr::memmem::find(src, b":=").is_some()
        }
        vec![
            (self.named_expression, walrus as Trigger),
            (self.identifier, async_or_await as Trigger),
            (self.integer, leading_zero),
            (self.comparison_operator, not_equal),
            (self.string_start, backquote),
        ]
    }

    /// Checks one node (`frames` ends with its parent); pushes findings. Returns false when the
    /// walk should not descend further.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn check<'t>(
        &self,
        node: Node<'t>,
        frames: &[Frame<'t>],
        scratch: &mut TreeCursor<'t>,
        has_errors: bool,
        src: &str,
        pos: &Positions<'_>,
        out: &mut Vec<Finding>,
    ) -> bool {
        if has_errors && node.is_error() {
            if !subscripted_annotation(node) {
                out.push(error_message(node, src, pos));
            }
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
        let parent = frames.last().map(|f| f.node);
        if let Some((rule, message)) = self.forms.check(node, parent, scratch, src) {
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
        } else if kind == self.return_statement && !self.in_function(frames) {
            bad("return-outside-function", "'return' outside function");
        } else if self.loop_exits.contains(&kind) && !self.in_loop(frames) {
            if kind == self.loop_exits[0] {
                bad("break-outside-loop", "'break' outside loop");
            } else {
                bad("continue-outside-loop", "'continue' not properly in loop");
            }
        } else if kind == self.import_from_statement && unparenthesized_trailing_comma(node, src) {
            bad(
                "invalid-syntax",
                "trailing comma not allowed without surrounding parentheses",
            );
        } else if kind == self.nonlocal_statement && !self.in_function(frames) {
            // In a class body outside any function there is no enclosing binding either.
            bad(
                "nonlocal-outside-function",
                "nonlocal declaration not allowed at module level",
            );
        } else if kind == self.yield_ && !self.in_function(frames) {
            bad("yield-outside-function", "'yield' outside function");
        } else if kind == self.yield_
            && text(node, src).starts_with("yield from")
            && self.in_async_function(frames, src)
        {
            bad("yield-from-in-async", "'yield from' inside async function");
        } else if kind == self.named_expression && !self.walrus_allowed_in(frames) {
            bad(
                "invalid-syntax",
                "invalid syntax: an assignment expression (:=) must be parenthesized here",
            );
        } else if kind == self.block && node.child_count() == 0 {
            // A block with children is checked as they are visited (`PySyntax::child`).
            let header = parent.map_or(node.start_byte(), |p| p.start_byte());
            out.push(finding(
                pos,
                header,
                "expected-indented-block",
                "expected an indented block".into(),
            ));
        } else if self.clauses.contains(&kind) {
            if let Some((at, message)) = self.lines.clause_header(node, src) {
                out.push(finding(pos, at, "missing-token", message.to_string()));
            }
            self.check_clause(node, parent, src, pos, out);
        }
        true
    }

    /// Checks `node` against its earlier siblings: statements of a module or block (one logical
    /// line each, one indentation), arguments of a call (their order). Its parent's frame is the
    /// last of `frames`.
    pub(crate) fn child<'t>(
        &self,
        node: Node<'t>,
        frames: &mut [Frame<'t>],
        src: &str,
        pos: &Positions<'_>,
        out: &mut Vec<Finding>,
    ) {
        if node.is_extra() {
            return;
        }
        let Some((frame, above)) = frames.split_last_mut() else {
            return;
        };
        if frame.kind == self.argument_list {
            if node.is_named()
                && frame.bits & ORDER_REPORTED == 0
                && let Some(message) = self.argument_order(frame, node)
            {
                frame.bits |= ORDER_REPORTED;
                out.push(finding(
                    pos,
                    node.start_byte(),
                    "argument-order",
                    message.into(),
                ));
            }
            return;
        }
        // A statement of a module or block.
        if !node.is_named() {
            return;
        }
        frame.bits |= SEEN_STATEMENT;
        if frame.bits & LINES_REPORTED == 0
            && let Some((at, message)) = self.lines.check(node, frame.prev, src)
        {
            frame.bits |= LINES_REPORTED;
            out.push(finding(pos, at, "invalid-syntax", message.to_string()));
        }
        frame.prev = Some(node);
        if frame.bits & INDENT_REPORTED != 0 || !starts_line(src, node) {
            return;
        }
        let indent = indent_of(src, node);
        let problem = match frame.indent {
            Some(reference) if reference == indent => None,
            Some(reference) => Some(indent_finding(pos, node, reference, indent)),
            None if frame.kind == self.module => {
                frame.indent = Some((0, 0));
                (indent != (0, 0)).then(|| indent_finding(pos, node, (0, 0), indent))
            }
            None => {
                frame.indent = Some(indent);
                // The block must be indented deeper than the line of its header (`if x:` …).
                let header = above.last().map(|f| indent_of(src, f.node));
                header.and_then(|(w1, w8)| {
                    first_statement_indent(pos, node, (w1 + 1, w8 + 1), indent)
                })
            }
        };
        if let Some(f) = problem {
            frame.bits |= INDENT_REPORTED;
            out.push(f);
        }
    }

    /// A block whose children were all visited: it needs a statement (comments do not count).
    pub(crate) fn exit(
        &self,
        frame: &Frame<'_>,
        parent: Option<&Frame<'_>>,
        _src: &str,
        pos: &Positions<'_>,
        out: &mut Vec<Finding>,
    ) {
        if frame.kind == self.block && frame.bits & SEEN_STATEMENT == 0 {
            let header = parent.map_or(frame.node.start_byte(), |p| p.node.start_byte());
            out.push(finding(
                pos,
                header,
                "expected-indented-block",
                "expected an indented block".into(),
            ));
        }
    }

    /// The Python version this checks against.
    pub fn target(&self) -> PythonVersion {
        self.forms.target()
    }

    /// CPython's rules for argument order: no positional argument after a keyword argument or
    /// `**` unpacking, no `*` unpacking after `**` unpacking. `frame` records what came before.
    fn argument_order(&self, frame: &mut Frame<'_>, arg: Node<'_>) -> Option<&'static str> {
        let k = arg.kind_id();
        if k == self.keyword_argument {
            frame.bits |= SEEN_KEYWORD;
        } else if k == self.dictionary_splat {
            frame.bits |= SEEN_DOUBLE_STAR;
        } else if k == self.list_splat {
            if frame.bits & SEEN_DOUBLE_STAR != 0 {
                return Some("iterable argument unpacking follows keyword argument unpacking");
            }
        } else if frame.bits & SEEN_DOUBLE_STAR != 0 {
            return Some("positional argument follows keyword argument unpacking");
        } else if frame.bits & SEEN_KEYWORD != 0 {
            return Some("positional argument follows keyword argument");
        }
        None
    }
}

/// `from m import a,` (the grammar takes it; CPython wants `from m import (a,)`).
fn unparenthesized_trailing_comma(node: Node<'_>, src: &str) -> bool {
    let last = node.child(node.child_count().saturating_sub(1));
    last.is_some_and(|c| text(c, src) == ",") && !has_child_text(node, src, "(")
}

fn has_leading_zero(t: &str) -> bool {
    let digits: String = t.chars().filter(|c| *c != '_').collect();
    digits.len() > 1
        && digits.starts_with('0')
        && digits.chars().all(|c| c.is_ascii_digit())
        && digits.chars().any(|c| c != '0')
}

fn has_child_text(node: Node<'_>, src: &str, wanted: &str) -> bool {
    crate::rules::grammar::children(node).any(|c| !c.is_named() && text(c, src) == wanted)
}
