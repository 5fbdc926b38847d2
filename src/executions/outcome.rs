//! What a run became: the sandbox's outcome, classified into a typed error and kept as the
//! record's result, built once and written into the record as one change. A job keeps its
//! protocol result whole; a script run with a workspace (a job underneath) reads as a script's.

use std::time::{Duration, Instant};

use time::OffsetDateTime;

use super::check::error_kind;
use crate::artifacts::{Artifact, ArtifactStore};
use crate::domain::network::NetworkResult;
use crate::domain::record::{
    ArtifactIssue, ErrorKind, ExecutionError, ExecutionRecord, ResourceUsage, RunResult, Status,
};
use crate::sandbox::job::{ArtifactEntry, ErrorType, JobError, StepOutput, StepResult, StepStatus};
use crate::sandbox::{ArtifactFile, CappedText, JobOutcome, RunOutcome, Timings, Usage};
use crate::validate::Validator;

/// The id of a workspace run's step that runs the script (`check::workspace_job`).
const RUN_STEP: &str = "run";

/// The end of a run, ready to be written into its record.
#[derive(Debug)]
pub(super) struct Ended {
    status: Status,
    error: Option<ExecutionError>,
    result: RunResult,
    timings: Timings,
    duration_ms: u64,
}

impl Ended {
    /// `o` classified against the run's `timeout` and the sandbox's memory limit, its files kept in
    /// `artifacts`; `started` is when processing began (the duration counts from there).
    pub(super) fn of(
        mut o: RunOutcome,
        timeout: Duration,
        memory_mb: u64,
        artifacts: &ArtifactStore,
        started: Instant,
    ) -> Ended {
        let files: Vec<(String, Vec<u8>)> = std::mem::take(&mut o.files)
            .into_iter()
            .map(|f| (f.path, f.data))
            .collect();
        let (kept, dropped) = artifacts.put_all(&files);
        let mut ended = Ended::classified(o, timeout, memory_mb, started);
        ended.result.artifacts = kept;
        ended.result.artifacts_dropped += dropped;
        ended
    }

    /// A run whose network access the egress proxy could not give: the script did not run.
    pub(super) fn network_unavailable(
        execution_id: uuid::Uuid,
        reason: String,
        started: Instant,
    ) -> Ended {
        let outcome = RunOutcome::not_run(execution_id, reason.clone());
        let mut ended = Ended::classified(outcome, Duration::ZERO, 0, started);
        ended.status = Status::Failed;
        ended.error = Some(ExecutionError::new(ErrorKind::NetworkUnavailable, reason));
        ended
    }

    /// `o` classified, without its files.
    fn classified(o: RunOutcome, timeout: Duration, memory_mb: u64, started: Instant) -> Ended {
        let error = classify(&o, timeout, memory_mb);
        let status = match &error {
            Some(e) if e.kind == ErrorKind::InternalError => Status::Failed,
            _ => Status::Completed,
        };
        let result = RunResult {
            exit_code: o.exit_code,
            signal: o.signal,
            stdout_truncated: o.stdout.truncated(),
            stderr_truncated: o.stderr.truncated(),
            stdout: o.stdout.text(),
            stderr: o.stderr.text(),
            timed_out: o.timed_out,
            oom_killed: o.oom_killed,
            usage: ResourceUsage {
                cpu_time_ms: o.usage.cpu_time_ms,
                max_memory_bytes: o.usage.max_memory_bytes,
            },
            warm: o.warm,
            container_id: o.container_id,
            artifacts: Vec::new(),
            artifacts_dropped: o.files_dropped,
            provenance: o.provenance,
            artifact_errors: Vec::new(),
            job: None,
            events: None,
            redacted: false,
            network: o.network.map(network_result),
        };
        Ended {
            status,
            error,
            result,
            timings: o.timings,
            duration_ms: ms(started.elapsed()),
        }
    }

