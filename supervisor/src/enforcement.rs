//! The run-time policy part of the protocol: what a job asks the supervisor to enforce, the events
//! it reports, and approvals (an operation held until the host answers).
//!
//! ```text
//! host → supervisor   Job {…, enforce: {policy, event_cap, approval_timeout_ms,
//!                              approved_commands?}}                          (the one job)
//! supervisor → host   Events {events, omitted, summary?}    batched while the script runs; the
//!                                                          last batch (with `summary`) comes
//!                                                          before `Exit`
//! supervisor → host   ApprovalRequest {id, operation, …}    an operation is held
//! host → supervisor   [kind 21][len u32 BE][ApprovalDecision JSON]   on stdin, any time after the
//!                                                          job; unknown ids are ignored
//! ```
//!
//! Everything is additive: the host sends `enforce` only to a supervisor whose `Ready` lists
//! [`FEATURE_ENFORCE`] (an older supervisor refuses a job with an unknown field, so a policy is
//! never silently dropped), keeps stdin open after such a job (and only then) for decisions, and
//! the two frame kinds are only ever sent for a job that asked for enforcement.

use scriptgate_policy::events::{Event, OperationType};
use serde::{Deserialize, Serialize};

/// In `Ready::features`: the supervisor can enforce a run-time policy (seccomp user notification
/// works in this runtime).
pub const FEATURE_ENFORCE: &str = "enforce/1";

/// In the container's environment (`ready`): the supervisor starts its Python interpreter under
/// the enforcement's filter, so a job with a policy keeps the warm start (a job without one then
/// pays a few microseconds per file operation instead of nothing).
pub const ENFORCE_READY_ENV: &str = "SCRIPTGATE_ENFORCE";

/// The kind byte of an [`ApprovalDecision`] frame on the supervisor's stdin (after the job).
pub const HOST_APPROVAL_DECISION: u8 = crate::HostKind::ApprovalDecision as u8;

/// Events kept per list when a job does not say.
pub const DEFAULT_EVENT_CAP: u32 = 1000;

/// What a job asks the supervisor to enforce.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Enforce {
    /// The policy in its wire form (`scriptgate_policy::WirePolicy` JSON); the supervisor compiles
    /// it again and refuses the job if it does not compile.
    pub policy: serde_json::Value,
    /// Events the supervisor sends per list (`processes`, `file_operations`,
    /// `network_operations`, `blocked_operations`); the rest are counted in `omitted`.
    pub event_cap: u32,
    /// How long a held operation waits for the host's decision before it fails (`EACCES`).
    pub approval_timeout_ms: u64,
    /// Command lines an operator approved before the run (each `[name, args…]`, the name without
    /// its directory): an `execve` of exactly one of them that `command_rules` would hold runs
    /// instead, reported as `log` with the rule `approved-before-run`. Sent only when not empty,
    /// so a job without any still reaches a supervisor that predates the field.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approved_commands: Vec<Vec<String>>,
}

/// A batch of events (an `Events` frame).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EventBatch {
    pub events: Vec<Event>,
    /// Events of each list that the cap left out since the previous batch.
    pub omitted: Omitted,
    /// In the last batch of a run only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<EnforceSummary>,
}

/// Counts per event list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Omitted {
    pub processes: u64,
    pub file_operations: u64,
    pub network_operations: u64,
    pub blocked_operations: u64,
}

impl Omitted {
    pub fn total(&self) -> u64 {
        self.processes + self.file_operations + self.network_operations + self.blocked_operations
    }
}

/// What the enforcement did over the whole run.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EnforceSummary {
    /// System calls the supervisor decided (the script's, after the policy took effect).
    pub decided: u64,
    /// Allowed `stat`-family calls: decided and counted, not listed (an interpreter makes
    /// hundreds; denied, logged and held ones are listed).
    pub stats_allowed: u64,
    /// How the files a script may execute at all are bounded (see the supervisor's `enforce`
    /// module): `landlock` (an allow-list derived from the command rules), `none` (the policy
    /// lets every program run, so the per-call check is the only one).
    pub exec_floor: String,
    /// The most operations held for approval at once.
    pub peak_pending: u32,
    /// The most threads the supervisor had at once (one monitor per command, however many
    /// operations wait).
    pub peak_supervisor_threads: u32,
    /// The supervisor's peak resident memory (`VmHWM`).
    pub supervisor_peak_rss_bytes: u64,
}

/// An operation held until the host decides (an `ApprovalRequest` frame).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// Unique within the container; the decision names it.
    pub id: u64,
    pub operation: OperationType,
    /// The path, the command line, or `address:port`.
    pub target: String,
    /// Executions: the program (resolved path) and its arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    /// The process's working directory.
    pub cwd: String,
    pub pid: u32,
    pub rule: Option<String>,
    pub message: Option<String>,
    /// The last command lines the run executed, oldest first.
    pub recent_commands: Vec<String>,
    /// The operation fails this long after the request unless the host decides first.
    pub timeout_ms: u64,
}

/// The host's answer to an [`ApprovalRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalDecision {
    pub id: u64,
    pub verdict: ApprovalVerdict,
    /// Shown in the blocked operation's event when the operation fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalVerdict {
    /// The operation proceeds.
    Approved,
    /// It fails with `EACCES`.
    Denied,
    /// Nobody decided in time (the host's own expiry); it fails with `EACCES`.
    Expired,
}

/// An [`ApprovalDecision`] as the host writes it to the supervisor's stdin.
pub fn encode_decision(decision: &ApprovalDecision) -> Vec<u8> {
    let json = serde_json::to_vec(decision).expect("a decision always serializes");
    let mut out = Vec::with_capacity(json.len() + 5);
    out.push(HOST_APPROVAL_DECISION);
    out.extend_from_slice(&u32::try_from(json.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(&json);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_are_framed_json() {
        let d = ApprovalDecision {
            id: 7,
            verdict: ApprovalVerdict::Approved,
            message: None,
        };
        let wire = encode_decision(&d);
        assert_eq!(wire[0], HOST_APPROVAL_DECISION);
        let len = u32::from_be_bytes([wire[1], wire[2], wire[3], wire[4]]) as usize;
        assert_eq!(len, wire.len() - 5);
        let back: ApprovalDecision = serde_json::from_slice(&wire[5..]).expect("json");
        assert_eq!(back, d);
        assert!(String::from_utf8_lossy(&wire).contains(r#""verdict":"approved""#));
    }
}
