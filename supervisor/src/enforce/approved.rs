//! Command lines an operator approved before the run: an `execve` of exactly one of them, which
//! `command_rules` would hold (`approve`), runs without asking again.
//!
//! The match is exact and narrow on purpose: the base name of the program the supervisor resolved
//! (not the caller's `argv[0]`, which a script chooses freely) and every argument after it. A
//! different argument list, a program of the same name elsewhere that resolves to another base
//! name, or a decision other than `approve` (a `deny`, a file rule's hold) is decided as before.

use std::collections::HashSet;

use scriptgate_policy::Decision;

use super::events::Judgement;

/// The rule shown on the event of an execution approved before the run.
pub(crate) const APPROVED_BEFORE_RUN: &str = "approved-before-run";

/// The approved command lines, each `[name, args…]`.
#[derive(Debug, Default)]
pub(crate) struct Approved {
    lines: HashSet<Vec<String>>,
}

impl Approved {
    /// From the job's `approved_commands` (empty entries are ignored: they name no program).
    pub(crate) fn new(lines: &[Vec<String>]) -> Approved {
        Approved {
            lines: lines.iter().filter(|l| !l.is_empty()).cloned().collect(),
        }
    }

    /// Whether `program` (resolved path) run with `argv` (`argv[0]` as the caller passed it) is
    /// one of the approved lines.
    fn covers(&self, program: &str, argv: &[String]) -> bool {
        if self.lines.is_empty() {
            return false;
        }
        let name = program.rsplit('/').next().unwrap_or(program);
        let args = argv.get(1..).unwrap_or_default();
        self.lines.iter().any(|l| l[0] == name && l[1..] == *args)
    }

    /// `by_command` (the `command_rules` decision on this exec), turned into `log` with the rule
    /// [`APPROVED_BEFORE_RUN`] when it holds an approved line; anything else as it was.
    pub(crate) fn apply(&self, by_command: Judgement, program: &str, argv: &[String]) -> Judgement {
        if by_command.decision != Decision::Approve || !self.covers(program, argv) {
            return by_command;
        }
        Judgement {
            decision: Decision::Log,
            rule: Some(APPROVED_BEFORE_RUN.to_string()),
            message: by_command.message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approved() -> Approved {
        Approved::new(&[
            vec!["curl".into(), "-s".into(), "http://x/a b".into()],
            vec![],
        ])
    }

    fn judged(decision: Decision) -> Judgement {
        Judgement {
            decision,
            rule: Some("ask-curl".into()),
            message: Some("fetch?".into()),
        }
    }

    fn argv(args: &[&str]) -> Vec<String> {
        args.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn an_approved_line_held_by_the_rules_runs_as_log() {
        let a = approved();
        let j = a.apply(
            judged(Decision::Approve),
            "/usr/bin/curl",
            &argv(&["curl", "-s", "http://x/a b"]),
        );
        assert_eq!(j.decision, Decision::Log);
        assert_eq!(j.rule.as_deref(), Some(APPROVED_BEFORE_RUN));
        // argv[0] is the caller's: only the resolved program's name counts.
        let j = a.apply(
            judged(Decision::Approve),
            "/usr/bin/curl",
            &argv(&["/usr/bin/curl", "-s", "http://x/a b"]),
        );
        assert_eq!(j.decision, Decision::Log);
    }

    #[test]
    fn other_arguments_another_program_or_a_deny_are_decided_as_before() {
        let a = approved();
        for (program, args) in [
            ("/usr/bin/curl", &["curl", "-s", "http://x/other"][..]),
            ("/usr/bin/curl", &["curl", "-s", "http://x/a", "b"][..]),
            ("/usr/bin/curl", &["curl", "-s"][..]),
            ("/usr/bin/curl", &["curl", "-s", "http://x/a b", "-O"][..]),
            ("/usr/bin/wget", &["curl", "-s", "http://x/a b"][..]),
            ("/usr/bin/curl", &[][..]),
        ] {
            let j = a.apply(judged(Decision::Approve), program, &argv(args));
            assert_eq!(j.decision, Decision::Approve, "{program} {args:?}");
            assert_eq!(j.rule.as_deref(), Some("ask-curl"));
        }
        for d in [Decision::Deny, Decision::Allow, Decision::Log] {
            let j = a.apply(
                judged(d),
                "/usr/bin/curl",
                &argv(&["curl", "-s", "http://x/a b"]),
            );
            assert_eq!((j.decision, j.rule.as_deref()), (d, Some("ask-curl")));
        }
    }

    #[test]
    fn nothing_approved_changes_nothing() {
        let a = Approved::new(&[]);
        let j = a.apply(judged(Decision::Approve), "/usr/bin/curl", &argv(&["curl"]));
        assert_eq!(j.decision, Decision::Approve);
        // A program alone (no arguments) is approved only as exactly that.
        let a = Approved::new(&[vec!["curl".into()]]);
        let j = a.apply(judged(Decision::Approve), "/usr/bin/curl", &argv(&["curl"]));
        assert_eq!(j.decision, Decision::Log);
        let j = a.apply(
            judged(Decision::Approve),
            "/usr/bin/curl",
            &argv(&["curl", "x"]),
        );
        assert_eq!(j.decision, Decision::Approve);
    }
}
