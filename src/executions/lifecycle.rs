//! The steps every run goes through: validate, decide where it goes next, admit, acquire a
//! sandbox, run, record. `submit` takes a new submission through them; `work` (`worker.rs`) takes
//! queued work (approved, accepted without waiting, or left by a previous process) through them
//! again from validation on, under the rules of this process. Each kind of work (a script, a script with a
//! workspace, a job) has its own arm in the validate step (`check.rs`) and in the sandbox call
//! (`run`); everything else is shared.

use std::sync::Arc;
use std::time::Instant;

use time::OffsetDateTime;
use uuid::Uuid;

use super::check::{self, CheckDeps, Checked, Cleared, Refusal};
use super::outcome::{Ended, ms};
use super::prerun::Review;
use super::worker::retryable;
use super::{ExecError, Executions, Submitted, audit};
use crate::auth::Caller;
use crate::domain::content::ContentVerdict;
use crate::domain::record::{
    ErrorKind, ExecutionError, ExecutionRecord, RunResult, StageMs, Status, sha256_hex,
};
use crate::domain::script::Script;
use crate::domain::verdict::{Finding, Layer, Severity, Verdict};
use crate::domain::work::Work;
use crate::sandbox::{JOB_LANGUAGE, Lease, SandboxError};
use crate::store::{AuditEvent, Transition};

/// Where a validated submission goes next.
#[derive(Debug)]
enum Next {
    /// Refused before it ran (validation, or a job's constraints): it ends here.
    Reject(Refusal),
    /// An operator decides first.
    Hold,
    /// A worker runs it; the caller reads the result later.
    Queue,
    /// It runs within the call.
    Run(Cleared),
}

/// A submission with its verdicts, before it has a record.
struct Intake<'a> {
    caller: &'a Caller,
    work: Work,
    verdict: Verdict,
    contents: Vec<ContentVerdict>,
    /// The run-time policy's decisions before the run.
    review: Review,
    started: Instant,
    validate_ms: u64,
}

impl Intake<'_> {
    fn record(&self, id: Uuid, status: Status) -> ExecutionRecord {
        let now = OffsetDateTime::now_utc();
        ExecutionRecord {
            id,
            agent: self.caller.name.clone(),
            status,
            run: self.work.clone(),
            script_sha256: sha256_hex(&self.work.text()),
            created_at: now,
            updated_at: now,
            verdict: self.verdict.clone(),
            contents: self.contents.clone(),
            result: None,
            error: None,
            approval: None,
            policy_checks: self.review.checks.clone(),
            timings: StageMs {
                validate: self.validate_ms,
                ..StageMs::default()
            },
            duration_ms: 0,
        }
    }

    /// The audit entries every new record starts with.
    fn events(&self, rec: &ExecutionRecord) -> Vec<AuditEvent> {
        let mut events = vec![
            audit::request(rec, &self.caller.name),
            audit::validation(rec, &rec.verdict),
        ];
        events.extend(audit::policy_checks(rec));
        events
    }
}

impl Executions {
    /// Validation is CPU work of up to a few milliseconds: it runs on the blocking pool.
    pub(crate) async fn validate(&self, script: Script) -> Verdict {
        let validator = self.validator.clone();
        let language = script.language;
        let verdict = tokio::task::spawn_blocking(move || validator.validate(&script))
            .await
            .unwrap_or_else(|e| {
                // A panic in validation must not take the request down: fail closed.
                tracing::error!(error = %e, "validation task failed");
                validator_failure(language)
            });
        crate::metrics::validated(&verdict);
        verdict
    }

