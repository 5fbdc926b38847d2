//! Each operation type under each decision: the errno the script saw, the events, the blocked
//! operations and the approval requests.

use std::time::Duration;

use scriptgate::domain::script::Language;
use scriptgate::sandbox::Runner;
use scriptgate_policy::Decision;
use serde_json::Value;

use super::*;

/// The policy of the decision matrix: decision `d` for one operation of each type, allow for the
/// rest.
pub(super) fn matrix_policy(d: &str) -> WirePolicy {
    wire(&format!(
        r#"
version: 1
name: matrix-{d}
file_rules:
  - {{name: gated-read, paths: [/etc/hostname], operations: [read], decision: {d}}}
  - {{name: gated-write, paths: [/tmp/t/write.txt], operations: [write], decision: {d}}}
  - {{name: gated-create, paths: [/tmp/t/create.txt], operations: [create], decision: {d}}}
  - {{name: gated-delete, paths: [/tmp/t/delete.txt], operations: [delete], decision: {d}}}
  - {{name: everything-else, paths: ["/**"], operations: ["*"], decision: allow}}
command_rules:
  - {{name: gated-exec, commands: [id], decision: {d}}}
  - {{name: any-program, commands: ["*"], decision: allow}}
network_rules:
  - {{name: gated-connect, cidrs: [127.0.0.1], ports: [9], decision: {d}}}
  - {{name: loopback, cidrs: [127.0.0.0/8], decision: allow}}
  - {{name: no-network, decision: deny}}
"#
    ))
}

/// Performs one operation of each type and prints the errno each saw (0: it succeeded).
pub(super) const MATRIX_SCRIPT: &str = r#"
import json, os, socket, subprocess
os.makedirs("/tmp/t", exist_ok=True)
with open("/tmp/t/write.txt", "w") as f:
    f.write("old")
with open("/tmp/t/delete.txt", "w") as f:
    f.write("x")

def attempt(fn):
    try:
        fn()
        return 0
    except OSError as e:
        return e.errno

def connect():
    s = socket.socket()
    s.settimeout(10)
    try:
        s.connect(("127.0.0.1", 9))
    finally:
        s.close()

def write():
    with open("/tmp/t/write.txt", "w") as f:
        f.write("new")

def create():
    with open("/tmp/t/create.txt", "x") as f:
        f.write("c")

r = {}
r["exec"] = attempt(lambda: subprocess.run(["id"], capture_output=True))
r["read"] = attempt(lambda: open("/etc/hostname").read())
r["write"] = attempt(write)
r["create"] = attempt(create)
r["delete"] = attempt(lambda: os.unlink("/tmp/t/delete.txt"))
r["connect"] = attempt(connect)
# A refused write must not have truncated the file (O_TRUNC happens only in the real open).
r["write_kept"] = open("/tmp/t/write.txt").read()
print(json.dumps(r))
"#;

pub(super) const EACCES: i64 = 13;
const ECONNREFUSED: i64 = 111;

