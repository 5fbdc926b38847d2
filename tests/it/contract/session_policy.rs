//! Sessions under a run-time policy over the fake runner: the `policy` field of a session and
//! who may select which (403 `policy_not_allowed`, the token's default), `events` in command
//! results, the live event stream and the paged event history, and the typed error of a sandbox
//! that cannot enforce one. The fake session reports each command as a process and `DENY PATH`
//! as a denied write (see `fake.rs`).

use scriptgate::config::Config;
use serde_json::{Value, json};

use crate::api::session::create;
use crate::api::{call, get, post_in_background};
use crate::fake::FakeRunner;
use crate::harness::{self, Service};

const AGENT: &str = "agent-token-session-policy-81d0aa";
const CI: &str = "agent-token-session-policy-ci-5e21c3";

fn secured(c: &mut Config) {
    harness::two_agents(c, AGENT, CI);
}

async fn post(s: &Service, path: &str, body: Value) -> (u16, Value) {
    call(s, "POST", path, None, Some(body)).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_selects_only_its_policies_and_its_default_applies_unasked() {
    let s = Service::fake(FakeRunner::new(), |c| {
        secured(c);
        harness::unenforced_by_default(c);
    })
    .await;
    let (status, body) = call(
        &s,
        "POST",
        "/v1/sessions",
        Some(AGENT),
        Some(json!({"policy": "audit"})),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["type"], "policy_not_allowed", "{body}");
    // Refused before a sandbox was asked for.
    assert_eq!(
        s.runner().calls.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
    let (status, created) = call(&s, "POST", "/v1/sessions", Some(CI), Some(json!({}))).await;
    assert_eq!(status, 201, "{created}");
    let id = created["session_id"].as_str().expect("id");
    let path = format!("/v1/sessions/{id}");
    let (_, view) = call(&s, "GET", &path, Some(CI), None).await;
    assert_eq!(view["policy"], "strict", "{view}");
    // Without a policy of its own or a default, a session is not enforced.
    let (status, plain) = call(&s, "POST", "/v1/sessions", Some(AGENT), Some(json!({}))).await;
    assert_eq!(status, 201, "{plain}");
    let path = format!("/v1/sessions/{}", plain["session_id"].as_str().expect("id"));
    let (_, view) = call(&s, "GET", &path, Some(AGENT), None).await;
    assert_eq!(view["policy"], Value::Null, "{view}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_policy_is_a_schema_error_naming_the_known_ones() {
    let s = Service::fake(FakeRunner::new(), |_| {}).await;
    let (status, body) = post(&s, "/v1/sessions", json!({"policy": "nope"})).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["type"], "schema_error", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("audit, default, strict")),
        "{body}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn results_carry_events_and_the_history_pages_through_them() {
    let s = Service::fake(FakeRunner::new(), |_| {}).await;
    let id = create(&s, json!({"policy": "default"})).await;
    let exec = format!("/v1/sessions/{id}/exec");
    let (status, denied) = post(&s, &exec, json!({"command": "echo DENY /etc/x"})).await;
    assert_eq!(status, 200, "{denied}");
    let events = &denied["events"];
    assert_eq!(
        events["blocked_operations"][0]["target"], "/etc/x",
        "{events}"
    );
    assert_eq!(events["blocked_operations"][0]["errno"], 13, "{events}");
    assert_eq!(events["file_operations"][0]["decision"], "deny", "{events}");
    assert_eq!(
        events["processes"][0]["argv"],
        json!(["echo", "DENY", "/etc/x"])
    );
    assert_eq!(events["omitted"]["processes"], 0, "{events}");
    let (_, second) = post(&s, &exec, json!({"command": "ls"})).await;

    let history = format!("/v1/sessions/{id}/events/history");
    let (status, all) = get(&s, &history).await;
    assert_eq!(status, 200, "{all}");
    assert_eq!(
        (all["total"].clone(), all["commands"].clone()),
        (json!(4), json!(2))
    );
    assert_eq!(all["next_offset"], Value::Null, "{all}");
    let kinds: Vec<&str> = all["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["process", "file", "blocked", "process"], "{all}");
    assert_eq!(all["events"][0]["command_id"], denied["command_id"]);
    assert_eq!(all["events"][3]["command_id"], second["command_id"]);
    assert_eq!(all["events"][2]["event"]["target"], "/etc/x", "{all}");
    assert_eq!(all["omitted"]["blocked_operations"], 0, "{all}");

    let (_, page) = get(&s, &format!("{history}?types=process&limit=1")).await;
    assert_eq!(
        (page["total"].clone(), page["next_offset"].clone()),
        (json!(2), json!(1))
    );
    let (_, next) = get(&s, &format!("{history}?types=process&offset=1")).await;
    assert_eq!(
        next["events"][0]["command_id"], second["command_id"],
        "{next}"
    );
    for bad in ["?types=disk", "?limit=0", "?limit=1001", "?page=2"] {
        let (status, body) = get(&s, &format!("{history}{bad}")).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    let (status, body) = get(
        &s,
        &format!("/v1/sessions/{}/events/history", uuid::Uuid::new_v4()),
    )
    .await;
    assert_eq!(
        (status, body["error"]["type"].clone()),
        (404, json!("session_not_found"))
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_without_a_policy_has_no_events() {
    let s = Service::fake(FakeRunner::new(), harness::unenforced_by_default).await;
    let id = create(&s, json!({})).await;
    let (_, result) = post(
        &s,
        &format!("/v1/sessions/{id}/exec"),
        json!({"command": "ls"}),
    )
    .await;
    assert_eq!(result["events"], Value::Null, "{result}");
    let (_, history) = get(&s, &format!("/v1/sessions/{id}/events/history")).await;
    assert_eq!(
        (history["total"].clone(), history["commands"].clone()),
        (json!(0), json!(1))
    );
    // Nothing to stream: the stream ends at once.
    let body = s
        .client
        .get(format!("{}/v1/sessions/{id}/events", s.url))
        .send()
        .await
        .expect("stream")
        .text()
        .await
        .expect("body");
    assert_eq!(body, "");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn live_events_arrive_while_the_command_runs_and_the_stream_ends_with_the_session() {
    let s = Service::fake(FakeRunner::new(), |_| {}).await;
    let id = create(&s, json!({"policy": "default"})).await;
    let (status, body) = get(&s, &format!("/v1/sessions/{id}/events?types=disk")).await;
    assert_eq!(
        (status, body["error"]["type"].clone()),
        (400, json!("schema_error"))
    );
    let mut response = s
        .client
        .get(format!("{}/v1/sessions/{id}/events?types=blocked", s.url))
        .send()
        .await
        .expect("subscribe");
    assert_eq!(response.status().as_u16(), 200);
    let body = json!({"command": "BLOCK DENY /etc/y"});
    let running = post_in_background(&s, &format!("/v1/sessions/{id}/exec"), body);
    let mut buf = String::new();
    while !buf.contains("\n\n") {
        let chunk = response.chunk().await.expect("chunk").expect("an event");
        buf.push_str(&String::from_utf8_lossy(&chunk));
    }
    // Only the kinds asked for, while the command still waits.
    assert!(buf.starts_with("event: blocked\n"), "{buf}");
    assert!(buf.contains(r#""target":"/etc/y""#), "{buf}");
    assert!(!running.is_finished());
    s.runner().release.notify_one();
    let result = running.await.expect("ends");
    assert_eq!(
        result["events"]["blocked_operations"][0]["target"],
        "/etc/y"
    );
    let status = s
        .client
        .delete(format!("{}/v1/sessions/{id}", s.url))
        .send()
        .await
        .expect("delete")
        .status();
    assert_eq!(status.as_u16(), 204);
    // The session stopped: its stream ends.
    while let Some(chunk) = response.chunk().await.expect("chunk") {
        assert!(!String::from_utf8_lossy(&chunk).contains("event: process"));
    }
    s.stop().await;
}

/// Writes under /workspace/locked are denied; everything else is allowed.
const LOCKED: &str = r#"
version: 1
name: locked
file_rules:
  - {name: locked, paths: [/workspace/locked/**], operations: [write, create], decision: deny, message: "{path} is locked"}
  - {name: rest, paths: ["/**"], operations: ["*"], decision: allow}
command_rules:
  - {name: any, commands: ["*"], decision: allow}
network_rules:
  - {name: none, decision: deny}
"#;

#[tokio::test(flavor = "multi_thread")]
async fn the_files_api_answers_403_policy_violation_before_the_sandbox() {
    let dir = tempfile::tempdir().expect("policies dir").keep();
    std::fs::write(dir.join("locked.yml"), LOCKED).expect("policy file");
    let s = Service::fake(FakeRunner::new(), move |c| {
        c.policy.policies_dir = Some(dir)
    })
    .await;
    let id = create(&s, json!({"policy": "locked"})).await;
    let url = format!("{}/v1/sessions/{id}/files/locked/a.txt", s.url);
    let r = s.client.put(&url).body("x").send().await.expect("put");
    assert_eq!(r.status().as_u16(), 403);
    let body: Value = r.json().await.expect("json");
    assert_eq!(
        body,
        json!({"error": {"type": "policy_violation", "rule": "locked", "message": "/workspace/locked/a.txt is locked"}})
    );
    // The fake sandbox never saw it.
    let r = s.client.get(&url).send().await.expect("get");
    assert_eq!(r.status().as_u16(), 404);
    let r = s
        .client
        .put(format!("{}/v1/sessions/{id}/files/free.txt", s.url))
        .body("x")
        .send()
        .await
        .expect("put");
    assert_eq!(r.status().as_u16(), 200);
    s.stop().await;
}

/// Writes under /workspace/held need an operator, those under /workspace/noted are logged.
const HELD: &str = r#"
version: 1
name: held
file_rules:
  - {name: needs-an-operator, paths: [/workspace/held/**], operations: [write, create], decision: approve, message: "{path} is shared"}
  - {name: noted, paths: [/workspace/noted/**], operations: ["*"], decision: log}
  - {name: rest, paths: ["/**"], operations: ["*"], decision: allow}
command_rules:
  - {name: any, commands: ["*"], decision: allow}
network_rules:
  - {name: none, decision: deny}
"#;

#[tokio::test(flavor = "multi_thread")]
async fn the_files_api_answers_approval_required_for_an_approve_and_lets_a_log_through() {
    let dir = tempfile::tempdir().expect("policies dir").keep();
    std::fs::write(dir.join("held.yml"), HELD).expect("policy file");
    let s = Service::fake(FakeRunner::new(), move |c| {
        c.policy.policies_dir = Some(dir)
    })
    .await;
    let id = create(&s, json!({"policy": "held"})).await;
    let url = format!("{}/v1/sessions/{id}/files/held/a.txt", s.url);
    let r = s.client.put(&url).body("x").send().await.expect("put");
    assert_eq!(r.status().as_u16(), 403);
    let body: Value = r.json().await.expect("json");
    assert_eq!(
        body,
        json!({"error": {"type": "approval_required", "message":
            "write of /workspace/held/a.txt needs an operator's approval (rule `needs-an-operator`: \
             /workspace/held/a.txt is shared); the files API does not wait for one: perform it \
             with a command, which the session's policy holds for an operator in /v1/approvals"}})
    );
    // The fake sandbox never saw it; nothing waits in /v1/approvals.
    let r = s.client.get(&url).send().await.expect("get");
    assert_eq!(r.status().as_u16(), 404);
    let (_, approvals) = get(&s, "/v1/approvals").await;
    assert_eq!(approvals["pending"], json!([]), "{approvals}");
    let noted = format!("{}/v1/sessions/{id}/files/noted/a.txt", s.url);
    let r = s.client.put(&noted).body("x").send().await.expect("put");
    assert_eq!(r.status().as_u16(), 200);
    let r = s.client.get(&noted).send().await.expect("get");
    assert_eq!(r.status().as_u16(), 200);

    // A job in the session: its file steps are decided the same way before it runs.
    let job = |path: &str| {
        json!({"protocol_version": "1.0", "steps": [
            {"id": "w", "type": "write_file", "arguments": {"path": path, "content": "x"}}]})
    };
    let jobs = format!("/v1/sessions/{id}/jobs");
    let (status, body) = post(&s, &jobs, job("held/b.txt")).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["type"], "approval_required", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with(
                "create of /workspace/held/b.txt needs an operator's approval (rule \
             `needs-an-operator`: /workspace/held/b.txt is shared); a session's job does not wait"
            )),
        "{body}"
    );
    // Logged only: the policy lets it through to the session (the fake does not run session
    // jobs; the real engine's run is `jobs_policy::a_sessions_job_runs_under_the_sessions_policy`).
    let (_, body) = post(&s, &jobs, job("noted/b.txt")).await;
    assert!(
        !matches!(
            body["error"]["type"].as_str(),
            Some("approval_required" | "policy_violation")
        ),
        "{body}"
    );

    let data_dir = s.data_dir.clone();
    s.stop().await;
    let tail = std::process::Command::new(env!("CARGO_BIN_EXE_scriptgate"))
        .args(["audit", "tail", "-n", "1000", "--data-dir"])
        .arg(&data_dir)
        .output()
        .expect("audit tail");
    let decisions: Vec<Value> = String::from_utf8_lossy(&tail.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line"))
        .filter(|e| e["event"] == "policy_decision")
        .map(|e| {
            let o = &e["outcome"];
            json!([
                o["via"],
                o["operation"],
                o["target"],
                o["decision"],
                o["rule"]
            ])
        })
        .collect();
    assert_eq!(
        decisions,
        [
            json!([
                "files_api",
                "file_write",
                "/workspace/held/a.txt",
                "approve",
                "needs-an-operator"
            ]),
            json!([
                "files_api",
                "file_write",
                "/workspace/noted/a.txt",
                "log",
                "noted"
            ]),
            json!([
                "files_api",
                "file_create",
                "/workspace/noted/a.txt",
                "log",
                "noted"
            ]),
            json!([
                "files_api",
                "file_read",
                "/workspace/noted/a.txt",
                "log",
                "noted"
            ]),
            json!([
                "job",
                "file_create",
                "/workspace/held/b.txt",
                "approve",
                "needs-an-operator"
            ]),
            json!([
                "job",
                "file_write",
                "/workspace/held/b.txt",
                "approve",
                "needs-an-operator"
            ]),
            json!([
                "job",
                "file_create",
                "/workspace/noted/b.txt",
                "log",
                "noted"
            ]),
            json!([
                "job",
                "file_write",
                "/workspace/noted/b.txt",
                "log",
                "noted"
            ]),
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sandbox_that_cannot_enforce_refuses_a_session_with_a_policy() {
    let s = Service::fake(
        FakeRunner::new().without_enforcement(),
        harness::unenforced_by_default,
    )
    .await;
    let (status, body) = post(&s, "/v1/sessions", json!({"policy": "default"})).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["type"], "policy_unavailable", "{body}");
    // Nothing was left running, and the record says why it never served.
    let (_, list) = get(&s, "/v1/sessions").await;
    let sessions = list["sessions"].as_array().expect("sessions");
    assert_eq!(sessions.len(), 1, "{list}");
    assert_eq!(sessions[0]["state"], "stopped", "{list}");
    assert!(
        sessions[0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("not available")),
        "{list}"
    );
    // The same sandbox still serves sessions without a policy.
    create(&s, json!({})).await;
    s.stop().await;
}