    /// The validate step (`check.rs`): CPU work of up to a few milliseconds per program, on the
    /// blocking pool.
    pub(crate) async fn check(&self, work: &Work) -> Checked {
        let validator = self.validator.clone();
        let maxima = self.job_maxima.clone();
        let output_bytes = self.output_bytes;
        let policy = work
            .policy()
            .and_then(|name| Some((name.to_string(), self.run_policies.compiled(name)?)));
        let owned = work.clone();
        tokio::task::spawn_blocking(move || {
            let deps = CheckDeps {
                validator: &validator,
                maxima: &maxima,
                output_bytes,
                policy: policy.as_ref().map(|(name, p)| (name.as_str(), &**p)),
            };
            check::check(deps, &owned)
        })
        .await
        .unwrap_or_else(|e| {
            // A panic in validation must not take the request down: fail closed.
            tracing::error!(error = %e, "validation task failed");
            let language = work.script().map_or(JOB_LANGUAGE, |s| s.script.language);
            Checked {
                verdict: validator_failure(language),
                contents: Vec::new(),
                review: Review::default(),
                outcome: Err(Refusal::Invalid),
            }
        })
    }

    /// Validates and, unless it must wait (approval, or `wait_for_result` is false), runs the
    /// work within the call. A job whose `job_id` is taken is refused before anything else.
    pub(crate) async fn submit(
        self: &Arc<Self>,
        caller: &Caller,
        work: Work,
        wait_for_result: bool,
    ) -> Result<Submitted, ExecError> {
        let started = Instant::now();
        if let Some(job) = work.job()
            && self.store.by_job(job.job_id).await?.is_some()
        {
            return Err(ExecError::DuplicateJob(job.job_id));
        }
        let Checked {
            verdict,
            contents,
            review,
            outcome,
        } = self.check(&work).await;
        let intake = Intake {
            caller,
            work,
            verdict,
            contents,
            review,
            started,
            validate_ms: ms(started.elapsed()),
        };
        match self.next(&intake, outcome, wait_for_result) {
            Next::Reject(refusal) => self.reject(intake, refusal).await,
            Next::Hold => self.hold(intake).await,
            Next::Queue => self.enqueue(intake).await,
            Next::Run(cleared) => self.run_now(intake, cleared).await,
        }
    }

    /// Only cleared work runs; the approval policy (or an `approve` of the run's policy) and the
    /// caller decide when.
    fn next(
        &self,
        intake: &Intake<'_>,
        outcome: Result<Cleared, Refusal>,
        wait_for_result: bool,
    ) -> Next {
        let cleared = match outcome {
            Ok(cleared) => cleared,
            Err(refusal) => return Next::Reject(refusal),
        };
        if self.policy.requires(&intake.verdict) || intake.review.holds() {
            Next::Hold
        } else if wait_for_result {
            Next::Run(cleared)
        } else {
            Next::Queue
        }
    }

    async fn reject(&self, intake: Intake<'_>, refusal: Refusal) -> Result<Submitted, ExecError> {
        let mut rec = intake.record(Uuid::new_v4(), Status::Completed);
        let events = intake.events(&rec);
        refused(&mut rec, refusal, intake.started);
        self.create(&rec, events).await?;
        Ok(Submitted::Finished(rec))
    }

    async fn hold(&self, intake: Intake<'_>) -> Result<Submitted, ExecError> {
        let rec = intake.record(Uuid::new_v4(), Status::PendingApproval);
        let mut events = intake.events(&rec);
        events.push(audit::approval_requested(&rec, self.policy.mode));
        self.create(&rec, events).await?;
        Ok(Submitted::Accepted(rec))
    }

    async fn enqueue(self: &Arc<Self>, intake: Intake<'_>) -> Result<Submitted, ExecError> {
        let rec = intake.record(Uuid::new_v4(), Status::Queued);
        let mut events = intake.events(&rec);
        events.push(audit::queued(&rec));
        self.create(&rec, events).await?;
        self.spawn_worker(rec.id);
        Ok(Submitted::Accepted(rec))
    }

