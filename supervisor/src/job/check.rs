//! The checks anyone can make without running a job: the deployment's maxima, the job's own
//! constraints (paths, commands, environment), diffs that parse and stay inside the allowed
//! paths. A pure function of the job and the maxima: the service runs it before any container
//! exists, and the agent runs it again inside the container (fail closed on both sides).

use std::time::Duration;

use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use super::diff::{self, FilePatch};
use super::env::{self, IMAGE_PATH};
use super::paths::{Allowed, JobPath, Root};
use super::result::ResultBuilder;
use super::types::{Action, Constraints, Job, JobError, ProtocolVersion, RunCommand, Step};
use super::{JobResult, Maxima};

/// A job that passed every static check, with what the checks resolved (paths, commands, diffs).
/// Only [`check`] makes one.
#[derive(Debug, Clone)]
pub struct CheckedJob {
    protocol_version: ProtocolVersion,
    job_id: Uuid,
    task_id: Option<String>,
    skill_id: Option<String>,
    profile: Option<String>,
    constraints: Constraints,
    allowed: Allowed,
    steps: Vec<CheckedStep>,
    artifacts: Vec<ArtifactPattern>,
    warnings: Vec<String>,
    maxima: Maxima,
}

/// A step and what its checks resolved.
#[derive(Debug, Clone)]
pub struct CheckedStep {
    pub step: Step,
    pub plan: CheckedAction,
}

/// What the agent acts on, per step type (the step's own arguments hold the rest).
#[derive(Debug, Clone)]
pub enum CheckedAction {
    RunCommand {
        command: CommandCheck,
        working_dir: JobPath,
        timeout: Option<Duration>,
    },
    WriteFile {
        path: JobPath,
    },
    ReadFile {
        path: JobPath,
    },
    ApplyUnifiedDiff {
        files: Vec<(JobPath, FilePatch)>,
    },
    ListTree {
        path: JobPath,
        max_entries: u64,
    },
}

/// How a command names its program: a bare name (looked up in the image's PATH directories) or
/// an absolute path in one of them. Either way its bare name is in `allowed_commands`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandCheck {
    Name(String),
    Path { dir: String, name: String },
}

impl CommandCheck {
    pub fn name(&self) -> &str {
        match self {
            CommandCheck::Name(n) | CommandCheck::Path { name: n, .. } => n,
        }
    }
}

/// An artifact glob: its text, its root, and its components below the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactPattern {
    pub text: String,
    pub root: Root,
    pub components: Vec<String>,
}

/// A job refused by [`check`]: the job-level error, and the offending step when one is.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    pub job_id: Uuid,
    pub error: JobError,
    /// The index of the step that broke a constraint (`None`: the job as a whole).
    pub step: Option<usize>,
    steps: Vec<(String, super::StepType)>,
    warnings: Vec<String>,
}

impl Rejection {
    /// The complete result: status `failure`, the offending step failed, the others skipped.
    pub fn result(&self, at: OffsetDateTime) -> JobResult {
        let steps = self.steps.iter().map(|(id, t)| (id.as_str(), *t));
        ResultBuilder::new(self.job_id, steps, self.warnings.clone(), at)
            .refuse(self.step, self.error.clone())
    }
}

/// Checks `job` against `maxima` and its own constraints, with the runner images' PATH.
pub fn check(job: Job, maxima: &Maxima) -> Result<CheckedJob, Rejection> {
    check_with(job, maxima, IMAGE_PATH)
}

