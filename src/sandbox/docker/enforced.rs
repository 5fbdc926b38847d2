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
        approved_commands: e.approved_commands.clone(),
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

/// Why a job with a policy did not run, when the supervisor cannot enforce one.
pub(super) const UNAVAILABLE_JOB: &str = "run-time policy enforcement is not available in this \
     sandbox (its supervisor does not announce it: gVisor has no seccomp user notification, or the \
     runner image predates it); the job was not run";

/// What a job under a policy gathers: each `run_command` step's events (from its `StepStarted` to
/// its `StepEnd`) and the whole job's.
#[derive(Debug)]
pub(super) struct JobGathered {
    enforcement: Enforcement,
    answers: mpsc::Sender<ApprovalDecision>,
    step: Option<Gathered>,
    total: Events,
}

impl JobGathered {
    /// `answers` receives the decisions to write to the supervisor.
    pub(super) fn new(
        enforcement: Enforcement,
        answers: mpsc::Sender<ApprovalDecision>,
    ) -> JobGathered {
        JobGathered {
            total: Events::with_cap(enforcement.event_cap as usize),
            enforcement,
            answers,
            step: None,
        }
    }

    /// A step started: what follows is its own.
    pub(super) fn step_started(&mut self) {
        self.step = Some(Gathered::new(&self.enforcement, self.answers.clone()));
    }

    fn current(&mut self) -> &mut Gathered {
        let (e, answers) = (&self.enforcement, &self.answers);
        self.step
            .get_or_insert_with(|| Gathered::new(e, answers.clone()))
    }

    /// An `Events` frame of the running step.
    pub(super) fn on_events(&mut self, payload: &[u8]) -> Result<(), String> {
        self.current().on_events(payload)
    }

    /// An `ApprovalRequest` frame of the running step.
    pub(super) fn on_request(&mut self, payload: &[u8]) -> Result<(), String> {
        self.current().on_request(payload)
    }

    /// The step ended: its events (also counted in the job's); an operation of it still
    /// waiting for a decision has nobody to reach any more.
    pub(super) fn step_ended(&mut self) -> Events {
        let events = match self.step.take() {
            Some(g) => g.finish().0,
            None => Events::with_cap(self.enforcement.event_cap as usize),
        };
        merge(&mut self.total, &events);
        events
    }

    /// The whole job's events (a step the job never ended included).
    pub(super) fn finish(mut self) -> Events {
        if self.step.is_some() {
            self.step_ended();
        }
        self.total
    }
}

/// Adds `more` (its items and what it left out) to `total`, within `total`'s cap.
fn merge(total: &mut Events, more: &Events) {
    for p in more.processes.items() {
        total.processes.push(p.clone());
    }
    for f in more.file_operations.items() {
        total.file_operations.push(f.clone());
    }
    for n in more.network_operations.items() {
        total.network_operations.push(n.clone());
    }
    for b in more.blocked_operations.items() {
        total.blocked_operations.push(b.clone());
    }
    total.processes.add_omitted(more.processes.omitted());
    total
        .file_operations
        .add_omitted(more.file_operations.omitted());
    total
        .network_operations
        .add_omitted(more.network_operations.omitted());
    total
        .blocked_operations
        .add_omitted(more.blocked_operations.omitted());
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use scriptgate_policy::Decision;
    use scriptgate_policy::events::{FileEvent, FileOperationType};

    use super::*;

    fn enforcement(cap: u32) -> Enforcement {
        // a small policy of its own: the sandbox layer may not read the service's policies
        let policy = scriptgate_policy::WirePolicy::from_json(
            r#"{"version": 1, "name": "t",
                "file_rules": [{"name": "all", "paths": ["/**"], "operations": ["*"], "decision": "allow"}],
                "network_rules": [], "command_rules": []}"#,
        )
        .expect("a wire policy");
        Enforcement {
            policy,
            event_cap: cap,
            approval_timeout: Duration::from_secs(1),
            approvals: None,
            live: None,
            approved_commands: Vec::new(),
        }
    }

    fn batch(paths: &[&str], omitted: u64) -> Vec<u8> {
        let events = paths
            .iter()
            .map(|p| {
                Event::File(FileEvent {
                    kind: FileOperationType::FileRead,
                    path: p.to_string(),
                    bytes: None,
                    decision: Decision::Allow,
                    rule: None,
                })
            })
            .collect();
        let batch = EventBatch {
            events,
            omitted: scriptgate_supervisor::enforcement::Omitted {
                file_operations: omitted,
                ..Default::default()
            },
            summary: None,
        };
        serde_json::to_vec(&batch).expect("json")
    }

    fn paths(events: &Events) -> Vec<&str> {
        events
            .file_operations
            .items()
            .iter()
            .map(|f| f.path.as_str())
            .collect()
    }

    #[tokio::test]
    async fn each_step_keeps_its_own_events_and_the_job_all_of_them_within_the_cap() {
        let (answers, _decisions) = mpsc::channel(1);
        let mut job = JobGathered::new(enforcement(2), answers);
        job.step_started();
        job.on_events(&batch(&["/a", "/b", "/c"], 4))
            .expect("events");
        let first = job.step_ended();
        assert_eq!(paths(&first), ["/a", "/b"]);
        assert_eq!(
            first.file_operations.omitted(),
            5,
            "one past the cap, four before it"
        );
        job.step_started();
        let empty = job.step_ended();
        assert!(paths(&empty).is_empty(), "a step without frames has none");
        job.step_started();
        job.on_events(&batch(&["/d"], 0)).expect("events");
        let total = job.finish();
        assert_eq!(paths(&total), ["/a", "/b"], "the job's lists keep the cap");
        assert_eq!(total.file_operations.omitted(), 6);
        let mut bad = JobGathered::new(enforcement(2), mpsc::channel(1).0);
        assert!(bad.on_events(b"not json").is_err());
    }
}
