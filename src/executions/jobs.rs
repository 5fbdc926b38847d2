//! Jobs as executions: found by their `job_id`, their files kept when the sandbox returns them,
//! and a complete job result for every job that ended, including those that never ran (denied,
//! expired, or lost with the service).

use std::time::{Duration, Instant};

use uuid::Uuid;

use super::live::{self, LiveEvent};
use super::outcome::{Ended, keep};
use super::{ExecError, Executions};
use crate::auth::Caller;
use crate::domain::record::{ErrorKind, ExecutionRecord, JobResult};
use crate::domain::work::Work;
use crate::sandbox::job::{self, ErrorType, JobError, ResultBuilder};
use crate::sandbox::{JobOutcome, JobRun, Lease};

impl Executions {
    /// The execution that runs job `job_id`, as [`Executions::get`] gives it.
    pub(crate) async fn get_job(
        &self,
        caller: &Caller,
        job_id: Uuid,
        wait: Duration,
    ) -> Result<ExecutionRecord, ExecError> {
        let rec = self
            .store
            .by_job(job_id)
            .await?
            .ok_or(ExecError::NotFound)?;
        self.get(caller, rec.id, wait).await
    }

    /// Runs a job (or a workspace run) in its sandbox, with network access through the egress
    /// proxy when it opted in (its events streamed live as they happen); `Err` says why the proxy
    /// could not give it, and nothing ran.
    pub(super) async fn job_call(
        &self,
        rec: &ExecutionRecord,
        mut lease: Box<dyn Lease>,
        run: JobRun,
    ) -> Result<JobOutcome, String> {
        if !self.network_opted_in(rec) {
            return Ok(lease.run_job(run).await);
        }
        let (asks, _listed) = self.held.channel(rec.id, &rec.agent);
        let (live, _publishing) = self.live.publish(rec.id);
        let access = self.network_access(rec, asks)?;
        let events = lease
            .open_network(access)
            .await
            .map_err(|e| e.to_string())?;
        let _bridged = live::bridge(events, live, LiveEvent::Egress);
        Ok(lease.run_job(run).await)
    }

    /// How a job (or a workspace run) ended, with its files kept in the artifact store.
    pub(super) async fn ended_job(&self, work: &Work, o: JobOutcome, started: Instant) -> Ended {
        let mut o = o;
        let entries = std::mem::take(&mut o.result.artifacts);
        let files = std::mem::take(&mut o.files);
        let store = self.artifacts.clone();
        let kept = tokio::task::spawn_blocking(move || keep(entries, files, &store))
            .await
            .unwrap_or_else(|e| {
                tracing::error!(error = %e, "keeping artifacts failed");
                Default::default()
            });
        match work {
            Work::Job(_) => Ended::of_job(o, kept, started),
            Work::Script(run) => {
                Ended::of_workspace(o, kept, run.timeout(), self.memory_mb, started)
            }
        }
    }
}

/// A job's complete result once its execution ended: the one it ran (or was refused) with, or,
/// for a job that never reached a sandbox, every step skipped and the reason as its error.
/// `None` while it has not ended (and for scripts).
pub(crate) fn job_result(rec: &ExecutionRecord) -> Option<JobResult> {
    let work = rec.run.job()?;
    if !rec.status.is_terminal() {
        return None;
    }
    if let Some(result) = rec.result.as_ref().and_then(|r| r.job.as_deref()) {
        return Some(result.clone());
    }
    let error = rec.error.as_ref().map_or_else(
        || JobError::internal("the job ended without a result"),
        |e| JobError::new(protocol_type(e.kind), e.message.clone()),
    );
    // The steps as submitted (a job that no longer parses has none to list).
    let parsed = job::parse_value(&work.job).ok();
    let steps = parsed.iter().flat_map(|j| {
        j.steps
            .iter()
            .map(|s| (s.id.as_str(), s.action.step_type()))
    });
    let warnings = parsed
        .as_ref()
        .map(|j| j.warnings.clone())
        .unwrap_or_default();
    let mut result =
        ResultBuilder::new(work.job_id, steps, warnings, rec.created_at).refuse(None, error);
    result.finished_at = rec.updated_at.max(rec.created_at);
    Some(result)
}

/// The job protocol's error type for a record's error kind (an operator's denial and an approval
/// that expired are the deployment's policy).
fn protocol_type(kind: ErrorKind) -> ErrorType {
    match kind {
        ErrorKind::SchemaError => ErrorType::SchemaError,
        ErrorKind::ValidationFailed | ErrorKind::PolicyViolation => ErrorType::PolicyViolation,
        ErrorKind::Denied | ErrorKind::ApprovalTimeout => ErrorType::PolicyViolation,
        ErrorKind::Timeout => ErrorType::Timeout,
        ErrorKind::ResourceLimitExceeded => ErrorType::ResourceLimitExceeded,
        // A job is never killed by a session's kill; should one be, it failed while running.
        ErrorKind::ExecutionFailure | ErrorKind::Killed => ErrorType::ExecutionFailure,
        ErrorKind::InternalError | ErrorKind::NetworkUnavailable => ErrorType::InternalError,
    }
}
