//! Run-time policies through the whole service: a request names a policy, the script sees the
//! errno of a denied operation, and the HTTP result, the stored record and the audit chain carry
//! the decisions; an operation an `approve` rule holds waits in `/v1/approvals` for an operator.

use serde_json::{Value, json};

use crate::api::{
    assert_audit_verifies, audit_tail, first_held, get_json, has, post_in_background, stored,
};
use crate::harness::{Service, Setup};

/// Reading /etc/hostname is denied, running `id` is logged, everything else is allowed.
const GATE: &str = r#"
version: 1
name: gate
file_rules:
  - {name: gated-read, paths: [/etc/hostname], operations: [read], decision: deny, message: "{path} is gated"}
  - {name: held-read, paths: [/etc/hosts], operations: [read], decision: approve}
  - {name: everything-else, paths: ["/**"], operations: ["*"], decision: allow}
command_rules:
  - {name: logged-id, commands: [id], decision: log}
  - {name: any-program, commands: ["*"], decision: allow}
network_rules:
  - {name: loopback, cidrs: [127.0.0.0/8], decision: allow}
  - {name: no-network, decision: deny}
"#;

const SCRIPT: &str = r#"
import subprocess
try:
    open("/etc/hostname").read()
    print("read 0")
except OSError as e:
    print("read", e.errno)
print("id", subprocess.run(["id", "-u"], capture_output=True).returncode)
"#;

fn setup() -> Setup {
    Service::setup()
        .policy("gate", GATE)
        .config(|c| c.sandbox.enforcement_ready = true)
}

async fn service() -> Service {
    setup().start().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_denied_read_fails_in_the_script_and_shows_in_the_result_the_record_and_the_audit() {
    let s = service().await;
    let body =
        json!({"script_content": SCRIPT, "script_type": "python", "timeout": 30, "policy": "gate"});
    let (status, result) = s.post("/v1/execute", &body).await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["stdout"], "read 13\nid 0\n", "{result}");
    assert_eq!(result["policy"], "gate");
    let events = &result["events"];
    assert!(
        has(&events["blocked_operations"], |b| b["type"] == "file_read"
            && b["target"] == "/etc/hostname"
            && b["errno"] == 13
            && b["rule"] == "gated-read"
            && b["message"] == "/etc/hostname is gated"),
        "{events}"
    );
    assert!(
        has(&events["file_operations"], |f| f["path"] == "/etc/hostname"
            && f["decision"] == "deny"),
        "{events}"
    );
    assert!(
        has(&events["processes"], |p| p["argv"] == json!(["id", "-u"])
            && p["decision"] == "log"
            && p["rule"] == "logged-id"
            && p["cwd"].is_string()),
        "{events}"
    );
    assert!(events["omitted"]["file_operations"].is_u64(), "{events}");
    // Before the run, the same rule decided the command validation found in the script.
    assert_eq!(
        result["policy_checks"],
        json!([{"kind": "command", "target": "id -u", "decision": "log", "rule": "logged-id",
            "message": null, "line": 8, "column": 28}]),
        "{result}"
    );
    let id = result["execution_id"].as_str().expect("id").to_string();
    let stored = stored(&s, &id).await;
    assert_eq!(stored["events"], result["events"]);

    let data_dir = s.data_dir.clone();
    s.stop().await;
    let records = audit_tail(&data_dir);
    let decisions: Vec<&Value> = records
        .iter()
        .filter(|r| r["event"] == "policy_decision" && r["execution_id"] == id.as_str())
        .collect();
    assert!(
        decisions
            .iter()
            .any(|r| r["outcome"]["operation"] == "file_read"
                && r["outcome"]["target"] == "/etc/hostname"
                && r["outcome"]["decision"] == "deny"
                && r["outcome"]["rule"] == "gated-read"
                && r["outcome"]["policy"] == "gate"),
        "{decisions:?}"
    );
    assert!(
        decisions
            .iter()
            .any(|r| r["outcome"]["operation"] == "process"
                && r["outcome"]["target"] == "id -u"
                && r["outcome"]["decision"] == "log"),
        "{decisions:?}"
    );
    assert!(
        decisions
            .iter()
            .all(|r| r["outcome"]["decision"] != "allow"),
        "only deny, approve and log decisions are audited: {decisions:?}"
    );
    assert_audit_verifies(&data_dir);
}

