//! Word splitting: an unquoted `$cmd` as a command's name whose value is a whole command line is
//! split as the shell splits it (on blanks, and on the separators a constant `IFS=…` adds), so
//! the line can be checked as Bash code. The same holds for an alias (its value is put in front of
//! the arguments) and for a function that runs its arguments (`run() { "$@"; }; run rm -rf /`).

use tree_sitter::Node;

use super::Embedded;
use crate::domain::script::Language;
use crate::rules::bash::BashSem;
use crate::rules::grammar::text;

/// `$cmd` as a command's name, where `cmd` holds a whole command line (`cmd="rm -rf /home"`, or
/// words joined by the separator a constant `IFS=,` names): the shell splits the value into a
/// program and its arguments, so the line (with the command's own arguments after it) is checked
/// as Bash code. A quoted `"$cmd"` is one word and is not split.
pub(super) fn split_command_line<'t>(sem: &BashSem<'_>, command: Node<'t>) -> Option<Embedded<'t>> {
    let name = command.child_by_field_id(sem.k.f_name)?;
    let word = name.named_child(0)?;
    if !matches!(word.kind(), "simple_expansion" | "expansion") {
        return None;
    }
    let value = sem.fold(word)?;
    let separators = ifs(sem.src);
    let line: String = value
        .chars()
        .map(|c| if separators.contains(c) { ' ' } else { c })
        .collect();
    if !line.trim().contains(' ') {
        return None;
    }
    let rest = &sem.src[name.end_byte()..command.end_byte()];
    Some(Embedded {
        interpreter: text(word, sem.src).to_string(),
        language: Some(Language::Bash),
        code: Some(format!("{}{rest}", line.trim())),
        anchor: word,
        verbatim_at: None,
    })
}

/// The characters unquoted expansions are split on: the default blanks, and those of a constant
/// `IFS=…` assignment standing alone anywhere in the script (`IFS=,`; a prefix such as
/// `IFS=, read -r a b` applies to that command only and is not one).
fn ifs(src: &str) -> String {
    let mut chars = String::from(" \t\n");
    for line in src.lines() {
        let line = line.trim_start();
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some(value) = line.strip_prefix("IFS=") else {
            continue;
        };
        let value = value.split(';').next().unwrap_or_default().trim_end();
        if value.contains(char::is_whitespace) && !value.starts_with(['\'', '"']) {
            continue;
        }
        let value = value.trim_matches(['\'', '"']);
        if !value.contains('$') && !value.contains('\\') {
            chars.push_str(value);
        }
    }
    chars
}

/// A command named by an alias the script defines (`alias tidy='rm -rf'; tidy ~/`): the alias's
/// value with the command's arguments after it, checked as Bash code.
pub(super) fn alias_expansion<'t>(sem: &BashSem<'_>, command: Node<'t>) -> Option<Embedded<'t>> {
    let name = command.child_by_field_id(sem.k.f_name)?;
    let value = sem.facts.aliases.get(text(name, sem.src))?.as_ref()?;
    let rest = &sem.src[name.end_byte()..command.end_byte()];
    Some(Embedded {
        interpreter: text(name, sem.src).to_string(),
        language: Some(Language::Bash),
        code: Some(format!("{value}{rest}")),
        anchor: name,
        verbatim_at: None,
    })
}

/// A call of a function that runs its arguments (`step rm -rf /usr`, where `step` passes `"$@"` to
/// a function whose body is `"$@"`): the arguments, checked as the command they are.
pub(super) fn function_runs_arguments<'t>(
    sem: &BashSem<'_>,
    command: Node<'t>,
) -> Option<Embedded<'t>> {
    let name = command.child_by_field_id(sem.k.f_name)?;
    if !sem.facts.runners.contains(text(name, sem.src)) {
        return None;
    }
    let rest = sem.src[name.end_byte()..command.end_byte()].trim();
    (!rest.is_empty()).then(|| Embedded {
        interpreter: text(name, sem.src).to_string(),
        language: Some(Language::Bash),
        code: Some(rest.to_string()),
        anchor: name,
        verbatim_at: None,
    })
}
