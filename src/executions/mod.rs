//! Executions: every submitted script from request to terminal status, recorded durably with its
//! audit trail, under the approval policy.
//!
//! ```text
//! submit ─► validate ─┬─ invalid ──────────────────────────────► completed (validation_failed)
//!                     ├─ approval required ─► pending_approval ─┬─ approve ─► queued ─► running ─► completed | failed
//!                     │                                         ├─ deny ────► denied
//!                     │                                         └─ timeout ─► expired
//!                     └─ otherwise ─► running (synchronous) or queued (asynchronous) ─► …
//! ```
//! The record is written before the script runs, so a crash mid-run reads as `failed`
//! ("interrupted") after a restart; queued work and pending approvals survive restarts.

pub use crate::domain::record::ApprovalMode;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use time::OffsetDateTime;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::artifacts::ArtifactStore;
use crate::auth::{Caller, Role};
use crate::domain::record::{
    Approval, Decision, ExecutionRecord, RunResult, StageMs, Status, sha256_hex,
};
use crate::domain::verdict::{Layer, Verdict};
use crate::gate::{ErrorKind, ExecuteRequest, ExecutionError, Gate, GateError};
use crate::sandbox::{Lease, RunOutcome, RunSpec};
use crate::store::{AuditEvent, Store, StoreError, Transition};

/// The actor recorded for the service's own events.
const SERVICE: &str = "scriptgate";

#[derive(Debug, Clone, Copy)]
pub struct ApprovalPolicy {
    pub mode: ApprovalMode,
    pub timeout: Duration,
}

impl ApprovalPolicy {
    pub fn requires(&self, verdict: &Verdict) -> bool {
        match self.mode {
            ApprovalMode::Never => false,
            ApprovalMode::Always => true,
            ApprovalMode::OnWarn => verdict.has_warnings(),
        }
    }
}

