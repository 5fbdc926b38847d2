//! The command a shell runner (`ssh HOST CMD…`, `parallel CMD :::`) hands to a shell: which of
//! its words are options, and when code with run-time parts can still be checked.

use tree_sitter::Node;

use super::{Embedded, ShellRunner, perl};
use crate::domain::script::Language;
use crate::rules::bash::{BashSem, Invocation, base_name};
use crate::rules::grammar::text;

/// The words a `rest` runner hands to the shell: those after its options and the `skip` words
/// (ssh's host), up to an `until` word.
pub(super) fn command_words<'t>(
    sem: &BashSem<'_>,
    inv: &Invocation<'t>,
    runner: &ShellRunner,
) -> Vec<Node<'t>> {
    let mut i = 0;
    while let Some(arg) = inv.args.get(i) {
        // `ssh "${opts[@]}" host cmd`: an array of options the script assigned is options
        if let Some(words) = sem.array_words(*arg)
            && all_options(&words, runner)
        {
            i += 1;
            continue;
        }
        let a = sem.fold(*arg).unwrap_or_default();
        if a == "--" {
            i += 1;
            break;
        }
        if !a.starts_with('-') || a.len() == 1 {
            break;
        }
        i += if runner.value_options.contains(&a) {
            2
        } else {
            1
        };
    }
    let i = i + runner.skip;
    inv.args[i.min(inv.args.len())..]
        .iter()
        .copied()
        .take_while(|a| sem.fold(*a).is_none_or(|v| !runner.until.contains(&v)))
        .collect()
}

/// The words an `after_dashes` runner runs: those after its first `--`, when one of its
/// `subcommands` comes before (`kubectl -n ns exec POD -c app -- sh -c CODE`). None for a bare
/// shell or interpreter (`kubectl exec -it POD -- bash`): a session for the person at the
/// terminal, not a program.
pub(super) fn words_after_dashes<'t>(
    sem: &BashSem<'_>,
    inv: &Invocation<'t>,
    runner: &ShellRunner,
) -> Vec<Node<'t>> {
    let folded: Vec<Option<String>> = inv.args.iter().map(|a| sem.fold(*a)).collect();
    let Some(dashes) = folded.iter().position(|f| f.as_deref() == Some("--")) else {
        return Vec::new();
    };
    let chosen = runner.subcommands.is_empty()
        || folded[..dashes]
            .iter()
            .flatten()
            .any(|f| runner.subcommands.contains(f));
    let words = &inv.args[dashes + 1..];
    let interactive = matches!(folded.get(dashes + 1), Some(Some(w)) if words.len() == 1
        && matches!(base_name(w), "sh" | "bash" | "zsh" | "ash" | "dash" | "python" | "python3" | "psql" | "mysql" | "redis-cli" | "mongosh"));
    if !chosen || interactive {
        return Vec::new();
    }
    words.to_vec()
}

/// `word` as one shell word: unchanged when it has nothing the shell would split or expand,
/// else in single quotes (`''` for an empty word).
pub(super) fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_./=:@%+,-".contains(&b));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// What a run-time part of a remote command stands as (see `runner_command`).
pub(super) const RUNTIME_WORD: &str = "SCRIPTGATE_RUNTIME_VALUE";

/// Whether every run-time part of a remote command is an argument: none names the command to run
/// or is code (`"$STEP"`, `"x; $cmd"`, `"bash -c '$code'"`, `"eval $x"` are run-time code).
pub(super) fn runtime_parts_are_arguments(code: &str) -> bool {
    code.match_indices(RUNTIME_WORD).all(|(at, _)| {
        let before = code[..at].trim_end_matches(['\'', '"', ' ', '\t']);
        let mut words = before.rsplit(|c: char| c.is_whitespace());
        let last_word = words.next().unwrap_or("");
        let shells = [
            "sh", "bash", "zsh", "dash", "ksh", "ash", "su", "python", "python3", "perl",
        ];
        let code_flag =
            last_word == "-c" && words.next().is_some_and(|w| shells.contains(&base_name(w)));
        !(before.is_empty()
            || before.ends_with([';', '|', '&', '(', '\n', '`', '{'])
            || before.ends_with("$(")
            || code_flag
            || matches!(
                last_word,
                "eval" | "exec" | "sh" | "bash" | "source" | "." | "sudo" | "xargs" | "env"
            ))
    })
}

