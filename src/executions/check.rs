//! The validate step of every run, by kind of work: what may run (a [`Cleared`] value the sandbox
//! accepts) or why not (a [`Refusal`]), with the verdicts that decided.
//!
//! - A script: every validation layer; [`RunSpec::cleared`] takes only a passing verdict. Under
//!   a run-time policy, the policy's pre-run decisions too (`prerun.rs`): a `deny` refuses it.
//! - A script with a workspace (files in, artifacts out): the script as above, each file's
//!   content (see `content.rs`), then the run becomes a job of its own (write the files, write
//!   the script, run it with its interpreter, collect the globs), cleared like any job; the files
//!   it moves in and out are decided by the run's policy too (`filerules.rs`).
//! - A job: parsed (version first), checked against the deployment's maxima and its own
//!   constraints, its files decided by the run's policy (`filerules.rs`), then its content
//!   validated; [`JobRun::cleared`] takes only a job whose content
//!   verdicts all pass and were made on that very job. A job refused here has a complete result:
//!   the offending step failed with its typed error, every other step skipped, nothing run.

use serde_json::{Value, json};
use time::OffsetDateTime;

use scriptgate_policy::CompiledPolicy;

use super::content::{self, ContentChecker};
use super::filerules;
use super::prerun::{self, Review};
use crate::domain::content::{ContentVerdict, JobVerdict, empty_verdict, merged};
use crate::domain::record::{ErrorKind, ExecutionError, JobResult};
use crate::domain::script::Language;
use crate::domain::verdict::Verdict;
use crate::domain::work::{JobWork, ScriptRun, Work};
use crate::sandbox::job::{self, ErrorType, JobError, Maxima, ResultBuilder};
use crate::sandbox::{JOB_LANGUAGE, JobRun, RunSpec, job_sha256};
use crate::validate::Validator;

/// Where a workspace run keeps its script (outside `/workspace`, which is the caller's).
pub(crate) const SCRIPT_DIR: &str = "/tmp/.scriptgate-run";
/// The plots of a profile with `plots`, returned from workspace runs too.
const PLOT_GLOB: &str = "/tmp/.scriptgate-plots/*.png";
/// Runs the script file as `__main__` with `/workspace` (the working directory) first on
/// `sys.path`, so it imports the files it came with.
const PYTHON_MAIN: &str =
    "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')";
/// A workspace run's job deadline beyond the script's own: writing the files.
const WORKSPACE_GRACE_SECS: u64 = 5;

/// What the validate step needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CheckDeps<'a> {
    pub validator: &'a Validator,
    pub maxima: &'a Maxima,
    /// Bytes of stdout and of stderr a workspace run keeps (`sandbox.limits.output_bytes`).
    pub output_bytes: u64,
    /// The run-time policy the work runs under, with its name (`None`: not enforced).
    pub policy: Option<(&'a str, &'a CompiledPolicy)>,
}

/// The validate step's answer.
#[derive(Debug)]
pub(crate) struct Checked {
    /// The verdict the record keeps: the script's merged with the contents' (a job's starts
    /// empty, in the language of the container jobs run in).
    pub verdict: Verdict,
    pub contents: Vec<ContentVerdict>,
    /// The run-time policy's decisions before the run (empty without a policy).
    pub review: Review,
    pub outcome: Result<Cleared, Refusal>,
}

/// What a lease may run.
#[derive(Debug)]
pub(crate) enum Cleared {
    Script(RunSpec),
    /// A job, or a script run with a workspace.
    Job(Box<JobRun>),
}

/// Why the work does not run.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// Validation rejected the script or one of its workspace files (`verdict` says why).
    Invalid,
    /// Refused before it ran for another reason, with the error the record keeps and, for a
    /// job, its complete result.
    Refused {
        error: ExecutionError,
        result: Option<Box<JobResult>>,
    },
}

/// The validate step for any work. CPU only (validation, parsing): callers run it off the
/// async runtime.
pub(crate) fn check(deps: CheckDeps<'_>, work: &Work) -> Checked {
    match work {
        Work::Script(run) if run.has_workspace() => workspace(deps, run),
        Work::Script(run) => script(deps, run),
        Work::Job(job) => job_work(deps, job),
    }
}

/// The script's verdict, with the findings the run's policy raises, and the policy's review.
fn validated(deps: CheckDeps<'_>, run: &ScriptRun) -> (Verdict, Review) {
    let mut verdict = deps.validator.validate(&run.script);
    let review = match deps.policy {
        Some((name, policy)) => {
            prerun::review(deps.validator, policy, name, &run.script, &mut verdict)
        }
        None => Review::default(),
    };
    crate::metrics::validated(&verdict);
    (verdict, review)
}

