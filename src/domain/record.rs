//! What is recorded about an execution, from submission to its terminal status.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::domain::content::ContentVerdict;
use crate::domain::verdict::Verdict;
use crate::domain::work::Work;

/// A job's result as the job protocol writes it (shared with the agent in the container).
pub type JobResult = scriptgate_supervisor::job::JobResult;

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Status {
    PendingApproval,
    Queued,
    Running,
    /// The script ran (its exit code, timeout or OOM is in the result).
    Completed,
    Denied,
    /// Nobody decided before the approval timeout.
    Expired,
    /// The service could not run it (sandbox failure, or the service stopped mid-run).
    Failed,
}

impl Status {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Status::Completed | Status::Denied | Status::Expired | Status::Failed
        )
    }

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Approve,
    Deny,
}

/// An operator's decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Approval {
    pub decision: Decision,
    pub by: String,
    pub reason: String,
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
}

/// Milliseconds per stage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StageMs {
    pub validate: u64,
    pub queue: u64,
    pub create: u64,
    pub start: u64,
    pub run: u64,
    pub cleanup: u64,
}

/// What the sandbox reported.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub timed_out: bool,
    pub oom_killed: bool,
    #[serde(flatten)]
    pub usage: ResourceUsage,
    pub warm: bool,
    pub container_id: String,
    /// Files the run returned (plots), kept in the artifact store.
    #[serde(default)]
    pub artifacts: Vec<Artifact>,
    /// Files left out by the caps (count and size per image, size per run).
    #[serde(default)]
    pub artifacts_dropped: u32,
    /// The image and supervisor that ran it.
    #[serde(default)]
    pub provenance: Provenance,
    /// Artifact globs or files that could not be returned, and why (a workspace run's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifact_errors: Vec<ArtifactIssue>,
    /// A job's complete result, as the job protocol writes it (absent for scripts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<Box<JobResult>>,
    /// What the run's processes did, as its run-time policy decided it (runs under a policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<scriptgate_policy::events::Events>,
    /// Secrets were replaced by their redacted form in stdout or stderr.
    #[serde(default)]
    pub redacted: bool,
    /// What the run did through the egress proxy (runs with network access only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::domain::network::NetworkResult>,
}

/// An artifact (or a glob) that was not returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ArtifactIssue {
    /// The file, or the glob when it failed as a whole.
    pub path: String,
    /// The job protocol's error type (`policy_violation` for a symlink or a directory,
    /// `resource_limit_exceeded` over a maximum, …).
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
}

/// What the container used, as the engine's cgroup accounting reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ResourceUsage {
    pub cpu_time_ms: u64,
    pub max_memory_bytes: u64,
}

/// A file a run returned, as records and results list it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Artifact {
    /// Absolute path in the sandbox; the download path is this without its leading slash.
    pub path: String,
    pub sha256: String,
    pub size_bytes: u64,
    pub mime_type: String,
}

/// What ran the script, so that a run can be replayed exactly.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    pub profile: String,
    /// The image name the container was created from.
    pub image: String,
    /// The image's content id (`sha256:…`) the container actually ran.
    pub image_digest: Option<String>,
    /// The supervisor's version as it reported it (absent from supervisors that predate it).
    pub supervisor_version: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionRecord {
    pub id: Uuid,
    /// The agent (token name) that submitted it.
    pub agent: String,
    pub status: Status,
    /// What it runs, as submitted (its fields sit at the top level of the stored JSON).
    #[serde(flatten)]
    pub run: Work,
    pub script_sha256: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
    /// The verdict that decided whether it runs: the script's, merged with those of the other
    /// content it carries (`contents`).
    pub verdict: Verdict,
    /// Verdicts on the content beyond the script: a job's files, programs, diffs and arguments,
    /// or a script run's workspace files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub contents: Vec<ContentVerdict>,
    pub result: Option<RunResult>,
    pub error: Option<ExecutionError>,
    pub approval: Option<Approval>,
    /// What the run's policy decided before the run, other than `allow`: the commands the
    /// script runs (its `command_rules`) and the findings it raises (its `validation_rules`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policy_checks: Vec<PolicyCheck>,
    pub timings: StageMs,
    /// Milliseconds of processing until the terminal status (0 until then): from the request for
    /// a run that waits for its result, from a worker picking it up for a queued or approved run.
    pub duration_ms: u64,
}

