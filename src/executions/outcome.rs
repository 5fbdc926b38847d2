//! What a run became: the sandbox's outcome, classified into a typed error and kept as the
//! record's result, built once and written into the record as one change.

use std::time::{Duration, Instant};

use time::OffsetDateTime;

use crate::artifacts::ArtifactStore;
use crate::domain::record::{
    ErrorKind, ExecutionError, ExecutionRecord, ResourceUsage, RunResult, Status,
};
use crate::sandbox::{RunOutcome, Timings};
use crate::validate::Validator;

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
        o: RunOutcome,
        timeout: Duration,
        memory_mb: u64,
        artifacts: &ArtifactStore,
        started: Instant,
    ) -> Ended {
        let error = classify(&o, timeout, memory_mb);
        let status = match &error {
            Some(e) if e.kind == ErrorKind::InternalError => Status::Failed,
            _ => Status::Completed,
        };
        let files: Vec<(String, Vec<u8>)> = o.files.into_iter().map(|f| (f.path, f.data)).collect();
        let (kept, dropped) = artifacts.put_all(&files);
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
            artifacts: kept,
            artifacts_dropped: dropped + o.files_dropped,
            provenance: o.provenance,
            events: None,
            redacted: false,
        };
        Ended {
            status,
            error,
            result,
            timings: o.timings,
            duration_ms: ms(started.elapsed()),
        }
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
