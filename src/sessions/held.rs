//! Operations a session's policy holds for approval (`approve` rules): each waits in the session
//! container while it is listed here, until an operator answers through `/v1/approvals/{id}`,
//! the policy's approval timeout fails it, or its command ends (then it is withdrawn: denied).
//! The command's deadline keeps running while it waits.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use time::OffsetDateTime;
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::AbortOnDropHandle;
use uuid::Uuid;

use super::{Session, SessionError, Sessions, State};
use crate::auth::Caller;
use crate::domain::record::Decision;
use crate::sandbox::{ApprovalAsk, ApprovalRequest, ApprovalVerdict};
use crate::store::AuditEvent;

/// Held operations queued from one session before the forwarder files them.
const ASKS_PER_SESSION: usize = 64;

/// One held operation, as an operator reviews it.
#[derive(Debug, Clone)]
pub(crate) struct HeldOperation {
    /// What `/v1/approvals/{id}` names.
    pub id: Uuid,
    pub session_id: Uuid,
    /// The command that asked (the one running when it asked).
    pub command_id: Option<Uuid>,
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

/// Every operation of a session command waiting for an operator, by its id.
#[derive(Debug, Default, Clone)]
pub(super) struct Held {
    waiting: Arc<Mutex<HashMap<Uuid, Waiting>>>,
}

impl Held {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, Waiting>> {
        self.waiting.lock().expect("held operations lock")
    }

    /// The channel `session`'s sandbox sends its held operations to, and the task that files
    /// them (aborted when dropped, with the session's stop).
    pub(super) fn channel(
        &self,
        session: &Arc<Session>,
    ) -> (mpsc::Sender<ApprovalAsk>, AbortOnDropHandle<()>) {
        let (tx, mut rx) = mpsc::channel::<ApprovalAsk>(ASKS_PER_SESSION);
        let held = self.clone();
        let session = Arc::downgrade(session);
        let task = tokio::spawn(async move {
            while let Some(ask) = rx.recv().await {
                let Some(session) = session.upgrade() else {
                    return;
                };
                // Filed under the session's lock, so a command that ended (or a session that
                // stopped) meanwhile cannot leave it listed: its answer is dropped (denied).
                let live = session.live.lock().expect("session lock");
                let command_id = match (&live.current, live.state) {
                    (Some(c), State::Busy) => Some(c.id),
                    _ => continue,
                };
                let now = OffsetDateTime::now_utc();
                let op = HeldOperation {
                    id: Uuid::new_v4(),
                    session_id: session.id,
                    command_id,
                    agent: session.agent.clone(),
                    requested_at: now,
                    expires_at: now + Duration::from_millis(ask.request.timeout_ms),
                    request: ask.request,
                };
                held.lock().insert(
                    op.id,
                    Waiting {
                        held: op,
                        answer: ask.answer,
                    },
                );
                drop(live);
            }
        });
        (tx, AbortOnDropHandle::new(task))
    }

    /// Withdraws what `session_id` still has waiting (its command ended, or it stopped): the
    /// dropped answers deny them.
    pub(super) fn withdraw(&self, session_id: Uuid) {
        self.lock().retain(|_, w| w.held.session_id != session_id);
    }

    /// The operations waiting now, oldest first (expired ones are dropped: the supervisor has
    /// failed them already).
    fn list(&self) -> Vec<HeldOperation> {
        let now = OffsetDateTime::now_utc();
        let mut map = self.lock();
        map.retain(|_, w| w.held.expires_at > now);
        let mut out: Vec<HeldOperation> = map.values().map(|w| w.held.clone()).collect();
        out.sort_by_key(|h| h.requested_at);
        out
    }

    fn take(&self, id: Uuid) -> Option<Waiting> {
        let w = self.lock().remove(&id)?;
        (w.held.expires_at > OffsetDateTime::now_utc()).then_some(w)
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
        self.held.list()
    }

    /// Whether `id` names an operation a session command holds.
    pub(crate) fn is_held_operation(&self, id: Uuid) -> bool {
        self.held.lock().contains_key(&id)
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
        let waiting = self.held.take(id).ok_or(SessionError::NotFound)?;
        let verdict = match decision {
            Decision::Approve => ApprovalVerdict::Approved,
            Decision::Deny => ApprovalVerdict::Denied,
        };
        let held = waiting.held;
        let outcome = OperationDecided {
            session_id: held.session_id,
            command_id: held.command_id,
            decision,
            reason,
            operation: &held.request,
        };
        let record = AuditEvent {
            actor: operator.name.clone(),
            execution_id: Some(held.command_id.unwrap_or(held.session_id)),
            event: "operation_decision",
            script_sha256: None,
            outcome: serde_json::to_value(outcome).expect("audit entries serialise"),
        };
        // Recorded before the operation proceeds: whoever sees its effect finds the record.
        if let Err(e) = self.store.append_audit(vec![record]).await {
            tracing::error!(session_id = %held.session_id, error = %e, "could not audit an operation decision");
        }
        let _ = waiting.answer.send(verdict);
        Ok(held)
    }
}

#[cfg(test)]
mod tests {
    use scriptgate_policy::events::OperationType;

    use super::*;

    fn waiting(
        session_id: Uuid,
        expires_in: time::Duration,
    ) -> (Uuid, Waiting, oneshot::Receiver<ApprovalVerdict>) {
        let (answer, verdict) = oneshot::channel();
        let now = OffsetDateTime::now_utc();
        let held = HeldOperation {
            id: Uuid::new_v4(),
            session_id,
            command_id: Some(Uuid::new_v4()),
            agent: "bot".into(),
            request: ApprovalRequest {
                id: 1,
                operation: OperationType::FileRead,
                target: "/etc/hosts".into(),
                command: None,
                argv: None,
                cwd: "/workspace".into(),
                pid: 7,
                rule: Some("held-read".into()),
                message: None,
                recent_commands: Vec::new(),
                timeout_ms: 1000,
            },
            requested_at: now,
            expires_at: now + expires_in,
        };
        (held.id, Waiting { held, answer }, verdict)
    }

    #[test]
    fn withdrawn_operations_are_denied_and_expired_ones_leave_the_list() {
        let held = Held::default();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let (id_a, w_a, mut verdict_a) = waiting(a, time::Duration::minutes(1));
        let (id_b, w_b, _verdict_b) = waiting(b, time::Duration::minutes(1));
        let (id_old, w_old, _) = waiting(b, -time::Duration::seconds(1));
        for (id, w) in [(id_a, w_a), (id_b, w_b), (id_old, w_old)] {
            held.lock().insert(id, w);
        }
        held.withdraw(a);
        // The dropped answer is what the sandbox reads as a denial.
        assert!(matches!(
            verdict_a.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        ));
        let listed: Vec<Uuid> = held.list().iter().map(|h| h.id).collect();
        assert_eq!(listed, vec![id_b]);
        assert!(held.take(id_old).is_none());
        assert!(held.take(id_b).is_some());
        assert!(held.take(id_b).is_none(), "decided once");
    }
}
