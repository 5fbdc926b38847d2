//! Command lines an operator approved before the run: an `execve` of exactly one of them, which
//! `command_rules` would hold (`approve`), runs without asking again.
//!
//! The match is exact and narrow on purpose: the base name of the program the supervisor resolved
//! (not the caller's `argv[0]`, which a script chooses freely) and every argument after it. A
//! different argument list, a program of the same name elsewhere that resolves to another base
//! name, or a decision other than `approve` (a `deny`, a file rule's hold) is decided as before.
//!
//! The operator approved a name as the script wrote it (`python3`), while the supervisor decides
//! the file it resolves to (`python3.11` behind the `python3` symlink): each approved name is
//! also looked up once, before the script runs, on the search path of the image (its root is
//! read-only, so the script cannot change where a name leads), and the base name of the file it
//! resolves to is approved with it.

use std::collections::HashSet;

use scriptgate_policy::Decision;

use super::events::Judgement;

/// The rule shown on the event of an execution approved before the run.
pub(crate) const APPROVED_BEFORE_RUN: &str = "approved-before-run";

/// Where a name without a `/` is looked up: the search path every runner image sets.
const SEARCH_PATH: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// The approved command lines: the base names an approved line's program may resolve to, with
/// the arguments after it.
#[derive(Debug, Default)]
pub(crate) struct Approved {
    lines: HashSet<(String, Vec<String>)>,
}

impl Approved {
    /// From the job's `approved_commands` (empty entries are ignored: they name no program).
    pub(crate) fn new(lines: &[Vec<String>]) -> Approved {
        Approved::resolving(lines, SEARCH_PATH)
    }

    /// [`Approved::new`] with names looked up in `search`.
    fn resolving(lines: &[Vec<String>], search: &[&str]) -> Approved {
        let mut approved = HashSet::new();
        for line in lines.iter().filter(|l| !l.is_empty()) {
            let args = line[1..].to_vec();
            for name in names(&line[0], search) {
                approved.insert((name, args.clone()));
            }
        }
        Approved { lines: approved }
    }

    /// Whether `program` (resolved path) run with `argv` (`argv[0]` as the caller passed it) is
    /// one of the approved lines.
    fn covers(&self, program: &str, argv: &[String]) -> bool {
        if self.lines.is_empty() {
            return false;
        }
        let name = base(program);
        let args = argv.get(1..).unwrap_or_default();
        self.lines.iter().any(|(n, a)| n == name && a[..] == *args)
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

fn base(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The base names `name` stands for: its own, and that of the file it resolves to (a path as
/// written, or the first match on `search`) when a symlink leads elsewhere.
fn names(name: &str, search: &[&str]) -> Vec<String> {
    let mut names = vec![base(name).to_string()];
    let found = if name.contains('/') {
        std::fs::canonicalize(name).ok()
    } else {
        search
            .iter()
            .map(|dir| std::path::Path::new(dir).join(name))
            .find(|p| p.is_file())
            .and_then(|p| std::fs::canonicalize(p).ok())
    };
    if let Some(target) = found.as_deref().and_then(|t| t.file_name()?.to_str())
        && target != names[0]
    {
        names.push(target.to_string());
    }
    names
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

    #[test]
    fn a_name_approved_as_written_covers_the_file_its_symlink_resolves_to() {
        let dir = tempfile::tempdir().expect("dir");
        let real = dir.path().join("python3.11");
        std::fs::write(&real, "").expect("program");
        std::os::unix::fs::symlink(&real, dir.path().join("python3")).expect("link");
        let search = [dir.path().to_str().expect("utf-8")];
        let a = Approved::resolving(&[vec!["python3".into(), "x.py".into()]], &search);
        let resolved = real.to_str().expect("utf-8");
        for (program, args) in [
            (resolved, &["python3", "x.py"][..]),
            ("/elsewhere/python3", &["python3", "x.py"][..]),
        ] {
            let j = a.apply(judged(Decision::Approve), program, &argv(args));
            assert_eq!(j.decision, Decision::Log, "{program}");
        }
        // Other arguments, or another program the name does not lead to, are held as before.
        let j = a.apply(
            judged(Decision::Approve),
            resolved,
            &argv(&["python3", "y.py"]),
        );
        assert_eq!(j.decision, Decision::Approve);
        let j = a.apply(
            judged(Decision::Approve),
            "/usr/bin/python3.12",
            &argv(&["python3", "x.py"]),
        );
        assert_eq!(j.decision, Decision::Approve);
        // A path as written resolves the same way.
        let link = dir.path().join("python3");
        let a = Approved::resolving(&[vec![link.to_str().expect("utf-8").into()]], &[]);
        let j = a.apply(judged(Decision::Approve), resolved, &argv(&["python3"]));
        assert_eq!(j.decision, Decision::Log);
    }
}
