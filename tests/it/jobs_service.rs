//! Jobs and workspaces through the whole service on the real engine: `POST /v1/jobs` end to end
//! (a program written, run and patched, its report downloaded with a matching sha256),
//! a job the host refuses before any container, and `/v1/execute` with files in and artifacts
//! out. (The sandbox alone: `jobs_sandbox`; the HTTP shapes without an engine: `contract::jobs`.)

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::harness::{self, Service};

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The bytes and `x-content-sha256` header of a download.
async fn download(s: &Service, path: &str) -> (Vec<u8>, String) {
    let response = s
        .client
        .get(format!("{}{path}", s.url))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200, "{path}");
    let header = response
        .headers()
        .get("x-content-sha256")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (response.bytes().await.expect("bytes").to_vec(), header)
}

fn statuses(result: &Value) -> Vec<&str> {
    result["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| s["status"].as_str().expect("status"))
        .collect()
}

const APP: &str = "import json, sys\nprint('hello')\njson.dump({'args': sys.argv[1:]}, open('out/report.json', 'w'))\n";
const DIFF: &str = "--- a/app.py\n+++ b/app.py\n@@ -1,3 +1,3 @@\n import json, sys\n-print('hello')\n+print('hello, world')\n json.dump({'args': sys.argv[1:]}, open('out/report.json', 'w'))\n";

#[tokio::test(flavor = "multi_thread")]
async fn a_job_runs_end_to_end_and_its_artifact_downloads_with_its_sha256() {
    let s = Service::start(harness::without_data_pool).await;
    let job = json!({"protocol_version": "1.0",
        "constraints": {"allowed_commands": ["python3", "mkdir"], "max_runtime_seconds": 60},
        "steps": [
            {"id": "write", "type": "write_file", "arguments": {"path": "app.py", "content": APP}},
            {"id": "patch", "type": "apply_unified_diff", "arguments": {"diff": DIFF}},
            {"id": "mkdir", "type": "run_command", "arguments": {"command": "mkdir", "args": ["out"]}},
            {"id": "run", "type": "run_command", "arguments": {"command": "python3", "args": ["app.py", "x"]}},
            {"id": "read", "type": "read_file", "arguments": {"path": "/workspace/out/report.json"}},
            {"id": "list", "type": "list_tree", "arguments": {"path": "/workspace"}}
        ],
        "artifacts": ["/workspace/out/*.json", "/workspace/app.py"]});
    let (status, result) = s.post("/v1/jobs", &job).await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["status"], "success", "{result}");
    assert_eq!(statuses(&result), ["success"; 6], "{result}");
    assert_eq!(result["steps"][3]["result"]["stdout"], "hello, world\n");
    let report = "{\"args\": [\"x\"]}";
    assert_eq!(result["steps"][4]["result"]["content"], report);
    let job_id = result["job_id"].as_str().expect("job id").to_string();
    let artifacts = result["artifacts"].as_array().expect("artifacts");
    assert_eq!(artifacts.len(), 2, "{result}");
    for artifact in artifacts {
        let path = artifact["path"].as_str().expect("path");
        let (bytes, header) =
            download(&s, &format!("/v1/jobs/{job_id}/artifacts/{}", &path[1..])).await;
        assert_eq!(artifact["sha256"], sha256(&bytes).as_str(), "{path}");
        assert_eq!(header, sha256(&bytes));
        assert_eq!(artifact["size_bytes"], bytes.len());
    }
    let (report_bytes, _) = download(
        &s,
        &format!("/v1/jobs/{job_id}/artifacts/workspace/out/report.json"),
    )
    .await;
    assert_eq!(report_bytes, report.as_bytes());
    // The same result by id; the execution that ran it is an execution like any other.
    let again: Value = s
        .client
        .get(format!("{}/v1/jobs/{job_id}", s.url))
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json");
    assert_eq!(again["steps"], result["steps"]);
    let execution = result["execution_id"].as_str().expect("execution id");
    let record: Value = s
        .client
        .get(format!("{}/v1/executions/{execution}", s.url))
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json");
    assert_eq!(record["status"], "completed", "{record}");
    // A failing command ends the job; the steps after it are skipped; what exists is collected.
    let failing = json!({"protocol_version": "1.0",
        "constraints": {"allowed_commands": ["python3"]},
        "steps": [
            {"id": "write", "type": "write_file", "arguments": {"path": "partial.txt", "content": "so far\n"}},
            {"id": "fail", "type": "run_command", "arguments": {"command": "python3", "args": ["-c", "import sys; sys.exit(3)"]}},
            {"id": "never", "type": "list_tree", "arguments": {"path": "/workspace"}}
        ],
        "artifacts": ["/workspace/partial.txt"]});
    let (status, failed) = s.post("/v1/jobs", &failing).await;
    assert_eq!(status, 200, "{failed}");
    assert_eq!(failed["status"], "failure");
    assert_eq!(statuses(&failed), ["success", "failure", "skipped"]);
    assert_eq!(failed["steps"][1]["error"]["type"], "execution_failure");
    assert_eq!(failed["steps"][1]["result"]["exit_code"], 3);
    assert_eq!(
        failed["artifacts"][0]["sha256"],
        sha256(b"so far\n").as_str()
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_the_host_refuses_starts_no_container() {
    let s = Service::start(harness::without_data_pool).await;
    let key = format!("token = ghp_{}\n", "aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5");
    let job = json!({"protocol_version": "1.0",
    "steps": [
        {"id": "list", "type": "list_tree", "arguments": {"path": "/workspace"}},
        {"id": "creds", "type": "write_file", "arguments": {"path": "creds.ini", "content": key}}
    ]});
    let (status, result) = s.post("/v1/jobs", &job).await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["status"], "failure");
    assert_eq!(statuses(&result), ["skipped", "failure"]);
    assert_eq!(result["steps"][1]["error"]["type"], "policy_violation");
    let (status, malformed) = s
        .post("/v1/jobs", &json!({"protocol_version": "2.0", "steps": []}))
        .await;
    assert_eq!(status, 400, "{malformed}");
    assert_eq!(malformed["error"]["type"], "schema_error");
    assert!(
        harness::containers(&s.instance).await.is_empty(),
        "no container was started"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn execute_with_files_and_artifacts() {
    let s = Service::start(harness::without_data_pool).await;
    let helper = "def double(x):\n    return 2 * x\n";
    let script = "import os, helper\nrows = open('data/in.csv').read().split()\nos.makedirs('out', exist_ok=True)\nopen('out/sum.txt', 'w').write(str(helper.double(len(rows))))\nprint(len(rows))\n";
    let request = json!({"script_content": script, "script_type": "python", "timeout": 30,
        "files": [{"path": "helper.py", "content": helper},
                  {"path": "data/in.csv", "content": "a,b\n1,2\n3,4\n"},
                  {"path": "blob.bin", "content": "AAECAw==", "encoding": "base64"}],
        "artifacts": ["out/*.txt", "/workspace/blob.bin"]});
    let (status, out) = s.post("/v1/execute", &request).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["success"], true, "{out}");
    assert_eq!(out["stdout"], "3\n");
    let id = out["execution_id"].as_str().expect("id");
    let artifacts = out["artifacts"].as_array().expect("artifacts");
    assert_eq!(artifacts.len(), 2, "{out}");
    for (path, expected) in [
        ("workspace/out/sum.txt", &b"6"[..]),
        ("workspace/blob.bin", &[0u8, 1, 2, 3][..]),
    ] {
        let listed = artifacts
            .iter()
            .find(|a| a["path"] == format!("/{path}"))
            .unwrap_or_else(|| panic!("{path} in {out}"));
        let (bytes, header) = download(&s, &format!("/v1/executions/{id}/artifacts/{path}")).await;
        assert_eq!(bytes, expected, "{path}");
        assert_eq!(listed["sha256"], sha256(&bytes).as_str());
        assert_eq!(header, sha256(&bytes));
    }
    s.stop().await;
}
