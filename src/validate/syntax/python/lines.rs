//! Logical lines: tree-sitter-python's scanner drops a line break wherever the grammar cannot take
//! one, so `import\nos`, `x = a +\nb` and `a = 1  b = 2` parse as single statements. CPython ends a
//! statement at every line break outside brackets (unless a backslash continues the line), and two
//! statements on one line need a `;`. Both are checked per statement of a module or block, with a
//! small lexical pass over the statements that span lines.

use tree_sitter::Node;

use crate::rules::grammar::{Grammar, text};

#[derive(Debug, Clone)]
pub struct Lines {
    compound: [u16; 9],
    decorated_definition: u16,
    decorator: u16,
    f_definition: u16,
}

impl Lines {
    pub fn new(g: &Grammar) -> Self {
        let k = |n| g.known_kind(n);
        Lines {
            compound: [
                k("if_statement"),
                k("for_statement"),
                k("while_statement"),
                k("try_statement"),
                k("with_statement"),
                k("function_definition"),
                k("class_definition"),
                k("match_statement"),
                k("case_clause"),
            ],
            decorated_definition: k("decorated_definition"),
            decorator: k("decorator"),
            f_definition: g.known_field("definition"),
        }
    }

    /// The byte offset where CPython would see a problem with `stmt`, a child of a module or block
    /// that follows a statement ending at `prev_end` (if any), and the message.
    pub fn check(
        &self,
        stmt: Node<'_>,
        prev: Option<Node<'_>>,
        src: &str,
    ) -> Option<(usize, &'static str)> {
        if let Some(prev) = prev
            && src
                .get(prev.end_byte()..stmt.start_byte())
                .is_some_and(one_logical_line)
        {
            return Some((
                stmt.start_byte(),
                "invalid syntax: statements on one line must be separated by ';'",
            ));
        }
        // each decorator is a logical line of its own (`@` then `name` on the next line is not)
        if stmt.kind_id() == self.decorated_definition
            && let Some(at) = crate::rules::grammar::children(stmt)
                .filter(|d| d.kind_id() == self.decorator)
                .find_map(|d| stray_line_break(src, d.start_byte(), d.end_byte()))
        {
            return Some((
                at,
                "invalid syntax: a decorator goes on to the next line outside brackets",
            ));
        }
        let (start, end) = self.logical_span(stmt, src)?;
        stray_line_break(src, start, end).map(|at| {
            (
                at,
                "invalid syntax: the statement goes on to the next line outside brackets",
            )
        })
    }

    /// The header of a clause (`elif c:`, `except E:`, `else:`, `finally:`) up to its `:` is one
    /// logical line too.
    pub fn clause_header(&self, clause: Node<'_>, src: &str) -> Option<(usize, &'static str)> {
        let colon = crate::rules::grammar::children(clause)
            .find(|c| !c.is_named() && text(*c, src) == ":")?;
        if colon.start_position().row == clause.start_position().row {
            return None;
        }
        stray_line_break(src, clause.start_byte(), colon.start_byte())
            .map(|at| (at, "expected ':'"))
    }

    /// The part of a statement that must be one logical line: all of a simple statement, the
    /// header (up to its `:`) of a compound one. None when it fits on one physical line.
    fn logical_span(&self, stmt: Node<'_>, src: &str) -> Option<(usize, usize)> {
        let mut node = stmt;
        if node.kind_id() == self.decorated_definition {
            node = node.child_by_field_id(self.f_definition)?;
        }
        let end = if self.compound.contains(&node.kind_id()) {
            let colon = crate::rules::grammar::children(node)
                .find(|c| !c.is_named() && text(*c, src) == ":")?;
            (colon.start_position().row != node.start_position().row)
                .then_some(colon.start_byte())?
        } else {
            (node.end_position().row != node.start_position().row).then_some(node.end_byte())?
        };
        Some((node.start_byte(), end))
    }
}

/// Whether the text between two statements leaves them on one logical line: no `;` and no line
/// break but those a backslash continues (`a = 1 \\` then `b = 2` on the next line).
fn one_logical_line(gap: &str) -> bool {
    let b = gap.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b';' | b'\n' | b'#' => return false,
            b'\\' => i += 1 + usize::from(b.get(i + 1) == Some(&b'\r')),
            _ => {}
        }
        i += 1;
    }
    true
}

/// The first line break in `src[start..end]` that ends a logical line: outside brackets, strings
/// and comments, and not after a backslash.
fn stray_line_break(src: &str, start: usize, end: usize) -> Option<usize> {
    let b = src.as_bytes();
    let end = end.min(b.len());
    let mut depth = 0usize;
    let mut i = start;
    while i < end {
        match b[i] {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            b'\\' => i += 1,
            b'#' => {
                while i < end && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'\n' if depth == 0 => return Some(i),
            q @ (b'\'' | b'"') => {
                i = skip_string(b, i, q, end);
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The index just past the string literal opening at `i` (quote `q`), or `end`.
fn skip_string(b: &[u8], i: usize, q: u8, end: usize) -> usize {
    let triple = b.get(i + 1) == Some(&q) && b.get(i + 2) == Some(&q);
    let mut j = if triple { i + 3 } else { i + 1 };
    while j < end {
        match b[j] {
            b'\\' => j += 1,
            b'\n' if !triple => return j,
            c if c == q && (!triple || (b.get(j + 1) == Some(&q) && b.get(j + 2) == Some(&q))) => {
                return j + if triple { 3 } else { 1 };
            }
            _ => {}
        }
        j += 1;
    }
    end
}

#[cfg(test)]
mod tests {
    use super::{Lines, one_logical_line, stray_line_break};
    use crate::domain::script::Language;
    use crate::rules::grammar::Grammar;

    #[test]
    fn a_decorator_is_one_logical_line() {
        let g = Grammar::new(Language::Python);
        let lines = Lines::new(&g);
        for (src, bad) in [
            ("@\ndataclass(order=True)\nclass A:\n    pass\n", true),
            ("@dataclass(\n    order=True)\nclass A:\n    pass\n", false),
            ("@a\n@b.c\ndef f(): pass\n", false),
        ] {
            let tree = g.parse(src);
            let stmt = tree.root_node().child(0).expect("statement");
            assert_eq!(lines.check(stmt, None, src).is_some(), bad, "{src:?}");
        }
    }

    #[test]
    fn line_breaks_inside_brackets_strings_and_after_backslashes_continue_the_statement() {
        let ok = [
            "x = (a +\n b)",
            "x = a + \\\n b",
            "x = '''a\nb'''",
            "f(a,  # c\n b)",
            "s = 'a\\\nb'",
        ];
        for text in ok {
            assert_eq!(stray_line_break(text, 0, text.len()), None, "{text:?}");
        }
        let bad = [
            "import \nos",
            "x = a +\n b",
            "x = 1  # c\n+ 2",
            "x = ')' +\n b",
        ];
        for text in bad {
            assert!(stray_line_break(text, 0, text.len()).is_some(), "{text:?}");
        }
    }

    #[test]
    fn a_backslash_continuation_keeps_two_statements_on_one_line() {
        for glued in [" ", "  \\\n    ", "\\\r\n"] {
            assert!(one_logical_line(glued), "{glued:?}");
        }
        for apart in ["\n", " ; ", "  # c\n", "\\\n\n", "\r\n"] {
            assert!(!one_logical_line(apart), "{apart:?}");
        }
    }
}
