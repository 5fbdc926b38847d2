//! The shell state between commands: the prologue a command line's bash starts with (the
//! session's aliases, its history, the EXIT trap that reports the state), and what is kept of a
//! report.
//!
//! The prologue reaches bash through `BASH_ENV=/dev/fd/254` (a pipe bash reads whole before the
//! command line, so the line's own line numbers stay right), and unsets `BASH_ENV` at once. The
//! report goes to descriptor 253: `P`, the working directory; `E`, an exported name and value; `A`,
//! an alias and its text; `Z`, the end; fields end with NUL. A report without its `Z` (the command
//! was killed while reporting) is not used. Whatever it says, only state passes: a working
//! directory, environment values under names that load no code, alias texts the host expands
//! (and validates) before it sends a command. Functions, traps, options and descriptors never
//! reach the next command, which starts a fresh bash.

use std::collections::BTreeMap;

use scriptgate_supervisor::job::env::{IMAGE_PATH, refusal};
use scriptgate_supervisor::sessions::ShellState;

/// Where bash finds its prologue (`BASH_ENV=/dev/fd/254`).
pub(crate) const PROLOGUE_FD: i32 = 254;
/// Where the EXIT trap writes the state.
pub(crate) const REPORT_FD: i32 = 253;
/// The largest report read; a larger one is dropped.
pub(crate) const MAX_REPORT: usize = 1 << 20;

/// Environment names a session refuses beside the job protocol's list: prompts run code in an
/// interactive shell.
const SESSION_REFUSED: &[&str] = &["PS0", "PS1", "PS2", "PS3"];
/// Variables bash maintains itself: never carried.
const BASH_OWN: &[&str] = &["BASH_ENV", "PWD", "SHLVL", "_"];

const MAX_ENV_BYTES: usize = 512 * 1024;
const MAX_ALIASES: usize = 1000;
const MAX_ALIAS_BYTES: usize = 64 * 1024;
/// History lines handed to `history`, newest kept.
const MAX_HISTORY: usize = 200;
const MAX_HISTORY_BYTES: usize = 64 * 1024;

/// `history` lists the session's command lines; bash's own history stays off and empty, so
/// nothing from it can run again (`!!`, `fc -s`).
const HISTORY_FN: &str = r#"history() { local __sg_i; for __sg_i in "${!__scriptgate_history[@]}"; do builtin printf '%5d  %s\n' "$((__sg_i + 1))" "${__scriptgate_history[__sg_i]}"; done; }
"#;

const REPORT: &str = r#"__scriptgate_report() {
  builtin set +eu +o pipefail
  local IFS=$' \t\n' __sg_n __sg_a
  {
    builtin printf 'P\0%s\0' "$PWD"
    for __sg_n in $(builtin compgen -e); do builtin printf 'E\0%s\0%s\0' "$__sg_n" "${!__sg_n-}"; done
    for __sg_a in "${!BASH_ALIASES[@]}"; do builtin printf 'A\0%s\0%s\0' "$__sg_a" "${BASH_ALIASES[$__sg_a]}"; done
    builtin printf 'Z\0'
  } >&253 2>/dev/null
}
trap __scriptgate_report EXIT
"#;

/// `text` as one single-quoted bash word.
pub(crate) fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The prologue of a command line run in `state`, with `history` (oldest first).
pub(crate) fn prologue(state: &ShellState, history: &[String]) -> String {
    let mut p = format!("exec {PROLOGUE_FD}<&-\nunset BASH_ENV\n__scriptgate_history=(");
    for line in history {
        p.push(' ');
        p.push_str(&quote(line));
    }
    p.push_str(" )\n");
    p.push_str(HISTORY_FN);
    for (name, value) in &state.aliases {
        p.push_str("alias ");
        p.push_str(&quote(&format!("{name}={value}")));
        p.push('\n');
    }
    p.push_str(REPORT);
    p
}

/// Keeps the newest history lines within the bounds.
pub(crate) fn trim_history(history: &mut Vec<String>) {
    let mut bytes: usize = history.iter().map(String::len).sum();
    while history.len() > MAX_HISTORY || (bytes > MAX_HISTORY_BYTES && history.len() > 1) {
        bytes -= history.remove(0).len();
    }
}

/// Why an environment variable may not be part of a session (`None`: it may).
pub(crate) fn env_refusal(name: &str, value: &str) -> Option<String> {
    if SESSION_REFUSED.contains(&name) {
        return Some(format!(
            "environment variable `{name}` is refused: a prompt runs code"
        ));
    }
    refusal(name, value, IMAGE_PATH)
}

fn alias_refusal(name: &str, value: &str) -> Option<String> {
    let bad = |c: char| {
        c.is_whitespace()
            || c.is_control()
            || matches!(
                c,
                '=' | '\'' | '"' | '`' | '$' | '\\' | '/' | '|' | '&' | ';' | '(' | ')' | '<' | '>'
            )
    };
    if name.is_empty() || name.len() > 255 || name.chars().any(bad) {
        return Some(format!(
            "alias name `{}` is not usable",
            name.escape_debug()
        ));
    }
    if value.len() > MAX_ALIAS_BYTES || value.contains('\0') {
        return Some(format!("alias `{name}` is too long"));
    }
    None
}

