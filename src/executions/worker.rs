//! Queued work (accepted without waiting, approved, or left by a previous process): validated
//! again under the rules of this process, then a run slot and a sandbox (retried while the engine
//! is away), then the same run step as a synchronous submission (`lifecycle.rs`).

use std::sync::Arc;
use std::time::Instant;

use uuid::Uuid;

use super::admission::Slot;
use super::check::Refusal;
use super::lifecycle::refused;
use super::{ExecError, Executions, audit};
use crate::domain::content::ContentVerdict;
use crate::domain::record::{ExecutionRecord, PolicyCheck, Status};
use crate::domain::verdict::Verdict;
use crate::sandbox::{Lease, SandboxError};
use crate::store::{StoreError, Transition};

impl Executions {
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
        let checked = self.check(&rec.run).await;
        let cleared = match checked.outcome {
            Ok(cleared) => cleared,
            Err(refusal) => {
                let verdicts = (checked.verdict, checked.contents, checked.review.checks);
                return Ok(self.reject_queued(id, verdicts, refusal, started).await?);
            }
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
            self.run(&rec, lease, cleared, started).await?;
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

    /// Queued work that no longer passes: it ends as it would have at submission.
    async fn reject_queued(
        &self,
        id: Uuid,
        (verdict, contents, checks): (Verdict, Vec<ContentVerdict>, Vec<PolicyCheck>),
        refusal: Refusal,
        started: Instant,
    ) -> Result<(), StoreError> {
        self.transition(id, &[Status::Queued], move |r| {
            r.verdict = verdict;
            r.contents = contents;
            r.policy_checks = checks;
            let mut events = vec![audit::validation(r, &r.verdict)];
            events.extend(audit::policy_checks(r));
            refused(r, refusal, started);
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
pub(super) fn retryable(e: &SandboxError) -> bool {
    matches!(
        e,
        SandboxError::EngineUnavailable(_) | SandboxError::ImageMissing(_)
    )
}
