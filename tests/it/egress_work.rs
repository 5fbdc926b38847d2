//! Network egress of the other kinds of work on the real engine: jobs (`POST /v1/jobs`, their
//! `run_command` steps), script runs with `files`, and sessions (every command, one byte budget
//! over the session's life, the proxy's events on the session's stream); and the isolation of
//! one sandbox from another that runs at the same time.
//!
//! The upstreams and the service are those of `egress_service` (containers the test starts on an
//! internal network of its own, reached through `egress.hosts`).

use std::time::Duration;

use serde_json::{Value, json};

use super::egress_service::{Upstreams, connect, lines, ops, service};
use crate::api::audit_tail;
use crate::harness::Service;

/// Fetches the URLs it is given (one per argument), printing `status` or `cut <error>` per line.
const FETCH: &str = r#"
import sys, urllib.error, urllib.request
for url in sys.argv[1:]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            print(r.status, len(r.read()))
    except urllib.error.HTTPError as e:
        print(e.code)
    except Exception as e:
        print("cut", type(e).__name__)
"#;

fn grant(domains: &[&str]) -> Value {
    json!({"allowed_domains": domains, "allowed_ports": [8080]})
}

fn job(network: Option<Value>, urls: &[&str]) -> Value {
    let args: Vec<&str> = std::iter::once("fetch.py")
        .chain(urls.iter().copied())
        .collect();
    let mut job = json!({
        "protocol_version": "1.0",
        "constraints": {"allowed_commands": ["python3"], "max_runtime_seconds": 60},
        "steps": [
            {"id": "write", "type": "write_file",
             "arguments": {"path": "/workspace/fetch.py", "content": FETCH}},
            {"id": "fetch", "type": "run_command",
             "arguments": {"command": "python3", "args": args}},
        ],
    });
    if let Some(n) = network {
        job["network"] = n;
    }
    job
}

fn step_stdout(result: &Value, step: &str) -> String {
    result["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"] == step))
        .and_then(|s| s["result"]["stdout"].as_str())
        .unwrap_or_else(|| panic!("no stdout of step {step}: {result}"))
        .to_string()
}

