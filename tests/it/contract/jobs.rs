//! Jobs and workspaces over HTTP, against the real service over the fake runner's model of the
//! agent: `POST /v1/jobs` (200 with the result, 202 under approval, 400 for a malformed job, 409
//! for a reused `job_id`), `GET /v1/jobs/{job_id}`, artifact downloads checked against their
//! sha256, the host's checks before any container (nothing reaches the runner), and `/v1/execute`
//! with `files` and `artifacts`.

use scriptgate::config::Config;
use scriptgate::domain::record::ApprovalMode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::fake::FakeRunner;
use crate::harness::{Service, token};

const AGENT: &str = "agent-token-jobs-5c2e9a";
const OPERATOR: &str = "operator-token-jobs-0b7d4f";

fn secured(c: &mut Config, mode: ApprovalMode) {
    c.agent_tokens = vec![token("job-bot", AGENT)];
    c.operator_tokens = vec![token("alice", OPERATOR)];
    c.approval = mode;
}

async fn call(
    s: &Service,
    method: &str,
    path: &str,
    bearer: &str,
    body: Option<Vec<u8>>,
) -> (u16, Value) {
    let mut req = s
        .client
        .request(method.parse().expect("method"), format!("{}{path}", s.url))
        .bearer_auth(bearer);
    if let Some(b) = body {
        req = req.header("content-type", "application/json").body(b);
    }
    let response = req.send().await.expect("request");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn post_job(s: &Service, job: &Value) -> (u16, Value) {
    call(
        s,
        "POST",
        "/v1/jobs",
        AGENT,
        Some(job.to_string().into_bytes()),
    )
    .await
}

/// The bytes and `x-content-sha256` of a download, or its status and error body.
async fn download(s: &Service, path: &str) -> Result<(Vec<u8>, String), (u16, Value)> {
    let response = s
        .client
        .get(format!("{}{path}", s.url))
        .bearer_auth(AGENT)
        .send()
        .await
        .expect("request");
    let status = response.status().as_u16();
    if status != 200 {
        return Err((status, response.json().await.unwrap_or(Value::Null)));
    }
    let sha = response
        .headers()
        .get("x-content-sha256")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    Ok((response.bytes().await.expect("bytes").to_vec(), sha))
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn statuses(result: &Value) -> Vec<&str> {
    result["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| s["status"].as_str().expect("status"))
        .collect()
}

const REPORT: &str = "{\"passed\": 3}\n";

fn report_job(job_id: &str) -> Value {
    json!({"protocol_version": "1.0", "job_id": job_id,
        "constraints": {"allowed_commands": ["python3"]},
        "steps": [
            {"id": "write", "type": "write_file", "arguments": {"path": "report.json", "content": REPORT}},
            {"id": "run", "type": "run_command", "arguments": {"command": "python3", "args": ["-c", "print(1)"]}},
            {"id": "read", "type": "read_file", "arguments": {"path": "/workspace/report.json"}}
        ],
        "artifacts": ["/workspace/report.json"]})
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_answers_its_result_and_its_artifact_downloads_checked() {
    let s = Service::fake(FakeRunner::new(), |c| secured(c, ApprovalMode::Never)).await;
    let job_id = uuid::Uuid::new_v4().to_string();
    let (status, result) = post_job(&s, &report_job(&job_id)).await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["protocol_version"], "1.0");
    assert_eq!(result["job_id"], job_id.as_str());
    assert_eq!(result["status"], "success", "{result}");
    assert_eq!(statuses(&result), ["success"; 3]);
    assert_eq!(result["steps"][2]["result"]["content"], REPORT);
    assert_eq!(result["error"], Value::Null);
    let artifact = &result["artifacts"][0];
    assert_eq!(artifact["path"], "/workspace/report.json");
    assert_eq!(artifact["sha256"], sha256(REPORT.as_bytes()).as_str());
    assert_eq!(artifact["size_bytes"], REPORT.len());
    assert_eq!(artifact["mime_type"], "application/json");
    // The inline program was validated and kept beside the result.
    let validation = result["validation"].as_array().expect("validation");
    assert!(
        validation.iter().any(|v| v["target"] == "python3 -c"),
        "{result}"
    );
    assert_eq!(s.runner().jobs().len(), 1);
    // The same result by job id, and the execution that ran it.
    let (status, again) = call(&s, "GET", &format!("/v1/jobs/{job_id}"), AGENT, None).await;
    assert_eq!(status, 200);
    assert_eq!(again["steps"], result["steps"]);
    let execution = result["execution_id"].as_str().expect("execution id");
    let (status, record) = call(
        &s,
        "GET",
        &format!("/v1/executions/{execution}"),
        AGENT,
        None,
    )
    .await;
    assert_eq!((status, &record["status"]), (200, &json!("completed")));
    // The artifact's bytes, checked against its sha256.
    let (bytes, header) = download(
        &s,
        &format!("/v1/jobs/{job_id}/artifacts/workspace/report.json"),
    )
    .await
    .expect("the artifact");
    assert_eq!(bytes, REPORT.as_bytes());
    assert_eq!(header, sha256(&bytes));
    let missing = download(
        &s,
        &format!("/v1/jobs/{job_id}/artifacts/workspace/other.json"),
    )
    .await;
    assert_eq!(missing.err().map(|e| e.0), Some(404));
    let unknown = uuid::Uuid::new_v4();
    let (status, _) = call(&s, "GET", &format!("/v1/jobs/{unknown}"), AGENT, None).await;
    assert_eq!(status, 404);
    let (status, body) = call(&s, "GET", "/v1/jobs/not-a-uuid", AGENT, None).await;
    assert_eq!(
        (status, &body["error"]["type"]),
        (400, &json!("schema_error"))
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_job_is_a_schema_error_before_anything_exists() {
    let s = Service::fake(FakeRunner::new(), |c| secured(c, ApprovalMode::Never)).await;
    let step = json!({"id": "l", "type": "list_tree", "arguments": {"path": "/workspace"}});
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("not JSON", b"{\"protocol_version\": ".to_vec()),
        ("protocol 2.0", json!({"protocol_version": "2.0", "steps": [step]}).to_string().into_bytes()),
        ("protocol \"1\"", json!({"protocol_version": "1", "steps": [step]}).to_string().into_bytes()),
        ("protocol as a number", json!({"protocol_version": 1.0, "steps": [step]}).to_string().into_bytes()),
        ("unknown step type", json!({"protocol_version": "1.0", "steps": [{"id": "x", "type": "run_shell", "arguments": {}}]}).to_string().into_bytes()),
        ("missing argument", json!({"protocol_version": "1.0", "steps": [{"id": "x", "type": "write_file", "arguments": {"path": "a"}}]}).to_string().into_bytes()),
        ("wrong type", json!({"protocol_version": "1.0", "steps": [{"id": "x", "type": "read_file", "arguments": {"path": 7}}]}).to_string().into_bytes()),
        ("unknown field at 1.0", json!({"protocol_version": "1.0", "colour": "red", "steps": [step]}).to_string().into_bytes()),
        ("job_id not a UUID", json!({"protocol_version": "1.0", "job_id": "job-1", "steps": [step]}).to_string().into_bytes()),
        ("setuid mode", json!({"protocol_version": "1.0", "steps": [{"id": "w", "type": "write_file", "arguments": {"path": "a", "content": "x", "mode": "4755"}}]}).to_string().into_bytes()),
        ("unknown profile", json!({"protocol_version": "1.0", "profile": "nope", "steps": [step]}).to_string().into_bytes()),
    ];
    for (case, body) in cases {
        let (status, answer) = call(&s, "POST", "/v1/jobs", AGENT, Some(body)).await;
        assert_eq!(status, 400, "{case}: {answer}");
        assert_eq!(answer["error"]["type"], "schema_error", "{case}: {answer}");
    }
    // A newer minor version is accepted; its unknown fields are named in `warnings`.
    let newer = json!({"protocol_version": "1.3", "colour": "red", "steps": [step]});
    let (status, result) = post_job(&s, &newer).await;
    assert_eq!(status, 200, "{result}");
    assert!(
        result["warnings"].to_string().contains("colour"),
        "{result}"
    );
    assert_eq!(s.runner().jobs().len(), 1, "only the well-formed job ran");
    assert_eq!(
        s.runner().calls.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    s.stop().await;
}

/// A job whose step `bad` breaks a constraint the host sees: 200, `failure`, that step failed
/// with `kind`, every other step skipped, nothing run.
async fn refused(s: &Service, case: &str, job: Value, bad: usize, kind: &str) -> Value {
    let (status, result) = post_job(s, &job).await;
    assert_eq!(status, 200, "{case}: {result}");
    assert_eq!(result["status"], "failure", "{case}: {result}");
    let steps = result["steps"].as_array().expect("steps");
    for (i, step) in steps.iter().enumerate() {
        let expected = if i == bad { "failure" } else { "skipped" };
        assert_eq!(step["status"], expected, "{case}: step {i}: {result}");
    }
    assert_eq!(steps[bad]["error"]["type"], kind, "{case}: {result}");
    assert_eq!(result["error"]["type"], kind, "{case}: {result}");
    result
}

#[tokio::test(flavor = "multi_thread")]
async fn constraint_breaks_the_host_sees_fail_their_step_and_run_nothing() {
    let s = Service::fake(FakeRunner::new(), |c| {
        secured(c, ApprovalMode::Never);
        c.sandbox.jobs.max_steps = 5;
    })
    .await;
    let list =
        |id: &str| json!({"id": id, "type": "list_tree", "arguments": {"path": "/workspace"}});
    let job = |commands: &[&str], step: Value| {
        json!({"protocol_version": "1.0", "constraints": {"allowed_commands": commands},
            "steps": [list("before"), step, list("after")]})
    };
    let write = |path: &str, content: &str| json!({"id": "w", "type": "write_file", "arguments": {"path": path, "content": content}});
    refused(
        &s,
        "outside allowed_paths",
        job(&[], write("/etc/passwd", "x")),
        1,
        "policy_violation",
    )
    .await;
    refused(
        &s,
        "escaping with ..",
        job(&[], write("../etc/passwd", "x")),
        1,
        "policy_violation",
    )
    .await;
    let curl =
        json!({"id": "c", "type": "run_command", "arguments": {"command": "curl", "args": []}});
    refused(
        &s,
        "a command not allowed",
        job(&["python3"], curl),
        1,
        "policy_violation",
    )
    .await;
    let key = format!("token = ghp_{}\n", "aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5");
    let secret = refused(
        &s,
        "a secret in a file",
        job(&[], write("config.ini", &key)),
        1,
        "policy_violation",
    )
    .await;
    assert!(
        secret["validation"].to_string().contains("secrets"),
        "{secret}"
    );
    let dangerous = write("wipe.sh", "rm -rf / --no-preserve-root\n");
    refused(
        &s,
        "a dangerous script file",
        job(&[], dangerous),
        1,
        "policy_violation",
    )
    .await;
    let inline = json!({"id": "c", "type": "run_command",
        "arguments": {"command": "bash", "args": ["-c", "rm -rf / --no-preserve-root"]}});
    refused(
        &s,
        "a dangerous inline program",
        job(&["bash"], inline),
        1,
        "policy_violation",
    )
    .await;
    let many: Vec<Value> = (0..6)
        .map(|i| json!({"id": format!("s{i}"), "type": "list_tree", "arguments": {"path": "/workspace"}}))
        .collect();
    let (status, over) = post_job(&s, &json!({"protocol_version": "1.0", "steps": many})).await;
    assert_eq!(status, 200, "{over}");
    assert_eq!(over["status"], "failure");
    assert_eq!(over["error"]["type"], "resource_limit_exceeded", "{over}");
    assert!(over["error"]["message"].to_string().contains('5'), "{over}");
    assert!(statuses(&over).iter().all(|s| *s == "skipped"), "{over}");
    assert_eq!(
        s.runner().calls.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
    assert!(s.runner().jobs().is_empty());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reused_job_id_is_a_conflict() {
    let s = Service::fake(FakeRunner::new(), |c| secured(c, ApprovalMode::Never)).await;
    let job_id = uuid::Uuid::new_v4().to_string();
    let (status, _) = post_job(&s, &report_job(&job_id)).await;
    assert_eq!(status, 200);
    let (status, conflict) = post_job(&s, &report_job(&job_id)).await;
    assert_eq!(status, 409, "{conflict}");
    assert_eq!(conflict["error"]["type"], "conflict");
    assert_eq!(s.runner().jobs().len(), 1);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_held_for_approval_answers_202_and_its_result_long_polls() {
    let s = Service::fake(FakeRunner::new(), |c| secured(c, ApprovalMode::Always)).await;
    let job_id = uuid::Uuid::new_v4().to_string();
    let (status, held) = post_job(&s, &report_job(&job_id)).await;
    assert_eq!(status, 202, "{held}");
    assert_eq!(held["status"], "pending_approval");
    assert_eq!(held["job_id"], job_id.as_str());
    assert_eq!(held["links"]["self"], format!("/v1/jobs/{job_id}"));
    let execution = held["execution_id"].as_str().expect("id").to_string();
    assert_eq!(
        held["links"]["approval"],
        format!("/v1/approvals/{execution}")
    );
    assert!(s.runner().jobs().is_empty(), "nothing runs before approval");
    let (status, still) = call(&s, "GET", &format!("/v1/jobs/{job_id}"), AGENT, None).await;
    assert_eq!(
        (status, &still["status"]),
        (202, &json!("pending_approval"))
    );
    let (status, decided) = call(
        &s,
        "POST",
        &format!("/v1/approvals/{execution}"),
        OPERATOR,
        Some(
            json!({"decision": "approve", "reason": "fine"})
                .to_string()
                .into_bytes(),
        ),
    )
    .await;
    assert_eq!(status, 200, "{decided}");
    let (status, result) = call(
        &s,
        "GET",
        &format!("/v1/jobs/{job_id}?wait=30"),
        AGENT,
        None,
    )
    .await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["status"], "success", "{result}");
    // A denied job ends as a policy violation with every step skipped.
    let denied_id = uuid::Uuid::new_v4().to_string();
    let (_, held) = post_job(&s, &report_job(&denied_id)).await;
    let execution = held["execution_id"].as_str().expect("id").to_string();
    let (status, _) = call(
        &s,
        "POST",
        &format!("/v1/approvals/{execution}"),
        OPERATOR,
        Some(
            json!({"decision": "deny", "reason": "no"})
                .to_string()
                .into_bytes(),
        ),
    )
    .await;
    assert_eq!(status, 200);
    let (status, denied) = call(
        &s,
        "GET",
        &format!("/v1/jobs/{denied_id}?wait=30"),
        AGENT,
        None,
    )
    .await;
    assert_eq!(status, 200, "{denied}");
    assert_eq!(denied["status"], "failure");
    assert_eq!(denied["error"]["type"], "policy_violation", "{denied}");
    assert_eq!(statuses(&denied), ["skipped"; 3]);
    assert_eq!(s.runner().jobs().len(), 1);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn execute_writes_files_and_returns_artifacts() {
    let s = Service::fake(FakeRunner::new(), |c| secured(c, ApprovalMode::Never)).await;
    let csv = "a,b\n1,2\n";
    let request = json!({"script_content": "print(open('data/in.csv').read())", "script_type": "python",
        "files": [{"path": "data/in.csv", "content": csv},
                  {"path": "/workspace/blob.bin", "content": "AAEC", "encoding": "base64"}],
        "artifacts": ["/workspace/data/in.csv", "/workspace/blob.bin"]});
    let (status, out) = call(
        &s,
        "POST",
        "/v1/execute",
        AGENT,
        Some(request.to_string().into_bytes()),
    )
    .await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["success"], true, "{out}");
    let artifacts = out["artifacts"].as_array().expect("artifacts");
    assert_eq!(artifacts.len(), 2, "{out}");
    let id = out["execution_id"].as_str().expect("id");
    for (path, bytes) in [
        ("workspace/data/in.csv", csv.as_bytes()),
        ("workspace/blob.bin", &[0u8, 1, 2][..]),
    ] {
        let listed = artifacts
            .iter()
            .find(|a| a["path"] == format!("/{path}"))
            .unwrap_or_else(|| panic!("{path} in {out}"));
        assert_eq!(listed["sha256"], sha256(bytes).as_str());
        let (got, header) = download(&s, &format!("/v1/executions/{id}/artifacts/{path}"))
            .await
            .expect("the artifact");
        assert_eq!((got.as_slice(), header), (bytes, sha256(bytes)));
    }
    // Bad workspaces are refused before anything runs.
    let base = |files: Value, artifacts: Value| json!({"script_content": "print(1)", "script_type": "python", "files": files, "artifacts": artifacts});
    let bad = [
        (
            "escaping path",
            base(
                json!([{"path": "../etc/passwd", "content": "x"}]),
                json!([]),
            ),
        ),
        (
            "outside /workspace",
            base(json!([{"path": "/etc/passwd", "content": "x"}]), json!([])),
        ),
        (
            "twice",
            base(
                json!([{"path": "a", "content": "x"}, {"path": "a", "content": "y"}]),
                json!([]),
            ),
        ),
        (
            "bad base64",
            base(
                json!([{"path": "a", "content": "@@", "encoding": "base64"}]),
                json!([]),
            ),
        ),
        (
            "unknown encoding",
            base(
                json!([{"path": "a", "content": "x", "encoding": "hex"}]),
                json!([]),
            ),
        ),
        ("artifact outside", base(json!([]), json!(["/etc/*"]))),
    ];
    let before = s.runner().jobs().len();
    for (case, request) in bad {
        let (status, answer) = call(
            &s,
            "POST",
            "/v1/execute",
            AGENT,
            Some(request.to_string().into_bytes()),
        )
        .await;
        assert_eq!(status, 400, "{case}: {answer}");
        assert_eq!(answer["error"]["type"], "schema_error", "{case}: {answer}");
    }
    // A file carrying a secret is a rejected run (200 with the verdict), never run.
    let key = format!("token = ghp_{}\n", "aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5");
    let secret = base(json!([{"path": "creds.ini", "content": &key}]), json!([]));
    let (status, rejected) = call(
        &s,
        "POST",
        "/v1/execute",
        AGENT,
        Some(secret.to_string().into_bytes()),
    )
    .await;
    assert_eq!(status, 200, "{rejected}");
    assert_eq!(rejected["success"], false);
    assert_eq!(rejected["validation"]["valid"], false, "{rejected}");
    assert_eq!(s.runner().jobs().len(), before);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn run_job_is_a_tool_in_both_shapes() {
    let s = Service::fake(FakeRunner::new(), |c| secured(c, ApprovalMode::Never)).await;
    let (status, tools) = call(&s, "GET", "/v1/tools", AGENT, None).await;
    assert_eq!(status, 200, "{tools}");
    assert_eq!(
        tools["metadata"]["run_job"]["endpoint"], "POST /v1/jobs",
        "{tools}"
    );
    let tool = tools["openai"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["function"]["name"] == "run_job"))
        .unwrap_or_else(|| panic!("run_job in {tools}"));
    let parameters = &tool["function"]["parameters"];
    assert!(parameters["properties"]["steps"].is_object(), "{tool}");
    assert!(
        parameters["required"]
            .to_string()
            .contains("protocol_version"),
        "{tool}"
    );
    let tool = tools["anthropic"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == "run_job"))
        .unwrap_or_else(|| panic!("run_job in {tools}"));
    assert_eq!(tool["input_schema"], *parameters);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_above_the_body_maximum_is_413_naming_the_setting() {
    let s = Service::fake(FakeRunner::new(), |c| {
        secured(c, ApprovalMode::Never);
        c.sandbox.jobs.max_job_bytes = 64 << 10;
    })
    .await;
    let big = "x".repeat(1 << 20);
    let job = json!({"protocol_version": "1.0",
        "steps": [{"id": "w", "type": "write_file", "arguments": {"path": "big.txt", "content": big}}]});
    let (status, answer) = post_job(&s, &job).await;
    assert_eq!(status, 413, "{answer}");
    assert_eq!(answer["error"]["type"], "payload_too_large");
    assert!(
        answer["error"]["message"]
            .to_string()
            .contains("sandbox.jobs.max_job_bytes"),
        "{answer}"
    );
    assert!(s.runner().jobs().is_empty());
    s.stop().await;
}
