//! The Bash matcher keys: `command:` (a command's effective name, flags, arguments and whether it
//! reads a program from stdin) and `recursive:` (a function that calls itself).

use tree_sitter::Node;

use super::{BashSem, Invocation};
use crate::rules::grammar::text;
use crate::rules::matcher::{CommandSpec, Cx};

impl BashSem<'_> {
    pub fn command_matches<'t>(&self, node: Node<'t>, spec: &CommandSpec, cx: &Cx<'t>) -> bool {
        let (invocations, hot) = cx.bash_invocations(self, node);
        hot && invocations.iter().any(|inv| {
            spec.name.contains(&inv.name)
                && (spec.flags.is_empty() || self.has_flag(inv, &spec.flags, cx))
                && spec
                    .arg
                    .as_ref()
                    .is_none_or(|m| inv.args.iter().any(|a| m.matches(*a, cx)))
                && spec
                    .last_arg
                    .as_ref()
                    .is_none_or(|m| inv.args.last().is_some_and(|a| m.matches(*a, cx)))
                && (!spec.stdin_program || self.reads_program_from_stdin(inv))
        })
    }

    /// Whether an option appears before `--`; `-r` matches inside clusters such as `-rf`.
    pub fn has_flag<'t>(&self, inv: &Invocation<'t>, flags: &[String], cx: &Cx<'t>) -> bool {
        for arg in &inv.args {
            let Some(a) = cx.fold(*arg) else { continue };
            let a: &str = &a;
            if a == "--" {
                return false;
            }
            for flag in flags {
                let hit = if flag.starts_with("--") || flag.len() > 2 {
                    a == flag
                        || a.strip_prefix(flag.as_str())
                            .is_some_and(|r| r.starts_with('='))
                } else {
                    let letter = &flag[1..];
                    a.starts_with('-')
                        && !a.starts_with("--")
                        && a[1..].chars().all(|c| c.is_ascii_alphanumeric())
                        && a[1..].contains(letter)
                };
                if hit {
                    return true;
                }
            }
        }
        false
    }

    /// An interpreter with neither inline code nor a script file reads its program from stdin.
    pub fn reads_program_from_stdin(&self, inv: &Invocation<'_>) -> bool {
        let Some(interp) = self.interpreters.and_then(|t| t.lookup(&inv.name)) else {
            return false;
        };
        for arg in &inv.args {
            let Some(a) = self.fold(*arg) else {
                return false;
            };
            if interp.stdin_markers.contains(&a) {
                return true;
            }
            // `node --version`, `python3 -V`: prints and exits without reading a program; `bash -n`
            // (also `-nv`, `-xn`) only parses what it reads and runs none of it
            let informational = matches!(a.as_str(), "--version" | "-V" | "--help" | "-h")
                || (interp.language == Some(crate::domain::script::Language::Bash)
                    && a.starts_with('-')
                    && !a.starts_with("--")
                    && a.contains('n'));
            if interp.takes_code(&a) || interp.module_flags.contains(&a) || informational {
                return false;
            }
            if !a.starts_with('-') {
                return false;
            }
        }
        interp.bare_reads_stdin
    }

    pub fn is_recursive<'t>(&self, node: Node<'t>, cx: &Cx<'t>) -> bool {
        let (Some(name), Some(body)) = (
            node.child_by_field_id(self.k.f_name),
            node.child_by_field_id(self.k.f_body),
        ) else {
            return false;
        };
        let name = text(name, self.src);
        if !text(body, self.src).contains(name) {
            return false;
        }
        // Depth-first over the body with one pooled cursor.
        cx.with_cursor(body, |cursor| {
            let mut depth = 0usize;
            loop {
                let n = cursor.node();
                // Not the memoized invocations: those leave out names no rule mentions, and a
                // function's own name is one.
                if n.kind_id() == self.k.command
                    && text(n, self.src).contains(name)
                    && self.invocations(n).iter().any(|i| i.name == name)
                {
                    return true;
                }
                if cursor.goto_first_child() {
                    depth += 1;
                    continue;
                }
                loop {
                    if depth == 0 {
                        return false;
                    }
                    if cursor.goto_next_sibling() {
                        break;
                    }
                    cursor.goto_parent();
                    depth -= 1;
                }
            }
        })
    }
}