async fn get(s: &Service, path: &str) -> (u16, Value) {
    let r = s
        .client
        .get(format!("{}{path}", s.url))
        .send()
        .await
        .expect("request");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread")]
async fn jobs_and_runs_with_files_reach_exactly_their_granted_names() {
    let up = Upstreams::start(&["allowed"]);
    let s = service(&up, |_| {}).await;
    let urls = [
        "http://allowed.test:8080/hello",
        "http://denied.test:8080/hello",
    ];
    let (status, result) = s
        .post(
            "/v1/jobs",
            &job(Some(grant(&["allowed.test", "denied.test"])), &urls),
        )
        .await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["status"], "success", "{result}");
    // Both names are granted (and within the policy): both are reached.
    assert!(
        step_stdout(&result, "fetch").starts_with("200 "),
        "{result}"
    );
    assert_eq!(
        connect(&result, "allowed.test", 8080)["decision"],
        "allow",
        "{result}"
    );
    let (status, narrow) = s
        .post("/v1/jobs", &job(Some(grant(&["allowed.test"])), &urls))
        .await;
    assert_eq!(status, 200, "{narrow}");
    let out = step_stdout(&narrow, "fetch");
    let fetched: Vec<&str> = out.lines().collect();
    assert!(fetched[0].starts_with("200 "), "{narrow}");
    assert_eq!(fetched[1], "403", "{narrow}");
    let denied = connect(&narrow, "denied.test", 8080);
    assert_eq!(denied["decision"], "deny", "{denied}");
    assert!(denied["remote"].is_null(), "never looked up: {denied}");
    let summary = &narrow["network_summary"];
    assert_eq!(summary["connections"], 1, "{summary}");
    assert_eq!(summary["blocked"], 1, "{summary}");
    assert_eq!(summary["unique_destinations"], 1, "{summary}");
    // The stored result is the same.
    let job_id = narrow["job_id"].as_str().expect("job_id");
    let (status, stored) = get(&s, &format!("/v1/jobs/{job_id}")).await;
    assert_eq!(status, 200, "{stored}");
    assert_eq!(stored["network_operations"], narrow["network_operations"]);
    assert_eq!(stored["network_summary"], narrow["network_summary"]);

    // Without `network` a job has none: the forwarder has no proxy behind it.
    let (status, none) = s.post("/v1/jobs", &job(None, &urls[..1])).await;
    assert_eq!(status, 200, "{none}");
    assert_eq!(step_stdout(&none, "fetch"), "502\n", "{none}");
    assert!(none.get("network_operations").is_none(), "{none}");
    // Wider than the policy: refused before anything runs.
    let (status, wide) = s
        .post("/v1/jobs", &job(Some(grant(&["example.org"])), &urls))
        .await;
    assert_eq!(status, 403, "{wide}");
    assert_eq!(wide["error"]["type"], "network_not_allowed", "{wide}");
    let (status, bad) = s
        .post("/v1/jobs", &job(Some(json!({"allowed": ["x"]})), &urls))
        .await;
    assert_eq!(status, 400, "{bad}");
    assert_eq!(bad["error"]["type"], "schema_error", "{bad}");

    // A script run with files runs in the job agent and has its network too.
    let body = json!({
        "script_content": "import subprocess, sys\nsubprocess.run([sys.executable, 'fetch.py', 'http://allowed.test:8080/hello'], check=True)",
        "script_type": "python", "timeout": 60,
        "files": [{"path": "/workspace/fetch.py", "content": FETCH}],
        "network": grant(&["allowed.test"]),
    });
    let (status, run) = s.post("/v1/execute", &body).await;
    assert_eq!(status, 200, "{run}");
    assert!(
        run["stdout"]
            .as_str()
            .unwrap_or_default()
            .starts_with("200 "),
        "{run}"
    );
    assert_eq!(run["network_summary"]["connections"], 1, "{run}");
    assert_eq!(ops(&run, "dns_query")[0]["domain"], "allowed.test", "{run}");
    s.stop().await;
}

async fn create(s: &Service, body: Value) -> String {
    let (status, out) = s.post("/v1/sessions", &body).await;
    assert_eq!(status, 201, "{out}");
    out["session_id"].as_str().expect("id").to_string()
}

async fn exec(s: &Service, id: &str, script: &str) -> Value {
    let body = json!({"script_content": script, "script_type": "python", "timeout": 60});
    let (status, out) = s.post(&format!("/v1/sessions/{id}/exec"), &body).await;
    assert_eq!(status, 200, "{out}");
    out
}

