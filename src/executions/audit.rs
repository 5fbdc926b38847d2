//! The audit trail of an execution: each entry is a typed view of the record (and of what just
//! happened to it), serialised when it is appended.

use serde::Serialize;

use crate::domain::record::{
    ApprovalMode, Decision, ErrorKind, ExecutionRecord, PolicyCheckKind, Status,
};
use crate::domain::script::Language;
use crate::domain::verdict::{Layer, Severity, Verdict};
use crate::domain::work::Work;
use crate::store::AuditEvent;
use scriptgate_policy::Decision as PolicyVerdict;
use scriptgate_policy::events::{FileOperationType, NetworkEvent};

/// The actor recorded for the service's own events.
pub(super) const SERVICE: &str = "scriptgate";

pub(super) fn entry(
    rec: &ExecutionRecord,
    actor: &str,
    event: &'static str,
    outcome: impl Serialize,
) -> AuditEvent {
    let outcome = serde_json::to_value(outcome).expect("audit entries serialise");
    AuditEvent::new(actor, rec.id, event, &rec.script_sha256, outcome)
}

#[derive(Serialize)]
struct Request {
    language: Language,
    timeout_secs: u64,
    script_chars: usize,
    stdin_bytes: usize,
    #[serde(skip_serializing_if = "is_zero")]
    files: usize,
    #[serde(skip_serializing_if = "is_zero")]
    artifact_globs: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

#[derive(Serialize)]
struct JobRequest<'a> {
    job_id: uuid::Uuid,
    profile: &'a str,
    timeout_secs: u64,
    steps: usize,
    job_bytes: usize,
}

/// What the caller asked for (sizes only: the script or job itself is in the record, or
/// withheld).
pub(super) fn request(rec: &ExecutionRecord, caller: &str) -> AuditEvent {
    match &rec.run {
        Work::Script(run) => {
            let request = Request {
                language: run.script.language,
                timeout_secs: run.timeout_secs,
                script_chars: run.script.text.chars().count(),
                stdin_bytes: run.stdin.len(),
                files: run.files.len(),
                artifact_globs: run.artifacts.len(),
            };
            entry(rec, caller, "request", request)
        }
        Work::Job(job) => {
            let steps = job.job.get("steps").and_then(|s| s.as_array());
            let request = JobRequest {
                job_id: job.job_id,
                profile: &job.profile,
                timeout_secs: job.timeout_secs,
                steps: steps.map_or(0, Vec::len),
                job_bytes: job.job.to_string().len(),
            };
            entry(rec, caller, "job_request", request)
        }
    }
}

#[derive(Serialize)]
struct Validation<'a> {
    valid: bool,
    layer: Option<Layer>,
    findings: Vec<FindingSeen<'a>>,
}

#[derive(Serialize)]
struct FindingSeen<'a> {
    layer: Layer,
    rule: &'a str,
    severity: Severity,
    line: u32,
    message: &'a str,
}

/// The verdict on the record's script: findings are redacted by the rules that wrote them.
pub(super) fn validation(rec: &ExecutionRecord, verdict: &Verdict) -> AuditEvent {
    let findings = verdict
        .findings
        .iter()
        .map(|f| FindingSeen {
            layer: f.layer,
            rule: &f.rule,
            severity: f.severity,
            line: f.line,
            message: &f.message,
        })
        .collect();
    let validation = Validation {
        valid: verdict.valid,
        layer: verdict.layer,
        findings,
    };
    entry(rec, SERVICE, "validation", validation)
}

#[derive(Serialize)]
struct ApprovalRequested<'a> {
    mode: ApprovalMode,
    /// The run's policy, when one of its `approve` decisions holds the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<&'a str>,
}

pub(super) fn approval_requested(rec: &ExecutionRecord, mode: ApprovalMode) -> AuditEvent {
    let by_policy = rec
        .policy_checks
        .iter()
        .any(|c| c.decision == PolicyVerdict::Approve);
    let requested = ApprovalRequested {
        mode,
        policy: rec.run.policy().filter(|_| by_policy),
    };
    entry(rec, SERVICE, "approval_requested", requested)
}

/// A decision of the run's policy before the run (a command, or a raised finding).
#[derive(Serialize)]
struct PolicyCheckSeen<'a> {
    policy: &'a str,
    /// `command` or `finding`.
    operation: PolicyCheckKind,
    /// The command line, or the finding's rule id.
    target: &'a str,
    decision: PolicyVerdict,
    rule: Option<&'a str>,
    line: u32,
}

