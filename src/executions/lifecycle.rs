//! The steps every run goes through: validate, decide where it goes next, admit, acquire a
//! sandbox, run, record. `submit` takes a new submission through them; `work` takes queued work
//! (approved, accepted without waiting, or left by a previous process) through them again from
//! validation on, under the rules of this process.

use std::sync::Arc;
use std::time::Instant;

use time::OffsetDateTime;
use uuid::Uuid;

use super::admission::Slot;
use super::outcome::{Ended, ms};
use super::{ExecError, Executions, Submitted, audit};
use crate::auth::Caller;
use crate::domain::record::{
    ErrorKind, ExecutionError, ExecutionRecord, StageMs, Status, sha256_hex,
};
use crate::domain::script::Script;
use crate::domain::verdict::{Finding, Layer, Severity, Verdict};
use crate::domain::work::ScriptRun;
use crate::sandbox::{Lease, RunSpec, SandboxError};
use crate::store::{AuditEvent, StoreError, Transition};

/// Where a validated submission goes next.
#[derive(Debug)]
enum Next {
    /// Validation rejected it: it ends here.
    Reject,
    /// An operator decides first.
    Hold,
    /// A worker runs it; the caller reads the result later.
    Queue,
    /// It runs within the call.
    Run(RunSpec),
}

/// A submission with its verdict, before it has a record.
struct Intake<'a> {
    caller: &'a Caller,
    work: ScriptRun,
    verdict: Verdict,
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
            script_sha256: sha256_hex(&self.work.script.text),
            created_at: now,
            updated_at: now,
            verdict: self.verdict.clone(),
            result: None,
            error: None,
            approval: None,
            timings: StageMs {
                validate: self.validate_ms,
                ..StageMs::default()
            },
            duration_ms: 0,
        }
    }

    /// The audit entries every new record starts with.
    fn events(&self, rec: &ExecutionRecord) -> Vec<AuditEvent> {
        vec![
            audit::request(rec, &self.caller.name),
            audit::validation(rec, &rec.verdict),
        ]
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
            });
        crate::metrics::validated(&verdict);
        verdict
    }

    /// Validates and, unless it must wait (approval, or `wait_for_result` is false), runs the
    /// script within the call.
    pub(crate) async fn submit(
        self: &Arc<Self>,
        caller: &Caller,
        work: ScriptRun,
        wait_for_result: bool,
    ) -> Result<Submitted, ExecError> {
        let started = Instant::now();
        let verdict = self.validate(work.script.clone()).await;
        let intake = Intake {
            caller,
            work,
            verdict,
            started,
            validate_ms: ms(started.elapsed()),
        };
        match self.next(&intake, wait_for_result) {
            Next::Reject => self.reject(intake).await,
            Next::Hold => self.hold(intake).await,
            Next::Queue => self.enqueue(intake).await,
            Next::Run(spec) => self.run_now(intake, spec).await,
        }
    }

    /// Only a passing verdict yields the run; the approval policy and the caller decide when.
    fn next(&self, intake: &Intake<'_>, wait_for_result: bool) -> Next {
        let Ok(spec) = RunSpec::cleared(&intake.work, &intake.verdict) else {
            return Next::Reject;
        };
        if self.policy.requires(&intake.verdict) {
            Next::Hold
        } else if wait_for_result {
            Next::Run(spec)
        } else {
            Next::Queue
        }
    }

    async fn reject(&self, intake: Intake<'_>) -> Result<Submitted, ExecError> {
        let mut rec = intake.record(Uuid::new_v4(), Status::Completed);
        let events = intake.events(&rec);
        rejected(&mut rec, intake.started);
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
        spec: RunSpec,
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
        let rec = self.run(&rec, lease, spec, intake.started).await?;
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

    /// A sandbox in the work's profile (warm when none is imposed and one waits).
    async fn acquire(
        &self,
        work: &ScriptRun,
        id: Option<Uuid>,
    ) -> Result<Box<dyn Lease>, SandboxError> {
        self.runner
            .acquire_in(&work.profile, work.script.language, id)
            .await
    }

    /// The sandbox call, then the record of how it ended (from `running`, once).
    async fn run(
        &self,
        rec: &ExecutionRecord,
        lease: Box<dyn Lease>,
        spec: RunSpec,
        started: Instant,
    ) -> Result<ExecutionRecord, ExecError> {
        let (outcome, events) = self.sandbox_call(rec, lease, spec).await;
        let timeout = rec.run.timeout();
        let mut ended = Ended::of(outcome, timeout, self.memory_mb, &self.artifacts, started);
        ended.set_events(events);
        if self.settings.redact_output_secrets {
            ended.redact(&self.validator);
        }
        let t = self
            .transition(rec.id, &[Status::Running], move |r| {
                ended.apply(r);
                let mut entries = vec![audit::run_finished(r)];
                entries.extend(audit::policy_decisions(r));
                entries
            })
            .await?;
        match t {
            Transition::Applied(rec) => Ok(*rec),
            // Something else ended it first (nothing does today): what is stored is the answer.
            _ => self.store.get(rec.id).await?.ok_or(ExecError::NotFound),
        }
    }

    pub(super) fn spawn_worker(self: &Arc<Self>, id: Uuid) {
        let this = self.clone();
        self.tasks.spawn(async move {
            if let Err(e) = this.work(id).await {
                tracing::error!(execution_id = %id, error = %e, "background execution failed");
            }
        });
    }

    /// Runs one queued execution: validates it again, waits for a slot and a sandbox (retrying
    /// while the engine is away), then runs it.
    async fn work(self: Arc<Self>, id: Uuid) -> Result<(), ExecError> {
        let started = Instant::now();
        let Some(rec) = self.queued(id).await? else {
            return Ok(());
        };
        // The rules may have changed since it was accepted (a restart with other rules).
        let verdict = self.validate(rec.run.script.clone()).await;
        let Ok(spec) = RunSpec::cleared(&rec.run, &verdict) else {
            return Ok(self.reject_queued(id, verdict, started).await?);
        };
        let Some((lease, _slot)) = self.slot_and_sandbox(&rec).await? else {
            return Ok(());
        };
        let warm = lease.warm();
        let t = self
            .transition(id, &[Status::Queued], move |r| {
                r.status = Status::Running;
                vec![audit::run_started(r, warm)]
            })
            .await?;
        if let Transition::Applied(rec) = t {
            self.run(&rec, lease, spec, started).await?;
        }
        Ok(())
    }

    /// The record, while it is still queued.
    async fn queued(&self, id: Uuid) -> Result<Option<ExecutionRecord>, StoreError> {
        Ok(self
            .store
            .get(id)
            .await?
            .filter(|r| r.status == Status::Queued))
    }

    /// Queued work whose script no longer passes: it ends as a validation failure.
    async fn reject_queued(
        &self,
        id: Uuid,
        verdict: Verdict,
        started: Instant,
    ) -> Result<(), StoreError> {
        self.transition(id, &[Status::Queued], move |r| {
            r.verdict = verdict;
            let events = vec![audit::validation(r, &r.verdict)];
            rejected(r, started);
            events
        })
        .await
        .map(drop)
    }

    /// A run slot and a sandbox for queued work; `None` when it left the queue meanwhile, failed
    /// to start (recorded), or the service is stopping.
    async fn slot_and_sandbox(
        &self,
        rec: &ExecutionRecord,
    ) -> Result<Option<(Box<dyn Lease>, Slot)>, StoreError> {
        let id = rec.id;
        while self.queued(id).await?.is_some() {
            let slot = tokio::select! {
                s = self.admission.admit_background() => s,
                _ = self.shutdown.cancelled() => return Ok(None),
            };
            let Ok(slot) = slot else { return Ok(None) };
            match self.acquire(&rec.run, Some(id)).await {
                Ok(lease) => return Ok(Some((lease, slot))),
                Err(e) if retryable(&e) => {
                    // Accepted work is never dropped: retry until the engine is back (or shutdown).
                    tracing::warn!(execution_id = %id, error = %e, "sandbox unavailable; the execution stays queued");
                    drop(slot);
                    tokio::select! {
                        _ = tokio::time::sleep(std::time::Duration::from_secs(2)) => {}
                        _ = self.shutdown.cancelled() => return Ok(None),
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "sandbox failure");
                    self.fail(id, &[Status::Queued], "failed", &e.to_string())
                        .await?;
                    return Ok(None);
                }
            }
        }
        Ok(None)
    }
}

