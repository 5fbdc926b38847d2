//! Operations a run-time policy holds for approval (`approve` rules) inside running executions:
//! the shared registry ([`crate::sandbox::held`]) keyed by execution id. Each waits in the
//! sandbox while it is listed, until an operator answers through `/v1/approvals/{id}`, the
//! supervisor's approval timeout fails it, or its run ends. The run's deadline keeps running.

use std::ops::ControlFlow;

use tokio::sync::mpsc;
use uuid::Uuid;

use super::{ExecError, Executions, audit};
use crate::auth::Caller;
use crate::domain::record::{Decision, ExecutionRecord, Status};
use crate::sandbox::ApprovalAsk;
use crate::sandbox::held;
use crate::store::Transition;

/// One held operation, as an operator reviews it; its owner is its execution's id.
pub(crate) type HeldOperation = held::HeldOperation<Uuid>;

/// Every operation waiting for an operator inside a running execution, by its id.
#[derive(Debug, Default, Clone)]
pub(crate) struct Held(held::Held<Uuid>);

impl Held {
    /// The channel a run's sandbox sends its held operations to; they are listed until answered,
    /// expired or the run ends (then the forwarder's `Drop` takes them away: denied).
    pub(super) fn channel(
        &self,
        execution_id: Uuid,
        agent: &str,
    ) -> (mpsc::Sender<ApprovalAsk>, Forwarder) {
        let agent = agent.to_string();
        let (tx, task) = self.0.channel(move |held, ask| {
            held.file(execution_id, &agent, ask);
            ControlFlow::Continue(())
        });
        let forwarder = Forwarder {
            held: self.clone(),
            execution_id,
            task,
        };
        (tx, forwarder)
    }

    /// The operations waiting now, oldest first (expired ones are dropped: the supervisor has
    /// failed them already).
    pub(crate) fn list(&self) -> Vec<HeldOperation> {
        self.0.list()
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
        self.held.0.withdraw(|owner| *owner == id);
    }
}

impl Executions {
    /// The operations held for an operator now.
    pub(crate) fn held_operations(&self) -> Vec<HeldOperation> {
        self.held.list()
    }

    /// Whether `id` names a held operation (rather than an execution).
    pub(crate) fn is_held_operation(&self, id: Uuid) -> bool {
        self.held.0.contains(id)
    }

    /// An operator's answer to a held operation: it proceeds (approve) or fails with `EACCES`
    /// (deny). The decision is audited on its execution before the sandbox hears it, so the
    /// answer is the record as the decision left it (`running`) and a run that ends at once cannot
    /// lose the audit record. A run that ended before the answer was recorded leaves nothing
    /// waiting: not found.
    pub(crate) async fn decide_operation(
        &self,
        operator: &Caller,
        id: Uuid,
        decision: Decision,
        reason: String,
    ) -> Result<ExecutionRecord, ExecError> {
        let Some(waiting) = self.held.0.take(id) else {
            return Err(ExecError::NotFound);
        };
        let by = operator.name.clone();
        let held = waiting.held.clone();
        let recorded = self
            .transition(held.owner, &[Status::Running], move |r| {
                vec![audit::operation_decided(r, &by, decision, &reason, &held)]
            })
            .await?;
        match recorded {
            Transition::Applied(rec) => {
                waiting.answer(decision);
                Ok(*rec)
            }
            // The run ended while the operator answered: dropping `waiting` denies what its
            // sandbox, if any is left, still waits for.
            Transition::Conflict(_) | Transition::Missing => Err(ExecError::NotFound),
        }
    }
}