/// What a submission became.
#[derive(Debug, Clone)]
pub enum Submitted {
    /// Ran (or was rejected) within the request.
    Finished(ExecutionRecord),
    /// Waits for an approval or a slot; read it later.
    Accepted(ExecutionRecord),
}

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error(transparent)]
    Gate(#[from] GateError),
    #[error("no such execution")]
    NotFound,
    #[error("the execution is {} and cannot be decided", .0.as_str())]
    Conflict(Status),
    #[error(transparent)]
    Store(#[from] StoreError),
}

#[derive(Debug)]
pub struct Executions {
    gate: Arc<Gate>,
    store: Store,
    policy: ApprovalPolicy,
    watchers: Mutex<HashMap<Uuid, watch::Sender<Status>>>,
    tasks: TaskTracker,
    shutdown: CancellationToken,
    artifacts: ArtifactStore,
}

/// Every execution that reaches a terminal status passes here once: a log line that carries its
/// id (inside the request's span, so with the request id too) and the metrics.
fn finished(rec: &ExecutionRecord) {
    tracing::info!(
        execution_id = %rec.id,
        agent = %rec.agent,
        language = rec.language.as_str(),
        status = rec.status.as_str(),
        error = rec.error.as_ref().map(|e| e.kind.as_str()),
        exit_code = rec.result.as_ref().and_then(|r| r.exit_code),
        duration_ms = rec.duration_ms,
        "execution finished"
    );
    crate::metrics::finished(rec);
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn verdict_outcome(v: &Verdict) -> serde_json::Value {
    json!({
        "valid": v.valid,
        "layer": v.layer,
        "findings": v.findings.iter().map(|f| json!({
            "layer": f.layer, "rule": f.rule, "severity": f.severity, "line": f.line, "message": f.message,
        })).collect::<Vec<_>>(),
    })
}

impl Executions {
    /// Recovers state left by a previous process (running → failed, queued → resumed) and starts
    /// the approval-expiry sweeper.
    pub async fn start(
        gate: Arc<Gate>,
        store: Store,
        policy: ApprovalPolicy,
        artifacts: ArtifactStore,
    ) -> Result<Arc<Executions>, StoreError> {
        let this = Arc::new(Executions {
            artifacts,
            gate,
            store,
            policy,
            watchers: Mutex::new(HashMap::new()),
            tasks: TaskTracker::new(),
            shutdown: CancellationToken::new(),
        });
        let interrupted = this.store.with_status(Status::Running).await?;
        for rec in &interrupted {
            this.fail(
                rec.id,
                &[Status::Running],
                "interrupted",
                "interrupted: the service stopped while the script ran",
            )
            .await?;
        }
        let queued = this.store.with_status(Status::Queued).await?;
        if !interrupted.is_empty() || !queued.is_empty() {
            tracing::info!(
                interrupted = interrupted.len(),
                resumed = queued.len(),
                "recovered executions from the previous run"
            );
        }
        for rec in queued {
            this.spawn_worker(rec.id);
        }
        let sweeper = this.clone();
        this.tasks.spawn(async move { sweeper.expire_loop().await });
        Ok(this)
    }

    pub fn gate(&self) -> &Arc<Gate> {
        &self.gate
    }

    pub fn policy(&self) -> ApprovalPolicy {
        self.policy
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn artifacts(&self) -> &ArtifactStore {
        &self.artifacts
    }

    fn new_record(
        &self,
        id: Uuid,
        caller: &Caller,
        req: &ExecuteRequest,
        verdict: Verdict,
        status: Status,
    ) -> ExecutionRecord {
        let now = OffsetDateTime::now_utc();
        ExecutionRecord {
            id,
            agent: caller.name.clone(),
            status,
            language: req.script.language,
            profile: req.profile.clone(),
            script: req.script.text.clone(),
            stdin: req.stdin.clone(),
            timeout_secs: req.timeout.as_secs(),
            script_sha256: sha256_hex(&req.script.text),
            created_at: now,
            updated_at: now,
            verdict,
            result: None,
            error: None,
            approval: None,
            timings: StageMs::default(),
            duration_ms: 0,
        }
    }

    fn event(
        &self,
        rec: &ExecutionRecord,
        actor: &str,
        event: &'static str,
        outcome: serde_json::Value,
    ) -> AuditEvent {
        AuditEvent::new(actor, rec.id, event, &rec.script_sha256, outcome)
    }

    fn intake_events(
        &self,
        rec: &ExecutionRecord,
        caller: &Caller,
        req: &ExecuteRequest,
    ) -> Vec<AuditEvent> {
        vec![
            self.event(
                rec,
                &caller.name,
                "request",
                json!({
                    "language": req.script.language, "timeout_secs": req.timeout.as_secs(),
                    "script_chars": req.script.text.chars().count(), "stdin_bytes": req.stdin.len(),
                }),
            ),
            self.event(rec, SERVICE, "validation", verdict_outcome(&rec.verdict)),
        ]
    }

    /// Validates and, unless it must wait (approval, or `wait_for_result` is false), runs the
    /// script within the call.
    pub async fn submit(
        self: &Arc<Self>,
        caller: &Caller,
        req: ExecuteRequest,
        wait_for_result: bool,
    ) -> Result<Submitted, ExecError> {
        let started = Instant::now();
        let verdict = self.gate.validate(req.script.clone()).await;
        let validate_ms = ms(started.elapsed());
        if !verdict.valid {
            let mut rec = self.new_record(Uuid::new_v4(), caller, &req, verdict, Status::Completed);
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
                // Never at rest in clear: the record keeps the hash and the redacted findings only.
                rec.script = "[withheld: the script contains a secret]".into();
                rec.stdin = String::new();
            }
            rec.timings.validate = validate_ms;
            rec.duration_ms = ms(started.elapsed());
            let events = self.intake_events(&rec, caller, &req);
            self.store.save(&rec, events).await?;
            finished(&rec);
            return Ok(Submitted::Finished(rec));
        }
        if self.policy.requires(&verdict) {
            let mut rec = self.new_record(
                Uuid::new_v4(),
                caller,
                &req,
                verdict,
                Status::PendingApproval,
            );
            rec.timings.validate = validate_ms;
            let mut events = self.intake_events(&rec, caller, &req);
            events.push(self.event(
                &rec,
                SERVICE,
                "approval_requested",
                json!({"mode": self.policy.mode}),
            ));
            self.store.save(&rec, events).await?;
            return Ok(Submitted::Accepted(rec));
        }
        if !wait_for_result {
            let mut rec = self.new_record(Uuid::new_v4(), caller, &req, verdict, Status::Queued);
            rec.timings.validate = validate_ms;
            let mut events = self.intake_events(&rec, caller, &req);
            events.push(self.event(&rec, SERVICE, "queued", json!({})));
            self.store.save(&rec, events).await?;
            self.spawn_worker(rec.id);
            return Ok(Submitted::Accepted(rec));
        }
        let queued = Instant::now();
        let _permit = self.gate.admit().await?;
        let queue_ms = ms(queued.elapsed());
        let lease = match self
            .gate
            .acquire_in(&req.profile, req.script.language, None)
            .await
        {
            Ok(lease) => lease,
            Err(GateError::SandboxFailed(reason)) => {
                let mut rec =
                    self.new_record(Uuid::new_v4(), caller, &req, verdict, Status::Failed);
                rec.error = Some(ExecutionError::new(
                    ErrorKind::InternalError,
                    "the sandbox failed to start",
                ));
                rec.timings.validate = validate_ms;
                let mut events = self.intake_events(&rec, caller, &req);
                events.push(self.event(&rec, SERVICE, "failed", json!({"reason": reason})));
                self.store.save(&rec, events).await?;
                finished(&rec);
                return Ok(Submitted::Finished(rec));
            }
            Err(e) => return Err(e.into()),
        };
        let mut rec = self.new_record(lease.execution_id(), caller, &req, verdict, Status::Running);
        rec.timings.validate = validate_ms;
        rec.timings.queue = queue_ms;
        let mut events = self.intake_events(&rec, caller, &req);
        events.push(self.event(&rec, SERVICE, "run_started", json!({"warm": lease.warm()})));
        self.store.save(&rec, events).await?;
        // If the caller goes away mid-run, the lease (and its container) is dropped with this
        // future; the guard then records the execution as failed.
        let guard = Interrupted::new(self, rec.id);
        let rec = self.run_lease(rec, lease, &req, started).await?;
        guard.disarm();
        Ok(Submitted::Finished(rec))
    }

    async fn run_lease(
        &self,
        mut rec: ExecutionRecord,
        lease: Box<dyn Lease>,
        req: &ExecuteRequest,
        started: Instant,
    ) -> Result<ExecutionRecord, StoreError> {
        let outcome = lease
            .run(RunSpec {
                script: req.script.text.clone(),
                stdin: req.stdin.clone(),
                timeout: req.timeout,
            })
            .await;
        self.finish(&mut rec, &outcome, req.timeout, started);
        let event = self.event(&rec, SERVICE, "run_finished", json!({
            "status": rec.status, "exit_code": outcome.exit_code, "timed_out": outcome.timed_out,
            "oom_killed": outcome.oom_killed, "error": rec.error.as_ref().map(|e| e.kind),
            "container_id": outcome.container_id, "cpu_time_ms": outcome.usage.cpu_time_ms,
            "max_memory_bytes": outcome.usage.max_memory_bytes, "duration_ms": rec.duration_ms,
        }));
        self.store.save(&rec, vec![event]).await?;
        self.notify(rec.id, rec.status);
        finished(&rec);
        Ok(rec)
    }

    fn finish(
        &self,
        rec: &mut ExecutionRecord,
        o: &RunOutcome,
        timeout: Duration,
        started: Instant,
    ) {
        rec.error = self.gate.classify(o, timeout);
        rec.status = match &rec.error {
            Some(e) if e.kind == ErrorKind::InternalError => Status::Failed,
            _ => Status::Completed,
        };
        let files: Vec<(String, Vec<u8>)> = o
            .files
            .iter()
            .map(|f| (f.path.clone(), f.data.clone()))
            .collect();
        let (artifacts, dropped) = self.artifacts.put_all(&files);
        rec.result = Some(RunResult {
            exit_code: o.exit_code,
            signal: o.signal,
            stdout: o.stdout.text(),
            stderr: o.stderr.text(),
            stdout_truncated: o.stdout.truncated(),
            stderr_truncated: o.stderr.truncated(),
            timed_out: o.timed_out,
            oom_killed: o.oom_killed,
            cpu_time_ms: o.usage.cpu_time_ms,
            max_memory_bytes: o.usage.max_memory_bytes,
            warm: o.warm,
            container_id: o.container_id.clone(),
            artifacts,
            artifacts_dropped: dropped + o.files_dropped,
            provenance: o.provenance.clone(),
        });
        rec.timings.create = ms(o.timings.create);
        rec.timings.start = ms(o.timings.start);
        rec.timings.run = ms(o.timings.run);
        rec.timings.cleanup = ms(o.timings.cleanup);
        rec.duration_ms = ms(started.elapsed());
        rec.updated_at = OffsetDateTime::now_utc();
    }

    fn spawn_worker(self: &Arc<Self>, id: Uuid) {
        let this = self.clone();
        self.tasks.spawn(async move {
            if let Err(e) = this.work(id).await {
                tracing::error!(execution_id = %id, error = %e, "background execution failed");
            }
        });
    }

    /// Runs one queued execution: waits for a slot and a sandbox (retrying while the engine is
    /// away), then runs it.
    async fn work(self: Arc<Self>, id: Uuid) -> Result<(), StoreError> {
        let started = Instant::now();
        let (lease, _permit) = loop {
            let Some(rec) = self.store.get(id).await? else {
                return Ok(());
            };
            if rec.status != Status::Queued {
                return Ok(());
            }
            let permit = tokio::select! {
                p = self.gate.admit_background() => p,
                _ = self.shutdown.cancelled() => return Ok(()),
            };
            let Ok(permit) = permit else { return Ok(()) };
            match self
                .gate
                .acquire_in(&rec.profile, rec.language, Some(id))
                .await
            {
                Ok(lease) => break (lease, permit),
                Err(GateError::SandboxFailed(reason)) => {
                    return self.fail(id, &[Status::Queued], "failed", &reason).await;
                }
                Err(e) => {
                    // Accepted work is never dropped: retry until the engine is back (or shutdown).
                    tracing::warn!(execution_id = %id, error = %e, "sandbox unavailable; the execution stays queued");
                    drop(permit);
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(2)) => continue,
                        _ = self.shutdown.cancelled() => return Ok(()),
                    }
                }
            }
        };
        let warm = lease.warm();
        let started_event = move |r: &mut ExecutionRecord| {
            r.status = Status::Running;
            vec![AuditEvent::new(
                SERVICE,
                r.id,
                "run_started",
                &r.script_sha256,
                json!({"warm": warm}),
            )]
        };
        let rec = match self
            .store
            .transition(id, &[Status::Queued], started_event)
            .await?
        {
            Transition::Applied(r) => *r,
            _ => return Ok(()),
        };
        self.notify(id, Status::Running);
        let req = ExecuteRequest {
            script: crate::domain::script::Script::new(rec.language, rec.script.clone()),
            timeout: Duration::from_secs(rec.timeout_secs),
            stdin: rec.stdin.clone(),
            profile: rec.profile.clone(),
        };
        self.run_lease(rec, lease, &req, started).await.map(|_| ())
    }

    async fn fail(
        &self,
        id: Uuid,
        from: &'static [Status],
        event: &'static str,
        reason: &str,
    ) -> Result<(), StoreError> {
        let reason = reason.to_string();
        let t = self
            .store
            .transition(id, from, move |r| {
                r.status = Status::Failed;
                r.error = Some(ExecutionError::new(
                    ErrorKind::InternalError,
                    reason.clone(),
                ));
                vec![AuditEvent::new(
                    SERVICE,
                    r.id,
                    event,
                    &r.script_sha256,
                    json!({"reason": reason}),
                )]
            })
            .await?;
        if let Transition::Applied(r) = t {
            self.notify(id, r.status);
            finished(&r);
        }
        Ok(())
    }

    /// An operator's decision on a pending execution.
    pub async fn decide(
        self: &Arc<Self>,
        operator: &Caller,
        id: Uuid,
        decision: Decision,
        reason: String,
    ) -> Result<ExecutionRecord, ExecError> {
        self.expire_due().await?;
        let by = operator.name.clone();
        let t = self
            .store
            .transition(id, &[Status::PendingApproval], move |r| {
                let at = OffsetDateTime::now_utc();
                r.approval = Some(Approval {
                    decision,
                    by: by.clone(),
                    reason: reason.clone(),
                    at,
                });
                match decision {
                    Decision::Approve => r.status = Status::Queued,
                    Decision::Deny => {
                        r.status = Status::Denied;
                        let why = if reason.is_empty() {
                            "denied by an operator".to_string()
                        } else {
                            format!("denied by {by}: {reason}")
                        };
                        r.error = Some(ExecutionError::new(ErrorKind::Denied, why));
                    }
                }
                vec![AuditEvent::new(
                    &by,
                    r.id,
                    "approval_decision",
                    &r.script_sha256,
                    json!({"decision": decision, "reason": reason}),
                )]
            })
            .await?;
        match t {
            Transition::Applied(rec) => {
                self.notify(id, rec.status);
                finished(&rec);
                if rec.status == Status::Queued {
                    self.spawn_worker(id);
                }
                Ok(*rec)
            }
            Transition::Conflict(status) => Err(ExecError::Conflict(status)),
            Transition::Missing => Err(ExecError::NotFound),
        }
    }

    /// Executions waiting for an operator, oldest first.
    pub async fn pending(&self) -> Result<Vec<ExecutionRecord>, ExecError> {
        self.expire_due().await?;
        Ok(self.store.with_status(Status::PendingApproval).await?)
    }

    /// An execution the caller may see (agents see their own), waiting up to `wait` for a terminal
    /// status.
    pub async fn get(
        &self,
        caller: &Caller,
        id: Uuid,
        wait: Duration,
    ) -> Result<ExecutionRecord, ExecError> {
        let mut changes = self.watch(id);
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let rec = self.store.get(id).await?.ok_or(ExecError::NotFound)?;
            if !caller.is(Role::Operator) && rec.agent != caller.name {
                return Err(ExecError::NotFound);
            }
            if rec.status.is_terminal() || wait.is_zero() {
                return Ok(rec);
            }
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { changes = self.watch(id); },
                _ = tokio::time::sleep_until(deadline) => return Ok(rec),
            }
        }
    }

    fn watch(&self, id: Uuid) -> watch::Receiver<Status> {
        let mut map = self.watchers.lock().expect("watchers lock");
        map.entry(id)
            .or_insert_with(|| watch::channel(Status::Queued).0)
            .subscribe()
    }

    fn notify(&self, id: Uuid, status: Status) {
        let mut map = self.watchers.lock().expect("watchers lock");
        if let Some(tx) = map.get(&id) {
            let _ = tx.send(status);
            if status.is_terminal() {
                map.remove(&id);
            }
        }
    }

    /// Pending executions past the approval timeout become `expired`.
    async fn expire_due(&self) -> Result<(), StoreError> {
        let timeout = self.policy.timeout;
        for rec in self.store.with_status(Status::PendingApproval).await? {
            let age = OffsetDateTime::now_utc() - rec.created_at;
            if age < timeout {
                continue;
            }
            let secs = timeout.as_secs();
            let t = self
                .store
                .transition(rec.id, &[Status::PendingApproval], move |r| {
                    r.status = Status::Expired;
                    r.error = Some(ExecutionError::new(
                        ErrorKind::ApprovalTimeout,
                        format!("no operator decided within {secs}s"),
                    ));
                    vec![AuditEvent::new(
                        SERVICE,
                        r.id,
                        "expired",
                        &r.script_sha256,
                        json!({"after_secs": secs}),
                    )]
                })
                .await?;
            if let Transition::Applied(r) = t {
                self.notify(r.id, r.status);
                finished(&r);
            }
        }
        Ok(())
    }

    async fn expire_loop(self: Arc<Self>) {
        let period =
            (self.policy.timeout / 10).clamp(Duration::from_millis(200), Duration::from_secs(5));
        loop {
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = self.shutdown.cancelled() => return,
            }
            if let Err(e) = self.expire_due().await {
                tracing::warn!(error = %e, "approval expiry sweep failed");
            }
        }
    }

    /// Stops background work: queued executions stay queued (resumed at the next start), running
    /// ones finish within their timeout.
    pub async fn shutdown(&self) {
        self.shutdown.cancel();
        self.tasks.close();
        self.tasks.wait().await;
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
