//! Scripts a Bash script writes out for later (a git hook, a cron job, a helper): a heredoc that
//! `cat`/`tee` copy to a file or `read -d ''` keeps in a variable, or a value `printf`/`echo`
//! print into a file, that starts with a shell's or Python's `#!` line, or goes to a file named
//! `*.sh`/`*.bash`/`*.py` or to a shell's start-up file (`~/.bashrc`…), is checked as the program
//! it is; a Dockerfile's `RUN` instructions and a pipeline's or playbook's commands (`run:`,
//! `script:`, `shell:`…) are checked as the shell lines they are, text that starts with Python
//! imports as Python.

use tree_sitter::Node;

use super::{Embedded, Origin, planted};
use crate::domain::script::Language;
use crate::rules::bash::BashSem;
use crate::rules::grammar::{children, children_in_field, text};
use crate::rules::matcher::Cx;

/// A script written out (see the module's comment): checked as the program it is.
pub(super) fn written_script<'t>(
    sem: &BashSem<'_>,
    cx: &Cx<'t>,
    command: Node<'t>,
) -> Option<Embedded<'t>> {
    let k = sem.k;
    let name = command.child_by_field_id(k.f_name)?;
    let mut name_text = text(name, sem.src);
    // (`sudo tee /usr/local/bin/tool <<EOF`: the program sudo runs writes the file)
    let behind_sudo;
    if matches!(name_text, "sudo" | "doas") {
        behind_sudo = cx
            .bash_invocations(sem, command)
            .0
            .iter()
            .find(|i| matches!(i.name.as_str(), "tee" | "cat"))
            .map(|i| i.name.clone())?;
        name_text = behind_sudo.as_str();
    }
    if matches!(name_text, "sed" | "gsed" | "/bin/sed" | "/usr/bin/sed") {
        return planted::sed_inserted(sem, command);
    }
    // (the name first: a parent the walk did not record is found by descending from the root)
    if !matches!(
        name_text,
        "cat" | "tee" | "/bin/cat" | "/usr/bin/tee" | "read" | "printf" | "echo"
    ) {
        return None;
    }
    // (`grep -q x rc || printf … >> rc`: the tree hangs the redirection on the whole list, but
    // Bash gives it to the list's last command)
    let mut statement = cx.parent(command)?;
    let mut last = command;
    while statement.kind_id() == k.list && statement.end_byte() == last.end_byte() {
        last = statement;
        statement = cx.parent(statement)?;
    }
    if statement.kind_id() != k.redirected_statement {
        return None;
    }
    let program = |code: String, anchor: Node<'t>, verbatim_at: Option<usize>| {
        // a Dockerfile's `RUN` instructions, a pipeline's `run:`/`script:` commands, Python code
        let shebang = shebang_language(&code);
        if shebang.is_none()
            && let Some((interpreter, language, code)) = planted::configured_program(&code)
        {
            return Some(Embedded {
                interpreter: interpreter.to_string(),
                language: Some(language),
                code: Some(code),
                anchor,
                verbatim_at: None,
                origin: Origin::Local,
            });
        }
        let language =
            shebang.or_else(|| destination_language(sem, statement, command, name_text))?;
        Some(Embedded {
            interpreter: if name_text == "read" {
                "the script read into a variable".to_string()
            } else {
                format!("the script written by {name_text}")
            },
            language: Some(language),
            code: Some(code),
            anchor,
            verbatim_at,
            origin: Origin::Local,
        })
    };
    match name_text {
        "cat" | "tee" | "/bin/cat" | "/usr/bin/tee" | "read" => {
            let body = children(statement)
                .filter(|c| c.kind_id() == k.heredoc_redirect)
                .find_map(|r| children(r).find(|c| c.kind_id() == k.heredoc_body))?;
            program(
                text(body, sem.src).to_string(),
                body,
                Some(body.start_byte()),
            )
        }
        // `printf '%s\n' "$hook" > "$repo/.git/hooks/post-merge"` with `hook='#!/bin/sh …'`;
        // `printf '#!/bin/sh\ncurl … | sh\n' > …`; `echo 'cp /bin/bash /tmp/x; chmod 4755 /tmp/x'
        // > /tmp/c.sh`: what the command prints
        "printf" | "echo" => {
            let anchor = children_in_field(command, k.f_argument)
                .into_iter()
                .next()?;
            program(sem.printed(command)?, anchor, None)
        }
        _ => None,
    }
}

