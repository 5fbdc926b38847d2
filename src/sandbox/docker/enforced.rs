//! The host's side of a run under a run-time policy: the job's `enforce` field, the supervisor's
//! `Events` frames gathered into capped lists, and `ApprovalRequest` frames handed to the caller's
//! approver, whose answers go back to the supervisor as decision frames.

use scriptgate_policy::events::{Event, Events};
use scriptgate_supervisor::enforcement::{
    ApprovalDecision, ApprovalRequest, ApprovalVerdict, Enforce, EnforceSummary, EventBatch,
    FEATURE_ENFORCE,
};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::task::JoinSet;

use crate::sandbox::{ApprovalAsk, Enforcement};

/// Why a run with a policy did not start, when the supervisor cannot enforce one.
pub(super) const UNAVAILABLE: &str = "run-time policy enforcement is not available in this sandbox \
     (its supervisor does not announce it: gVisor has no seccomp user notification, or the runner \
     image predates it); the script was not run";

/// Why a session with a policy did not open, when the supervisor cannot enforce one.
pub(super) const UNAVAILABLE_HERE: &str = "run-time policy enforcement is not available in this \
     sandbox (its supervisor does not announce it: gVisor has no seccomp user notification, or the \
     runner image predates it); a session with a policy is refused rather than run without it";

/// Whether a supervisor that announced `features` can enforce a policy.
pub(super) fn supported(features: &[String]) -> bool {
    features.iter().any(|f| f == FEATURE_ENFORCE)
}

/// The job's `enforce` field.
pub(super) fn job_field(e: &Enforcement) -> Result<Enforce, String> {
    Ok(Enforce {
        policy: serde_json::to_value(&e.policy).map_err(|e| format!("the policy: {e}"))?,
        event_cap: e.event_cap,
        approval_timeout_ms: u64::try_from(e.approval_timeout.as_millis()).unwrap_or(u64::MAX),
    })
}

/// What one run under a policy gathers.
#[derive(Debug)]
pub(super) struct Gathered {
    events: Events,
    summary: Option<EnforceSummary>,
    approvals: Option<mpsc::Sender<ApprovalAsk>>,
    live: Option<broadcast::Sender<Event>>,
    answers: mpsc::Sender<ApprovalDecision>,
    /// One task per operation waiting for its answer; aborted when the run ends.
    waiting: JoinSet<()>,
}

impl Gathered {
    /// `answers` receives the decisions to write to the supervisor.
    pub(super) fn new(e: &Enforcement, answers: mpsc::Sender<ApprovalDecision>) -> Gathered {
        Gathered {
            events: Events::with_cap(e.event_cap as usize),
            summary: None,
            approvals: e.approvals.clone(),
            live: e.live.clone(),
            answers,
            waiting: JoinSet::new(),
        }
    }

    /// An `Events` frame.
    pub(super) fn on_events(&mut self, payload: &[u8]) -> Result<(), String> {
        let batch: EventBatch =
            serde_json::from_slice(payload).map_err(|e| format!("malformed events frame: {e}"))?;
        for event in batch.events {
            if let Some(live) = &self.live {
                // No receiver now is fine: nobody is watching.
                let _ = live.send(event.clone());
            }
            self.events.push(event);
        }
        let o = batch.omitted;
        self.events.processes.add_omitted(o.processes);
        self.events.file_operations.add_omitted(o.file_operations);
        self.events
            .network_operations
            .add_omitted(o.network_operations);
        self.events
            .blocked_operations
            .add_omitted(o.blocked_operations);
        if batch.summary.is_some() {
            self.summary = batch.summary;
        }
        Ok(())
    }

    /// An `ApprovalRequest` frame: to the approver, whose answer (or its absence: denied) goes
    /// back to the supervisor.
    pub(super) fn on_request(&mut self, payload: &[u8]) -> Result<(), String> {
        let request: ApprovalRequest = serde_json::from_slice(payload)
            .map_err(|e| format!("malformed approval request: {e}"))?;
        let id = request.id;
        let answers = self.answers.clone();
        let approvals = self.approvals.clone();
        self.waiting.spawn(async move {
            let verdict = match approvals {
                None => ApprovalVerdict::Denied,
                Some(approvals) => {
                    let (answer, verdict) = oneshot::channel();
                    match approvals.send(ApprovalAsk { request, answer }).await {
                        Ok(()) => verdict.await.unwrap_or(ApprovalVerdict::Denied),
                        Err(_) => ApprovalVerdict::Denied,
                    }
                }
            };
            let _ = answers
                .send(ApprovalDecision {
                    id,
                    verdict,
                    message: None,
                })
                .await;
        });
        Ok(())
    }

    /// The events and the summary.
    pub(super) fn finish(mut self) -> (Events, Option<EnforceSummary>) {
        self.waiting.abort_all();
        (self.events, self.summary)
    }
}