/// [`check`] with the PATH of the image the job runs in (the agent passes its own).
pub fn check_with(job: Job, maxima: &Maxima, image_path: &str) -> Result<CheckedJob, Rejection> {
    let job_id = job.job_id.unwrap_or_else(Uuid::new_v4);
    let reject = |step: Option<usize>, error: JobError| Rejection {
        job_id,
        error,
        step,
        steps: job
            .steps
            .iter()
            .map(|s| (s.id.clone(), s.action.step_type()))
            .collect(),
        warnings: job.warnings.clone(),
    };
    let allowed = job_level(&job, maxima).map_err(|e| reject(None, e))?;
    let artifacts = job
        .artifacts
        .iter()
        .map(|p| artifact_pattern(p, &allowed))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| reject(None, e))?;
    let mut plans = Vec::with_capacity(job.steps.len());
    for (i, step) in job.steps.iter().enumerate() {
        let plan = step_plan(step, &job.constraints, &allowed, maxima, image_path)
            .map_err(|e| reject(Some(i), e))?;
        plans.push(plan);
    }
    Ok(CheckedJob {
        protocol_version: job.protocol_version,
        job_id,
        task_id: job.task_id,
        skill_id: job.skill_id,
        profile: job.profile,
        constraints: job.constraints,
        allowed,
        steps: job
            .steps
            .into_iter()
            .zip(plans)
            .map(|(step, plan)| CheckedStep { step, plan })
            .collect(),
        artifacts,
        warnings: job.warnings,
        maxima: maxima.clone(),
    })
}

fn above(what: &str, asked: impl std::fmt::Display, max: impl std::fmt::Display) -> JobError {
    JobError::limit(format!(
        "{what} {asked} is above this deployment's maximum of {max}"
    ))
}

fn job_level(job: &Job, maxima: &Maxima) -> Result<Allowed, JobError> {
    let c = &job.constraints;
    if c.network_allowed && !maxima.network_allowed {
        return Err(JobError::policy(
            "network_allowed: this deployment runs jobs without a network",
        ));
    }
    if job.steps.len() > maxima.max_steps {
        return Err(above(
            "a job of",
            format!("{} steps", job.steps.len()),
            maxima.max_steps,
        ));
    }
    if c.max_runtime_seconds > maxima.max_runtime_seconds {
        return Err(above(
            "max_runtime_seconds",
            c.max_runtime_seconds,
            maxima.max_runtime_seconds,
        ));
    }
    if c.max_output_bytes > maxima.max_output_bytes {
        return Err(above(
            "max_output_bytes",
            c.max_output_bytes,
            maxima.max_output_bytes,
        ));
    }
    let size = job_size(job);
    if size > maxima.max_job_bytes {
        return Err(above(
            "a job of",
            format!("{size} bytes"),
            maxima.max_job_bytes,
        ));
    }
    if job.artifacts.len() > maxima.max_artifacts {
        return Err(above(
            "artifacts: a list of",
            job.artifacts.len(),
            maxima.max_artifacts,
        ));
    }
    if let Some(bad) = c.allowed_commands.iter().find(|n| !bare_name(n)) {
        return Err(JobError::policy(format!(
            "allowed_commands: `{}` is not a bare program name",
            bad.escape_debug()
        )));
    }
    Allowed::new(&c.allowed_paths).map_err(JobError::policy)
}

/// The job's size as JSON (counted, not buffered).
fn job_size(job: &Job) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, job) {
        Ok(()) => count.0,
        Err(_) => u64::MAX,
    }
}

fn bare_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0'])
}

fn step_plan(
    step: &Step,
    constraints: &Constraints,
    allowed: &Allowed,
    maxima: &Maxima,
    image_path: &str,
) -> Result<CheckedAction, JobError> {
    let path = |p: &str| allowed.check(p).map_err(JobError::policy);
    match &step.action {
        Action::RunCommand(c) => command_plan(c, constraints, allowed, maxima, image_path),
        Action::WriteFile(w) => {
            if w.decoded_len() > maxima.max_write_bytes {
                return Err(above(
                    "write_file content of",
                    format!("{} bytes", w.decoded_len()),
                    maxima.max_write_bytes,
                ));
            }
            Ok(CheckedAction::WriteFile {
                path: path(&w.path)?,
            })
        }
        Action::ReadFile(r) => {
            if r.max_bytes > maxima.max_read_bytes {
                return Err(above(
                    "read_file max_bytes",
                    r.max_bytes,
                    maxima.max_read_bytes,
                ));
            }
            Ok(CheckedAction::ReadFile {
                path: path(&r.path)?,
            })
        }
        Action::ApplyUnifiedDiff(d) => {
            if d.diff.len() as u64 > maxima.max_diff_bytes {
                return Err(above(
                    "a diff of",
                    format!("{} bytes", d.diff.len()),
                    maxima.max_diff_bytes,
                ));
            }
            let patch =
                diff::parse(&d.diff).map_err(|e| JobError::new(e.error_type(), e.to_string()))?;
            let files = patch
                .files
                .into_iter()
                .map(|f| Ok((path(&f.path)?, f)))
                .collect::<Result<Vec<_>, JobError>>()?;
            Ok(CheckedAction::ApplyUnifiedDiff { files })
        }
        Action::ListTree(l) => {
            if l.max_depth > maxima.max_list_depth {
                return Err(above(
                    "list_tree max_depth",
                    l.max_depth,
                    maxima.max_list_depth,
                ));
            }
            let max_entries = l.max_entries.unwrap_or(maxima.max_list_entries);
            if max_entries > maxima.max_list_entries {
                return Err(above(
                    "list_tree max_entries",
                    max_entries,
                    maxima.max_list_entries,
                ));
            }
            Ok(CheckedAction::ListTree {
                path: path(&l.path)?,
                max_entries,
            })
        }
    }
}