impl ExecutionRecord {
    pub fn success(&self) -> bool {
        self.status == Status::Completed && self.error.is_none()
    }

    /// The job's id, when it runs a job.
    pub fn job_id(&self) -> Option<Uuid> {
        self.run.job().map(|j| j.job_id)
    }
}

/// What a policy's pre-run decision was about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PolicyCheckKind {
    /// A command the script runs, decided by the policy's `command_rules`.
    Command,
    /// A validation finding, raised by the policy's `validation_rules`.
    Finding,
    /// A file the service itself moves in or out of the sandbox (a job's file steps and artifact
    /// globs, a script's `files` and `artifacts`), decided by the policy's `file_rules`.
    File,
}

/// A decision a run's policy made before the run (`deny`, `approve` or `log`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PolicyCheck {
    pub kind: PolicyCheckKind,
    /// The command line (`pip install requests`), the finding's rule id, or for a file the
    /// operation and the path (`write /workspace/a.py`).
    pub target: String,
    /// `deny`, `approve` or `log`.
    #[schema(value_type = String, example = "approve")]
    pub decision: scriptgate_policy::Decision,
    /// The policy rule that decided; null when none matched (the section denies).
    pub rule: Option<String>,
    /// The rule's message, rendered for this command or finding.
    pub message: Option<String>,
    /// Where in the script (1-based; 0 for a file).
    pub line: u32,
    pub column: u32,
    /// A held (`approve`) command's argument vector (`[name, args…]`), when every word of it is
    /// known before the run: once an operator approves the run, its `execve` of exactly this line
    /// is not held again at run time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
}

impl PolicyCheck {
    /// A file check that let the work go on (`log`, or `approve` an operator granted), as the
    /// event of a result's `file_operations`; `None` for other checks.
    pub fn file_event(&self) -> Option<scriptgate_policy::events::FileEvent> {
        if self.kind != PolicyCheckKind::File || self.decision == scriptgate_policy::Decision::Deny
        {
            return None;
        }
        let (operation, path) = self.target.split_once(' ')?;
        Some(scriptgate_policy::events::FileEvent {
            kind: operation
                .parse::<scriptgate_policy::Operation>()
                .ok()?
                .into(),
            path: path.to_string(),
            bytes: None,
            decision: self.decision,
            rule: self.rule.clone(),
        })
    }
}

pub fn sha256_hex(text: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// When executions wait for an operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum ApprovalMode {
    Never,
    Always,
    /// Only scripts whose validation produced warn findings.
    OnWarn,
}

impl ApprovalMode {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum ErrorKind {
    ValidationFailed,
    Timeout,
    ResourceLimitExceeded,
    ExecutionFailure,
    InternalError,
    /// An operator denied the execution.
    Denied,
    /// Nobody decided within the approval timeout.
    ApprovalTimeout,
    /// A job broke one of its own constraints or the deployment's (a path outside
    /// `allowed_paths`, a command not allowed, a symlink, an overwrite).
    PolicyViolation,
    /// A job that is no longer a well-formed job of a protocol version this service speaks.
    SchemaError,
    /// A session command ended by `POST …/commands/{command_id}/kill`.
    Killed,
    /// The run asked for network access and the egress proxy could not give it (none is
    /// configured, it stopped, or its socket did not answer): the script did not run.
    NetworkUnavailable,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ExecutionError {
    #[serde(rename = "type")]
    pub kind: ErrorKind,
    pub message: String,
}

impl ExecutionError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ExecutionError {
            kind,
            message: message.into(),
        }
    }
}
