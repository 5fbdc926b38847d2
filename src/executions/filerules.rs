//! Host-side file APIs under a run's policy (enforcement point 3): the files a run writes into its
//! sandbox and the files it takes out, decided by the policy's `file_rules` before any container
//! exists. A script's `files` are created and written under `/workspace`, its `artifacts` read; a
//! job's `write_file` steps are created and written, `apply_unified_diff` files written (created
//! when the diff creates them), `read_file` read, `list_tree` listed, its artifact globs read.
//!
//! A `deny` refuses the request (403 `policy_violation`, nothing recorded). The other decisions
//! join the run's pre-run review (`prerun.rs`) as `file` checks: an `approve` holds the run for an
//! operator before anything is written, like an `approve` of a command; a `log` lets it through.
//! Both are audited with the other pre-run decisions and, once the run ends, listed in its
//! result's `events.file_operations` (decision and rule). What the run's commands do to the same
//! files is decided inside the container.

use scriptgate_policy::events::{Event, Events, FileEvent};
use scriptgate_policy::{CompiledPolicy, Decision, Operation};

use super::Executions;
use super::prerun::Review;
use crate::domain::record::{ExecutionRecord, PolicyCheck, PolicyCheckKind};
use crate::domain::work::{ScriptRun, Work};
use crate::sandbox::job::paths::JobPath;
use crate::sandbox::job::{self, CheckedAction, CheckedJob};

/// A file operation the run's policy denies.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub(crate) struct FileDenied {
    pub policy: String,
    pub operation: Operation,
    pub path: String,
    pub rule: Option<String>,
    pub message: Option<String>,
}

impl FileDenied {
    fn describe(&self) -> String {
        let rule = match &self.rule {
            Some(rule) => format!("rule `{rule}`"),
            None => "no rule matched (the section denies)".into(),
        };
        let mut text = format!(
            "the policy `{}` denies {} of {}: {rule}",
            self.policy,
            self.operation.as_str(),
            self.path
        );
        if let Some(m) = &self.message {
            text.push_str(": ");
            text.push_str(m);
        }
        text
    }
}

impl Executions {
    /// The files `work` moves in and out of its sandbox, against its policy's `file_rules` (no
    /// policy, or one no longer configured: nothing to decide here): a `deny` is the error, the
    /// other decisions that are not `allow` are the answer (as `file` checks).
    pub(crate) fn policy_files(&self, work: &Work) -> Result<Vec<PolicyCheck>, FileDenied> {
        let Some(name) = work.policy() else {
            return Ok(Vec::new());
        };
        let Some(policy) = self.run_policies.compiled(name) else {
            return Ok(Vec::new());
        };
        let files = match work {
            Work::Script(run) => workspace_files(run),
            Work::Job(j) => match job::parse_value(&j.job)
                .ok()
                .and_then(|parsed| job::check(parsed, self.job_maxima()).ok())
            {
                Some(checked) => job_files(&checked),
                // A job that breaks its constraints is refused with its result anyway.
                None => Vec::new(),
            },
        };
        decide_all(&policy, name, &files)?;
        let mut review = Review::default();
        review_files(&mut review, &policy, name, &files);
        Ok(review.checks)
    }
}

/// Each operation and path, in the order the run would perform them.
pub(super) type Files = Vec<(Operation, String)>;

/// Every decision of `policy` (named `name`) on `files` other than `allow`, into `review`.
pub(super) fn review_files(
    review: &mut Review,
    policy: &CompiledPolicy,
    name: &str,
    files: &Files,
) {
    for (operation, path) in files {
        let verdict = policy.decide_file(*operation, path.as_str());
        if verdict.decision == Decision::Allow {
            continue;
        }
        let check = PolicyCheck {
            kind: PolicyCheckKind::File,
            target: format!("{} {path}", operation.as_str()),
            decision: verdict.decision,
            rule: verdict.rule().map(str::to_string),
            message: verdict.message().map(|m| m.to_string()),
            line: 0,
            column: 0,
            argv: None,
        };
        review.add(check, name);
    }
}