/// The engine or the runner image is away: worth retrying later, not a failure of this run.
fn retryable(e: &SandboxError) -> bool {
    matches!(
        e,
        SandboxError::EngineUnavailable(_) | SandboxError::ImageMissing(_)
    )
}

/// Ends a record as rejected by validation. A script with a secret is never at rest in clear:
/// the record keeps its hash and the redacted findings only.
fn rejected(rec: &mut ExecutionRecord, started: Instant) {
    rec.status = Status::Completed;
    rec.error = Some(ExecutionError::new(
        ErrorKind::ValidationFailed,
        rec.verdict.summary(),
    ));
    if rec
        .verdict
        .findings
        .iter()
        .any(|f| f.layer == Layer::Secrets)
    {
        rec.run.script.text = "[withheld: the script contains a secret]".into();
        rec.run.stdin = String::new();
    }
    rec.duration_ms = ms(started.elapsed());
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
            run: ScriptRun::new(
                Script::new(Language::Python, "token = 'ghp_x'"),
                "stdin".into(),
                std::time::Duration::from_secs(1),
                "minimal".into(),
            ),
            script_sha256: "h".into(),
            created_at: now,
            updated_at: now,
            verdict: Verdict {
                language: Language::Python,
                valid: false,
                layer: Some(Layer::Secrets),
                findings: vec![finding],
            },
            result: None,
            error: None,
            approval: None,
            timings: StageMs::default(),
            duration_ms: 0,
        };
        rejected(&mut rec, Instant::now());
        assert_eq!(rec.status, Status::Completed);
        assert_eq!(
            rec.error.as_ref().map(|e| e.kind),
            Some(ErrorKind::ValidationFailed)
        );
        assert!(!rec.run.script.text.contains("ghp_"));
        assert!(rec.run.stdin.is_empty());
    }
}