/// A `deny` of the run's policy, as the refusal the record keeps.
fn denied(review: &Review) -> Option<Refusal> {
    review.refusal.clone().map(|error| Refusal::Refused {
        error,
        result: None,
    })
}

fn script(deps: CheckDeps<'_>, run: &ScriptRun) -> Checked {
    let (verdict, review) = validated(deps, run);
    let outcome = match denied(&review) {
        Some(refusal) => Err(refusal),
        None => RunSpec::cleared(run, &verdict)
            .map(Cleared::Script)
            .map_err(|_| Refusal::Invalid),
    };
    Checked {
        verdict,
        contents: Vec::new(),
        review,
        outcome,
    }
}

fn workspace(deps: CheckDeps<'_>, run: &ScriptRun) -> Checked {
    let (script_verdict, mut review) = validated(deps, run);
    if let Some((name, policy)) = deps.policy {
        filerules::review_files(&mut review, policy, name, &filerules::workspace_files(run));
    }
    let contents = ContentChecker::new(deps.validator).files(&run.files);
    let verdict = merged(script_verdict.clone(), &contents);
    let mut checked = Checked {
        verdict,
        contents,
        outcome: Err(Refusal::Invalid),
        review,
    };
    if let Some(refusal) = denied(&checked.review) {
        checked.outcome = Err(refusal);
        return checked;
    }
    if !checked.verdict.valid || RunSpec::cleared(run, &script_verdict).is_err() {
        return checked;
    }
    let job = workspace_job(run, deps.output_bytes, deps.maxima);
    checked.outcome = match job::parse_value(&job).map(|j| job::check(j, deps.maxima)) {
        Ok(Ok(job)) => {
            let mut all = vec![ContentVerdict::program(
                None,
                "script".into(),
                script_verdict,
            )];
            all.extend(checked.contents.iter().cloned());
            let verdict = JobVerdict {
                job_sha256: job_sha256(&job),
                contents: all,
            };
            JobRun::cleared(job, &verdict)
                .map(|job| Cleared::Job(Box::new(job)))
                .map_err(|_| Refusal::Invalid)
        }
        Ok(Err(rejection)) => Err(refused(&rejection.error, None)),
        Err(schema) => Err(refused(&schema.to_job_error(), None)),
    };
    checked
}

/// The job a workspace run is: its files, its script, the script run by its interpreter in
/// `/workspace`, then its artifact globs (and the plots of a profile that makes them).
pub(crate) fn workspace_job(run: &ScriptRun, output_bytes: u64, maxima: &Maxima) -> Value {
    let (command, file, args) = match run.script.language {
        Language::Python => {
            let file = format!("{SCRIPT_DIR}/script.py");
            (
                "python3",
                file.clone(),
                vec!["-c".to_string(), PYTHON_MAIN.into(), file],
            )
        }
        Language::Bash => {
            let file = format!("{SCRIPT_DIR}/script.sh");
            ("bash", file.clone(), vec![file])
        }
    };
    let mut steps: Vec<Value> = run
        .files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            json!({"id": format!("files[{i}]"), "type": "write_file",
                "arguments": {"path": f.path, "content": f.content, "encoding": content::encoding(f)}})
        })
        .collect();
    steps.push(json!({"id": "script", "type": "write_file",
        "arguments": {"path": file, "content": run.script.text}}));
    let mut arguments = json!({"command": command, "args": args, "working_dir": "/workspace",
        "timeout_seconds": run.timeout_secs});
    if !run.stdin.is_empty() {
        arguments["stdin"] = json!(run.stdin);
    }
    steps.push(json!({"id": "run", "type": "run_command", "arguments": arguments}));
    let mut artifacts = run.artifacts.clone();
    artifacts.push(PLOT_GLOB.into());
    json!({"protocol_version": "1.0",
        "constraints": {
            "max_runtime_seconds": (run.timeout_secs + WORKSPACE_GRACE_SECS).min(maxima.max_runtime_seconds),
            "allowed_paths": ["/workspace", "/tmp"],
            "allowed_commands": [command],
            "max_output_bytes": output_bytes.min(maxima.max_output_bytes),
        },
        "steps": steps,
        "artifacts": artifacts})
}

