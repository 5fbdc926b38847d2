//! The registry of operations a sandbox holds for an operator ([`ApprovalAsk`]s of a run-time
//! policy's `approve` rules), keyed by their owner: an execution, or a session's command. Each
//! waits in its sandbox while it is listed here, until an operator answers, the approval timeout
//! fails it (it leaves the list), or its owner withdraws it (its run or command ended: the
//! dropped answer denies it). The owner's deadline keeps running while it waits.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use time::OffsetDateTime;
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::AbortOnDropHandle;
use uuid::Uuid;

use super::{ApprovalAsk, ApprovalRequest, ApprovalVerdict};
use crate::domain::record::Decision;

/// Held operations queued from one channel before its task files them.
const ASKS_PER_CHANNEL: usize = 64;

/// One held operation, as an operator reviews it.
#[derive(Debug, Clone)]
pub(crate) struct HeldOperation<O> {
    /// What `/v1/approvals/{id}` names.
    pub(crate) id: Uuid,
    /// Whose sandbox holds it.
    pub(crate) owner: O,
    pub(crate) agent: String,
    pub(crate) request: ApprovalRequest,
    pub(crate) requested_at: OffsetDateTime,
    pub(crate) expires_at: OffsetDateTime,
}

/// A held operation taken off the list for an operator's answer.
#[derive(Debug)]
pub(crate) struct Waiting<O> {
    pub(crate) held: HeldOperation<O>,
    answer: oneshot::Sender<ApprovalVerdict>,
}

impl<O> Waiting<O> {
    /// Sends the operator's decision to the sandbox: the operation proceeds (approve) or fails
    /// with `EACCES` (deny).
    pub(crate) fn answer(self, decision: Decision) -> HeldOperation<O> {
        let verdict = match decision {
            Decision::Approve => ApprovalVerdict::Approved,
            Decision::Deny => ApprovalVerdict::Denied,
        };
        let _ = self.answer.send(verdict);
        self.held
    }
}

/// Every operation waiting for an operator, by its id.
#[derive(Debug)]
pub(crate) struct Held<O> {
    waiting: Arc<Mutex<HashMap<Uuid, Waiting<O>>>>,
}

impl<O> Default for Held<O> {
    fn default() -> Self {
        Held {
            waiting: Arc::default(),
        }
    }
}

impl<O> Clone for Held<O> {
    fn clone(&self) -> Self {
        Held {
            waiting: self.waiting.clone(),
        }
    }
}

impl<O: Clone + Send + 'static> Held<O> {
    fn lock(&self) -> MutexGuard<'_, HashMap<Uuid, Waiting<O>>> {
        self.waiting.lock().expect("held operations lock")
    }

    /// The channel a sandbox sends its held operations to, and the task that hands each to
    /// `file` (which lists it, or drops it: denied) until `file` breaks or the handle drops.
    pub(crate) fn channel(
        &self,
        mut file: impl FnMut(&Held<O>, ApprovalAsk) -> ControlFlow<()> + Send + 'static,
    ) -> (mpsc::Sender<ApprovalAsk>, AbortOnDropHandle<()>) {
        let (tx, mut rx) = mpsc::channel::<ApprovalAsk>(ASKS_PER_CHANNEL);
        let held = self.clone();
        let task = tokio::spawn(async move {
            while let Some(ask) = rx.recv().await {
                if file(&held, ask).is_break() {
                    return;
                }
            }
        });
        (tx, AbortOnDropHandle::new(task))
    }

    /// Lists `ask` under `owner` until it is answered, expires or is withdrawn.
    pub(crate) fn file(&self, owner: O, agent: &str, ask: ApprovalAsk) {
        let now = OffsetDateTime::now_utc();
        let op = HeldOperation {
            id: Uuid::new_v4(),
            owner,
            agent: agent.to_string(),
            requested_at: now,
            expires_at: now + Duration::from_millis(ask.request.timeout_ms),
            request: ask.request,
        };
        let waiting = Waiting {
            held: op,
            answer: ask.answer,
        };
        self.lock().insert(waiting.held.id, waiting);
    }

    /// Withdraws what the owners `of` still have waiting: the dropped answers deny them.
    pub(crate) fn withdraw(&self, of: impl Fn(&O) -> bool) {
        self.lock().retain(|_, w| !of(&w.held.owner));
    }

    /// The operations waiting now, oldest first (expired ones are dropped: the sandbox has
    /// failed them already).
    pub(crate) fn list(&self) -> Vec<HeldOperation<O>> {
        let now = OffsetDateTime::now_utc();
        let mut map = self.lock();
        map.retain(|_, w| w.held.expires_at > now);
        let mut out: Vec<HeldOperation<O>> = map.values().map(|w| w.held.clone()).collect();
        out.sort_by_key(|h| h.requested_at);
        out
    }

    /// Whether `id` names an operation listed here.
    pub(crate) fn contains(&self, id: Uuid) -> bool {
        self.lock().contains_key(&id)
    }

    /// Takes the operation `id` off the list, if it is still waiting.
    pub(crate) fn take(&self, id: Uuid) -> Option<Waiting<O>> {
        let w = self.lock().remove(&id)?;
        (w.held.expires_at > OffsetDateTime::now_utc()).then_some(w)
    }
}

#[cfg(test)]
mod tests {
    use scriptgate_policy::events::OperationType;

    use super::*;

    /// A held read that expires `ms` milliseconds after it is filed.
    fn ask(ms: u64) -> (ApprovalAsk, oneshot::Receiver<ApprovalVerdict>) {
        let (answer, verdict) = oneshot::channel();
        let request = ApprovalRequest {
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
            timeout_ms: ms,
        };
        (ApprovalAsk { request, answer }, verdict)
    }

    #[test]
    fn withdrawn_operations_are_denied_and_expired_ones_leave_the_list() {
        let held = Held::<Uuid>::default();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let (ask_a, mut verdict_a) = ask(60_000);
        let (ask_b, _verdict_b) = ask(60_000);
        let (ask_old, _) = ask(0);
        held.file(a, "bot", ask_a);
        held.file(b, "bot", ask_b);
        held.file(b, "bot", ask_old);
        let ids: HashMap<bool, Uuid> = held
            .lock()
            .values()
            .filter(|w| w.held.owner == b)
            .map(|w| (w.held.expires_at > w.held.requested_at, w.held.id))
            .collect();
        let (id_b, id_old) = (ids[&true], ids[&false]);
        held.withdraw(|owner| *owner == a);
        // The dropped answer is what the sandbox reads as a denial.
        assert!(matches!(
            verdict_a.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        ));
        let listed: Vec<Uuid> = held.list().iter().map(|h| h.id).collect();
        assert_eq!(listed, vec![id_b]);
        assert!(held.take(id_old).is_none());
        assert!(held.contains(id_b));
        let waiting = held.take(id_b).expect("still waiting");
        assert!(held.take(id_b).is_none(), "decided once");
        assert_eq!(waiting.answer(Decision::Approve).owner, b);
    }
}
