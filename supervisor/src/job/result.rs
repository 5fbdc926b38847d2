//! A job's result, and its assembly: step by step as steps finish, completed whatever happens, so
//! a result is never partial.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use uuid::Uuid;

use super::JOB_PROTOCOL;
use super::types::{Encoding, ErrorType, JobError, ProtocolVersion, StepType};

/// The response body of a job (and `/job/result.json` in file mode).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobResult {
    pub protocol_version: ProtocolVersion,
    pub job_id: Uuid,
    pub status: JobStatus,
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub finished_at: OffsetDateTime,
    /// Every step of the job, in order.
    pub steps: Vec<StepResult>,
    pub artifacts: Vec<ArtifactEntry>,
    pub resource_usage: ResourceUsage,
    pub error: Option<JobError>,
    /// Unknown fields a newer minor version carried, ignored.
    #[serde(default)]
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    Success,
    Failure,
    Timeout,
}

impl JobStatus {
    /// The status of a job that `error` ended: `timeout` for a timeout, else `failure`.
    pub fn ended_by(error: &JobError) -> JobStatus {
        if error.kind == ErrorType::Timeout {
            JobStatus::Timeout
        } else {
            JobStatus::Failure
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    Success,
    Failure,
    Skipped,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    pub id: String,
    #[serde(rename = "type")]
    pub step_type: StepType,
    pub status: StepStatus,
    pub duration_ms: u64,
    /// What the step produced (also for some failures: a command's exit code and output).
    pub result: Option<StepOutput>,
    pub error: Option<JobError>,
    /// What a `run_command` step did under the job's run-time policy (the host gathers it from
    /// the step's `Events` frames; absent without a policy and for file steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<scriptgate_policy::events::Events>,
}

impl StepResult {
    pub fn skipped(id: &str, step_type: StepType) -> Self {
        StepResult {
            id: id.to_string(),
            step_type,
            status: StepStatus::Skipped,
            duration_ms: 0,
            result: None,
            error: None,
            events: None,
        }
    }
}

/// The `result` of a step, by step type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StepOutput {
    RunCommand(CommandOutput),
    ReadFile(ReadOutput),
    WriteFile(WriteOutput),
    ApplyUnifiedDiff(DiffOutput),
    ListTree(TreeOutput),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandOutput {
    /// `None` when the command did not exit by itself (killed at its timeout).
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub duration_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadOutput {
    /// At most `max_bytes` of the file: UTF-8 text when it is, else base64.
    pub content: String,
    pub encoding: Encoding,
    /// The whole file's size.
    pub size_bytes: u64,
    pub truncated: bool,
    /// Of the whole file.
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteOutput {
    pub path: String,
    pub size_bytes: u64,
    pub sha256: String,
    /// `false` when an existing file was replaced (`allow_overwrite`).
    pub created: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiffOutput {
    pub files_modified: Vec<String>,
    pub files_created: Vec<String>,
    pub files_deleted: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TreeOutput {
    pub tree: ListedNode,
    /// Entries listed (the root excluded).
    pub entries: u64,
    /// More entries exist than `max_entries` allowed.
    pub truncated: bool,
}

/// One entry of `list_tree`. Symlinks are listed, never followed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedNode {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: NodeKind,
    pub size: u64,
    /// Permission bits, e.g. `"0644"`.
    pub mode: String,
    /// A directory's entries by name; absent below `max_depth` and for anything but directories.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub children: Option<Vec<ListedNode>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    File,
    Directory,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

/// A collected file, or why a file (or a glob) could not be collected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactEntry {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<JobError>,
}

impl ArtifactEntry {
    pub fn failed(path: impl Into<String>, error: JobError) -> Self {
        ArtifactEntry {
            path: path.into(),
            sha256: None,
            size_bytes: None,
            mime_type: None,
            error: Some(error),
        }
    }
}

/// Measured in the container, never from anything a step printed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceUsage {
    pub cpu_time_ms: u64,
    pub max_rss_bytes: u64,
}

/// How a job ended, as the agent reports it after its last step and its artifacts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobEnd {
    pub status: JobStatus,
    pub error: Option<JobError>,
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub finished_at: OffsetDateTime,
    pub artifacts: Vec<ArtifactEntry>,
    pub resource_usage: ResourceUsage,
}

/// Assembles a [`JobResult`]: every step starts `skipped`, reported steps replace them, and the
/// result is complete whether the job ended ([`ResultBuilder::finish`]) or its sandbox was lost
/// ([`ResultBuilder::abandon`]).
#[derive(Debug, Clone)]
pub struct ResultBuilder {
    job_id: Uuid,
    warnings: Vec<String>,
    started_at: OffsetDateTime,
    steps: Vec<StepResult>,
    reported: Vec<bool>,
    running: Option<usize>,
}

impl ResultBuilder {
    pub fn new<'a>(
        job_id: Uuid,
        steps: impl IntoIterator<Item = (&'a str, StepType)>,
        warnings: Vec<String>,
        started_at: OffsetDateTime,
    ) -> Self {
        let steps: Vec<StepResult> = steps
            .into_iter()
            .map(|(id, t)| StepResult::skipped(id, t))
            .collect();
        ResultBuilder {
            job_id,
            warnings,
            started_at,
            reported: vec![false; steps.len()],
            steps,
            running: None,
        }
    }

    /// Step `index` started (a lost sandbox then fails it rather than skipping it).
    pub fn started(&mut self, index: usize) {
        if index < self.steps.len() {
            self.running = Some(index);
        }
    }

    /// Step `index` finished; its id and type must be the job's, and it is reported once.
    pub fn record(&mut self, index: usize, result: StepResult) -> Result<(), String> {
        let Some(slot) = self.steps.get(index) else {
            return Err(format!("a result for step {index}, which does not exist"));
        };
        if slot.id != result.id || slot.step_type != result.step_type {
            return Err(format!(
                "a result for step {index} names `{}` ({}), not `{}` ({})",
                result.id, result.step_type, slot.id, slot.step_type
            ));
        }
        if std::mem::replace(&mut self.reported[index], true) {
            return Err(format!("step `{}` reported twice", result.id));
        }
        self.steps[index] = result;
        self.running = None;
        Ok(())
    }

    pub fn steps(&self) -> &[StepResult] {
        &self.steps
    }

    /// The result of a job that ended as `end` says.
    pub fn finish(self, end: JobEnd) -> JobResult {
        JobResult {
            protocol_version: JOB_PROTOCOL,
            job_id: self.job_id,
            status: end.status,
            started_at: end.started_at,
            finished_at: end.finished_at,
            steps: self.steps,
            artifacts: end.artifacts,
            resource_usage: end.resource_usage,
            error: end.error,
            warnings: self.warnings,
        }
    }

    /// The result of a job that did not end by itself (its sandbox timed out or died): the step
    /// that was running fails with `error`, the rest of the unreported steps stay `skipped`.
    pub fn abandon(mut self, status: JobStatus, error: JobError) -> JobResult {
        if let Some(index) = self.running.take() {
            let step = &mut self.steps[index];
            step.status = StepStatus::Failure;
            step.error = Some(error.clone());
        }
        let started_at = self.started_at;
        self.finish(JobEnd {
            status,
            error: Some(error),
            started_at,
            finished_at: OffsetDateTime::now_utc(),
            artifacts: Vec::new(),
            resource_usage: ResourceUsage::default(),
        })
    }

    /// The result of a job refused before it ran: step `step` (if any) fails with `error`.
    pub fn refuse(mut self, step: Option<usize>, error: JobError) -> JobResult {
        let job_error = match step.and_then(|i| self.steps.get_mut(i)) {
            Some(failed) => {
                failed.status = StepStatus::Failure;
                failed.error = Some(error.clone());
                error.in_step(&failed.id)
            }
            None => error,
        };
        let at = self.started_at;
        self.finish(JobEnd {
            status: JobStatus::Failure,
            error: Some(job_error),
            started_at: at,
            finished_at: at,
            artifacts: Vec::new(),
            resource_usage: ResourceUsage::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builder() -> ResultBuilder {
        ResultBuilder::new(
            Uuid::nil(),
            [
                ("a", StepType::WriteFile),
                ("b", StepType::RunCommand),
                ("c", StepType::ListTree),
            ],
            vec![],
            OffsetDateTime::UNIX_EPOCH,
        )
    }

    #[test]
    fn a_lost_sandbox_still_gives_every_step_a_status() {
        let mut b = builder();
        let mut done = StepResult::skipped("a", StepType::WriteFile);
        done.status = StepStatus::Success;
        b.record(0, done).expect("step a");
        b.started(1);
        let result = b.abandon(
            JobStatus::Timeout,
            JobError::new(ErrorType::Timeout, "deadline"),
        );
        let statuses: Vec<StepStatus> = result.steps.iter().map(|s| s.status).collect();
        assert_eq!(
            statuses,
            [
                StepStatus::Success,
                StepStatus::Failure,
                StepStatus::Skipped
            ]
        );
        assert_eq!(result.status, JobStatus::Timeout);
        assert_eq!(result.protocol_version.to_string(), "1.0");
    }

    #[test]
    fn results_must_match_the_job_and_come_once() {
        let mut b = builder();
        assert!(
            b.record(7, StepResult::skipped("x", StepType::ListTree))
                .is_err()
        );
        assert!(
            b.record(0, StepResult::skipped("b", StepType::WriteFile))
                .is_err()
        );
        assert!(
            b.record(0, StepResult::skipped("a", StepType::ReadFile))
                .is_err()
        );
        assert!(
            b.record(0, StepResult::skipped("a", StepType::WriteFile))
                .is_ok()
        );
        assert!(
            b.record(0, StepResult::skipped("a", StepType::WriteFile))
                .is_err()
        );
    }

    #[test]
    fn a_refused_job_fails_the_offending_step_and_skips_the_rest() {
        let result = builder().refuse(Some(1), JobError::policy("`sh` is not allowed"));
        assert_eq!(result.status, JobStatus::Failure);
        assert_eq!(result.steps[1].status, StepStatus::Failure);
        assert_eq!(result.steps[0].status, StepStatus::Skipped);
        let error = result.error.expect("job error");
        assert_eq!(error.kind, ErrorType::PolicyViolation);
        assert_eq!(error.message, "step `b`: `sh` is not allowed");
    }

    #[test]
    fn step_outputs_read_back_as_their_own_type() {
        let outputs = [
            StepOutput::RunCommand(CommandOutput {
                exit_code: Some(0),
                signal: None,
                stdout: "x".into(),
                stderr: String::new(),
                stdout_truncated: false,
                stderr_truncated: false,
                duration_ms: 3,
            }),
            StepOutput::ReadFile(ReadOutput {
                content: "x".into(),
                encoding: Encoding::Utf8,
                size_bytes: 1,
                truncated: false,
                sha256: "ab".into(),
            }),
            StepOutput::WriteFile(WriteOutput {
                path: "/workspace/x".into(),
                size_bytes: 1,
                sha256: "ab".into(),
                created: true,
            }),
            StepOutput::ApplyUnifiedDiff(DiffOutput {
                files_modified: vec![],
                files_created: vec!["/workspace/y".into()],
                files_deleted: vec![],
            }),
        ];
        for output in outputs {
            let json = serde_json::to_string(&output).expect("json");
            let back: StepOutput = serde_json::from_str(&json).expect("reads back");
            assert_eq!(back, output, "{json}");
        }
    }
}