    async fn run_now(
        self: &Arc<Self>,
        intake: Intake<'_>,
        cleared: Cleared,
    ) -> Result<Submitted, ExecError> {
        let waited = Instant::now();
        let _slot = self.admission.admit().await?;
        let queue_ms = ms(waited.elapsed());
        let lease = match self.acquire(&intake.work, None).await {
            Ok(lease) => lease,
            Err(e) if retryable(&e) => return Err(ExecError::Unavailable(e)),
            Err(e) => return self.failed_to_start(intake, &e).await,
        };
        let mut rec = intake.record(lease.execution_id(), Status::Running);
        rec.timings.queue = queue_ms;
        let mut events = intake.events(&rec);
        events.push(audit::run_started(&rec, lease.warm()));
        self.create(&rec, events).await?;
        // If the caller goes away mid-run, the lease (and its container) is dropped with this
        // future; the guard then records the execution as failed.
        let guard = Interrupted::new(self, rec.id);
        let rec = self.run(&rec, lease, cleared, intake.started).await?;
        guard.disarm();
        Ok(Submitted::Finished(rec))
    }

    async fn failed_to_start(
        &self,
        intake: Intake<'_>,
        e: &SandboxError,
    ) -> Result<Submitted, ExecError> {
        tracing::error!(error = %e, "sandbox failure");
        let mut rec = intake.record(Uuid::new_v4(), Status::Failed);
        rec.error = Some(ExecutionError::new(
            ErrorKind::InternalError,
            "the sandbox failed to start",
        ));
        let mut events = intake.events(&rec);
        events.push(audit::failed(&rec, "failed", &e.to_string()));
        self.create(&rec, events).await?;
        Ok(Submitted::Finished(rec))
    }

    /// A sandbox in the work's profile (warm when none is imposed and one waits): a script's
    /// language, or the container jobs run in.
    pub(super) async fn acquire(
        &self,
        work: &Work,
        id: Option<Uuid>,
    ) -> Result<Box<dyn Lease>, SandboxError> {
        let language = match work {
            Work::Script(s) if !s.has_workspace() => s.script.language,
            _ => JOB_LANGUAGE,
        };
        self.runner.acquire_in(work.profile(), language, id).await
    }

    /// The sandbox call, then the record of how it ended (from `running`, once).
    pub(super) async fn run(
        &self,
        rec: &ExecutionRecord,
        lease: Box<dyn Lease>,
        cleared: Cleared,
        started: Instant,
    ) -> Result<ExecutionRecord, ExecError> {
        let timeout = std::time::Duration::from_secs(rec.run.timeout_secs());
        let mut ended = match cleared {
            Cleared::Script(spec) => {
                let id = lease.execution_id();
                match self.sandbox_call(rec, lease, spec).await {
                    Ok((outcome, events)) => {
                        let mut ended =
                            Ended::of(outcome, timeout, self.memory_mb, &self.artifacts, started);
                        ended.set_events(events);
                        ended
                    }
                    Err(reason) => Ended::network_unavailable(id, reason, started),
                }
            }
            // Runs with a workspace (and jobs) go through the job agent, under the run's policy.
            Cleared::Job(job) => {
                let id = lease.execution_id();
                match self.job_call(rec, lease, *job).await {
                    Ok(outcome) => self.ended_job(&rec.run, outcome, started).await,
                    Err(reason) => Ended::network_unavailable(id, reason, started),
                }
            }
        };
        if self.settings.redact_output_secrets {
            ended.redact(&self.validator);
        }
        let cap = self.run_policies.policies().settings().event_cap;
        let t = self
            .transition(rec.id, &[Status::Running], move |r| {
                ended.apply(r);
                let mut entries = vec![audit::run_finished(r)];
                entries.extend(audit::policy_decisions(r));
                // After the run's own decisions: the service's file operations were audited
                // before the run, with the other pre-run decisions.
                super::filerules::host_events(r, cap);
                entries.extend(super::network::network_decisions(r));
                entries
            })
            .await?;
        match t {
            Transition::Applied(rec) => Ok(*rec),
            // Something else ended it first (nothing does today): what is stored is the answer.
            _ => self.store.get(rec.id).await?.ok_or(ExecError::NotFound),
        }
    }
}