/// Every `deny`, `approve` and `log` decision the run's policy made before the run.
pub(super) fn policy_checks(rec: &ExecutionRecord) -> Vec<AuditEvent> {
    let Some(policy) = rec.run.policy() else {
        return Vec::new();
    };
    rec.policy_checks
        .iter()
        .map(|c| {
            let seen = PolicyCheckSeen {
                policy,
                operation: c.kind,
                target: &c.target,
                decision: c.decision,
                rule: c.rule.as_deref(),
                line: c.line,
            };
            entry(rec, SERVICE, "policy_decision", seen)
        })
        .collect()
}

/// One decision of a run-time policy other than `allow`.
#[derive(Serialize)]
struct PolicyDecision<'a> {
    policy: &'a str,
    /// `process`, a file operation's type (`file_read`, …), `net_connect` or `dns_query`.
    operation: &'a str,
    /// The command line, the path, `address:port` or the domain.
    target: String,
    decision: PolicyVerdict,
    rule: Option<&'a str>,
}

/// Every `deny`, `approve` and `log` decision of a run under a policy, from the events its result
/// keeps (decisions beyond `policy.event_cap` are counted in the result, not audited one by one).
pub(super) fn policy_decisions(rec: &ExecutionRecord) -> Vec<AuditEvent> {
    let (Some(policy), Some(events)) = (
        rec.run.policy(),
        rec.result.as_ref().and_then(|r| r.events.as_ref()),
    ) else {
        return Vec::new();
    };
    let mut seen = Vec::new();
    for p in events.processes.items() {
        seen.push(("process", p.argv.join(" "), p.decision, p.rule.as_deref()));
    }
    for f in events.file_operations.items() {
        seen.push((
            file_kind(f.kind),
            f.path.clone(),
            f.decision,
            f.rule.as_deref(),
        ));
    }
    for n in events.network_operations.items() {
        seen.push(match n {
            NetworkEvent::NetConnect {
                remote,
                port,
                decision,
                rule,
                ..
            } => (
                "net_connect",
                format!("{remote}:{port}"),
                *decision,
                rule.as_deref(),
            ),
            NetworkEvent::DnsQuery {
                domain, decision, ..
            } => ("dns_query", domain.clone(), *decision, None),
        });
    }
    seen.into_iter()
        .filter(|(_, _, decision, _)| *decision != PolicyVerdict::Allow)
        .map(|(operation, target, decision, rule)| {
            let d = PolicyDecision {
                policy,
                operation,
                target,
                decision,
                rule,
            };
            entry(rec, SERVICE, "policy_decision", d)
        })
        .collect()
}

/// The static name of a file operation's type.
fn file_kind(kind: FileOperationType) -> &'static str {
    match kind {
        FileOperationType::FileRead => "file_read",
        FileOperationType::FileWrite => "file_write",
        FileOperationType::FileCreate => "file_create",
        FileOperationType::FileDelete => "file_delete",
        FileOperationType::FileList => "file_list",
        FileOperationType::FileStat => "file_stat",
        FileOperationType::FileExec => "file_exec",
    }
}

#[derive(Serialize)]
struct Nothing {}

pub(super) fn queued(rec: &ExecutionRecord) -> AuditEvent {
    entry(rec, SERVICE, "queued", Nothing {})
}

#[derive(Serialize)]
struct RunStarted {
    warm: bool,
}

pub(super) fn run_started(rec: &ExecutionRecord, warm: bool) -> AuditEvent {
    entry(rec, SERVICE, "run_started", RunStarted { warm })
}

#[derive(Serialize)]
struct RunFinished<'a> {
    status: Status,
    exit_code: Option<i32>,
    timed_out: bool,
    oom_killed: bool,
    error: Option<ErrorKind>,
    container_id: &'a str,
    cpu_time_ms: u64,
    max_memory_bytes: u64,
    duration_ms: u64,
}

/// The record once its run ended (its result is set).
pub(super) fn run_finished(rec: &ExecutionRecord) -> AuditEvent {
    let result = rec.result.clone().unwrap_or_default();
    let finished = RunFinished {
        status: rec.status,
        exit_code: result.exit_code,
        timed_out: result.timed_out,
        oom_killed: result.oom_killed,
        error: rec.error.as_ref().map(|e| e.kind),
        container_id: &result.container_id,
        cpu_time_ms: result.usage.cpu_time_ms,
        max_memory_bytes: result.usage.max_memory_bytes,
        duration_ms: rec.duration_ms,
    };
    entry(rec, SERVICE, "run_finished", finished)
}