const HELD: &str = r#"
import os
os.chdir("/tmp")
try:
    open("/etc/hosts").read()
    print("hosts 0")
except OSError as e:
    print("hosts", e.errno)
"#;

/// Runs HELD under `gate`, answers its held read with `decision` once it is listed, and returns
/// the held entry and the result.
async fn held_read(s: &Service, decision: &str) -> (Value, Value) {
    let body =
        json!({"script_content": HELD, "script_type": "python", "timeout": 60, "policy": "gate"});
    let run = post_in_background(s, "/v1/execute", body);
    let held = first_held(s, "operations").await;
    assert!(!run.is_finished(), "the run waits for the decision");
    let id = held["approval_id"]
        .as_str()
        .unwrap_or_else(|| panic!("nothing was held: {held}"));
    let (status, after) = s
        .post(
            &format!("/v1/approvals/{id}"),
            &json!({"decision": decision, "reason": "test"}),
        )
        .await;
    assert_eq!(status, 200, "{after}");
    assert_eq!(after["status"], "running", "{after}");
    let (status, again) = s
        .post(
            &format!("/v1/approvals/{id}"),
            &json!({"decision": decision}),
        )
        .await;
    assert_eq!(status, 404, "a held operation is decided once: {again}");
    let result = tokio::time::timeout(std::time::Duration::from_secs(90), run)
        .await
        .expect("the run ends")
        .expect("task");
    (held, result)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operation_held_for_approval_waits_for_the_operator_and_proceeds_or_fails() {
    let s = service().await;
    let (held, result) = held_read(&s, "approve").await;
    assert_eq!(held["operation"], "file_read", "{held}");
    assert_eq!(held["target"], "/etc/hosts", "{held}");
    assert_eq!(held["cwd"], "/tmp", "{held}");
    assert_eq!(held["rule"], "held-read", "{held}");
    assert!(
        held["recent_commands"].is_array() && held["expires_at"].is_string(),
        "{held}"
    );
    assert_eq!(result["stdout"], "hosts 0\n", "{result}");
    assert!(
        has(&result["events"]["file_operations"], |f| f["path"]
            == "/etc/hosts"
            && f["decision"] == "approve"),
        "{result}"
    );

    let (_, result) = held_read(&s, "deny").await;
    assert_eq!(result["stdout"], "hosts 13\n", "{result}");
    assert!(
        has(&result["events"]["blocked_operations"], |b| b["target"]
            == "/etc/hosts"
            && b["errno"] == 13),
        "{result}"
    );
    let list = s
        .client
        .get(format!("{}/v1/approvals", s.url))
        .send()
        .await
        .expect("list");
    let list: Value = list.json().await.expect("json");
    assert_eq!(
        list["operations"],
        json!([]),
        "nothing waits once the runs ended"
    );
    let data_dir = s.data_dir.clone();
    s.stop().await;
    let decisions: Vec<Value> = audit_tail(&data_dir)
        .into_iter()
        .filter(|r| r["event"] == "operation_decision")
        .collect();
    assert_eq!(decisions.len(), 2, "{decisions:?}");
    assert_eq!(decisions[0]["outcome"]["decision"], "approve");
    assert_eq!(decisions[1]["outcome"]["decision"], "deny");
    assert_eq!(decisions[1]["outcome"]["operation"]["target"], "/etc/hosts");
}

/// Tries the denied read every quarter second for about ten seconds.
const REPEATED: &str = r#"
import time
for _ in range(40):
    try:
        open("/etc/hostname").read()
    except OSError:
        pass
    time.sleep(0.25)
print("done")
"#;

#[tokio::test(flavor = "multi_thread")]
async fn live_events_arrive_while_the_command_runs() {
    use futures::StreamExt as _;
    let s = service().await;
    let body = json!({"script_content": REPEATED, "script_type": "python", "timeout": 60, "policy": "gate"});
    let (status, accepted) = s.post("/v1/executions", &body).await;
    assert_eq!(status, 202, "{accepted}");
    let id = accepted["execution_id"].as_str().expect("id").to_string();
    let bad = s
        .client
        .get(format!("{}/v1/executions/{id}/events?types=disk", s.url))
        .send()
        .await
        .expect("events");
    assert_eq!(bad.status().as_u16(), 400);
    let response = s
        .client
        .get(format!("{}/v1/executions/{id}/events?types=blocked", s.url))
        .send()
        .await
        .expect("events");
    assert_eq!(response.status().as_u16(), 200);
    let mut body = response.bytes_stream();
    let mut seen = String::new();
    let first = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        while let Some(chunk) = body.next().await {
            seen.push_str(&String::from_utf8_lossy(&chunk.expect("chunk")));
            if seen.contains("event: blocked") && seen.contains("\n\n") {
                return;
            }
        }
    })
    .await;
    assert!(first.is_ok(), "no blocked event arrived: {seen}");
    let now = stored(&s, &id).await;
    assert_eq!(
        now["status"], "running",
        "the event came before the command ended"
    );
    assert!(
        seen.contains("/etc/hostname") && seen.contains("\"kind\":\"blocked\""),
        "{seen}"
    );
    assert!(
        !seen.contains("event: file"),
        "only the kinds asked for: {seen}"
    );
    drop(body);
    let done = get_json(&s, &format!("/v1/executions/{id}?wait=60")).await;
    assert_eq!(done["stdout"], "done\n", "{done}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operation_nobody_decides_expires_fails_with_eacces_and_leaves_the_list() {
    let s = setup()
        .config(|c| c.policy.approval_timeout_secs = 2)
        .start()
        .await;
    let body =
        json!({"script_content": HELD, "script_type": "python", "timeout": 60, "policy": "gate"});
    let run = post_in_background(&s, "/v1/execute", body);
    let held = first_held(&s, "operations").await;
    assert_eq!(held["target"], "/etc/hosts", "nothing was held: {held}");
    let parse = |v: &Value| {
        time::OffsetDateTime::parse(
            v.as_str().expect("a time"),
            &time::format_description::well_known::Rfc3339,
        )
        .expect("RFC 3339")
    };
    let window = parse(&held["expires_at"]) - parse(&held["requested_at"]);
    assert_eq!(window.whole_seconds(), 2, "{held}");
    // Nobody decides: the operation fails when the approval expires, and the run goes on.
    let result = tokio::time::timeout(std::time::Duration::from_secs(90), run)
        .await
        .expect("the run ends")
        .expect("task");
    assert_eq!(result["stdout"], "hosts 13\n", "{result}");
    assert_eq!(result["status"], "completed", "{result}");
    assert!(
        has(&result["events"]["blocked_operations"], |b| b["target"]
            == "/etc/hosts"
            && b["errno"] == 13
            && b["rule"] == "held-read"),
        "{result}"
    );
    let list: Value = s
        .client
        .get(format!("{}/v1/approvals", s.url))
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("json");
    assert_eq!(list["operations"], json!([]), "{list}");
    let id = held["approval_id"].as_str().expect("id");
    let (status, late) = s
        .post(
            &format!("/v1/approvals/{id}"),
            &json!({"decision": "approve"}),
        )
        .await;
    assert_eq!(
        status, 404,
        "an expired operation cannot be decided: {late}"
    );
    s.stop().await;
}
