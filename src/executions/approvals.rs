//! Operators' decisions on held executions, and the expiry of the ones nobody decides.

use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;
use uuid::Uuid;

use super::{ExecError, Executions, audit};
use crate::auth::Caller;
use crate::domain::record::{
    Approval, ApprovalMode, Decision, ErrorKind, ExecutionError, ExecutionRecord, Status,
};
use crate::domain::verdict::Verdict;
use crate::store::{StoreError, Transition};

/// When executions wait for an operator, and for how long.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ApprovalPolicy {
    pub mode: ApprovalMode,
    pub timeout: Duration,
}

impl ApprovalPolicy {
    pub(crate) fn requires(&self, verdict: &Verdict) -> bool {
        match self.mode {
            ApprovalMode::Never => false,
            ApprovalMode::Always => true,
            ApprovalMode::OnWarn => verdict.has_warnings(),
        }
    }
}

impl Executions {
    /// An operator's decision on a pending execution: approved, it is queued (and validated again
    /// when a worker takes it); denied, it ends.
    pub(crate) async fn decide(
        self: &Arc<Self>,
        operator: &Caller,
        id: Uuid,
        decision: Decision,
        reason: String,
    ) -> Result<ExecutionRecord, ExecError> {
        self.expire_due().await?;
        let by = operator.name.clone();
        let t = self
            .transition(id, &[Status::PendingApproval], move |r| {
                let event = audit::decided(r, &by, decision, &reason);
                decided(r, decision, by, reason);
                vec![event]
            })
            .await?;
        match t {
            Transition::Applied(rec) => {
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
    pub(crate) async fn pending(&self) -> Result<Vec<ExecutionRecord>, ExecError> {
        self.expire_due().await?;
        Ok(self.store.with_status(Status::PendingApproval).await?)
    }

    /// Pending executions past the approval timeout become `expired`.
    async fn expire_due(&self) -> Result<(), StoreError> {
        let timeout = self.policy.timeout;
        for rec in self.store.with_status(Status::PendingApproval).await? {
            if OffsetDateTime::now_utc() - rec.created_at < timeout {
                continue;
            }
            let secs = timeout.as_secs();
            self.transition(rec.id, &[Status::PendingApproval], move |r| {
                r.status = Status::Expired;
                r.error = Some(ExecutionError::new(
                    ErrorKind::ApprovalTimeout,
                    format!("no operator decided within {secs}s"),
                ));
                vec![audit::expired(r, secs)]
            })
            .await?;
        }
        Ok(())
    }

    pub(super) async fn expire_loop(self: Arc<Self>) {
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
}

/// The record after the decision.
fn decided(r: &mut ExecutionRecord, decision: Decision, by: String, reason: String) {
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
    r.approval = Some(Approval {
        decision,
        by,
        reason,
        at: OffsetDateTime::now_utc(),
    });
}