fn command_plan(
    c: &RunCommand,
    constraints: &Constraints,
    allowed: &Allowed,
    maxima: &Maxima,
    image_path: &str,
) -> Result<CheckedAction, JobError> {
    let command = command_check(&c.command, &constraints.allowed_commands, image_path)?;
    let working_dir = match &c.working_dir {
        Some(dir) => allowed
            .check(dir)
            .map_err(|e| JobError::policy(format!("working_dir: {e}")))?,
        None => allowed
            .first()
            .cloned()
            .ok_or_else(|| JobError::policy("no allowed_paths for the working directory"))?,
    };
    if let Some(why) = c
        .env
        .iter()
        .find_map(|(name, value)| env::refusal(name, value, image_path))
    {
        return Err(JobError::policy(why));
    }
    let stdin = c.stdin.as_ref().map_or(0, |s| s.len() as u64);
    if stdin > maxima.max_stdin_bytes {
        return Err(above(
            "stdin of",
            format!("{stdin} bytes"),
            maxima.max_stdin_bytes,
        ));
    }
    Ok(CheckedAction::RunCommand {
        command,
        working_dir,
        timeout: c.timeout_seconds.map(Duration::from_secs),
    })
}

/// `command` resolved by name: a bare name in `allowed`, or an absolute path to one in the
/// image's PATH directories (`./python3`, `../../bin/sh` and anything in the workspace never).
pub fn command_check(
    command: &str,
    allowed: &[String],
    image_path: &str,
) -> Result<CommandCheck, JobError> {
    let refuse = |why: String| Err(JobError::policy(why));
    let checked = match command.rsplit_once('/') {
        None => CommandCheck::Name(command.to_string()),
        Some((dir, name)) => {
            let canonical = dir.starts_with('/')
                && dir[1..]
                    .split('/')
                    .all(|p| !p.is_empty() && p != "." && p != "..")
                && bare_name(name);
            let in_path = image_path.split(':').any(|d| d == dir);
            if !canonical || !in_path {
                return refuse(format!(
                    "command `{}` is neither a bare name nor a program in the image's PATH directories ({image_path})",
                    command.escape_debug()
                ));
            }
            CommandCheck::Path {
                dir: dir.to_string(),
                name: name.to_string(),
            }
        }
    };
    if !allowed.iter().any(|a| a == checked.name()) {
        return refuse(format!(
            "command `{}` is not in allowed_commands ({})",
            checked.name().escape_debug(),
            if allowed.is_empty() {
                "none".to_string()
            } else {
                allowed.join(", ")
            }
        ));
    }
    Ok(checked)
}

fn has_magic(component: &str) -> bool {
    component.contains(['*', '?', '['])
}

