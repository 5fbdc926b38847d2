//! Executions: every submitted run from request to terminal status, recorded durably with its
//! audit trail, under the approval policy.
//!
//! ```text
//! submit ─► validate ─┬─ invalid ──────────────────────────────► completed (validation_failed)
//!                     ├─ approval required ─► pending_approval ─┬─ approve ─► queued ─► (work) …
//!                     │                                         ├─ deny ────► denied
//!                     │                                         └─ timeout ─► expired
//!                     ├─ asynchronous ─► queued ─► (work) validate again ─► admit ─► sandbox ─► run ─► completed | failed
//!                     └─ synchronous ──────────────────────────────────► admit ─► sandbox ─► run ─► completed | failed
//! ```
//! The steps are in `lifecycle.rs`; each is a named function, and the sandbox call is one of them,
//! so another kind of work (a structured job, a session command) is another value the record
//! holds and another arm of that call, through the same steps.
//!
//! The record is written before the script runs, so a crash mid-run reads as `failed`
//! ("interrupted") after a restart; queued work and pending approvals survive restarts. Every
//! write that ends an execution goes through `Executions::create` or `Executions::transition`
//! (compare-and-set from a status that is not terminal), and only those announce the end: each
//! execution passes `finished` (its log line and metrics) exactly once.

mod admission;
mod approvals;
mod audit;
pub(crate) mod check;
mod content;
mod filerules;
mod held;
mod jobs;
mod lifecycle;
mod live;
mod network;
mod outcome;
mod prerun;
mod programs;
mod runpolicy;
mod worker;

pub(crate) use crate::domain::record::ApprovalMode;
pub(crate) use admission::Refused;
pub(crate) use approvals::ApprovalPolicy;
pub(crate) use filerules::FileDenied;
pub(crate) use held::HeldOperation;
pub(crate) use jobs::job_result;
pub(crate) use live::{LiveEvent, Watch};
pub(crate) use network::{NetworkChoiceError, NetworkSettings};
pub(crate) use runpolicy::{PolicyChoiceError, RunPolicies};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::artifacts::{ArtifactError, ArtifactStore};
use crate::auth::{Caller, Role};
use crate::config::ExecutionSettings;
use crate::domain::record::{ErrorKind, ExecutionError, ExecutionRecord, Status};
use crate::sandbox::job::Maxima;
use crate::sandbox::{ProfileStatus, Readiness, Runner, SandboxError, SandboxStats};
use crate::store::{AuditEvent, Store, StoreError, Transition};
use crate::validate::Validator;
use admission::Admission;