    /// A job's outcome: its result kept whole, its files already kept (`kept`).
    pub(super) fn of_job(o: JobOutcome, kept: Kept, started: Instant) -> Ended {
        let events = o.events;
        let mut result = o.result;
        result.artifacts = kept.entries;
        let error = result
            .error
            .as_ref()
            .map(|e| ExecutionError::new(error_kind(e.kind), e.message.clone()));
        let status = match &error {
            Some(e) if e.kind == ErrorKind::InternalError => Status::Failed,
            _ => Status::Completed,
        };
        if let Some(reason) = &o.crashed {
            tracing::warn!(execution_id = %o.execution_id, %reason, "job sandbox ended without the agent's report");
        }
        let usage = ResourceUsage {
            cpu_time_ms: result.resource_usage.cpu_time_ms,
            max_memory_bytes: result.resource_usage.max_rss_bytes,
        };
        let run = RunResult {
            timed_out: result.status == crate::sandbox::job::JobStatus::Timeout,
            oom_killed: o.oom_killed,
            usage,
            warm: o.warm,
            container_id: o.container_id,
            artifacts: kept.artifacts,
            artifact_errors: kept.issues,
            provenance: o.provenance,
            job: Some(Box::new(result)),
            events,
            network: o.network.map(network_result),
            ..RunResult::default()
        };
        Ended {
            status,
            error,
            result: run,
            timings: o.timings,
            duration_ms: ms(started.elapsed()),
        }
    }

    /// A script run with a workspace: the job underneath read back as the script's run (its
    /// `run` step's exit status and output), classified as a script's; a file that could not be
    /// written fails the run with that step's error.
    pub(super) fn of_workspace(
        mut o: JobOutcome,
        kept: Kept,
        timeout: Duration,
        memory_mb: u64,
        started: Instant,
    ) -> Ended {
        let early = o
            .result
            .steps
            .iter()
            .find(|s| s.id != RUN_STEP && s.error.is_some())
            .and_then(|s| Some((format!("{}: ", s.id), s.error.clone()?)))
            // A job no step of which ran (a sandbox that could not run it as asked): its reason.
            .or_else(|| {
                let never_ran = o
                    .result
                    .steps
                    .iter()
                    .all(|s| s.status == StepStatus::Skipped);
                let error = o.result.error.clone().filter(|_| never_ran)?;
                Some((String::new(), error))
            });
        let dropped = kept.issues.len() as u32;
        let events = o.events.take();
        let run = script_outcome(o);
        let mut ended = Ended::classified(run, timeout, memory_mb, started);
        if let Some((step, e)) = early {
            ended.error = Some(ExecutionError::new(
                error_kind(e.kind),
                format!("{step}{}", e.message),
            ));
            ended.status = if e.kind == ErrorType::InternalError {
                Status::Failed
            } else {
                Status::Completed
            };
        }
        ended.result.artifacts = kept.artifacts;
        ended.result.artifact_errors = kept.issues;
        ended.result.artifacts_dropped = dropped;
        ended.result.events = events;
        ended
    }

    /// The events of a run under a run-time policy.
    pub(super) fn set_events(&mut self, events: Option<scriptgate_policy::events::Events>) {
        self.result.events = events;
    }

    /// Replaces the secrets the validator's rules know in stdout and stderr by their redacted
    /// form, and says so in the result.
    pub(super) fn redact(&mut self, validator: &Validator) {
        for text in [&mut self.result.stdout, &mut self.result.stderr] {
            if let Some(clean) = validator.redact_secrets(text) {
                *text = clean;
                self.result.redacted = true;
            }
        }
    }

    pub(super) fn apply(self, rec: &mut ExecutionRecord) {
        rec.status = self.status;
        rec.error = self.error;
        rec.result = Some(self.result);
        rec.timings.create = ms(self.timings.create);
        rec.timings.start = ms(self.timings.start);
        rec.timings.run = ms(self.timings.run);
        rec.timings.cleanup = ms(self.timings.cleanup);
        rec.duration_ms = self.duration_ms;
        rec.updated_at = OffsetDateTime::now_utc();
    }
}