fn fetch(url: &str) -> String {
    format!("import sys\nsys.argv = ['fetch', '{url}']\n{FETCH}")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_s_commands_share_its_network_and_its_byte_budget() {
    let up = Upstreams::start(&["allowed"]);
    // Commands may move 3 MiB each; the session asks for 2 MiB over its life.
    let s = service(&up, |c| {
        c.egress.limits.max_network_mb = 8;
        c.egress.limits.max_command_network_mb = 3;
    })
    .await;
    for (body, status, kind) in [
        (
            json!({"network": grant(&["example.org"])}),
            403,
            "network_not_allowed",
        ),
        (json!({"max_network_mb": 2}), 400, "schema_error"),
        (
            json!({"network": grant(&["allowed.test"]), "max_network_mb": 9}),
            400,
            "schema_error",
        ),
    ] {
        let (got, out) = s.post("/v1/sessions", &body).await;
        assert_eq!(
            (got, out["error"]["type"].as_str()),
            (status, Some(kind)),
            "{body}: {out}"
        );
    }
    let id = create(
        &s,
        json!({"network": grant(&["allowed.test"]), "max_network_mb": 2}),
    )
    .await;
    let (_, view) = get(&s, &format!("/v1/sessions/{id}")).await;
    assert_eq!(view["network_access"], true, "{view}");
    assert_eq!(view["max_network_mb"], 2, "{view}");
    assert_eq!(
        view["network"]["allowed_domains"][0], "allowed.test",
        "{view}"
    );

    let first = exec(&s, &id, &fetch("http://allowed.test:8080/hello")).await;
    assert!(
        first["stdout"]
            .as_str()
            .unwrap_or_default()
            .starts_with("200 "),
        "{first}"
    );
    assert_eq!(first["network_summary"]["connections"], 1, "{first}");
    let denied = exec(&s, &id, &fetch("http://denied.test:8080/hello")).await;
    assert_eq!(denied["stdout"], "403\n", "{denied}");
    assert_eq!(
        denied["network_summary"]["connections"], 0,
        "each command reports its own: {denied}"
    );
    assert_eq!(denied["network_summary"]["blocked"], 1, "{denied}");

    // The session's stream carries the proxy's events as they happen.
    let stream = s
        .client
        .get(format!("{}/v1/sessions/{id}/events?types=network", s.url))
        .send()
        .await
        .expect("events");
    assert_eq!(stream.status(), 200);
    // 1.5 MiB fits in a command's 3 MiB but not twice in the session's 2 MiB.
    let url = "http://allowed.test:8080/bytes/1572864";
    let big = exec(&s, &id, &fetch(url)).await;
    assert!(
        big["stdout"]
            .as_str()
            .unwrap_or_default()
            .starts_with("200 1572864"),
        "{big}"
    );
    let cut = exec(&s, &id, &fetch(url)).await;
    assert!(
        cut["stdout"]
            .as_str()
            .unwrap_or_default()
            .starts_with("cut"),
        "the session's budget ends the second download: {cut}"
    );
    let c = connect(&cut, "allowed.test", 8080);
    assert_eq!(
        (c["ended"].as_str(), c["limit"].as_str()),
        (Some("limit"), Some("session_bytes")),
        "{c}"
    );
    let after = exec(&s, &id, &fetch("http://allowed.test:8080/hello")).await;
    let limit = ops(&after, "net_limit");
    assert_eq!(
        limit.len(),
        1,
        "a spent budget refuses new connections: {after}"
    );
    assert_eq!(limit[0]["limit"], "session_bytes", "{after}");

    // The history keeps the proxy's events too, under the command that made them.
    let (status, history) = get(
        &s,
        &format!("/v1/sessions/{id}/events/history?types=network"),
    )
    .await;
    assert_eq!(status, 200, "{history}");
    let entries = history["events"].as_array().expect("events");
    let of = |command: &Value, kind: &str| -> Vec<&Value> {
        entries
            .iter()
            .filter(|e| e["command_id"] == command["command_id"] && e["event"]["type"] == kind)
            .map(|e| &e["event"])
            .collect()
    };
    assert!(entries.iter().all(|e| e["kind"] == "network"), "{history}");
    assert_eq!(
        of(&first, "dns_query"),
        ops(&first, "dns_query"),
        "{history}"
    );
    assert_eq!(
        of(&first, "net_connect"),
        ops(&first, "net_connect"),
        "{history}"
    );
    assert_eq!(
        of(&denied, "net_connect"),
        ops(&denied, "net_connect"),
        "{history}"
    );
    assert_eq!(
        of(&cut, "net_connect"),
        ops(&cut, "net_connect"),
        "{history}"
    );
    assert_eq!(of(&after, "net_limit"), limit, "{history}");
    assert_eq!(history["total"], entries.len(), "{history}");

    let status = s
        .client
        .delete(format!("{}/v1/sessions/{id}", s.url))
        .send()
        .await
        .expect("delete")
        .status();
    assert!(status.is_success(), "{status}");
    let streamed = tokio::time::timeout(Duration::from_secs(30), stream.text())
        .await
        .expect("the stream ends with the session")
        .expect("stream body");
    assert!(
        streamed.contains("event: network")
            && streamed.contains("\"type\":\"net_connect\"")
            && streamed.contains("\"type\":\"net_limit\""),
        "{streamed}"
    );
    let data_dir = s.data_dir.clone();
    s.stop().await;
    // The denial and the limits are in the audit chain, under the command that met them.
    let audited: Vec<Value> = audit_tail(&data_dir)
        .into_iter()
        .filter(|r| r["event"] == "network_decision" && r["outcome"]["session_id"] == id.as_str())
        .collect();
    let denied_command = denied["command_id"].as_str().expect("command id");
    assert!(
        audited.iter().any(|r| r["execution_id"] == denied_command
            && r["outcome"]["decision"] == "deny"
            && r["outcome"]["domain"] == "denied.test"),
        "{audited:?}"
    );
    assert!(
        audited.iter().any(|r| r["outcome"]["type"] == "net_limit"),
        "{audited:?}"
    );
}

/// Listens on its own loopback and serves itself once, then waits for the other run.
const LISTENER: &str = r#"
import socket, threading, time, urllib.request
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 8000))
srv.listen(8)
def serve():
    while True:
        c, _ = srv.accept()
        c.recv(4096)
        c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 4\r\n\r\nmine")
        c.close()
