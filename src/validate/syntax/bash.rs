//! Bash syntax checks: tree-sitter-bash ERROR and MISSING nodes with shell-like messages.
//!
//! tree-sitter-bash (0.25) reports an ERROR for a valid heredoc line that continues after the
//! delimiter (`cat <<EOF; echo done`, `cat <<EOF 2>/dev/null | grep x`): the operator becomes an ERROR
//! and the rest of the line plain words (tree-sitter-bash #346). Those ERRORs are not reported; the
//! rest of the line is handed back as a region to parse and check on its own, so a command hidden
//! there is still seen by the rules. A line that starts with a backslash in column 0 (`\rm -rf /`,
//! the usual way to bypass an alias) is glued to the previous command as extra arguments, hiding the
//! command from every rule: [`normalize`] parses a copy where that backslash is a space (same program,
//! same byte offsets). A reserved word in command position (a stray `fi`, `done`, `then`) parses as a
//! command named `fi`; bash rejects it, and so does this layer. `print("x")` parses as a command
//! with a subshell argument and an indented here-document delimiter as a terminator; bash rejects
//! both. The grammar has no `<>` operator (`exec 3<>file`); [`normalize`] rewrites it. An
//! unterminated heredoc is only a warning for `bash -n`, but it swallows the rest of the script, so
//! it is rejected here. Where bash splits words differently from the grammar (a reserved word glued
//! to the next word, `;;` outside a `case`, an operator `[[ … ]]` does not know, a quote left open
//! in a here-document delimiter, a second word after a compound command's redirection) the checks
//! are in `tokens`.

use tree_sitter::{Node, TreeCursor};

mod herestrings;
mod merged;
mod rewrite;
mod tokens;
mod words;

use super::{excerpt, finding, first_token};
use crate::domain::verdict::{Finding, Positions};
use crate::rules::grammar::{Grammar, text};
use crate::validate::walk::Frame;
pub use merged::split_merged_lines;
pub use rewrite::normalize;

/// Words bash only accepts as part of a compound command, never as a command name.
const RESERVED: [&str; 8] = ["fi", "done", "then", "else", "elif", "esac", "do", "}"];

#[derive(Debug, Clone)]
pub struct BashSyntax {
    command: u16,
    command_name: u16,
    subshell: u16,
    heredoc_end: u16,
    word: u16,
    heredoc_redirect: u16,
    heredoc_start: u16,
    heredoc_body: u16,
    comment: u16,
    file_redirect: u16,
    f_destination: u16,
    compound_statement: u16,
    do_group: u16,
    if_statement: u16,
    elif_clause: u16,
    else_clause: u16,
    program: u16,
    /// `binary_expression`, `unary_expression`.
    expressions: [u16; 2],
    /// Compound commands whose reserved words must stand alone (see `tokens::glued_keyword`).
    keyword_holders: [u16; 9],
}

impl BashSyntax {
    pub fn new(g: &Grammar) -> Self {
        BashSyntax {
            command: g.known_kind("command"),
            command_name: g.known_kind("command_name"),
            subshell: g.known_kind("subshell"),
            heredoc_end: g.known_kind("heredoc_end"),
            word: g.known_kind("word"),
            heredoc_redirect: g.known_kind("heredoc_redirect"),
            heredoc_start: g.known_kind("heredoc_start"),
            heredoc_body: g.known_kind("heredoc_body"),
            comment: g.known_kind("comment"),
            file_redirect: g.known_kind("file_redirect"),
            f_destination: g.known_field("destination"),
            compound_statement: g.known_kind("compound_statement"),
            do_group: g.known_kind("do_group"),
            if_statement: g.known_kind("if_statement"),
            elif_clause: g.known_kind("elif_clause"),
            else_clause: g.known_kind("else_clause"),
            program: g.known_kind("program"),
            expressions: [
                g.known_kind("binary_expression"),
                g.known_kind("unary_expression"),
            ],
            keyword_holders: [
                "compound_statement",
                "do_group",
                "if_statement",
                "elif_clause",
                "else_clause",
                "for_statement",
                "while_statement",
                "case_statement",
                "function_definition",
            ]
            .map(|k| g.known_kind(k)),
        }
    }