/// The `file` checks of `rec` that let the run go on (`log`, and `approve` an operator granted),
/// as events of its result's `file_operations`; `cap` bounds a list the run did not fill.
pub(super) fn host_events(rec: &mut ExecutionRecord, cap: u32) {
    let seen: Vec<FileEvent> = rec
        .policy_checks
        .iter()
        .filter_map(PolicyCheck::file_event)
        .collect();
    let Some(result) = rec.result.as_mut().filter(|_| !seen.is_empty()) else {
        return;
    };
    let events = result
        .events
        .get_or_insert_with(|| Events::with_cap(cap as usize));
    for event in seen {
        events.push(Event::File(event));
    }
}

pub(super) fn workspace_files(run: &ScriptRun) -> Files {
    let mut files = Files::new();
    for f in &run.files {
        files.push((Operation::Create, f.path.clone()));
        files.push((Operation::Write, f.path.clone()));
    }
    for glob in &run.artifacts {
        let path = JobPath::resolve(glob).map_or_else(|_| glob.clone(), |p| absolute(&p));
        files.push((Operation::Read, path));
    }
    files
}

pub(super) fn job_files(job: &CheckedJob) -> Files {
    let mut files = Files::new();
    for step in job.steps() {
        match &step.plan {
            CheckedAction::WriteFile { path } => {
                files.push((Operation::Create, absolute(path)));
                files.push((Operation::Write, absolute(path)));
            }
            CheckedAction::ApplyUnifiedDiff { files: patched } => {
                for (path, _) in patched {
                    files.push((Operation::Write, absolute(path)));
                }
            }
            CheckedAction::ReadFile { path } => files.push((Operation::Read, absolute(path))),
            CheckedAction::ListTree { path, .. } => files.push((Operation::List, absolute(path))),
            CheckedAction::RunCommand { .. } => {}
        }
    }
    for pattern in job.artifacts() {
        let path = format!("{}/{}", pattern.root.path(), pattern.components.join("/"));
        files.push((Operation::Read, path));
    }
    files
}

fn absolute(path: &JobPath) -> String {
    let rel = path.components().join("/");
    if rel.is_empty() {
        path.root().path().to_string()
    } else {
        format!("{}/{rel}", path.root().path())
    }
}

