//! Operations a run-time policy holds for approval (`approve` rules): each waits in the sandbox
//! while it is listed here, until an operator answers through `/v1/approvals/{id}`, the
//! supervisor's approval timeout fails it, or its run ends. The run's deadline keeps running.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use time::OffsetDateTime;
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use super::{ExecError, Executions, audit};
use crate::auth::Caller;
use crate::domain::record::{Decision, Status};
use crate::sandbox::{ApprovalAsk, ApprovalRequest, ApprovalVerdict};

/// Held operations queued from one run before the forwarder files them.
const ASKS_PER_RUN: usize = 64;

/// One held operation, as an operator reviews it.
#[derive(Debug, Clone)]
pub(crate) struct HeldOperation {
    /// What `/v1/approvals/{id}` names.
    pub id: Uuid,
    pub execution_id: Uuid,
    pub agent: String,
    pub request: ApprovalRequest,
    pub requested_at: OffsetDateTime,
    pub expires_at: OffsetDateTime,
}

#[derive(Debug)]
struct Waiting {
    held: HeldOperation,
    answer: oneshot::Sender<ApprovalVerdict>,
}

/// Every operation waiting for an operator, by its id.
#[derive(Debug, Default, Clone)]
pub(crate) struct Held {
    waiting: Arc<Mutex<HashMap<Uuid, Waiting>>>,
}

impl Held {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, Waiting>> {
        self.waiting.lock().expect("held operations lock")
    }

    /// The channel a run's sandbox sends its held operations to; they are listed until answered,
    /// expired or the run ends (then the forwarder's `Drop` takes them away: denied).
    pub(super) fn channel(
        &self,
        execution_id: Uuid,
        agent: &str,
    ) -> (mpsc::Sender<ApprovalAsk>, Forwarder) {
        let (tx, mut rx) = mpsc::channel::<ApprovalAsk>(ASKS_PER_RUN);
        let held = self.clone();
        let agent = agent.to_string();
        let task = tokio::spawn(async move {
            while let Some(ask) = rx.recv().await {
                let now = OffsetDateTime::now_utc();
                let timeout = Duration::from_millis(ask.request.timeout_ms);
                let op = HeldOperation {
                    id: Uuid::new_v4(),
                    execution_id,
                    agent: agent.clone(),
                    request: ask.request,
                    requested_at: now,
                    expires_at: now + timeout,
                };
                held.lock().insert(
                    op.id,
                    Waiting {
                        held: op,
                        answer: ask.answer,
                    },
                );
            }
        });
        let forwarder = Forwarder {
            held: self.clone(),
            execution_id,
            task: tokio_util::task::AbortOnDropHandle::new(task),
        };
        (tx, forwarder)
    }

    /// The operations waiting now, oldest first (expired ones are dropped: the supervisor has
    /// failed them already).
    pub(crate) fn list(&self) -> Vec<HeldOperation> {
        let now = OffsetDateTime::now_utc();
        let mut map = self.lock();
        map.retain(|_, w| w.held.expires_at > now);
        let mut out: Vec<HeldOperation> = map.values().map(|w| w.held.clone()).collect();
        out.sort_by_key(|h| h.requested_at);
        out
    }

    /// Takes the waiting operation `id` (if it is still waiting).
    fn take(&self, id: Uuid) -> Option<Waiting> {
        let w = self.lock().remove(&id)?;
        (w.held.expires_at > OffsetDateTime::now_utc()).then_some(w)
    }
}

/// Files one run's held operations while it runs; dropping it (the run ended) withdraws them.
#[derive(Debug)]
pub(super) struct Forwarder {
    held: Held,
    execution_id: Uuid,
    task: tokio_util::task::AbortOnDropHandle<()>,
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
        let id = self.execution_id;
        self.held.lock().retain(|_, w| w.held.execution_id != id);
    }
}

impl Executions {
    /// The operations held for an operator now.
    pub(crate) fn held_operations(&self) -> Vec<HeldOperation> {
        self.held.list()
    }

    /// Whether `id` names a held operation (rather than an execution).
    pub(crate) fn is_held_operation(&self, id: Uuid) -> bool {
        self.held.lock().contains_key(&id)
    }

    /// An operator's answer to a held operation: it proceeds (approve) or fails with `EACCES`
    /// (deny); the decision is audited on its execution. Answers the execution's id.
    pub(crate) async fn decide_operation(
        &self,
        operator: &Caller,
        id: Uuid,
        decision: Decision,
        reason: String,
    ) -> Result<Uuid, ExecError> {
        let Some(waiting) = self.held.take(id) else {
            return Err(ExecError::NotFound);
        };
        let verdict = match decision {
            Decision::Approve => ApprovalVerdict::Approved,
            Decision::Deny => ApprovalVerdict::Denied,
        };
        let held = waiting.held;
        let _ = waiting.answer.send(verdict);
        let by = operator.name.clone();
        let execution_id = held.execution_id;
        self.transition(execution_id, &[Status::Running], move |r| {
            vec![audit::operation_decided(r, &by, decision, &reason, &held)]
        })
        .await?;
        Ok(execution_id)
    }
}