    /// The node kinds `BashSyntax::check` looks at when the tree has no errors.
    pub fn kinds(&self) -> Vec<u16> {
        let mut kinds = vec![
            self.command_name,
            self.subshell,
            self.heredoc_end,
            self.heredoc_start,
            self.file_redirect,
            self.compound_statement,
            self.do_group,
            self.if_statement,
            self.elif_clause,
            self.else_clause,
            self.program,
        ];
        kinds.extend(self.expressions);
        kinds.extend(self.keyword_holders);
        kinds
    }

    /// Checks one node. Returns false when the walk should not descend. `regions` receives byte
    /// ranges of code hidden by the heredoc grammar gap.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn check<'t>(
        &self,
        node: Node<'t>,
        parent: Option<&Frame<'t>>,
        scratch: &mut TreeCursor<'t>,
        has_errors: bool,
        src: &str,
        pos: &Positions<'_>,
        out: &mut Vec<Finding>,
        regions: &mut Vec<(usize, usize)>,
    ) -> bool {
        if has_errors && node.is_error() {
            if let Some(region) = self.heredoc_gap(node, src) {
                regions.push(region);
                return false;
            }
            out.push(error_message(node, src, pos));
            return false;
        }
        if has_errors && node.is_missing() {
            out.push(self.missing_message(node, src, pos));
            return false;
        }
        let in_command = parent.is_some_and(|p| p.kind == self.command);
        if node.kind_id() == self.command_name
            && in_command
            && RESERVED.contains(&text(node, src))
            && node.named_child_count() == 1
            && node
                .named_child(0)
                .is_some_and(|w| w.kind_id() == self.word)
        {
            out.push(finding(
                pos,
                node.start_byte(),
                "unexpected-token",
                format!("syntax error near unexpected token `{}`", text(node, src)),
            ));
        }
        // `print("x")`: the grammar takes the parenthesis as a subshell argument; bash rejects it.
        if node.kind_id() == self.subshell && in_command {
            out.push(finding(
                pos,
                node.start_byte(),
                "unexpected-token",
                "syntax error near unexpected token `(`".into(),
            ));
        }
        if node.kind_id() == self.heredoc_end {
            self.check_heredoc_end(node, src, pos, out);
        }
        if node.kind_id() == self.heredoc_start
            && let Some(wanted) = unterminated_delimiter(node, src)
        {
            out.push(finding(
                pos,
                node.start_byte(),
                "unterminated-heredoc",
                format!("here-document delimited by end of file (wanted `{wanted}`)"),
            ));
        }
        if node.kind_id() == self.file_redirect
            && let Some(target) = node.child_by_field_id(self.f_destination)
            && target.start_position().row != node.start_position().row
            && !src[node.start_byte()..target.start_byte()].contains("\\\n")
        {
            out.push(finding(
                pos,
                node.start_byte(),
                "unexpected-token",
                "syntax error near unexpected token `newline`: a redirection needs its file on the same line".into(),
            ));
        }
        self.check_tokens(node, src, pos, out);
        if let Some((at, token)) = self.empty_body(node, scratch, src) {
            out.push(finding(
                pos,
                at,
                "unexpected-token",
                format!("syntax error near unexpected token `{token}`: empty command list"),
            ));
        }
        true
    }

    /// Where bash splits words differently from the grammar (see [`tokens`]).
    fn check_tokens(&self, node: Node<'_>, src: &str, pos: &Positions<'_>, out: &mut Vec<Finding>) {
        let kind = node.kind_id();
        let unexpected = |at: usize, token: &str| {
            finding(
                pos,
                at,
                "unexpected-token",
                format!("syntax error near unexpected token `{token}`"),
            )
        };
        if self.keyword_holders.contains(&kind) {
            if let Some((at, word)) = tokens::glued_keyword(node, src) {
                out.push(unexpected(at, &word));
            }
        } else if kind == self.program {
            if let Some((at, token)) = tokens::stray_case_terminator(node, src) {
                out.push(unexpected(at, token));
            }
        } else if self.expressions.contains(&kind) {
            if let Some((at, message)) = tokens::conditional_operator(node, src) {
                out.push(finding(pos, at, "unexpected-token", message));
            }
        } else if kind == self.heredoc_start {
            if let Some(quote) = tokens::unbalanced_delimiter(node, src) {
                out.push(finding(
                    pos,
                    node.start_byte(),
                    "unterminated-string",
                    format!("unexpected EOF while looking for matching `{quote}'"),
                ));
            }
        } else if kind == self.file_redirect
            && let Some(extra) = tokens::extra_redirect_word(node, self.f_destination)
        {
            out.push(unexpected(extra.start_byte(), text(extra, src)));
        }
    }

    /// bash wants at least one command in `{ }`, `do … done` and every branch of an `if`; the
    /// grammar accepts an empty body (or one holding only comments). Returns the position and the
    /// token bash stops at.
    fn empty_body<'t, 's>(
        &self,
        node: Node<'t>,
        scratch: &mut TreeCursor<'t>,
        src: &'s str,
    ) -> Option<(usize, &'s str)> {
        let kind = node.kind_id();
        let whole_node = kind == self.compound_statement || kind == self.do_group;
        // For if/elif the body runs from `then` to the next clause or `fi`; an else clause's body
        // is all of it.
        let mut in_body = whole_node || kind == self.else_clause;
        if !in_body && kind != self.if_statement && kind != self.elif_clause {
            return None;
        }
        let mut has_command = false;
        for child in node.children(scratch) {
            let k = child.kind_id();
            if !child.is_named() {
                match text(child, src) {
                    "then" => in_body = true,
                    "fi" | "}" | "done" if in_body && !has_command => {
                        return Some((child.start_byte(), text(child, src)));
                    }
                    _ => {}
                }
            } else if k == self.elif_clause || k == self.else_clause {
                if in_body && !has_command {
                    return Some((
                        child.start_byte(),
                        if k == self.elif_clause {
                            "elif"
                        } else {
                            "else"
                        },
                    ));
                }
                in_body = false;
            } else if in_body && k != self.comment {
                has_command = true;
            }
        }
        // An elif or else clause ends where the `fi` of its if statement is.
        let clause = kind == self.else_clause || kind == self.elif_clause;
        (clause && in_body && !has_command).then(|| (node.end_byte(), "fi"))
    }

    /// bash ends a `<<` here-document only at a line that is exactly the delimiter, and a `<<-` one
    /// at a line of tabs plus the delimiter; the grammar also accepts other indentation and
    /// trailing blanks (`EOF `), which in bash leave the here-document unterminated (swallowing the
    /// rest of the script).
    fn check_heredoc_end(
        &self,
        end: Node<'_>,
        src: &str,
        pos: &Positions<'_>,
        out: &mut Vec<Finding>,
    ) {
        let line_start = src[..end.start_byte()].rfind('\n').map_or(0, |i| i + 1);
        let indent = &src[line_start..end.start_byte()];
        let rest = &src[end.end_byte()..];
        let trailing = &rest[..rest.find('\n').unwrap_or(rest.len())];
        if !trailing.is_empty() {
            out.push(finding(
                pos,
                end.start_byte(),
                "unterminated-heredoc",
                format!(
                    "here-document delimiter `{}` is followed by other text on its line, so bash does not end the here-document there",
                    text(end, src)
                ),
            ));
            return;
        }
        if indent.is_empty() {
            return;
        }
        let strips_tabs = end
            .parent()
            .is_some_and(|r| text(r, src).starts_with("<<-"));
        if strips_tabs && indent.bytes().all(|b| b == b'\t') {
            return;
        }
        out.push(finding(
            pos,
            end.start_byte(),
            "unterminated-heredoc",
            format!(
                "here-document delimiter `{}` is indented, so bash does not end the here-document there",
                text(end, src)
            ),
        ));
    }

    /// An ERROR that is only an operator right after a heredoc start: returns the rest of that line.
    fn heredoc_gap(&self, node: Node<'_>, src: &str) -> Option<(usize, usize)> {
        let parent = node.parent()?;
        if parent.kind_id() != self.heredoc_redirect {
            return None;
        }
        if !matches!(text(node, src).trim(), ";" | "|" | "&&" | "||" | "&" | "|&") {
            return None;
        }
        let body_start = parent
            .children(&mut parent.walk())
            .find(|c| c.kind_id() == self.heredoc_body)
            .map_or(parent.end_byte(), |b| b.start_byte());
        let line_end = src[node.end_byte()..]
            .find('\n')
            .map_or(src.len(), |i| node.end_byte() + i)
            .min(body_start);
        Some((node.end_byte(), line_end))
    }

    fn missing_message(&self, node: Node<'_>, src: &str, pos: &Positions<'_>) -> Finding {
        let (rule, message) = match node.kind() {
            "fi" => ("unterminated-if", "`if` without `fi`".to_string()),
            "done" => ("unterminated-loop", "loop without `done`".to_string()),
            "esac" => ("unterminated-case", "`case` without `esac`".to_string()),
            "then" => ("missing-then", "`if` without `then`".to_string()),
            "do" => ("missing-do", "loop without `do`".to_string()),
            "}" => ("unclosed-brace", "`{` without `}`".to_string()),
            ")" => ("unclosed-paren", "`(` without `)`".to_string()),
            "\"" => (
                "unterminated-string",
                "unterminated double-quoted string".to_string(),
            ),
            "heredoc_end" => {
                let wanted = node
                    .parent()
                    .and_then(|p| {
                        p.children(&mut p.walk())
                            .find(|c| c.kind_id() == self.heredoc_start)
                    })
                    .map(|s| text(s, src).trim_matches(['\'', '"']).to_string())
                    .unwrap_or_default();
                (
                    "unterminated-heredoc",
                    format!("here-document delimited by end of file (wanted `{wanted}`)"),
                )
            }
            other => ("missing-token", format!("missing `{other}`")),
        };
        let at = if node.kind() == "heredoc_end" {
            node.parent().map_or(node.start_byte(), |p| p.start_byte())
        } else {
            node.start_byte()
        };
        finding(pos, at, rule, message)
    }
}

