//! The programs a Bash command runs: its name as spelled or folded, and through wrappers (`sudo`,
//! `env`, `timeout 5`, `xargs`, `find -exec` …) the program each one runs in turn.

use tree_sitter::Node;

use super::wrappers::wrapper;
use super::{BashSem, Invocation};
use crate::rules::grammar::text;
use crate::rules::matcher::NameSet;

impl BashSem<'_> {
    /// The name a `command_name` node spells: plain words (the common case) without folding.
    fn command_name(&self, name: Node<'_>) -> Option<String> {
        if name.named_child_count() == 1
            && let Some(word) = name.named_child(0)
            && word.kind_id() == self.k.word
        {
            let t = text(word, self.src);
            if !t.contains('\\') {
                return Some(base_name(t).to_string());
            }
        }
        self.fold(name).map(|n| base_name(&n).to_string())
    }

    /// Whether a command can run a program named in `names`, from its name as written: a plain
    /// word that is neither a wrapper nor in `names` cannot (anything else might).
    pub fn may_run(&self, command: Node<'_>, names: &NameSet) -> bool {
        // The name is the first child unless assignments or redirections come before it.
        let first = command.child(0);
        let name = match first {
            Some(n) if n.kind_id() == self.k.command_name => n,
            _ => match command.child_by_field_id(self.k.f_name) {
                Some(n) => n,
                None => return true,
            },
        };
        let word = match (name.child_count(), name.child(0)) {
            (1, Some(w)) if w.kind_id() == self.k.word => text(w, self.src),
            _ => return true,
        };
        if word.contains('\\') {
            return true;
        }
        let base = base_name(word);
        wrapper(base).is_some() || names.contains(base)
    }

    /// The programs a `command` node runs, outermost first.
    pub fn invocations<'t>(&self, command: Node<'t>) -> Vec<Invocation<'t>> {
        self.invocations_with(command, &mut command.walk())
    }

    /// [`BashSem::invocations`] with a cursor to reuse (tree-sitter allocates per new cursor).
    pub fn invocations_with<'t>(
        &self,
        command: Node<'t>,
        cursor: &mut tree_sitter::TreeCursor<'t>,
    ) -> Vec<Invocation<'t>> {
        let name = command
            .child_by_field_id(self.k.f_name)
            .and_then(|n| self.command_name(n))
            .unwrap_or_default();
        let mut args: Vec<Node<'t>> = Vec::new();
        cursor.reset(command);
        if cursor.goto_first_child() {
            loop {
                if cursor.field_id().map(|f| f.get()) == Some(self.k.f_argument) {
                    args.push(cursor.node());
                }
                if !cursor.goto_next_sibling() {
                    break;
                }
            }
        }
        let mut chain = vec![Invocation { name, args }];
        while chain.len() < 8 {
            let last = chain.last().expect("chain is never empty");
            let Some(next) = self.unwrap_wrapper(last) else {
                break;
            };
            chain.push(next);
        }
        chain
    }

    /// For wrappers (`sudo`, `env`, `timeout 5`, `xargs -n1` …) the program they run.
    fn unwrap_wrapper<'t>(&self, inv: &Invocation<'t>) -> Option<Invocation<'t>> {
        if inv.name == "find" {
            return self.find_exec(inv);
        }
        let spec = wrapper(&inv.name)?;
        let mut i = 0;
        let mut positional_to_skip = spec.positional;
        while i < inv.args.len() {
            let arg = self.fold(inv.args[i]).unwrap_or_default();
            if arg == "--" {
                i += 1;
                break;
            }
            // `env -i PATH="$PATH" cmd`: an assignment is one by its spelling, whatever its value.
            if spec.env_assignments
                && (is_assignment(&arg) || is_assignment(text(inv.args[i], self.src)))
            {
                i += 1;
            } else if arg.starts_with('-') && arg.len() > 1 {
                if spec.stop_options.contains(&arg.as_str()) {
                    return None;
                }
                let takes_value = spec.value_options.iter().any(|o| *o == arg);
                i += if takes_value { 2 } else { 1 };
            } else if positional_to_skip > 0 {
                positional_to_skip -= 1;
                i += 1;
            } else {
                break;
            }
        }
        let name_node = *inv.args.get(i)?;
        let name = self.fold(name_node).unwrap_or_default();
        Some(Invocation {
            name: base_name(&name).to_string(),
            args: inv.args[i + 1..].to_vec(),
        })
    }

    /// `find … -exec cmd args {} \;` (or `-execdir`, `-ok`, `-okdir`, ending in `;` or `+`): the
    /// command find runs.
    fn find_exec<'t>(&self, inv: &Invocation<'t>) -> Option<Invocation<'t>> {
        let folded: Vec<Option<String>> = inv.args.iter().map(|a| self.fold(*a)).collect();
        let at = folded
            .iter()
            .position(|a| matches!(a.as_deref(), Some("-exec" | "-execdir" | "-ok" | "-okdir")))?;
        let name = folded.get(at + 1)?.clone().unwrap_or_default();
        let end = folded[at + 2..]
            .iter()
            .position(|a| matches!(a.as_deref(), Some(";" | "+")))
            .map_or(inv.args.len(), |p| at + 2 + p);
        Some(Invocation {
            name: base_name(&name).to_string(),
            args: inv.args[(at + 2).min(end)..end].to_vec(),
        })
    }
}

fn is_assignment(s: &str) -> bool {
    match s.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    }
}

/// `/usr/bin/rm` → `rm`.
pub fn base_name(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_assignments_read_like_the_shell() {
        assert_eq!(base_name("/usr/bin/rm"), "rm");
        assert!(is_assignment("X=1"));
        assert!(!is_assignment("-u"));
        assert!(!is_assignment("1X=1"));
    }
}