/// A job's files, kept in the artifact store: the entries its result lists (an entry whose file
/// could not be kept becomes an error entry), what the record lists for download, and what was
/// not returned.
#[derive(Debug, Default)]
pub(super) struct Kept {
    entries: Vec<ArtifactEntry>,
    artifacts: Vec<Artifact>,
    issues: Vec<ArtifactIssue>,
}

/// Streams each intact file into `store` (blocking I/O: run it off the async runtime).
pub(super) fn keep(
    entries: Vec<ArtifactEntry>,
    files: Vec<ArtifactFile>,
    store: &ArtifactStore,
) -> Kept {
    let mut kept = Kept::default();
    for entry in entries {
        let stored = entry.error.is_none().then(|| {
            let file = files
                .iter()
                .find(|f| f.path == entry.path && Some(&f.sha256) == entry.sha256.as_ref())?;
            let mut data = file.open().ok()?;
            store
                .put_reader(&file.path, &file.mime_type, &file.sha256, &mut data)
                .inspect_err(|e| tracing::error!(error = %e, "could not keep an artifact"))
                .ok()
        });
        match stored.flatten() {
            Some(artifact) => {
                kept.artifacts.push(artifact);
                kept.entries.push(entry);
            }
            None => {
                let error = entry.error.clone().unwrap_or_else(|| {
                    JobError::internal("the file arrived but could not be kept")
                });
                kept.issues.push(ArtifactIssue {
                    path: entry.path.clone(),
                    kind: error.kind.as_str().into(),
                    message: error.message.clone(),
                });
                kept.entries.push(ArtifactEntry::failed(entry.path, error));
            }
        }
    }
    kept
}

/// A workspace run's job, read back as the script run it stands for.
fn script_outcome(o: JobOutcome) -> RunOutcome {
    let step = o.result.steps.iter().find(|s| s.id == RUN_STEP);
    let output = step.and_then(|s| match &s.result {
        Some(StepOutput::RunCommand(c)) => Some(c.clone()),
        _ => None,
    });
    let error = step.and_then(|s: &StepResult| s.error.clone());
    let kind = error.as_ref().map(|e| e.kind);
    let capped = |text: &str, truncated: bool| {
        let mut c = CappedText::new(u64::MAX);
        c.push(text.as_bytes());
        if truncated {
            c.mark_truncated();
        }
        c
    };
    let out = output.unwrap_or(crate::sandbox::job::CommandOutput {
        exit_code: None,
        signal: None,
        stdout: String::new(),
        stderr: String::new(),
        stdout_truncated: false,
        stderr_truncated: false,
        duration_ms: 0,
    });
    let timed_out = kind == Some(ErrorType::Timeout)
        || (step.is_some() && o.result.status == crate::sandbox::job::JobStatus::Timeout);
    let oom = kind == Some(ErrorType::ResourceLimitExceeded) && out.signal == Some(9);
    let lost = (kind == Some(ErrorType::InternalError))
        .then(|| error.map(|e| e.message))
        .flatten();
    RunOutcome {
        execution_id: o.execution_id,
        container_id: o.container_id,
        exit_code: out.exit_code.filter(|_| !timed_out),
        signal: out.signal,
        stdout: capped(&out.stdout, out.stdout_truncated),
        stderr: capped(&out.stderr, out.stderr_truncated),
        timed_out,
        oom_killed: o.oom_killed || oom,
        crashed: o.crashed.or(lost),
        usage: Usage {
            cpu_time_ms: o.result.resource_usage.cpu_time_ms,
            max_memory_bytes: o.result.resource_usage.max_rss_bytes,
            oom_kills: 0,
        },
        timings: o.timings,
        warm: o.warm,
        files: Vec::new(),
        files_dropped: 0,
        provenance: o.provenance,
        network: o.network,
    }
}