/// A word as bash reads it once its quotes are removed: a backslash keeps the next character,
/// single quotes keep everything, double quotes keep all but `\` before `\`, `"`, `$` or `` ` ``.
fn quotes_removed(word: &str) -> String {
    let mut out = String::with_capacity(word.len());
    let mut chars = word.chars();
    let mut quote = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, '\\') => out.extend(chars.next()),
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (Some('"'), '\\') => match chars.next() {
                Some(n @ ('\\' | '"' | '$' | '`')) => out.push(n),
                Some(n) => out.extend(['\\', n]),
                None => out.push('\\'),
            },
            _ => out.push(c),
        }
    }
    out
}

/// bash's delimiter of the here-document `start` opens, when no line of the rest of the script
/// matches it (bash then reads to end of file). The delimiter is the whole word, quotes removed:
/// for `<<'K'x` it is `Kx`, where the grammar sees only the quoted part; and the grammar's scanner
/// ends some bodies (those holding expansions) at a line that is not the delimiter at all.
fn unterminated_delimiter(start: Node<'_>, src: &str) -> Option<String> {
    let from = start.start_byte();
    let word_end = src[from..]
        .find([' ', '\t', '\n', ';', '&', '|', '<', '>', '(', ')'])
        .map_or(src.len(), |i| from + i);
    let wanted = quotes_removed(&src[from..word_end]);
    let strips_tabs = src[..from].trim_end().ends_with("<<-");
    let body = src[word_end..]
        .split_once('\n')
        .map_or("", |(_, rest)| rest);
    let ends = body.lines().any(|l| {
        let l = if strips_tabs {
            l.trim_start_matches('\t')
        } else {
            l
        };
        l == wanted
    });
    (!ends).then_some(wanted)
}