/// An artifact pattern is canonical, and its literal part lies inside an allowed path (so no
/// wildcard can match anything outside one).
fn artifact_pattern(text: &str, allowed: &Allowed) -> Result<ArtifactPattern, JobError> {
    let refuse = |why: &str| Err(JobError::policy(format!("artifacts: `{text}` {why}")));
    let absolute = if text.starts_with('/') {
        text.to_string()
    } else {
        format!("{}/{text}", Root::Workspace.path())
    };
    let parts: Vec<&str> = absolute[1..].split('/').collect();
    let literal = parts.iter().take_while(|p| !has_magic(p)).count();
    if literal == 0 {
        return refuse("must start with /workspace or /tmp");
    }
    if parts
        .iter()
        .any(|p| p.is_empty() || *p == "." || *p == "..")
    {
        return refuse("is not canonical (empty, `.` or `..` components)");
    }
    let prefix =
        JobPath::parse(&format!("/{}", parts[..literal].join("/"))).map_err(JobError::policy)?;
    // The literal part lies in an allowed path, so whatever the wildcards match does too.
    if !allowed.contains(&prefix) {
        return refuse("is outside allowed_paths");
    }
    Ok(ArtifactPattern {
        text: text.to_string(),
        root: prefix.root(),
        components: parts[1..].iter().map(|p| p.to_string()).collect(),
    })
}

impl CheckedJob {
    pub fn job_id(&self) -> Uuid {
        self.job_id
    }

    pub fn protocol_version(&self) -> ProtocolVersion {
        self.protocol_version
    }

    pub fn profile(&self) -> Option<&str> {
        self.profile.as_deref()
    }

    pub fn task_id(&self) -> Option<&str> {
        self.task_id.as_deref()
    }

    pub fn skill_id(&self) -> Option<&str> {
        self.skill_id.as_deref()
    }

    pub fn constraints(&self) -> &Constraints {
        &self.constraints
    }

    pub fn allowed(&self) -> &Allowed {
        &self.allowed
    }

    pub fn steps(&self) -> &[CheckedStep] {
        &self.steps
    }

    pub fn artifacts(&self) -> &[ArtifactPattern] {
        &self.artifacts
    }

    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    pub fn maxima(&self) -> &Maxima {
        &self.maxima
    }

    /// The job's deadline from its start.
    pub fn runtime(&self) -> Duration {
        Duration::from_secs(self.constraints.max_runtime_seconds)
    }

    /// A builder whose steps are this job's, all `skipped` until reported.
    pub fn result_builder(&self, started_at: OffsetDateTime) -> ResultBuilder {
        let steps = self
            .steps
            .iter()
            .map(|s| (s.step.id.as_str(), s.step.action.step_type()));
        ResultBuilder::new(self.job_id, steps, self.warnings.clone(), started_at)
    }