fn job_work(deps: CheckDeps<'_>, work: &JobWork) -> Checked {
    let now = OffsetDateTime::now_utc();
    let mut checked = Checked {
        verdict: empty_verdict(JOB_LANGUAGE),
        contents: Vec::new(),
        review: Review::default(),
        outcome: Err(Refusal::Invalid),
    };
    let parsed = match job::parse_value(&work.job) {
        Ok(parsed) => parsed,
        Err(schema) => {
            let error = schema.to_job_error();
            let result = ResultBuilder::new(work.job_id, [], Vec::new(), now).refuse(None, error);
            checked.outcome = Err(refused(&schema.to_job_error(), Some(result)));
            return checked;
        }
    };
    let job = match job::check(parsed, deps.maxima) {
        Ok(job) => job,
        Err(rejection) => {
            let result = rejection.result(now);
            let error = result.error.clone().unwrap_or(rejection.error);
            checked.outcome = Err(refused(&error, Some(result)));
            return checked;
        }
    };
    if let Some((name, policy)) = deps.policy {
        filerules::review_files(
            &mut checked.review,
            policy,
            name,
            &filerules::job_files(&job),
        );
        if let Some(error) = checked.review.refusal.clone() {
            let denied = JobError::policy(error.message.clone());
            let result = job.result_builder(now).refuse(None, denied);
            checked.outcome = Err(Refusal::Refused {
                error,
                result: Some(Box::new(result)),
            });
            return checked;
        }
    }
    checked.contents = ContentChecker::new(deps.validator).job(&job);
    checked.verdict = merged(empty_verdict(JOB_LANGUAGE), &checked.contents);
    if let Some((index, bad)) = first_rejected(&job, &checked.contents) {
        let summary = merged(empty_verdict(JOB_LANGUAGE), std::slice::from_ref(bad)).summary();
        let error = JobError::policy(format!(
            "{} was rejected by validation: {summary}",
            bad.place()
        ));
        let result = job.result_builder(now).refuse(Some(index), error);
        let message = result.error.as_ref().map_or(summary, |e| e.message.clone());
        checked.outcome = Err(Refusal::Refused {
            error: ExecutionError::new(ErrorKind::ValidationFailed, message),
            result: Some(Box::new(result)),
        });
        return checked;
    }
    let verdict = JobVerdict {
        job_sha256: job_sha256(&job),
        contents: checked.contents.clone(),
    };
    checked.outcome = JobRun::cleared(job, &verdict)
        .map(|job| Cleared::Job(Box::new(job)))
        .map_err(|_| Refusal::Invalid);
    checked
}

/// The first content that failed, with the index of the step that carries it.
fn first_rejected<'c>(
    job: &job::CheckedJob,
    contents: &'c [ContentVerdict],
) -> Option<(usize, &'c ContentVerdict)> {
    let bad = contents.iter().find(|c| !c.passed())?;
    let index = job
        .steps()
        .iter()
        .position(|s| Some(&s.step.id) == bad.step.as_ref())?;
    Some((index, bad))
}

fn refused(error: &JobError, result: Option<JobResult>) -> Refusal {
    Refusal::Refused {
        error: ExecutionError::new(error_kind(error.kind), error.message.clone()),
        result: result.map(Box::new),
    }
}