/// Commands whose run-time operands are what they delete, overwrite or take over.
const DESTRUCTIVE: &[&str] = &[
    "rm", "rmdir", "unlink", "shred", "dd", "truncate", "wipefs", "chmod", "chown", "chgrp", "mv",
    "kill", "pkill", "killall", "userdel", "deluser",
];

/// Whether a command line with run-time parts gives one of them to a destructive command (or to
/// `find … -delete`).
pub(super) fn destroys_runtime_targets(code: &str) -> bool {
    code.split([';', '|', '&', '\n'])
        .filter(|segment| segment.contains(RUNTIME_WORD))
        .any(|segment| {
            let mut words = segment.split_whitespace();
            let first = words
                .find(|w| !matches!(*w, "sudo" | "exec" | "command" | "nohup"))
                .unwrap_or("");
            let name = first.rsplit('/').next().unwrap_or(first);
            DESTRUCTIVE.contains(&name) || name.starts_with("mkfs") || segment.contains("-delete")
        })
}

/// A run-time part of a shell's code, in the code checked (see [`RuntimeCode::Checkable`]).
const RUNTIME_EXPANSION: &str = "${SCRIPTGATE_RUNTIME_VALUE}";

pub(super) enum RuntimeCode {
    /// The values a loop over constants or a `case` branch allows
    /// (`for c in "${CHECKS[@]}"; do bash -c "$c"; done`): each is checked.
    Values(Vec<String>),
    /// Code whose run-time parts are only data, checked with each standing as one plain word:
    /// a shell's arguments (`timeout 1 bash -c "</dev/tcp/$host/$port"`; a destructive command
    /// given one stays run-time code), or perl's substitution text (`perl -pi -e "s/$old/$new/g"`;
    /// a command's output could be any Perl).
    Checkable(String),
    Unknown,
}

pub(super) fn runtime_code(
    sem: &BashSem<'_>,
    e: &Embedded<'_>,
    name: &str,
    language: Option<Language>,
) -> RuntimeCode {
    if sem.fold(e.anchor).is_none()
        && let Some(codes) = sem.possible_values(e.anchor)
    {
        return RuntimeCode::Values(codes);
    }
    let t = text(e.anchor, sem.src);
    if t.contains("$(") || t.contains('`') {
        return RuntimeCode::Unknown;
    }
    let Some(code) = sem.fold_with(e.anchor, RUNTIME_WORD) else {
        return RuntimeCode::Unknown;
    };
    if name.starts_with("perl") {
        if perl::substitutions_only(&code) {
            return RuntimeCode::Checkable(code);
        }
    } else if language == Some(Language::Bash)
        && runtime_parts_are_arguments(&code)
        && !destroys_runtime_targets(&code)
    {
        // (each run-time part stands in the shell's code as what it is there: an expansion
        // whose value is not known)
        return RuntimeCode::Checkable(code.replace(RUNTIME_WORD, RUNTIME_EXPANSION));
    }
    RuntimeCode::Unknown
}

/// Whether `words` (an array's) are whole options of `runner`, each value option with its value.
fn all_options(words: &[String], runner: &ShellRunner) -> bool {
    let mut i = 0;
    while let Some(w) = words.get(i) {
        if !w.starts_with('-') || w.len() == 1 || w == "--" {
            return false;
        }
        i += if runner.value_options.contains(w) {
            2
        } else {
            1
        };
    }
    i == words.len()
}

#[cfg(test)]
mod tests {
    use super::{RUNTIME_WORD, runtime_parts_are_arguments, shell_quote};

    #[test]
    fn words_a_container_runtime_passes_stay_one_word_each() {
        assert_eq!(shell_quote("etcdctl"), "etcdctl");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("rm -rf /"), "'rm -rf /'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
    }

    #[test]
    fn run_time_parts_of_a_remote_command_may_only_be_arguments() {
        let with = |c: &str| c.replace("RT", RUNTIME_WORD);
        for ok in [
            "systemctl is-active RT",
            "cd /srv && sha256sum -c RT.sha256",
            "ls -l 'RT'",
        ] {
            assert!(runtime_parts_are_arguments(&with(ok)), "{ok}");
        }
        for code in [
            "RT",
            "cd /srv && RT",
            "ls | RT",
            "eval RT",
            "bash -c 'RT'",
            "x; RT -f",
        ] {
            assert!(!runtime_parts_are_arguments(&with(code)), "{code}");
        }
    }
}