/// The language a file written by a redirection (`> x.sh`) or by `tee x.py` is in, by its name.
fn destination_language(
    sem: &BashSem<'_>,
    statement: Node<'_>,
    command: Node<'_>,
    name: &str,
) -> Option<Language> {
    let k = sem.k;
    let mut targets: Vec<Node<'_>> = children(statement)
        .filter(|c| c.kind() == "file_redirect")
        .filter_map(|r| r.child_by_field_name("destination"))
        .collect();
    if name.ends_with("tee") {
        targets.extend(
            children_in_field(command, k.f_argument)
                .into_iter()
                .filter(|a| !text(*a, sem.src).starts_with('-')),
        );
    }
    targets.iter().find_map(|t| {
        // (every value the destination can take, `>> "$HOME/$rc"` in `for rc in .bashrc
        // .zshrc`; when its start is only known at run time, the source text of every value
        // assigned to the variable it expands, `RC="$HOME/.bashrc"` then `cat >> "$RC"`)
        let paths = sem.possible_values(*t).unwrap_or_else(|| {
            sem.assigned_texts(*t)
                .unwrap_or_else(|| vec![text(*t, sem.src)])
                .into_iter()
                .map(str::to_string)
                .collect()
        });
        paths.iter().find_map(|path| {
            let path = path.trim_end_matches(['"', '\'']);
            if path.ends_with(".sh") || path.ends_with(".bash") || is_shell_startup_file(path) {
                Some(Language::Bash)
            } else if path.ends_with(".py") {
                Some(Language::Python)
            } else {
                None
            }
        })
    })
}

/// Whether `path` names a file a shell reads at start-up (`~/.bashrc`, `/etc/profile`…, or a
/// dotfiles repository's `bashrc` that is installed as one): what
/// is appended to it runs in every new shell.
pub(super) fn is_shell_startup_file(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    matches!(
        name,
        ".bashrc"
            | ".bash_profile"
            | ".bash_login"
            | ".bash_aliases"
            | ".profile"
            | ".zshrc"
            | ".zshenv"
            | ".zprofile"
            | ".zlogin"
            | ".kshrc"
            | ".mkshrc"
            | "bash.bashrc"
            | "bashrc"
            | "bash_profile"
            | "bash_aliases"
            | "zshrc"
            | "zprofile"
            | "profile"
    ) && (name != "profile" || path.starts_with("/etc/"))
}

/// The language a `#!` line at the start of `code` names, if it is a shell or Python.
pub(super) fn shebang_language(code: &str) -> Option<Language> {
    let shebang = code.trim_start().strip_prefix("#!")?.lines().next()?;
    let program = shebang
        .split_whitespace()
        .map(|w| w.rsplit('/').next().unwrap_or(w))
        .find(|w| *w != "env" && !w.starts_with('-'))?;
    match program {
        "sh" | "bash" | "dash" | "zsh" | "ksh" | "ash" => Some(Language::Bash),
        p if p.starts_with("python") => Some(Language::Python),
        _ => None,
    }
}

/// The shell lines of a Dockerfile's `RUN` instructions (continuation lines joined), when `code`
/// is a Dockerfile: its first instruction is `FROM` (after comments, parser directives and `ARG`).
pub(super) fn dockerfile_runs(code: &str) -> Option<String> {
    let mut instructions = code
        .lines()
        .map(str::trim_start)
        .filter(|l| !l.is_empty() && !l.starts_with('#'));
    let first = instructions.find(|l| !starts_with_word(l, "ARG"))?;
    if !starts_with_word(first, "FROM") {
        return None;
    }
    let mut out = String::new();
    let mut continued = false;
    for line in code.lines() {
        let trimmed = line.trim_start();
        if !continued {
            if !starts_with_word(trimmed, "RUN") {
                continue;
            }
            let body = trimmed[3..].trim_start();
            // (the exec form, `RUN ["a", "b"]`, runs no shell)
            if body.starts_with('[') {
                continue;
            }
            out.push_str(body);
        } else {
            out.push_str(line);
        }
        out.push('\n');
        continued = line.trim_end().ends_with('\\');
    }
    (!out.is_empty()).then_some(out)
}

/// Whether `line` starts with the instruction `word` (any case) followed by a blank.
fn starts_with_word(line: &str, word: &str) -> bool {
    line.get(..word.len())
        .is_some_and(|w| w.eq_ignore_ascii_case(word))
        && line[word.len()..].starts_with([' ', '\t'])
}

#[cfg(test)]
mod tests {
    use super::{dockerfile_runs, is_shell_startup_file};

    #[test]
    fn a_destination_is_a_start_up_file_by_its_name() {
        assert!(is_shell_startup_file("/root/.bashrc"));
        assert!(is_shell_startup_file("/etc/profile"));
        assert!(!is_shell_startup_file("docs/profile"));
        assert!(!is_shell_startup_file("notes/.bashrc.md"));
    }

    #[test]
    fn dockerfile_runs_joins_continuations_and_skips_other_instructions() {
        let code = "# base\nARG V=1\nFROM debian:12\nUSER root\nRUN apt-get update \\\n && apt-get install -y curl\nRUN [\"echo\", \"x\"]\nrun echo done\nCMD [\"sh\"]\n";
        assert_eq!(
            dockerfile_runs(code).as_deref(),
            Some("apt-get update \\\n && apt-get install -y curl\necho done\n")
        );
        assert_eq!(dockerfile_runs("echo hi\nRUN x\n"), None);
        assert_eq!(dockerfile_runs("FROM scratch\nCOPY a /a\n"), None);
    }
}
