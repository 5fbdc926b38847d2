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
        // `echo 'cp /bin/bash /tmp/x; chmod 4755 /tmp/x' > /tmp/c.sh`
        "printf" | "echo" => {
            let args: Vec<Node<'t>> = children_in_field(command, k.f_argument)
                .into_iter()
                .skip_while(|a| text(*a, sem.src).starts_with('-'))
                .collect();
            let values: Option<Vec<String>> = args.iter().map(|a| sem.fold(*a)).collect();
            let mut values = values?;
            // printf's format turns `\n` into a line break (`printf '#!/bin/sh\ncurl … | sh\n'`)
            if name_text == "printf"
                && let Some(format) = values.first_mut()
            {
                *format = printf_escapes(format);
            }
            let anchor = *args.first()?;
            // a value that is a script itself, or the words printed (the arguments a `printf`
            // format is applied to, one a line)
            if let Some(script) = values.iter().find(|v| v.trim_start().starts_with("#!")) {
                return program(script.clone(), anchor, None);
            }
            let code = match (name_text, values.split_first()) {
                ("printf", Some((format, rest))) if format.contains('%') => rest.join("\n"),
                ("printf", Some((format, _))) => format.clone(),
                _ => values.join(" "),
            };
            program(code, anchor, None)
        }
        _ => None,
    }
}

/// The common backslash escapes of a printf format (`\n`, `\t`, `\\`); others are kept as written.
fn printf_escapes(format: &str) -> String {
    let mut out = String::with_capacity(format.len());
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('\\') => out.push('\\'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
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