/// The environment a session starts with: the container's, then `set` (refused names left out,
/// each with a warning).
pub(crate) fn merge_env(
    base: &BTreeMap<String, String>,
    set: &BTreeMap<String, String>,
    warnings: &mut Vec<String>,
) -> BTreeMap<String, String> {
    let mut env = base.clone();
    for (name, value) in set {
        match env_refusal(name, value) {
            Some(why) => warnings.push(why),
            None => {
                env.insert(name.clone(), value.clone());
            }
        }
    }
    env
}

/// The state a report describes, kept to what may pass (with a warning per thing left out);
/// `None` when there is no complete report.
pub(crate) fn read_report(
    report: &[u8],
    before: &ShellState,
    warnings: &mut Vec<String>,
) -> Option<ShellState> {
    if report.is_empty() {
        return None;
    }
    let Some(fields) = fields(report) else {
        warnings.push("the command's shell state was not reported in full; it is unchanged".into());
        return None;
    };
    let mut state = ShellState {
        cwd: before.cwd.clone(),
        ..ShellState::default()
    };
    let mut env_bytes = 0usize;
    let mut it = fields.into_iter();
    while let Some(tag) = it.next() {
        match tag.as_str() {
            "P" => {
                let cwd = it.next()?;
                if cwd.starts_with('/') && cwd.len() <= 4096 {
                    state.cwd = cwd;
                }
            }
            "E" => {
                let (name, value) = (it.next()?, it.next()?);
                if BASH_OWN.contains(&name.as_str()) {
                    continue;
                }
                env_bytes += name.len() + value.len();
                match env_refusal(&name, &value) {
                    _ if env_bytes > MAX_ENV_BYTES => warnings.push(format!(
                        "environment variable `{name}` was not kept: the environment is larger than {MAX_ENV_BYTES} bytes"
                    )),
                    Some(why) => warnings.push(format!("{why}; it was not kept")),
                    None => {
                        state.env.insert(name, value);
                    }
                }
            }
            "A" => {
                let (name, value) = (it.next()?, it.next()?);
                match alias_refusal(&name, &value) {
                    _ if state.aliases.len() >= MAX_ALIASES => {}
                    Some(why) => warnings.push(format!("{why}; it was not kept")),
                    None => {
                        state.aliases.insert(name, value);
                    }
                }
            }
            "Z" => return Some(state),
            _ => return None,
        }
    }
    None
}

/// NUL-terminated fields of a report that ends with its `Z` record.
fn fields(report: &[u8]) -> Option<Vec<String>> {
    if !report.ends_with(b"Z\0") {
        return None;
    }
    let body = &report[..report.len() - 1];
    Some(
        body.split(|b| *b == 0)
            .map(|f| String::from_utf8_lossy(f).into_owned())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> ShellState {
        ShellState {
            cwd: "/workspace".into(),
            env: BTreeMap::from([("HOME".into(), "/tmp".into())]),
            aliases: BTreeMap::from([("ll".into(), "ls -l 'x'".into())]),
        }
    }

    #[test]
    fn a_report_keeps_state_and_leaves_out_what_loads_code() {
        let report = b"P\0/workspace/src\0E\0X\0a b\nc\0E\0LD_PRELOAD\0/tmp/x.so\0E\0SHLVL\x002\0E\0PS1\0$(id)\0A\0ll\0ls -l\0A\0a=b\0x\0Z\0";
        let mut warnings = Vec::new();
        let got = read_report(report, &state(), &mut warnings).expect("complete");
        assert_eq!(got.cwd, "/workspace/src");
        assert_eq!(got.env, BTreeMap::from([("X".into(), "a b\nc".into())]));
        assert_eq!(got.aliases, BTreeMap::from([("ll".into(), "ls -l".into())]));
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        assert!(warnings.iter().any(|w| w.contains("LD_PRELOAD")));
        assert!(warnings.iter().any(|w| w.contains("PS1")));
    }

    #[test]
    fn an_incomplete_report_changes_nothing() {
        let mut warnings = Vec::new();
        assert_eq!(read_report(b"P\0/etc\0E\0X", &state(), &mut warnings), None);
        assert_eq!(warnings.len(), 1);
        assert_eq!(read_report(b"", &state(), &mut Vec::new()), None);
        assert_eq!(read_report(b"Q\0x\0Z\0", &state(), &mut Vec::new()), None);
    }

    #[test]
    fn the_prologue_quotes_every_alias_and_history_line() {
        let p = prologue(&state(), &["echo 'hi'".into()]);
        assert!(p.contains(r"alias 'll=ls -l '\''x'\'''"), "{p}");
        assert!(
            p.contains(r"__scriptgate_history=( 'echo '\''hi'\''' )"),
            "{p}"
        );
        assert!(p.starts_with("exec 254<&-\nunset BASH_ENV\n"));
        assert!(p.ends_with("trap __scriptgate_report EXIT\n"));
    }

    #[test]
    fn history_keeps_the_newest_lines() {
        let mut h: Vec<String> = (0..300).map(|i| i.to_string()).collect();
        trim_history(&mut h);
        assert_eq!(h.len(), MAX_HISTORY);
        assert_eq!(h[0], "100");
    }
}
