//! Scripts a Bash script writes out for later (a git hook, a cron job, a helper): a heredoc that
//! `cat`/`tee` copy to a file and that starts with a shell's or Python's `#!` line is checked as
//! the program it is.

use tree_sitter::Node;

use super::{Embedded, Origin};
use crate::domain::script::Language;
use crate::rules::bash::BashSem;
use crate::rules::grammar::{children, text};

/// A script written out by `cat`/`tee` from a heredoc that starts with a shell's or Python's `#!`
/// line (a git hook, a cron job, a helper run later): checked as the program it is.
pub(super) fn written_script<'t>(sem: &BashSem<'_>, command: Node<'t>) -> Option<Embedded<'t>> {
    let k = sem.k;
    let name = command.child_by_field_id(k.f_name)?;
    if !matches!(
        text(name, sem.src),
        "cat" | "tee" | "/bin/cat" | "/usr/bin/tee"
    ) {
        return None;
    }
    let statement = command
        .parent()
        .filter(|p| p.kind_id() == k.redirected_statement)?;
    let body = children(statement)
        .filter(|c| c.kind_id() == k.heredoc_redirect)
        .find_map(|r| children(r).find(|c| c.kind_id() == k.heredoc_body))?;
    let code = text(body, sem.src);
    let shebang = code.trim_start().strip_prefix("#!")?.lines().next()?;
    let program = shebang
        .split_whitespace()
        .map(|w| w.rsplit('/').next().unwrap_or(w))
        .find(|w| *w != "env" && !w.starts_with('-'))?;
    let language = match program {
        "sh" | "bash" | "dash" | "zsh" | "ksh" | "ash" => Language::Bash,
        p if p.starts_with("python") => Language::Python,
        _ => return None,
    };
    Some(Embedded {
        interpreter: format!("the script written by {}", text(name, sem.src)),
        language: Some(language),
        code: Some(code.to_string()),
        anchor: body,
        verbatim_at: Some(body.start_byte()),
        origin: Origin::Local,
    })
}