/// The decision matrix for one decision: the errnos the script saw, the events and the blocked
/// operations, and what the approver was asked.
async fn decision_matrix(decision: &str, answer: Answer) {
    let sandbox = sandbox(true, 100).await;
    let (tx, asked) = approver(answer);
    let outcome = run(
        &sandbox,
        Language::Python,
        MATRIX_SCRIPT,
        matrix_policy(decision),
        Some(tx),
        Duration::from_secs(60),
    )
    .await;
    let requests = asked.await.expect("approver");
    sandbox.shutdown().await;
    assert_eq!(outcome.outcome.exit_code, Some(0), "{outcome:?}");
    let proceeds = matches!(
        (decision, answer),
        ("allow" | "log", _) | ("approve", Answer::Approve)
    );
    let seen = stdout_json(&outcome.outcome);
    let expected = if proceeds {
        serde_json::json!({"exec": 0, "read": 0, "write": 0, "create": 0, "delete": 0, "connect": ECONNREFUSED, "write_kept": "new"})
    } else {
        serde_json::json!({"exec": EACCES, "read": EACCES, "write": EACCES, "create": EACCES, "delete": EACCES, "connect": EACCES, "write_kept": "old"})
    };
    assert_eq!(seen, expected, "{decision} / {answer:?}");
    let wanted: Decision =
        serde_json::from_value(Value::String(decision.into())).expect("decision");
    let ev = events(&outcome);
    let process = ev
        .processes
        .items()
        .iter()
        .find(|p| p.argv.first().map(String::as_str) == Some("id"))
        .expect("the exec of id is an event");
    assert_eq!(
        (process.decision, process.rule.as_deref()),
        (wanted, Some("gated-exec"))
    );
    assert_eq!(process.cwd, "/tmp");
    for (kind, path, rule) in [
        (FileOperationType::FileRead, "/etc/hostname", "gated-read"),
        (
            FileOperationType::FileWrite,
            "/tmp/t/write.txt",
            "gated-write",
        ),
        (
            FileOperationType::FileCreate,
            "/tmp/t/create.txt",
            "gated-create",
        ),
        (
            FileOperationType::FileDelete,
            "/tmp/t/delete.txt",
            "gated-delete",
        ),
    ] {
        let e = ev
            .file_operations
            .items()
            .iter()
            .find(|f| f.kind == kind && f.path == path)
            .unwrap_or_else(|| panic!("no {kind:?} event for {path}: {:?}", ev.file_operations));
        assert_eq!(
            (e.decision, e.rule.as_deref()),
            (wanted, Some(rule)),
            "{path}"
        );
    }
    let connect = ev
        .network_operations
        .items()
        .iter()
        .find_map(|n| match n {
            NetworkEvent::NetConnect {
                remote,
                port: 9,
                decision,
                rule,
                ..
            } => Some((remote.to_string(), *decision, rule.clone())),
            _ => None,
        })
        .expect("the connect is an event");
    assert_eq!(
        connect,
        ("127.0.0.1".into(), wanted, Some("gated-connect".into()))
    );
    let blocked: Vec<OperationType> = ev
        .blocked_operations
        .items()
        .iter()
        .map(|b| b.kind)
        .collect();
    if proceeds {
        assert!(blocked.is_empty(), "{blocked:?}");
    } else {
        for kind in [
            OperationType::Exec,
            OperationType::FileRead,
            OperationType::FileWrite,
            OperationType::FileCreate,
            OperationType::FileDelete,
            OperationType::NetConnect,
        ] {
            let b = ev
                .blocked_operations
                .items()
                .iter()
                .find(|b| b.kind == kind)
                .unwrap_or_else(|| panic!("{kind:?} is not blocked: {blocked:?}"));
            assert_eq!(b.errno, Some(13), "{kind:?}");
            assert!(b.pid.is_some_and(|p| p > 1), "{b:?}");
            let message = b.message.clone().unwrap_or_default();
            match answer {
                Answer::Deny => assert!(message.contains("denied by an operator"), "{message}"),
                Answer::Never if decision == "approve" => {
                    assert!(message.contains("expired"), "{message}")
                }
                _ => {}
            }
        }
    }
    if decision == "approve" {
        let mut ops: Vec<OperationType> = requests.iter().map(|r| r.operation).collect();
        // An exec refused with EACCES is tried again along PATH (/usr/bin, then /bin): each
        // attempt is an operation of its own.
        ops.sort_by_key(|o| format!("{o:?}"));
        ops.dedup();
        assert_eq!(
            ops,
            vec![
                OperationType::Exec,
                OperationType::FileCreate,
                OperationType::FileDelete,
                OperationType::FileRead,
                OperationType::FileWrite,
                OperationType::NetConnect,
            ],
            "{requests:?}"
        );
        for r in &requests {
            assert_eq!(r.cwd, "/tmp");
            assert!(r.pid > 1 && r.timeout_ms == 1500, "{r:?}");
            assert!(r.rule.as_deref().is_some_and(|n| n.starts_with("gated-")));
        }
        let exec = requests
            .iter()
            .find(|r| r.operation == OperationType::Exec)
            .expect("exec request");
        assert_eq!(exec.argv.as_deref(), Some(&["id".to_string()][..]));
        assert!(exec.command.as_deref().is_some_and(|c| c.ends_with("/id")));
    } else {
        assert!(requests.is_empty(), "{requests:?}");
    }
    let summary = outcome.summary.expect("a summary");
    assert!(summary.decided > 6, "{summary:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn allowed_operations_proceed_and_are_reported() {
    decision_matrix("allow", Answer::Never).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn denied_operations_fail_with_eacces_and_are_blocked() {
    decision_matrix("deny", Answer::Never).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn logged_operations_proceed_flagged() {
    decision_matrix("log", Answer::Never).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn approved_operations_proceed_after_the_answer() {
    decision_matrix("approve", Answer::Approve).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn operations_an_operator_denies_fail() {
    decision_matrix("approve", Answer::Deny).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn operations_nobody_approves_expire_and_fail() {
    decision_matrix("approve", Answer::Never).await;
}