    /// The job as protocol JSON, with its `job_id` set (what the service sends to the agent).
    pub fn to_json(&self) -> Value {
        let job = Job {
            protocol_version: self.protocol_version,
            job_id: Some(self.job_id),
            task_id: self.task_id.clone(),
            skill_id: self.skill_id.clone(),
            profile: self.profile.clone(),
            constraints: self.constraints.clone(),
            steps: self.steps.iter().map(|s| s.step.clone()).collect(),
            artifacts: self.artifacts.iter().map(|a| a.text.clone()).collect(),
            warnings: Vec::new(),
        };
        serde_json::to_value(&job).unwrap_or(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{ErrorType, StepStatus, parse_value};
    use super::*;

    fn job(constraints: Value, steps: Value) -> Job {
        parse_value(&json!({"protocol_version": "1.0", "constraints": constraints, "steps": steps}))
            .expect("well-formed")
    }

    fn refused(constraints: Value, steps: Value) -> Rejection {
        check(job(constraints, steps), &Maxima::default()).expect_err("refused")
    }

    fn step(t: &str, arguments: Value) -> Value {
        json!({"id": format!("s-{t}"), "type": t, "arguments": arguments})
    }

    #[test]
    fn a_valid_job_resolves_paths_commands_and_diffs() {
        let checked = check(
            job(
                json!({"allowed_commands": ["python3", "git"]}),
                json!([
                    step("write_file", json!({"path": "main.py", "content": "print(1)"})),
                    step("run_command", json!({"command": "/usr/bin/python3", "args": ["main.py"]})),
                    step("apply_unified_diff", json!({"diff": "--- a/main.py\n+++ b/main.py\n@@ -1 +1 @@\n-print(1)\n+print(2)\n"})),
                ]),
            ),
            &Maxima::default(),
        )
        .expect("passes");
        let plans: Vec<&CheckedAction> = checked.steps().iter().map(|s| &s.plan).collect();
        assert!(
            matches!(plans[0], CheckedAction::WriteFile { path } if path.to_string() == "/workspace/main.py")
        );
        assert!(
            matches!(plans[1], CheckedAction::RunCommand { command: CommandCheck::Path { .. }, working_dir, .. }
            if working_dir.to_string() == "/workspace")
        );
        assert!(
            matches!(plans[2], CheckedAction::ApplyUnifiedDiff { files } if files[0].0.to_string() == "/workspace/main.py")
        );
        // What the service sends to the agent parses and checks the same way.
        let again = check(
            parse_value(&checked.to_json()).expect("parses"),
            &Maxima::default(),
        )
        .expect("passes");
        assert_eq!(again.job_id(), checked.job_id());
    }

    #[test]
    fn a_host_visible_violation_fails_its_step_and_skips_the_rest() {
        let r = refused(
            json!({"allowed_commands": ["python3"]}),
            json!([
                step("list_tree", json!({"path": "/workspace"})),
                {"id": "shell", "type": "run_command", "arguments": {"command": "sh", "args": ["-c", "id"]}},
                step("read_file", json!({"path": "/workspace/x"})),
            ]),
        );
        assert_eq!(r.step, Some(1));
        assert_eq!(r.error.kind, ErrorType::PolicyViolation);
        let result = r.result(OffsetDateTime::now_utc());
        let statuses: Vec<StepStatus> = result.steps.iter().map(|s| s.status).collect();
        assert_eq!(
            statuses,
            [
                StepStatus::Skipped,
                StepStatus::Failure,
                StepStatus::Skipped
            ]
        );
        assert!(
            result
                .error
                .expect("job error")
                .message
                .contains("`sh` is not in allowed_commands")
        );
    }

    #[test]
    fn commands_are_matched_by_bare_name_from_the_image_path_only() {
        let allowed = vec!["python3".to_string(), "bash".to_string()];
        assert!(command_check("python3", &allowed, IMAGE_PATH).is_ok());
        assert!(command_check("/usr/bin/python3", &allowed, IMAGE_PATH).is_ok());
        for bad in [
            "./python3",
            "../../bin/sh",
            "/workspace/python3",
            "/usr/bin/../bin/python3",
            "/tmp/bash",
            "sh",
            "bash/",
            "/usr/bin/perl",
        ] {
            let e = command_check(bad, &allowed, IMAGE_PATH).expect_err(bad);
            assert_eq!(e.kind, ErrorType::PolicyViolation, "{bad}");
        }
    }

    #[test]
    fn paths_outside_allowed_paths_and_dot_dot_are_policy_violations() {
        for path in [
            "../etc/passwd",
            "/etc/passwd",
            "/workspace/../etc/passwd",
            "/tmp/x",
        ] {
            let r = refused(json!({}), json!([step("read_file", json!({"path": path}))]));
            assert_eq!(
                (r.step, r.error.kind),
                (Some(0), ErrorType::PolicyViolation),
                "{path}"
            );
        }
        let r = refused(
            json!({"allowed_paths": ["/etc"]}),
            json!([step("list_tree", json!({"path": "/workspace"}))]),
        );
        assert_eq!((r.step, r.error.kind), (None, ErrorType::PolicyViolation));
        let r = refused(
            json!({"allowed_paths": ["/workspace/src"]}),
            json!([{"id": "r", "type": "run_command", "arguments": {"command": "ls", "working_dir": "/workspace"}}]),
        );
        assert_eq!(r.error.kind, ErrorType::PolicyViolation);
    }

    #[test]
    fn diffs_touching_etc_passwd_or_binary_are_refused() {
        let escape =
            "--- a/../etc/passwd\n+++ b/../etc/passwd\n@@ -1 +1 @@\n-root:x:0:0\n+root::0:0\n";
        let r = refused(
            json!({}),
            json!([step("apply_unified_diff", json!({"diff": escape}))]),
        );
        assert_eq!(r.error.kind, ErrorType::PolicyViolation);
        let absolute = "--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-root:x:0:0\n+root::0:0\n";
        let r = refused(
            json!({}),
            json!([step("apply_unified_diff", json!({"diff": absolute}))]),
        );
        assert_eq!(r.error.kind, ErrorType::PolicyViolation);
        let binary = "diff --git a/x.png b/x.png\nGIT binary patch\nliteral 1\nA\n";
        let r = refused(
            json!({}),
            json!([step("apply_unified_diff", json!({"diff": binary}))]),
        );
        assert_eq!(r.error.kind, ErrorType::PolicyViolation);
        let r = refused(
            json!({}),
            json!([step("apply_unified_diff", json!({"diff": "nonsense"}))]),
        );
        assert_eq!(r.error.kind, ErrorType::SchemaError);
    }

    #[test]
    fn requests_above_a_maximum_are_refused_naming_it() {
        let many: Vec<Value> = (0..10_000)
            .map(|i| json!({"id": format!("s{i}"), "type": "list_tree", "arguments": {"path": "/workspace"}}))
            .collect();
        let r = refused(json!({}), Value::Array(many));
        assert_eq!(
            (r.step, r.error.kind),
            (None, ErrorType::ResourceLimitExceeded)
        );
        assert!(
            r.error.message.contains("maximum of 100"),
            "{}",
            r.error.message
        );
        let r = refused(
            json!({}),
            json!([step(
                "read_file",
                json!({"path": "x", "max_bytes": 1_000_000_000u64})
            )]),
        );
        assert_eq!(
            (r.step, r.error.kind),
            (Some(0), ErrorType::ResourceLimitExceeded)
        );
        assert!(r.error.message.contains("1048576"), "{}", r.error.message);
        let r = refused(
            json!({"max_runtime_seconds": 100000}),
            json!([step("list_tree", json!({"path": "x"}))]),
        );
        assert_eq!(r.error.kind, ErrorType::ResourceLimitExceeded);
        let r = refused(
            json!({"network_allowed": true}),
            json!([step("list_tree", json!({"path": "x"}))]),
        );
        assert_eq!(r.error.kind, ErrorType::PolicyViolation);
    }

    #[test]
    fn a_200_mb_write_file_is_refused_by_size() {
        let big = "a".repeat(200 << 20);
        let r = refused(
            json!({}),
            json!([step(
                "write_file",
                json!({"path": "big.txt", "content": big})
            )]),
        );
        assert_eq!(r.error.kind, ErrorType::ResourceLimitExceeded);
    }

    #[test]
    fn environment_rules_apply_before_anything_runs() {
        for (name, value) in [
            ("LD_PRELOAD", "/tmp/x.so"),
            ("PATH", "/workspace:/usr/bin"),
            ("BASH_ENV", "/workspace/x"),
        ] {
            let r = refused(
                json!({"allowed_commands": ["bash"]}),
                json!([{"id": "r", "type": "run_command", "arguments": {"command": "bash", "env": {name: value}}}]),
            );
            assert_eq!(r.error.kind, ErrorType::PolicyViolation, "{name}");
        }
    }

    #[test]
    fn artifact_globs_stay_inside_the_allowed_paths() {
        let ok = check(
            parse_value(&json!({"protocol_version": "1.0", "artifacts": ["/workspace/out/*.png", "report.json"],
                "steps": [step("list_tree", json!({"path": "x"}))]})).expect("parses"),
            &Maxima::default(),
        )
        .expect("inside");
        assert_eq!(ok.artifacts()[1].components, ["report.json"]);
        for bad in ["/etc/*", "/*/passwd", "/workspace/../etc/x", "/tmp/*.log"] {
            let job = parse_value(&json!({"protocol_version": "1.0", "artifacts": [bad],
                "steps": [step("list_tree", json!({"path": "x"}))]}))
            .expect("parses");
            let r = check(job, &Maxima::default()).expect_err(bad);
            assert_eq!(
                (r.step, r.error.kind),
                (None, ErrorType::PolicyViolation),
                "{bad}"
            );
        }
        let narrow = parse_value(&json!({"protocol_version": "1.0", "constraints": {"allowed_paths": ["/workspace/out"]},
            "artifacts": ["/workspace/*/x.png"], "steps": [step("list_tree", json!({"path": "/workspace/out"}))]})).expect("parses");
        assert!(
            check(narrow, &Maxima::default()).is_err(),
            "a wildcard above the allowed path"
        );
    }
}
