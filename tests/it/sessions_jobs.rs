//! `POST /v1/sessions/{id}/jobs` against the real engine: a job of the job protocol runs in the
//! session's workspace (it sees what commands left there, and they see what it left), answers
//! like `POST /v1/jobs` (per-step results, artifacts with their sha256), is refused before it
//! runs when its content fails validation, and leaves the session usable.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::api::session::{create, line};
use crate::harness::Service;

#[tokio::test]
async fn a_job_runs_in_the_session_workspace_and_answers_like_v1_jobs() {
    let s = Service::start(|_| {}).await;
    let id = create(&s, json!({})).await;
    let made = line(
        &s,
        &id,
        "mkdir -p src && echo 'print(6 * 7)' > src/calc.py && cd src",
    )
    .await;
    assert_eq!(made["exit_code"], 0, "{made}");

    let report = "{\"answer\": 42}\n";
    let job = json!({
        "protocol_version": "1.0",
        "constraints": {"max_runtime_seconds": 30, "allowed_paths": ["/workspace"],
                        "allowed_commands": ["python3"]},
        "steps": [
            {"id": "run", "type": "run_command", "arguments": {"command": "python3", "args": ["src/calc.py"]}},
            {"id": "write", "type": "write_file", "arguments": {"path": "/workspace/out/report.json", "content": report}},
            {"id": "list", "type": "list_tree", "arguments": {"path": "/workspace", "max_depth": 2}}
        ],
        "artifacts": ["/workspace/out/*.json"]
    });
    let (status, done) = s.post(&format!("/v1/sessions/{id}/jobs"), &job).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["status"], "success", "{done}");
    assert_eq!(done["session_id"], id.as_str());
    let steps = done["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 3, "{done}");
    assert!(steps.iter().all(|st| st["status"] == "success"), "{done}");
    // The command that ran saw the file a session command left.
    assert_eq!(steps[0]["result"]["stdout"], "42\n", "{done}");
    let sha = hex::encode(Sha256::digest(report.as_bytes()));
    assert_eq!(done["artifacts"][0]["path"], "/workspace/out/report.json");
    assert_eq!(done["artifacts"][0]["sha256"], sha.as_str(), "{done}");
    assert!(done["validation"].is_array(), "{done}");

    // The session's next command sees what the job left; its working directory is its own.
    let after = line(&s, &id, "pwd; sha256sum /workspace/out/report.json").await;
    assert_eq!(
        after["stdout"],
        format!("/workspace/src\n{sha}  /workspace/out/report.json\n").as_str(),
        "{after}"
    );
    let file = s
        .client
        .get(format!("{}/v1/sessions/{id}/files/out/report.json", s.url))
        .send()
        .await
        .expect("download");
    assert_eq!(
        file.headers()["x-content-sha256"].to_str().ok(),
        Some(sha.as_str())
    );

    // A job whose content fails validation is refused before anything runs, with a complete
    // result; the session stays usable.
    let bad = json!({
        "protocol_version": "1.0",
        "constraints": {"max_runtime_seconds": 30, "allowed_paths": ["/workspace"]},
        "steps": [
            {"id": "mark", "type": "write_file", "arguments": {"path": "/workspace/marker", "content": "x"}},
            {"id": "kill", "type": "write_file", "arguments": {"path": "/workspace/k.sh", "content": "kill -9 -1\n"}}
        ]
    });
    let (status, refused) = s.post(&format!("/v1/sessions/{id}/jobs"), &bad).await;
    assert_eq!(status, 200, "{refused}");
    assert_eq!(refused["status"], "failure", "{refused}");
    let states: Vec<&str> = refused["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|st| st["status"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(states, ["skipped", "failure"], "{refused}");
    let marker = line(
        &s,
        &id,
        "test -e /workspace/marker && echo ran || echo nothing",
    )
    .await;
    assert_eq!(marker["stdout"], "nothing\n", "{marker}");

    // While a job runs the session is busy; a job past its deadline ends as `timeout`, and the
    // session goes on.
    let slow = json!({
        "protocol_version": "1.0",
        "constraints": {"max_runtime_seconds": 2, "allowed_paths": ["/workspace"],
                        "allowed_commands": ["python3"]},
        "steps": [
            {"id": "sleep", "type": "run_command", "arguments": {"command": "python3", "args": ["-c", "import time; time.sleep(60)"]}}
        ]
    });
    let (client, url) = (s.client.clone(), format!("{}/v1/sessions/{id}/jobs", s.url));
    let running = tokio::spawn(async move {
        let r = client.post(url).json(&slow).send().await.expect("job");
        (r.status().as_u16(), r.json::<Value>().await.expect("json"))
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let view: Value = s
            .client
            .get(format!("{}/v1/sessions/{id}", s.url))
            .send()
            .await
            .expect("view")
            .json()
            .await
            .expect("json");
        if view["state"] == "busy" {
            break;
        }
        if running.is_finished() {
            let (status, out) = running.await.expect("task");
            panic!("the job ended before the session was seen busy: {status} {out}");
        }
        assert!(std::time::Instant::now() < deadline, "never busy: {view}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (status, busy) = s
        .post(
            &format!("/v1/sessions/{id}/exec"),
            &json!({"command": "true"}),
        )
        .await;
    assert_eq!(
        (status, busy["error"]["type"].as_str()),
        (409, Some("session_busy")),
        "{busy}"
    );
    let (status, timed_out) = running.await.expect("task");
    assert_eq!(status, 200, "{timed_out}");
    assert_eq!(timed_out["status"], "timeout", "{timed_out}");
    assert_eq!(line(&s, &id, "echo usable").await["stdout"], "usable\n");

    // Not a job: 400; no such session: 404.
    let (status, schema) = s
        .post(
            &format!("/v1/sessions/{id}/jobs"),
            &json!({"protocol_version": "9.0"}),
        )
        .await;
    assert_eq!(
        (status, schema["error"]["type"].as_str()),
        (400, Some("schema_error")),
        "{schema}"
    );
    let unknown = uuid::Uuid::new_v4();
    let (status, missing) = s.post(&format!("/v1/sessions/{unknown}/jobs"), &job).await;
    assert_eq!(
        (status, missing["error"]["type"].as_str()),
        (404, Some("session_not_found")),
        "{missing}"
    );
    s.stop().await;
}

#[tokio::test]
async fn a_write_past_the_file_size_limit_fails_typed_and_leaves_no_staged_file() {
    // /workspace 1 MiB and the largest file (fsize) 1 MiB: a larger file reaches the per-file
    // limit before the workspace is full. The write fails with EFBIG (not SIGXFSZ, which would
    // kill the writer and leave its staged file behind).
    let s = Service::start(|c| {
        c.sandbox.limits.tmpfs_mb = 1;
        c.sandbox.limits.workspace_mb = 1;
    })
    .await;
    // Short lines: the content is secret-scanned before the job runs.
    let content: String = (0..150_000).map(|i| format!("{i:07}\n")).collect();
    let id = create(&s, json!({})).await;
    let job = json!({
        "protocol_version": "1.0",
        "constraints": {"max_runtime_seconds": 30, "allowed_paths": ["/workspace"]},
        "steps": [
            {"id": "big", "type": "write_file", "arguments": {"path": "/workspace/big.txt", "content": content}}
        ]
    });
    let (status, done) = s.post(&format!("/v1/sessions/{id}/jobs"), &job).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["status"], "failure", "{done}");
    assert_eq!(
        done["steps"][0]["error"]["type"], "resource_limit_exceeded",
        "{}",
        done["steps"][0]
    );
    let left = line(&s, &id, "ls -A /workspace | wc -l").await;
    assert_eq!(left["stdout"], "0\n", "{left}");
    s.stop().await;
}