fn decide_all(policy: &CompiledPolicy, name: &str, files: &Files) -> Result<(), FileDenied> {
    for (operation, path) in files {
        let verdict = policy.decide_file(*operation, path.as_str());
        if verdict.decision == Decision::Deny {
            return Err(FileDenied {
                policy: name.to_string(),
                operation: *operation,
                path: path.clone(),
                rule: verdict.rule().map(str::to_string),
                message: verdict.message().map(|m| m.to_string()),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::script::{Language, Script};
    use crate::domain::work::WorkspaceFile;
    use crate::sandbox::job::Maxima;

    const POLICY: &str = "version: 1\nname: t\nfile_rules:\n\
        - {name: no-secrets-in, paths: ['/workspace/secrets/**'], operations: [create, write], decision: deny, message: '{operation} of {path} refused'}\n\
        - {name: no-keys-out, paths: ['/workspace/**/*.key'], operations: [read], decision: deny}\n\
        - {name: scratch, paths: ['/workspace/**', '/tmp/**'], operations: ['*'], decision: allow}\n";

    fn policy() -> CompiledPolicy {
        crate::policy::parse_policy("t.yml", POLICY).expect("valid")
    }

    fn run(files: &[&str], artifacts: &[&str]) -> ScriptRun {
        ScriptRun::new(
            Script::new(Language::Python, "print(1)"),
            String::new(),
            std::time::Duration::from_secs(5),
            "minimal".into(),
        )
        .with_workspace(
            files
                .iter()
                .map(|p| WorkspaceFile {
                    path: p.to_string(),
                    content: "x".into(),
                    base64: false,
                })
                .collect(),
            artifacts.iter().map(|a| a.to_string()).collect(),
        )
    }

    #[test]
    fn files_in_are_created_and_written_and_artifacts_out_are_read() {
        let p = policy();
        let ok = run(&["/workspace/a.txt"], &["/workspace/out/*.png"]);
        assert_eq!(decide_all(&p, "t", &workspace_files(&ok)), Ok(()));
        let denied = decide_all(
            &p,
            "t",
            &workspace_files(&run(&["/workspace/secrets/x"], &[])),
        )
        .expect_err("denied");
        assert_eq!(
            denied.to_string(),
            "the policy `t` denies create of /workspace/secrets/x: rule `no-secrets-in`: create \
             of /workspace/secrets/x refused"
        );
        let out =
            decide_all(&p, "t", &workspace_files(&run(&[], &["keys/*.key"]))).expect_err("denied");
        assert_eq!(
            (out.operation, out.path.as_str(), out.rule.as_deref()),
            (
                Operation::Read,
                "/workspace/keys/*.key",
                Some("no-keys-out")
            )
        );
        let elsewhere =
            decide_all(&p, "t", &workspace_files(&run(&[], &["/etc/passwd"]))).expect_err("denied");
        assert_eq!(elsewhere.rule, None, "no rule matched: the section denies");
    }

    #[test]
    fn a_jobs_file_steps_and_artifacts_are_decided_on_their_resolved_paths() {
        let job = |steps: serde_json::Value, artifacts: serde_json::Value| {
            let doc = serde_json::json!({"protocol_version": "1.0", "steps": steps, "artifacts": artifacts});
            let parsed = job::parse_value(&doc).expect("parses");
            job::check(parsed, &Maxima::default()).expect("checks")
        };
        let p = policy();
        let ok = job(
            serde_json::json!([
                {"id": "w", "type": "write_file", "arguments": {"path": "src/a.py", "content": "x"}},
                {"id": "l", "type": "list_tree", "arguments": {"path": "/workspace"}},
                {"id": "r", "type": "read_file", "arguments": {"path": "src/a.py"}}
            ]),
            serde_json::json!(["/workspace/src/*.py"]),
        );
        let files = job_files(&ok);
        assert_eq!(
            files,
            [
                (Operation::Create, "/workspace/src/a.py".to_string()),
                (Operation::Write, "/workspace/src/a.py".to_string()),
                (Operation::List, "/workspace".to_string()),
                (Operation::Read, "/workspace/src/a.py".to_string()),
                (Operation::Read, "/workspace/src/*.py".to_string()),
            ]
        );
        assert_eq!(decide_all(&p, "t", &files), Ok(()));
        let bad = job(
            serde_json::json!([{"id": "r", "type": "read_file", "arguments": {"path": "id.key"}}]),
            serde_json::json!([]),
        );
        let denied = decide_all(&p, "t", &job_files(&bad)).expect_err("denied");
        assert_eq!(denied.path, "/workspace/id.key");
    }

    #[test]
    fn approve_and_log_join_the_review_and_deny_refuses_it() {
        let p = crate::policy::parse_policy(
            "a.yml",
            "version: 1\nname: a\nfile_rules:\n\
             - {name: ask, paths: ['/workspace/deploy/**'], operations: [write], decision: approve, message: '{path}?'}\n\
             - {name: note, paths: ['/workspace/**'], operations: [create], decision: log}\n\
             - {name: keys, paths: ['**/*.key'], operations: [read], decision: deny}\n\
             - {name: rest, paths: ['/**'], operations: ['*'], decision: allow}\n",
        )
        .expect("valid");
        let mut review = Review::default();
        let files = workspace_files(&run(&["/workspace/deploy/x"], &["/workspace/out.txt"]));
        review_files(&mut review, &p, "a", &files);
        assert!(review.holds() && review.refusal.is_none());
        let seen: Vec<(&str, Decision, Option<&str>)> = review
            .checks
            .iter()
            .map(|c| (c.target.as_str(), c.decision, c.message.as_deref()))
            .collect();
        assert_eq!(
            seen,
            [
                ("create /workspace/deploy/x", Decision::Log, None),
                (
                    "write /workspace/deploy/x",
                    Decision::Approve,
                    Some("/workspace/deploy/x?")
                ),
            ]
        );
        review_files(
            &mut review,
            &p,
            "a",
            &workspace_files(&run(&[], &["a.key"])),
        );
        let refusal = review.refusal.expect("refused");
        assert_eq!(
            refusal.message,
            "the policy `a` denies read of /workspace/a.key: rule `keys`"
        );
    }
}
