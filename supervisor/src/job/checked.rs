//! A job that passed the static checks ([`check`](super::check())), with what the checks resolved,
//! and a job they refused.

use std::time::Duration;

use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use super::diff::FilePatch;
use super::paths::{Allowed, JobPath, Root};
use super::result::ResultBuilder;
use super::types::{Constraints, Job, JobError, ProtocolVersion, Step};
use super::{JobResult, Maxima, StepType};

/// A job that passed every static check, with what the checks resolved (paths, commands, diffs).
/// Only [`check`](super::check()) makes one.
#[derive(Debug, Clone)]
pub struct CheckedJob {
    pub(super) protocol_version: ProtocolVersion,
    pub(super) job_id: Uuid,
    pub(super) task_id: Option<String>,
    pub(super) skill_id: Option<String>,
    pub(super) profile: Option<String>,
    pub(super) constraints: Constraints,
    pub(super) allowed: Allowed,
    pub(super) steps: Vec<CheckedStep>,
    pub(super) artifacts: Vec<ArtifactPattern>,
    pub(super) warnings: Vec<String>,
    pub(super) maxima: Maxima,
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

/// A job refused by [`check`](super::check()): the job-level error, and the offending step when one is.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    pub job_id: Uuid,
    pub error: JobError,
    /// The index of the step that broke a constraint (`None`: the job as a whole).
    pub step: Option<usize>,
    pub(super) steps: Vec<(String, StepType)>,
    pub(super) warnings: Vec<String>,
}

impl Rejection {
    /// The complete result: status `failure`, the offending step failed, the others skipped.
    pub fn result(&self, at: OffsetDateTime) -> JobResult {
        let steps = self.steps.iter().map(|(id, t)| (id.as_str(), *t));
        ResultBuilder::new(self.job_id, steps, self.warnings.clone(), at)
            .refuse(self.step, self.error.clone())
    }
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
            policy: None,
            constraints: self.constraints.clone(),
            steps: self.steps.iter().map(|s| s.step.clone()).collect(),
            artifacts: self.artifacts.iter().map(|a| a.text.clone()).collect(),
            warnings: Vec::new(),
        };
        serde_json::to_value(&job).unwrap_or(Value::Null)
    }
}