threading.Thread(target=serve, daemon=True).start()
with urllib.request.urlopen("http://127.0.0.1:8000/", timeout=5) as r:
    print("self", r.status, r.read().decode(), flush=True)
time.sleep(20)
"#;

/// The other sandbox, while the listener runs: its own loopback, the proxy, its socket directory,
/// and the host (the upstream network's gateway address).
const PROBE: &str = r#"
import os, socket, time, urllib.error, urllib.request
time.sleep(3)
s = socket.socket()
s.settimeout(5)
try:
    s.connect(("127.0.0.1", 8000))
    print("direct connected")
except OSError as e:
    print("direct", e.errno)
proxy = urllib.request.build_opener(urllib.request.ProxyHandler(
    {"http": "http://127.0.0.1:3128"}))
try:
    proxy.open("http://loopback.test:8000/", timeout=10)
    print("proxied reached")
except urllib.error.HTTPError as e:
    print("proxied", e.code)
print("sockets", sorted(os.listdir("/run/egress")))
h = socket.socket()
h.settimeout(5)
try:
    h.connect(("GATEWAY", 8080))
    print("host connected")
except OSError as e:
    print("host", e.errno)
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_sandbox_cannot_reach_another_that_runs_at_the_same_time_nor_the_host() {
    let up = Upstreams::start(&["allowed"]);
    let s = service(&up, |_| {}).await;
    let network = json!({"allowed_domains": ["loopback.test", "allowed.test"],
                         "allowed_ports": [8000, 8080]});
    let client = s.client.clone();
    let url = s.url.clone();
    let body = json!({"script_content": LISTENER, "script_type": "python", "timeout": 60,
                      "network": network});
    let listener = tokio::spawn(async move {
        let r = client
            .post(format!("{url}/v1/execute"))
            .json(&body)
            .send()
            .await;
        r.expect("execute").json::<Value>().await.expect("json")
    });
    let probe = PROBE.replace("GATEWAY", &up.gateway);
    let body = json!({"script_content": probe, "script_type": "python", "timeout": 60,
                      "network": network});
    let (status, probe) = s.post("/v1/execute", &body).await;
    assert_eq!(status, 200, "{probe}");
    let listener = listener.await.expect("listener");
    assert_eq!(
        listener["stdout"], "self 200 mine\n",
        "the listener serves its own loopback: {listener}"
    );
    let out = lines(&probe);
    // Its own loopback has nothing on that port; the proxy refuses loopback addresses, even
    // under an allowed name; and its socket directory holds its own socket only.
    assert_eq!(out["direct"], "111", "{probe}");
    assert_eq!(out["proxied"], "403", "{probe}");
    assert_eq!(out["sockets"], "['proxy.sock']", "{probe}");
    // Nor does it reach the host: its only interface is loopback.
    assert_eq!(out["host"], "101", "{probe}");
    let c = connect(&probe, "loopback.test", 8000);
    assert_eq!(c["cause"], "denied_range", "{c}");
    s.stop().await;
}
