//! Operations a session's policy holds for approval (`approve` rules) inside its commands: the
//! shared registry ([`crate::sandbox::held`]) keyed by session and command. Each waits in the
//! session container while it is listed, until an operator answers through
//! `/v1/approvals/{id}`, the policy's approval timeout fails it, or its command ends (then it is
//! withdrawn: denied). The command's deadline keeps running while it waits.

use std::ops::ControlFlow;
use std::sync::Arc;

use serde::Serialize;
use tokio::sync::mpsc;
use tokio_util::task::AbortOnDropHandle;
use uuid::Uuid;

use super::{Session, SessionError, Sessions, State};
use crate::auth::Caller;
use crate::domain::record::Decision;
use crate::sandbox::held;
use crate::sandbox::{ApprovalAsk, ApprovalRequest};
use crate::store::AuditEvent;

/// Whose operation it is: a session's command (the one running when it asked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CommandOwner {
    pub(crate) session_id: Uuid,
    pub(crate) command_id: Option<Uuid>,
}

/// One held operation, as an operator reviews it.
pub(crate) type HeldOperation = held::HeldOperation<CommandOwner>;

/// Every operation of a session command waiting for an operator, by its id.
#[derive(Debug, Default, Clone)]
pub(super) struct Held(held::Held<CommandOwner>);

impl Held {
    /// The channel `session`'s sandbox sends its held operations to, and the task that files
    /// them (aborted when dropped, with the session's stop).
    pub(super) fn channel(
        &self,
        session: &Arc<Session>,
    ) -> (mpsc::Sender<ApprovalAsk>, AbortOnDropHandle<()>) {
        let session = Arc::downgrade(session);
        self.0.channel(move |held, ask| {
            let Some(session) = session.upgrade() else {
                return ControlFlow::Break(());
            };
            // Filed under the session's lock, so a command that ended (or a session that
            // stopped) meanwhile cannot leave it listed: its answer is dropped (denied).
            let live = session.live.lock().expect("session lock");
            if let (Some(c), State::Busy) = (&live.current, live.state) {
                let owner = CommandOwner {
                    session_id: session.id,
                    command_id: Some(c.id),
                };
                held.file(owner, &session.agent, ask);
            }
            ControlFlow::Continue(())
        })
    }

    /// Withdraws what `session_id` still has waiting (its command ended, or it stopped): the
    /// dropped answers deny them.
    pub(super) fn withdraw(&self, session_id: Uuid) {
        self.0.withdraw(|owner| owner.session_id == session_id);
    }
}

#[derive(Serialize)]
struct OperationDecided<'a> {
    session_id: Uuid,
    command_id: Option<Uuid>,
    decision: Decision,
    reason: &'a str,
    operation: &'a ApprovalRequest,
}

impl Sessions {
    /// The operations of session commands held for an operator now.
    pub(crate) fn held_operations(&self) -> Vec<HeldOperation> {
        self.held.0.list()
    }

    /// Whether `id` names an operation a session command holds.
    pub(crate) fn is_held_operation(&self, id: Uuid) -> bool {
        self.held.0.contains(id)
    }

    /// An operator's answer: the operation proceeds (approve) or fails with `EACCES` (deny);
    /// the decision is an audit record under the command's id.
    pub(crate) async fn decide_operation(
        &self,
        operator: &Caller,
        id: Uuid,
        decision: Decision,
        reason: &str,
    ) -> Result<HeldOperation, SessionError> {
        let waiting = self.held.0.take(id).ok_or(SessionError::NotFound)?;
        let held = &waiting.held;
        let owner = held.owner;
        let outcome = OperationDecided {
            session_id: owner.session_id,
            command_id: owner.command_id,
            decision,
            reason,
            operation: &held.request,
        };
        let record = AuditEvent {
            actor: operator.name.clone(),
            execution_id: Some(owner.command_id.unwrap_or(owner.session_id)),
            event: "operation_decision",
            script_sha256: None,
            outcome: serde_json::to_value(outcome).expect("audit entries serialise"),
        };
        // Recorded before the operation proceeds: whoever sees its effect finds the record.
        if let Err(e) = self.store.append_audit(vec![record]).await {
            tracing::error!(session_id = %owner.session_id, error = %e, "could not audit an operation decision");
        }
        Ok(waiting.answer(decision))
    }
}
