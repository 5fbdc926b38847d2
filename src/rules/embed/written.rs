//! Scripts a Bash script writes out for later (a git hook, a cron job, a helper): a heredoc that
//! `cat`/`tee` copy to a file or `read -d ''` keeps in a variable, or a value `printf`/`echo`
//! print into a file, that starts with a shell's or Python's `#!` line, or goes to a file named
//! `*.sh`/`*.bash`/`*.py`, is checked as the program it is.

use tree_sitter::Node;

use super::{Embedded, Origin};
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
    let name_text = text(name, sem.src);
    // (the name first: a parent the walk did not record is found by descending from the root)
    if !matches!(
        name_text,
        "cat" | "tee" | "/bin/cat" | "/usr/bin/tee" | "read" | "printf" | "echo"
    ) {
        return None;
    }
    let statement = cx
        .parent(command)
        .filter(|p| p.kind_id() == k.redirected_statement)?;
    let program = |code: String, anchor: Node<'t>, verbatim_at: Option<usize>| {
        let language =
            shebang_language(&code).or_else(|| destination_language(sem, statement, command))?;
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
) -> Option<Language> {
    let k = sem.k;
    let mut targets: Vec<Node<'_>> = children(statement)
        .filter(|c| c.kind() == "file_redirect")
        .filter_map(|r| r.child_by_field_name("destination"))
        .collect();
    if command
        .child_by_field_id(k.f_name)
        .is_some_and(|n| text(n, sem.src).ends_with("tee"))
    {
        targets.extend(
            children_in_field(command, k.f_argument)
                .into_iter()
                .filter(|a| !text(*a, sem.src).starts_with('-')),
        );
    }
    targets.iter().find_map(|t| {
        let path = sem
            .fold(*t)
            .unwrap_or_else(|| text(*t, sem.src).to_string());
        let path = path.trim_end_matches(['"', '\'']);
        if path.ends_with(".sh") || path.ends_with(".bash") {
            Some(Language::Bash)
        } else if path.ends_with(".py") {
            Some(Language::Python)
        } else {
            None
        }
    })
}

/// The language a `#!` line at the start of `code` names, if it is a shell or Python.
fn shebang_language(code: &str) -> Option<Language> {
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
