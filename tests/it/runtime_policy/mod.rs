//! Run-time policy enforcement against a real engine: a script performs each operation type
//! (exec, read, write, create, delete, connect) under each decision (allow, deny, log, approve →
//! approved, denied, expired) and reports the errno it saw; the outcome must carry the matching
//! events. Then the hostile cases: a path swapped between an allowed and a denied file by another
//! thread, a symlink flipped in /tmp, a hundred processes waiting for approval at once, a million
//! opens.
//!
//! The image is `RUNNER_IMAGE_UNDER_TEST` when set (see `harness::runner_image`).

mod hostile;
mod matrix;
mod semantics;
mod service;

use std::time::Duration;

use scriptgate::domain::script::Language;
use scriptgate::sandbox::docker::DockerSandbox;
use scriptgate::sandbox::{
    ApprovalAsk, ApprovalRequest, ApprovalVerdict, EnforcedOutcome, Enforcement, RunOutcome, Runner,
};
use scriptgate_policy::events::{Events, FileOperationType, NetworkEvent, OperationType};
use scriptgate_policy::{CompiledPolicy, Policy, WirePolicy};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::harness;

pub(super) fn image() -> String {
    harness::runner_image()
}

/// A sandbox on the test image, Python started ready for a policy unless `ready` is false.
pub(super) async fn sandbox(ready: bool, pids: i64) -> DockerSandbox {
    harness::sandbox(|c| {
        c.python_image = image();
        c.bash_image = image();
        c.enforcement_ready = ready;
        c.limits.pids = pids;
    })
    .await
}

pub(super) fn wire(yaml: &str) -> WirePolicy {
    let policy: Policy = serde_norway::from_str(yaml).expect("test policy parses");
    CompiledPolicy::compile(policy)
        .expect("test policy compiles")
        .wire()
}

/// How the test approver answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Answer {
    Approve,
    Deny,
    /// Never: the supervisor's deadline ends each wait.
    Never,
    /// Holds every request until `n` wait at once, then approves them all.
    ApproveAfter(usize),
    /// Approves each request after this long.
    ApproveLater(Duration),
}

/// An approver task; it returns the requests it saw once the run has ended.
pub(super) fn approver(
    answer: Answer,
) -> (
    mpsc::Sender<ApprovalAsk>,
    tokio::task::JoinHandle<Vec<ApprovalRequest>>,
) {
    let (tx, mut rx) = mpsc::channel::<ApprovalAsk>(256);
    let task = tokio::spawn(async move {
        let mut seen = Vec::new();
        let mut held = Vec::new();
        while let Some(ask) = rx.recv().await {
            seen.push(ask.request.clone());
            match answer {
                Answer::Approve => {
                    let _ = ask.answer.send(ApprovalVerdict::Approved);
                }
                Answer::Deny => {
                    let _ = ask.answer.send(ApprovalVerdict::Denied);
                }
                Answer::Never => held.push(ask.answer),
                Answer::ApproveLater(after) => {
                    tokio::spawn(async move {
                        tokio::time::sleep(after).await;
                        let _ = ask.answer.send(ApprovalVerdict::Approved);
                    });
                }
                Answer::ApproveAfter(n) => {
                    held.push(ask.answer);
                    if held.len() >= n {
                        for a in held.drain(..) {
                            let _ = a.send(ApprovalVerdict::Approved);
                        }
                    }
                }
            }
        }
        seen
    });
    (tx, task)
}

pub(super) async fn run(
    sandbox: &DockerSandbox,
    language: Language,
    script: &str,
    policy: WirePolicy,
    approvals: Option<mpsc::Sender<ApprovalAsk>>,
    timeout: Duration,
) -> EnforcedOutcome {
    let lease = sandbox.acquire(language, None).await.expect("a container");
    let enforcement = Enforcement {
        policy,
        event_cap: 5000,
        approval_timeout: Duration::from_millis(1500),
        approvals,
        live: None,
        approved_commands: Vec::new(),
    };
    let spec = harness::vouched(language, script, timeout.as_secs()).spec;
    lease.run_enforced(spec, enforcement).await
}

pub(super) fn events(outcome: &EnforcedOutcome) -> &Events {
    outcome
        .events
        .as_ref()
        .expect("a run under a policy has events")
}

pub(super) fn stdout_json(outcome: &RunOutcome) -> Value {
    let text = outcome.stdout.text();
    let line = text.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| {
        panic!(
            "{e}: stdout {text:?}, stderr {:?}, crashed {:?}",
            outcome.stderr.text(),
            outcome.crashed
        )
    })
}