#[derive(Serialize)]
struct Failed<'a> {
    reason: &'a str,
}

/// The service gave up on the execution (`event` says how: `failed`, `interrupted`, …).
pub(super) fn failed(rec: &ExecutionRecord, event: &'static str, reason: &str) -> AuditEvent {
    entry(rec, SERVICE, event, Failed { reason })
}

#[derive(Serialize)]
struct Decided<'a> {
    decision: Decision,
    reason: &'a str,
}

pub(super) fn decided(
    rec: &ExecutionRecord,
    by: &str,
    decision: Decision,
    reason: &str,
) -> AuditEvent {
    entry(rec, by, "approval_decision", Decided { decision, reason })
}

#[derive(Serialize)]
struct OperationDecided<'a> {
    decision: Decision,
    reason: &'a str,
    operation: crate::sandbox::ApprovalRequest,
}

/// An operator's answer to an operation a run-time policy held.
pub(super) fn operation_decided(
    rec: &ExecutionRecord,
    by: &str,
    decision: Decision,
    reason: &str,
    held: &super::held::HeldOperation,
) -> AuditEvent {
    let d = OperationDecided {
        decision,
        reason,
        operation: held.request.clone(),
    };
    entry(rec, by, "operation_decision", d)
}

#[derive(Serialize)]
struct Expired {
    after_secs: u64,
}

pub(super) fn expired(rec: &ExecutionRecord, after_secs: u64) -> AuditEvent {
    entry(rec, SERVICE, "expired", Expired { after_secs })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::domain::record::{ResourceUsage, RunResult, StageMs};
    use crate::domain::script::Script;
    use crate::domain::verdict::Finding;
    use crate::domain::work::ScriptRun;

    fn record() -> ExecutionRecord {
        let now = time::OffsetDateTime::now_utc();
        ExecutionRecord {
            id: uuid::Uuid::nil(),
            agent: "bot".into(),
            status: Status::Completed,
            run: Work::Script(ScriptRun::new(
                Script::new(Language::Python, "print('é')"),
                "in".into(),
                std::time::Duration::from_secs(9),
                "minimal".into(),
            )),
            script_sha256: "abc".into(),
            created_at: now,
            updated_at: now,
            verdict: Verdict {
                language: Language::Python,
                valid: true,
                layer: None,
                findings: vec![Finding {
                    layer: Layer::Dangerous,
                    rule: "r".into(),
                    severity: Severity::Warn,
                    message: "m".into(),
                    line: 2,
                    column: 3,
                }],
            },
            contents: Vec::new(),
            result: Some(RunResult {
                exit_code: Some(0),
                usage: ResourceUsage {
                    cpu_time_ms: 4,
                    max_memory_bytes: 5,
                },
                container_id: "c1".into(),
                ..RunResult::default()
            }),
            error: None,
            approval: None,
            policy_checks: Vec::new(),
            timings: StageMs::default(),
            duration_ms: 12,
        }
    }

    #[test]
    fn entries_keep_the_shape_the_audit_log_has_always_had() {
        let rec = record();
        let request = request(&rec, "bot");
        assert_eq!(request.actor, "bot");
        assert_eq!(
            request.outcome,
            json!({"language": "python", "timeout_secs": 9, "script_chars": 10, "stdin_bytes": 2})
        );
        assert_eq!(
            validation(&rec, &rec.verdict).outcome,
            json!({"valid": true, "layer": null, "findings": [
                {"layer": "dangerous", "rule": "r", "severity": "warn", "line": 2, "message": "m"}
            ]})
        );
        assert_eq!(
            run_finished(&rec).outcome,
            json!({
                "status": "completed", "exit_code": 0, "timed_out": false, "oom_killed": false,
                "error": null, "container_id": "c1", "cpu_time_ms": 4, "max_memory_bytes": 5,
                "duration_ms": 12,
            })
        );
        assert_eq!(queued(&rec).outcome, json!({}));
        assert_eq!(
            decided(&rec, "alice", Decision::Approve, "ok").outcome,
            json!({"decision": "approve", "reason": "ok"})
        );
        assert_eq!(
            approval_requested(&rec, ApprovalMode::OnWarn).outcome,
            json!({"mode": "on_warn"})
        );
        assert_eq!(failed(&rec, "interrupted", "why").event, "interrupted");
        assert_eq!(expired(&rec, 3).outcome, json!({"after_secs": 3}));
    }
}
