//! Sessions under a run-time policy against the real engine, over HTTP: every command of a
//! session with a `policy` runs under it (a denied write fails with `EACCES` in the command and
//! shows in its `events` and the audit chain), the session's events stream live and stay in its
//! history, an `approve` rule holds an operation until an operator decides through
//! `/v1/approvals`, and the files API applies the policy's `file_rules` before it reaches the
//! container.
//! Runs the image under test (`RUNNER_IMAGE_UNDER_TEST`), whose supervisor enforces policies in
//! sessions.

use std::time::Duration;

use serde_json::{Value, json};

use crate::api::session::{create, exec, line};
use crate::api::{audit_tail, first_held, get, has, post_in_background};
use crate::harness::Service;

/// Writes under /workspace/locked, reading /workspace/sealed.txt and listing /workspace/hidden
/// are denied, reading /etc/hosts waits for an operator, `id` is logged, the rest is allowed.
const FENCE: &str = r#"
version: 1
name: fence
file_rules:
  - {name: locked, paths: [/workspace/locked, /workspace/locked/**], operations: [write, create, delete], decision: deny, message: "{path} is locked"}
  - {name: sealed, paths: [/workspace/sealed.txt], operations: [read], decision: deny, message: "{path} is sealed"}
  - {name: hidden, paths: [/workspace/hidden, /workspace/hidden/**], operations: [list], decision: deny}
  - {name: held-read, paths: [/etc/hosts], operations: [read], decision: approve}
  - {name: everything-else, paths: ["/**"], operations: ["*"], decision: allow}
command_rules:
  - {name: logged-id, commands: [id], decision: log}
  - {name: any-program, commands: ["*"], decision: allow}
network_rules:
  - {name: loopback, cidrs: [127.0.0.0/8], decision: allow}
  - {name: no-network, decision: deny}
"#;

async fn service() -> Service {
    Service::setup().policy("fence", FENCE).start().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_denied_write_fails_in_the_command_and_shows_in_its_events_and_the_audit() {
    let s = service().await;
    let id = create(&s, json!({"policy": "fence"})).await;
    let (_, view) = get(&s, &format!("/v1/sessions/{id}")).await;
    assert_eq!(view["policy"], "fence", "{view}");

    let denied = line(
        &s,
        &id,
        "cd /workspace && mkdir -p locked && echo hi > locked/x; echo \"rc=$?\"; id -u >/dev/null",
    )
    .await;
    let stdout = denied["stdout"].as_str().unwrap_or_default();
    let stderr = denied["stderr"].as_str().unwrap_or_default();
    assert!(stdout.contains("rc=1"), "{denied}");
    assert!(stderr.contains("Permission denied"), "{denied}");
    let events = &denied["events"];
    assert!(
        has(&events["blocked_operations"], |b| b["target"]
            .as_str()
            .is_some_and(|t| t.starts_with("/workspace/locked"))
            && b["errno"] == 13
            && b["rule"] == "locked"
            && b["decision"] == "deny"),
        "{events}"
    );
    assert!(
        has(&events["processes"], |p| p["argv"] == json!(["id", "-u"])
            && p["decision"] == "log"
            && p["rule"] == "logged-id"),
        "{events}"
    );
    assert!(events["omitted"]["file_operations"].is_u64(), "{events}");
    let command_id = denied["command_id"].as_str().expect("id").to_string();

    // The session stays usable, and the policy does not follow the shell: a new command is
    // decided again.
    let again = line(&s, &id, "pwd; touch /workspace/free.txt && echo made").await;
    assert_eq!(again["stdout"], "/workspace\nmade\n", "{again}");
    assert!(
        has(&again["events"]["file_operations"], |f| f["path"]
            == "/workspace/free.txt"
            && f["decision"] == "allow"),
        "{again}"
    );

    let data_dir = s.data_dir.clone();
    s.stop().await;
    let decisions: Vec<Value> = audit_tail(&data_dir)
        .into_iter()
        .filter(|r| r["event"] == "policy_decision" && r["execution_id"] == command_id.as_str())
        .collect();
    assert!(
        decisions
            .iter()
            .any(|r| r["outcome"]["session_id"] == id.as_str()
                && r["outcome"]["decision"] == "deny"
                && r["outcome"]["rule"] == "locked"
                && r["outcome"]["policy"] == "fence"),
        "{decisions:?}"
    );
    assert!(
        decisions
            .iter()
            .any(|r| r["outcome"]["operation"] == "process" && r["outcome"]["decision"] == "log"),
        "{decisions:?}"
    );
    assert!(
        decisions
            .iter()
            .all(|r| r["outcome"]["decision"] != "allow"),
        "{decisions:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn python_scripts_run_on_the_standby_under_the_policy_every_time() {
    let s = service().await;
    let id = create(&s, json!({"policy": "fence"})).await;
    let script = "import subprocess, sys\ntry:\n    open('/workspace/locked', 'w')\nexcept PermissionError as e:\n    print('denied', e.errno)\nprint(open('/workspace/free.txt', 'w').write('x'))\nsubprocess.run(['id', '-u'], stdout=subprocess.DEVNULL)\nprint('os.environ.update(env)' in sys.orig_argv[-1])\n";
    // Twice: the second runs on a standby started after the first, under a fresh enforcement.
    for _ in 0..2 {
        // The standby starts once the session idled briefly.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let out = exec(
            &s,
            &id,
            json!({"script_content": script, "script_type": "python", "timeout": 30}),
        )
        .await;
        assert_eq!(out["stdout"], "denied 13\n1\nTrue\n", "{out}");
        let events = &out["events"];
        assert!(
            has(&events["blocked_operations"], |b| b["target"]
                == "/workspace/locked"
                && b["errno"] == 13
                && b["rule"] == "locked"),
            "{events}"
        );
        assert!(
            has(&events["file_operations"], |f| f["path"]
                == "/workspace/free.txt"
                && f["decision"] == "allow"),
            "{events}"
        );
        assert!(
            has(&events["processes"], |p| p["argv"] == json!(["id", "-u"])
                && p["decision"] == "log"
                && p["rule"] == "logged-id"),
            "{events}"
        );
    }
    s.stop().await;
}

/// Reads `response` as Server-Sent Events until one named `name` arrives; its data.
async fn first_event(mut response: reqwest::Response, name: &str) -> Value {
    let mut buf = String::new();
    while let Some(chunk) = response.chunk().await.expect("chunk") {
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let event = block.lines().find_map(|l| l.strip_prefix("event: "));
            let data = block.lines().find_map(|l| l.strip_prefix("data: "));
            if let (Some(event), Some(data)) = (event, data)
                && event == name
            {
                return serde_json::from_str(data).expect("json data");
            }
        }
    }
    panic!("the stream ended before a `{name}` event");
}

#[tokio::test(flavor = "multi_thread")]
async fn events_stream_while_the_command_runs_and_stay_in_the_history() {
    let s = service().await;
    let id = create(&s, json!({"policy": "fence"})).await;
    let response = s
        .client
        .get(format!("{}/v1/sessions/{id}/events?types=blocked", s.url))
        .send()
        .await
        .expect("subscribe");
    assert_eq!(response.status().as_u16(), 200);
    // The command cannot end before the test has seen its blocked operation: it waits for a
    // file the test uploads only then.
    let body = json!({"command": "mkdir /workspace/locked; while [ ! -e /workspace/go ]; do sleep 0.1; done; echo done", "timeout": 60});
    let running = post_in_background(&s, &format!("/v1/sessions/{id}/exec"), body);
    let blocked = tokio::time::timeout(Duration::from_secs(60), first_event(response, "blocked"))
        .await
        .expect("a blocked operation streams while the command runs");
    assert_eq!(blocked["kind"], "blocked", "{blocked}");
    assert_eq!(blocked["event"]["target"], "/workspace/locked", "{blocked}");
    assert_eq!(blocked["event"]["rule"], "locked", "{blocked}");
    let (_, view) = get(&s, &format!("/v1/sessions/{id}")).await;
    assert_eq!(view["state"], "busy", "{view}");
    let put = s
        .client
        .put(format!("{}/v1/sessions/{id}/files/go", s.url))
        .body("go")
        .send()
        .await
        .expect("upload");
    assert_eq!(put.status().as_u16(), 200);
    let result = running.await.expect("the command ends");
    assert_eq!(result["stdout"], "done\n", "{result}");
    let command_id = result["command_id"].clone();

    line(&s, &id, "id -u").await;
    let (status, history) = get(&s, &format!("/v1/sessions/{id}/events/history")).await;
    assert_eq!(status, 200, "{history}");
    assert_eq!(history["commands"], 2, "{history}");
    let events = &history["events"];
    assert!(
        has(events, |e| e["command_id"] == command_id
            && e["kind"] == "blocked"
            && e["event"]["target"] == "/workspace/locked"
            && e["event"]["errno"] == 13),
        "{history}"
    );
    assert!(
        has(events, |e| e["kind"] == "process"
            && e["event"]["argv"] == json!(["id", "-u"])
            && e["event"]["decision"] == "log"),
        "{history}"
    );
    assert_eq!(
        history["total"],
        events.as_array().map_or(0, Vec::len),
        "{history}"
    );
    assert!(history["omitted"]["file_operations"].is_u64(), "{history}");
    let (_, blocked) = get(
        &s,
        &format!("/v1/sessions/{id}/events/history?types=blocked&limit=1"),
    )
    .await;
    assert_eq!(
        blocked["events"].as_array().map(Vec::len),
        Some(1),
        "{blocked}"
    );
    assert!(
        blocked["events"]
            .as_array()
            .is_some_and(|l| l.iter().all(|e| e["kind"] == "blocked")),
        "{blocked}"
    );
    s.stop().await;
}

async fn send(s: &Service, method: reqwest::Method, path: &str, body: &str) -> (u16, Value) {
    let r = s
        .client
        .request(method, format!("{}{path}", s.url))
        .body(body.to_string())
        .send()
        .await
        .expect("request");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_files_api_applies_the_policys_file_rules_before_the_container() {
    use reqwest::Method;
    let s = service().await;
    let id = create(&s, json!({"policy": "fence"})).await;
    let files = format!("/v1/sessions/{id}/files");

    let (status, body) = send(&s, Method::PUT, &format!("{files}/locked/a.txt"), "x").await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["type"], "policy_violation", "{body}");
    assert_eq!(body["error"]["rule"], "locked", "{body}");
    assert_eq!(
        body["error"]["message"],
        "/workspace/locked/a.txt is locked"
    );
    // Refused before the container: nothing was written.
    let ls = line(&s, &id, "ls -A /workspace").await;
    assert_eq!(ls["stdout"], "", "{ls}");

    let (status, body) = send(&s, Method::PUT, &format!("{files}/sealed.txt"), "secret").await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = send(&s, Method::GET, &format!("{files}/sealed.txt"), "").await;
    assert_eq!(
        (status, body["error"]["rule"].clone()),
        (403, json!("sealed")),
        "{body}"
    );
    // The command sees the same rule at run time.
    let cat = line(&s, &id, "cat /workspace/sealed.txt").await;
    assert!(
        has(&cat["events"]["blocked_operations"], |b| b["rule"]
            == "sealed"),
        "{cat}"
    );

    line(&s, &id, "mkdir /workspace/hidden").await;
    let (status, body) = get(&s, &format!("{files}?path=/workspace/hidden")).await;
    assert_eq!(
        (status, body["error"]["type"].clone()),
        (403, json!("policy_violation"))
    );
    let (status, _) = get(&s, &format!("{files}?path=/workspace")).await;
    assert_eq!(status, 200);
    let (status, body) = send(&s, Method::DELETE, &format!("{files}/locked"), "").await;
    assert_eq!(
        (status, body["error"]["rule"].clone()),
        (403, json!("locked")),
        "{body}"
    );
    let (status, _) = send(&s, Method::DELETE, &format!("{files}/sealed.txt"), "").await;
    assert_eq!(status, 204);

    let data_dir = s.data_dir.clone();
    s.stop().await;
    let decisions: Vec<Value> = audit_tail(&data_dir)
        .into_iter()
        .filter(|r| r["event"] == "policy_decision" && r["outcome"]["via"] == "files_api")
        .collect();
    for (operation, target, rule) in [
        ("file_write", "/workspace/locked/a.txt", "locked"),
        ("file_read", "/workspace/sealed.txt", "sealed"),
        ("file_list", "/workspace/hidden", "hidden"),
        ("file_delete", "/workspace/locked", "locked"),
    ] {
        assert!(
            decisions
                .iter()
                .any(|r| r["outcome"]["operation"] == operation
                    && r["outcome"]["target"] == target
                    && r["outcome"]["rule"] == rule
                    && r["outcome"]["decision"] == "deny"
                    && r["outcome"]["session_id"] == id.as_str()),
            "{operation} {target}: {decisions:?}"
        );
    }
}

/// Runs a read of /etc/hosts in session `id`, answers its held read with `decision` once it is
/// listed, and returns the held entry and the result.
async fn held_read(s: &Service, id: &str, decision: &str) -> (Value, Value) {
    let body =
        json!({"command": "cat /etc/hosts >/dev/null && echo read || echo refused", "timeout": 60});
    let run = post_in_background(s, &format!("/v1/sessions/{id}/exec"), body);
    let held = first_held(s, "session_operations").await;
    assert!(!run.is_finished(), "the command waits for the decision");
    let approval = held["approval_id"]
        .as_str()
        .unwrap_or_else(|| panic!("nothing was held: {held}"));
    let body = json!({"decision": decision, "reason": "test"});
    let (status, _) = s.post(&format!("/v1/approvals/{approval}"), &body).await;
    assert_eq!(status, 204);
    let (status, _) = s.post(&format!("/v1/approvals/{approval}"), &body).await;
    assert_eq!(status, 404, "a held operation is decided once");
    let result = tokio::time::timeout(Duration::from_secs(90), run)
        .await
        .expect("the command ends")
        .expect("task");
    (held, result)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operation_held_in_a_session_waits_for_the_operator_and_proceeds_or_fails() {
    let s = service().await;
    let id = create(&s, json!({"policy": "fence"})).await;
    let (held, result) = held_read(&s, &id, "approve").await;
    assert_eq!(held["session_id"], id.as_str(), "{held}");
    assert_eq!(held["operation"], "file_read", "{held}");
    assert_eq!(held["target"], "/etc/hosts", "{held}");
    assert_eq!(held["rule"], "held-read", "{held}");
    assert_eq!(held["command_id"], result["command_id"], "{held}");
    assert_eq!(result["stdout"], "read\n", "{result}");
    assert!(
        has(&result["events"]["file_operations"], |f| f["path"]
            == "/etc/hosts"
            && f["decision"] == "approve"),
        "{result}"
    );
    let (_, result) = held_read(&s, &id, "deny").await;
    assert_eq!(result["stdout"], "refused\n", "{result}");
    assert!(
        has(&result["events"]["blocked_operations"], |b| b["target"]
            == "/etc/hosts"
            && b["errno"] == 13),
        "{result}"
    );
    let (_, list) = get(&s, "/v1/approvals").await;
    assert_eq!(list["session_operations"], json!([]), "{list}");
    let data_dir = s.data_dir.clone();
    s.stop().await;
    let decisions: Vec<Value> = audit_tail(&data_dir)
        .into_iter()
        .filter(|r| r["event"] == "operation_decision")
        .collect();
    assert_eq!(decisions.len(), 2, "{decisions:?}");
    assert_eq!(decisions[0]["outcome"]["decision"], "approve");
    assert_eq!(decisions[1]["outcome"]["decision"], "deny");
    assert_eq!(decisions[1]["outcome"]["session_id"], id.as_str());
    assert_eq!(decisions[1]["outcome"]["operation"]["target"], "/etc/hosts");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_default_policy_leaves_ordinary_commands_alone_and_denies_writes_outside_scratch() {
    let s = service().await;
    let id = create(&s, json!({"policy": "default"})).await;
    let ok = line(
        &s,
        &id,
        "cd /tmp && echo hi > a && cat a && python3 -c 'print(1)'",
    )
    .await;
    assert_eq!(ok["stdout"], "hi\n1\n", "{ok}");
    assert_eq!(ok["events"]["blocked_operations"], json!([]), "{ok}");
    // (A write to /etc that validation can see fails before it runs: the path arrives at run
    // time, in two arguments.)
    let write = line(
        &s,
        &id,
        r#"python3 -c "import sys; open(sys.argv[1] + sys.argv[2], 'a')" /e tc/motd"#,
    )
    .await;
    assert_eq!(write["exit_code"], 1, "{write}");
    assert!(
        has(&write["events"]["blocked_operations"], |b| b["target"]
            == "/etc/motd"
            && b["rule"] == "no-writes-outside-scratch"
            && b["decision"] == "deny"),
        "{}",
        write["events"]["blocked_operations"]
    );
    // The shell state still carries under the policy.
    let (_, view) = get(&s, &format!("/v1/sessions/{id}")).await;
    assert_eq!(view["cwd"], "/tmp", "{view}");
    s.stop().await;
}