/// The verdict of work whose validation could not complete: it does not run.
fn validator_failure(language: crate::domain::script::Language) -> Verdict {
    Verdict {
        language,
        valid: false,
        layer: Some(Layer::Syntax),
        findings: vec![Finding {
            layer: Layer::Syntax,
            rule: "validator-failure".into(),
            severity: Severity::Block,
            message: "the script could not be validated".into(),
            line: 1,
            column: 1,
        }],
    }
}

/// Ends a record refused before it ran: rejected by validation, or (a job) refused with its
/// complete result.
pub(super) fn refused(rec: &mut ExecutionRecord, refusal: Refusal, started: Instant) {
    match refusal {
        Refusal::Invalid => rejected(rec, started),
        Refusal::Refused { error, result } => {
            rec.status = Status::Completed;
            rec.error = Some(error);
            rec.result = result.map(|job| RunResult {
                job: Some(job),
                ..RunResult::default()
            });
            withhold_secrets(rec);
            rec.duration_ms = ms(started.elapsed());
        }
    }
}

/// Ends a record as rejected by validation.
fn rejected(rec: &mut ExecutionRecord, started: Instant) {
    rec.status = Status::Completed;
    rec.error = Some(ExecutionError::new(
        ErrorKind::ValidationFailed,
        rec.verdict.summary(),
    ));
    withhold_secrets(rec);
    rec.duration_ms = ms(started.elapsed());
}

/// Work with a secret is never at rest in clear: the record keeps its hash and the redacted
/// findings only.
fn withhold_secrets(rec: &mut ExecutionRecord) {
    if rec
        .verdict
        .findings
        .iter()
        .any(|f| f.layer == Layer::Secrets)
    {
        rec.run.withhold();
    }
}

/// Marks a synchronous run as failed if its request is dropped (the client went away) before the
/// result was recorded; the lease, and with it the container, is dropped with the request.
struct Interrupted {
    executions: Arc<Executions>,
    id: Uuid,
    armed: bool,
}

impl Interrupted {
    fn new(executions: &Arc<Executions>, id: Uuid) -> Self {
        Interrupted {
            executions: executions.clone(),
            id,
            armed: true,
        }
    }

    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Interrupted {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let executions = self.executions.clone();
        let id = self.id;
        self.executions.tasks.spawn(async move {
            let reason = "the client disconnected before the result; the script was stopped";
            if let Err(e) = executions.fail(id, &[Status::Running], "client_disconnected", reason).await {
                tracing::warn!(execution_id = %id, error = %e, "could not record an interrupted execution");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::script::Language;
    use crate::domain::work::ScriptRun;

    #[test]
    fn a_rejected_secret_is_withheld_and_the_error_says_why() {
        let now = OffsetDateTime::now_utc();
        let finding = Finding {
            layer: Layer::Secrets,
            rule: "github-pat".into(),
            severity: Severity::Block,
            message: "a GitHub token".into(),
            line: 1,
            column: 9,
        };
        let mut rec = ExecutionRecord {
            id: Uuid::nil(),
            agent: "bot".into(),
            status: Status::Queued,
            run: Work::Script(ScriptRun::new(
                Script::new(Language::Python, "token = 'ghp_x'"),
                "stdin".into(),
                std::time::Duration::from_secs(1),
                "minimal".into(),
            )),
            script_sha256: "h".into(),
            created_at: now,
            updated_at: now,
            verdict: Verdict {
                language: Language::Python,
                valid: false,
                layer: Some(Layer::Secrets),
                findings: vec![finding],
            },
            contents: Vec::new(),
            result: None,
            error: None,
            approval: None,
            policy_checks: Vec::new(),
            timings: StageMs::default(),
            duration_ms: 0,
        };
        rejected(&mut rec, Instant::now());
        assert_eq!(rec.status, Status::Completed);
        assert_eq!(
            rec.error.as_ref().map(|e| e.kind),
            Some(ErrorKind::ValidationFailed)
        );
        let run = rec.run.script().expect("a script");
        assert!(!run.script.text.contains("ghp_"));
        assert!(run.stdin.is_empty());
    }
}