/// The proxy's report as the record keeps it.
fn network_result(report: crate::sandbox::egress::NetworkReport) -> NetworkResult {
    NetworkResult {
        network_operations: report
            .network_operations
            .iter()
            .filter_map(|e| serde_json::to_value(e).ok())
            .collect(),
        network_summary: report.network_summary,
    }
}

/// The typed error for a run's outcome (`None`: it succeeded).
fn classify(o: &RunOutcome, timeout: Duration, memory_mb: u64) -> Option<ExecutionError> {
    let error = |kind, message: String| Some(ExecutionError::new(kind, message));
    if o.timed_out {
        return error(
            ErrorKind::Timeout,
            format!(
                "the script did not finish within {}s and was killed",
                timeout.as_secs()
            ),
        );
    }
    if o.oom_killed {
        return error(
            ErrorKind::ResourceLimitExceeded,
            format!("the script exceeded the memory limit ({memory_mb} MiB) and was killed"),
        );
    }
    if let Some(reason) = &o.crashed {
        tracing::warn!(execution_id = %o.execution_id, %reason, "container ended without an exit report");
        return error(
            ErrorKind::InternalError,
            "the sandbox stopped unexpectedly".into(),
        );
    }
    match (o.exit_code, o.signal) {
        (Some(0), _) => None,
        (Some(code), Some(sig)) => error(
            ErrorKind::ExecutionFailure,
            format!("the script was killed by signal {sig} (exit code {code})"),
        ),
        (Some(code), None) => error(
            ErrorKind::ExecutionFailure,
            format!("the script exited with code {code}"),
        ),
        (None, _) => error(
            ErrorKind::InternalError,
            "the script's exit status is unknown".into(),
        ),
    }
}

/// Whole milliseconds, saturating.
pub(super) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::{CappedText, Provenance, Usage};

    fn outcome() -> RunOutcome {
        RunOutcome {
            execution_id: uuid::Uuid::nil(),
            container_id: "c".into(),
            exit_code: Some(0),
            signal: None,
            stdout: CappedText::new(16),
            stderr: CappedText::new(16),
            timed_out: false,
            oom_killed: false,
            crashed: None,
            usage: Usage::default(),
            timings: Timings::default(),
            warm: false,
            files: Vec::new(),
            files_dropped: 0,
            provenance: Provenance::default(),
            network: None,
        }
    }

    fn kind(o: &RunOutcome) -> Option<ErrorKind> {
        classify(o, Duration::from_secs(5), 512).map(|e| e.kind)
    }

    #[test]
    fn outcomes_are_classified_by_what_ended_the_run() {
        assert_eq!(kind(&outcome()), None);
        let exit = |code, signal| RunOutcome {
            exit_code: code,
            signal,
            ..outcome()
        };
        assert_eq!(
            kind(&exit(Some(3), None)),
            Some(ErrorKind::ExecutionFailure)
        );
        assert_eq!(
            kind(&exit(Some(137), Some(9))),
            Some(ErrorKind::ExecutionFailure)
        );
        assert_eq!(kind(&exit(None, None)), Some(ErrorKind::InternalError));
        // A deadline or an OOM kill says so, whatever the exit status.
        let timed_out = RunOutcome {
            timed_out: true,
            oom_killed: true,
            ..exit(None, Some(9))
        };
        assert_eq!(kind(&timed_out), Some(ErrorKind::Timeout));
        let oom = RunOutcome {
            oom_killed: true,
            ..exit(Some(137), Some(9))
        };
        let error = classify(&oom, Duration::from_secs(5), 512).expect("an error");
        assert_eq!(error.kind, ErrorKind::ResourceLimitExceeded);
        assert!(error.message.contains("512 MiB"), "{}", error.message);
        let crashed = RunOutcome {
            crashed: Some("gone".into()),
            ..exit(None, None)
        };
        assert_eq!(kind(&crashed), Some(ErrorKind::InternalError));
    }
}