fn error_message(node: Node<'_>, src: &str, pos: &Positions<'_>) -> Finding {
    let token = first_token(node).map(|t| text(t, src)).unwrap_or("");
    let (rule, message) = match token {
        "case" => ("unterminated-case", "`case` without `esac`".to_string()),
        "if" => ("unterminated-if", "`if` without `fi`".to_string()),
        "for" | "while" | "until" | "select" => {
            ("unterminated-loop", "loop without `done`".to_string())
        }
        "\"" => (
            "unterminated-string",
            "unterminated double-quoted string".to_string(),
        ),
        "'" => (
            "unterminated-string",
            "unterminated single-quoted string".to_string(),
        ),
        "$(" | "(" | "<(" | ">(" => ("unclosed-paren", format!("`{token}` without `)`")),
        "{" | "${" => ("unclosed-brace", format!("`{token}` without `}}`")),
        "fi" | "done" | "esac" | "then" | "do" | "else" | "elif" | "}" | ")" | ";;" => (
            "unexpected-token",
            format!("syntax error near unexpected token `{token}`"),
        ),
        _ if text(node, src).starts_with('\'') => (
            "unterminated-string",
            "unterminated single-quoted string".to_string(),
        ),
        _ if text(node, src).starts_with('"') => (
            "unterminated-string",
            "unterminated double-quoted string".to_string(),
        ),
        _ => (
            "syntax-error",
            format!("syntax error near `{}`", excerpt(node, src)),
        ),
    };
    finding(pos, node.start_byte(), rule, message)
}