/// What a submission became.
#[derive(Debug, Clone)]
pub(crate) enum Submitted {
    /// Ran (or was rejected) within the request.
    Finished(ExecutionRecord),
    /// Waits for an approval or a slot; read it later.
    Accepted(ExecutionRecord),
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ExecError {
    /// No run slot now (too many runs, or the service is stopping).
    #[error(transparent)]
    Refused(#[from] Refused),
    /// The engine or the runner image is not available: retry later.
    #[error(transparent)]
    Unavailable(SandboxError),
    #[error("no such execution")]
    NotFound,
    #[error("the execution is {} and cannot be decided", .0.as_str())]
    Conflict(Status),
    /// A job with this `job_id` exists already.
    #[error("job_id {0} is already used by another job")]
    DuplicateJob(Uuid),
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for ExecError {
    fn from(e: StoreError) -> Self {
        match e {
            // The store's unique index caught two jobs with one id racing each other.
            StoreError::DuplicateJob(job) => ExecError::DuplicateJob(job),
            other => ExecError::Store(other),
        }
    }
}

/// What the executions service runs on.
#[derive(Debug)]
pub(crate) struct Deps {
    pub validator: Validator,
    pub runner: Arc<dyn Runner>,
    pub store: Store,
    pub artifacts: ArtifactStore,
    pub policy: ApprovalPolicy,
    /// The run-time policies runs are enforced under.
    pub run_policies: RunPolicies,
    pub settings: ExecutionSettings,
    /// The sandbox's memory limit, named in the error of a run it killed.
    pub memory_mb: u64,
    /// The deployment's maxima for jobs (`sandbox.jobs`).
    pub job_maxima: Maxima,
    /// Bytes of stdout and of stderr a run keeps (`sandbox.limits.output_bytes`).
    pub output_bytes: u64,
    /// Limits and approval timeout of runs with network access (`egress`).
    pub network: NetworkSettings,
}

#[derive(Debug)]
pub(crate) struct Executions {
    validator: Validator,
    runner: Arc<dyn Runner>,
    admission: Admission,
    settings: ExecutionSettings,
    memory_mb: u64,
    job_maxima: Maxima,
    output_bytes: u64,
    store: Store,
    policy: ApprovalPolicy,
    run_policies: RunPolicies,
    network: NetworkSettings,
    /// Operations held by `approve` rules, waiting for an operator.
    held: held::Held,
    /// The events of runs under a policy, as they happen.
    live: live::Live,
    artifacts: ArtifactStore,
    watchers: Mutex<HashMap<Uuid, watch::Sender<Status>>>,
    tasks: TaskTracker,
    shutdown: CancellationToken,
}

/// Every execution that reaches a terminal status passes here once: a log line that carries its
/// id (inside the request's span, so with the request id too) and the metrics.
fn finished(rec: &ExecutionRecord) {
    tracing::info!(
        execution_id = %rec.id,
        agent = %rec.agent,
        language = rec.run.kind(),
        job_id = rec.job_id().map(tracing::field::display),
        status = rec.status.as_str(),
        error = rec.error.as_ref().map(|e| e.kind.as_str()),
        exit_code = rec.result.as_ref().and_then(|r| r.exit_code),
        duration_ms = rec.duration_ms,
        "execution finished"
    );
    crate::metrics::finished(rec);
}

impl Executions {
    /// Recovers state left by a previous process (running → failed, queued → resumed) and starts
    /// the approval-expiry sweeper.
    pub(crate) async fn start(deps: Deps) -> Result<Arc<Executions>, StoreError> {
        let this = Arc::new(Executions {
            admission: Admission::new(&deps.settings),
            validator: deps.validator,
            runner: deps.runner,
            settings: deps.settings,
            memory_mb: deps.memory_mb,
            job_maxima: deps.job_maxima,
            output_bytes: deps.output_bytes,
            store: deps.store,
            policy: deps.policy,
            run_policies: deps.run_policies,
            network: deps.network,
            held: held::Held::default(),
            live: live::Live::default(),
            artifacts: deps.artifacts,
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

    /// The limits requests are checked against.
    pub(crate) fn settings(&self) -> &ExecutionSettings {
        &self.settings
    }

    /// The deployment's maxima jobs are checked against.
    pub(crate) fn job_maxima(&self) -> &Maxima {
        &self.job_maxima
    }

    pub(crate) fn policy(&self) -> ApprovalPolicy {
        self.policy
    }

    /// Writes a new record with its first audit entries.
    async fn create(
        &self,
        rec: &ExecutionRecord,
        events: Vec<AuditEvent>,
    ) -> Result<(), StoreError> {
        self.store.save(rec, events).await?;
        self.changed(rec);
        Ok(())
    }

    /// Applies `change` when the record is in one of `from` (none of them terminal), with the
    /// audit entries it returns.
    async fn transition(
        &self,
        id: Uuid,
        from: &'static [Status],
        change: impl FnOnce(&mut ExecutionRecord) -> Vec<AuditEvent> + Send + 'static,
    ) -> Result<Transition, StoreError> {
        debug_assert!(from.iter().all(|s| !s.is_terminal()), "{from:?}");
        let t = self.store.transition(id, from, change).await?;
        if let Transition::Applied(rec) = &t {
            self.changed(rec);
        }
        Ok(t)
    }

    /// Wakes readers of the execution; a terminal status has finished.
    fn changed(&self, rec: &ExecutionRecord) {
        self.notify(rec.id, rec.status);
        if rec.status.is_terminal() {
            finished(rec);
        }
    }

    /// The service gives up on an execution in one of `from`.
    async fn fail(
        &self,
        id: Uuid,
        from: &'static [Status],
        event: &'static str,
        reason: &str,
    ) -> Result<(), StoreError> {
        let reason = reason.to_string();
        self.transition(id, from, move |r| {
            r.status = Status::Failed;
            r.error = Some(ExecutionError::new(
                ErrorKind::InternalError,
                reason.clone(),
            ));
            vec![audit::failed(r, event, &reason)]
        })
        .await
        .map(drop)
    }

    /// An execution the caller may see (agents see their own), waiting up to `wait` for a terminal
    /// status.
    pub(crate) async fn get(
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

    /// The bytes of a file a run returned, read back and checked against its sha256.
    pub(crate) async fn artifact(&self, sha256: &str) -> Result<Vec<u8>, ArtifactError> {
        let store = self.artifacts.clone();
        let sha256 = sha256.to_string();
        tokio::task::spawn_blocking(move || store.get(&sha256)).await?
    }

    /// A file a run returned, checked against its sha256, as a handle to stream and its size.
    pub(crate) async fn artifact_file(
        &self,
        sha256: &str,
    ) -> Result<(std::fs::File, u64), ArtifactError> {
        let store = self.artifacts.clone();
        let sha256 = sha256.to_string();
        tokio::task::spawn_blocking(move || store.open_blob(&sha256)).await?
    }

    /// Whether the sandbox can take runs now.
    pub(crate) async fn readiness(&self) -> Readiness {
        self.runner.readiness().await
    }

    /// Each runner profile with what its image holds.
    pub(crate) async fn profile_status(&self) -> Vec<ProfileStatus> {
        self.runner.profile_status().await
    }

    /// The sandbox's gauges, for metrics.
    pub(crate) fn sandbox_stats(&self) -> SandboxStats {
        self.runner.stats()
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

    /// Stops background work: queued executions stay queued (resumed at the next start), running
    /// ones finish within their timeout.
    pub(crate) async fn shutdown(&self) {
        self.shutdown.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}