/// The record's error kind for a job protocol error type.
pub(crate) fn error_kind(kind: ErrorType) -> ErrorKind {
    match kind {
        ErrorType::SchemaError => ErrorKind::SchemaError,
        ErrorType::PolicyViolation => ErrorKind::PolicyViolation,
        ErrorType::ExecutionFailure => ErrorKind::ExecutionFailure,
        ErrorType::Timeout => ErrorKind::Timeout,
        ErrorType::ResourceLimitExceeded => ErrorKind::ResourceLimitExceeded,
        ErrorType::InternalError => ErrorKind::InternalError,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::domain::script::Script;
    use crate::domain::work::WorkspaceFile;
    use crate::sandbox::job::StepStatus;

    fn validator() -> Validator {
        Validator::builtin()
    }

    fn job(steps: Value) -> Work {
        Work::Job(JobWork {
            job_id: uuid::Uuid::new_v4(),
            job: json!({"protocol_version": "1.0",
                "constraints": {"allowed_commands": ["python3", "bash"]}, "steps": steps}),
            profile: "minimal".into(),
            timeout_secs: 60,
            policy: None,
            network: None,
        })
    }

    fn checked(work: &Work) -> Checked {
        let validator = validator();
        let deps = CheckDeps {
            validator: &validator,
            maxima: &Maxima::default(),
            output_bytes: 1 << 20,
            policy: None,
        };
        check(deps, work)
    }

    /// The refused result's step statuses and its job-level error type.
    fn refused(checked: &Checked) -> (Vec<StepStatus>, ErrorType) {
        match &checked.outcome {
            Err(Refusal::Refused {
                result: Some(result),
                ..
            }) => (
                result.steps.iter().map(|s| s.status).collect(),
                result.error.as_ref().expect("an error").kind,
            ),
            other => panic!("not refused with a result: {other:?}"),
        }
    }

    const DANGEROUS: &str = "import os\nos.system(input())\n";

    #[test]
    fn a_dangerous_inline_program_fails_its_step_and_nothing_else_runs() {
        let work = job(json!([
            {"id": "a", "type": "list_tree", "arguments": {"path": "/workspace"}},
            {"id": "b", "type": "run_command", "arguments": {"command": "python3", "args": ["-c", DANGEROUS]}},
            {"id": "c", "type": "list_tree", "arguments": {"path": "/workspace"}}
        ]));
        let checked = checked(&work);
        assert!(!checked.verdict.valid);
        assert_eq!(
            refused(&checked),
            (
                vec![
                    StepStatus::Skipped,
                    StepStatus::Failure,
                    StepStatus::Skipped
                ],
                ErrorType::PolicyViolation
            )
        );
        assert!(
            checked
                .contents
                .iter()
                .any(|c| c.target == "python3 -c" && !c.passed())
        );
    }

    #[test]
    fn a_diff_that_makes_a_written_program_dangerous_is_judged_as_applied() {
        let diff = "--- a/app.py\n+++ b/app.py\n@@ -1 +1,2 @@\n-print('hello')\n+import os\n+os.system(input())\n";
        let work = job(json!([
            {"id": "write", "type": "write_file", "arguments": {"path": "app.py", "content": "print('hello')\n"}},
            {"id": "patch", "type": "apply_unified_diff", "arguments": {"diff": diff}}
        ]));
        let checked = checked(&work);
        let (steps, _) = refused(&checked);
        assert_eq!(steps, [StepStatus::Skipped, StepStatus::Failure]);
    }

    #[test]
    fn a_clean_job_is_cleared_with_its_programs_judged() {
        let work = job(json!([
            {"id": "write", "type": "write_file", "arguments": {"path": "app.py", "content": "print('hello')\n"}},
            {"id": "run", "type": "run_command", "arguments": {"command": "python3", "args": ["app.py"]}},
            {"id": "sh", "type": "run_command", "arguments": {"command": "bash", "args": ["-c", "echo hi"]}}
        ]));
        let checked = checked(&work);
        assert!(
            matches!(checked.outcome, Ok(Cleared::Job(_))),
            "{:?}",
            checked.outcome
        );
        let targets: Vec<&str> = checked.contents.iter().map(|c| c.target.as_str()).collect();
        assert!(
            targets.contains(&"/workspace/app.py") && targets.contains(&"bash -c"),
            "{targets:?}"
        );
    }

    #[test]
    fn a_workspace_run_becomes_a_job_and_a_secret_file_stops_it() {
        let run = |content: &str| {
            Work::Script(
                ScriptRun::new(
                    Script::new(Language::Python, "print(open('a.txt').read())"),
                    String::new(),
                    Duration::from_secs(10),
                    "minimal".into(),
                )
                .with_workspace(
                    vec![WorkspaceFile {
                        path: "/workspace/a.txt".into(),
                        content: content.into(),
                        base64: false,
                    }],
                    vec!["/workspace/*.txt".into()],
                ),
            )
        };
        let clean = checked(&run("hello"));
        let Ok(Cleared::Job(job)) = clean.outcome else {
            panic!("not cleared: {:?}", clean.outcome)
        };
        let steps: Vec<&str> = job
            .job()
            .steps()
            .iter()
            .map(|s| s.step.id.as_str())
            .collect();
        assert_eq!(steps, ["files[0]", "script", "run"]);
        let secret = format!("token = ghp_{}\n", "aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5");
        let blocked = checked(&run(&secret));
        assert!(matches!(blocked.outcome, Err(Refusal::Invalid)));
        assert!(!blocked.verdict.valid);
    }

    #[test]
    fn a_malformed_job_is_a_schema_error_with_a_result() {
        let work = Work::Job(JobWork {
            job_id: uuid::Uuid::new_v4(),
            job: json!({"protocol_version": "2.0", "steps": []}),
            profile: "minimal".into(),
            timeout_secs: 60,
            policy: None,
            network: None,
        });
        let checked = checked(&work);
        assert_eq!(refused(&checked).1, ErrorType::SchemaError);
    }
}
