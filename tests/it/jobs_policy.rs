//! Jobs under a run-time policy against the real engine, over HTTP: a job's `run_command` steps
//! run under the job's policy (a denied exec and a denied write fail with `EACCES` in the step,
//! show in the step's `events` and the job's, and are audit records of its execution), an
//! `approve` rule holds an operation of a step until an operator decides through `/v1/approvals`
//! (the step then goes on, or the operation fails), a script with `files` under a policy runs
//! and reports its events, and a session's job runs under the session's policy (its files decided
//! by that policy's `file_rules` first). A file step under `approve` holds the whole job before it
//! runs, until an operator approves it (then it runs, and the decision is in its events).
//!
//! Runs the image under test (`RUNNER_IMAGE_UNDER_TEST`), whose job agent enforces policies.

use std::time::Duration;

use scriptgate::config::Config;
use serde_json::{Value, json};

use crate::api::{audit_tail, get, has, pending_entry};
use crate::harness::{self, Service};

/// Exec of `id` is denied, `date` is logged, writes to /workspace/locked.txt are denied, reading
/// /etc/hosts waits for an operator, everything else is allowed.
const JOBFENCE: &str = r#"
version: 1
name: jobfence
file_rules:
  - {name: locked, paths: [/workspace/locked.txt], operations: [write, create, delete], decision: deny, message: "{path} is locked"}
  - {name: held-read, paths: [/etc/hosts], operations: [read], decision: approve}
  - {name: held-deploy, paths: [/workspace/deploy/**], operations: [create, write], decision: approve, message: "{operation} of {path} changes a deployment"}
  - {name: noted, paths: [/workspace/notes/**], operations: ["*"], decision: log}
  - {name: everything-else, paths: ["/**"], operations: ["*"], decision: allow}
command_rules:
  - {name: no-id, commands: [id], decision: deny, message: "{command} is not for jobs"}
  - {name: logged-date, commands: [date], decision: log}
  - {name: any-program, commands: ["*"], decision: allow}
network_rules:
  - {name: loopback, cidrs: [127.0.0.0/8], decision: allow}
  - {name: no-network, decision: deny}
"#;

/// Runs `id` (denied), writes /workspace/locked.txt (denied) and runs `date` (logged),
/// printing the errno each attempt saw.
const PROBE: &str = r#"import subprocess
try:
    subprocess.run(["id", "-u"], stdout=subprocess.DEVNULL)
    print("exec 0")
except OSError as e:
    print("exec", e.errno)
try:
    with open("/workspace/locked.txt", "w") as f:
        f.write("hi")
    print("write 0")
except OSError as e:
    print("write", e.errno)
subprocess.run(["date"], stdout=subprocess.DEVNULL)
"#;

fn policies(config: &mut Config) {
    let dir = tempfile::tempdir().expect("policies dir").keep();
    std::fs::write(dir.join("jobfence.yml"), JOBFENCE).expect("policy file");
    config.policy.policies_dir = Some(dir);
    config.sandbox.python_image = harness::runner_image();
    config.sandbox.bash_image = harness::runner_image();
}

async fn service() -> Service {
    Service::start(policies).await
}

fn probe_job() -> Value {
    json!({"protocol_version": "1.0", "policy": "jobfence",
    "constraints": {"allowed_commands": ["python3"], "max_runtime_seconds": 60},
    "steps": [
        {"id": "write", "type": "write_file", "arguments": {"path": "probe.py", "content": PROBE}},
        {"id": "probe", "type": "run_command", "arguments": {"command": "python3", "args": ["probe.py"]}}
    ]})
}

/// The step's events show the denied exec, the denied write and the logged `date`.
fn assert_probe_events(events: &Value) {
    assert!(
        has(&events["blocked_operations"], |b| b["type"] == "exec"
            && b["target"].as_str().is_some_and(|t| t.contains("id"))
            && b["rule"] == "no-id"
            && b["errno"] == 13),
        "{events}"
    );
    assert!(
        has(&events["blocked_operations"], |b| b["target"]
            == "/workspace/locked.txt"
            && b["rule"] == "locked"
            && b["decision"] == "deny"
            && b["errno"] == 13),
        "{events}"
    );
    assert!(
        has(&events["processes"], |p| p["argv"] == json!(["date"])
            && p["decision"] == "log"
            && p["rule"] == "logged-date"),
        "{events}"
    );
    assert!(events["omitted"]["processes"].is_u64(), "{events}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_jobs_command_runs_under_its_policy_denied_exec_and_write_fail_with_eacces_and_are_audited()
 {
    let s = service().await;
    let (status, result) = s.post("/v1/jobs", &probe_job()).await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["status"], "success", "{result}");
    assert_eq!(result["policy"], "jobfence", "{result}");
    let probe = &result["steps"][1];
    assert_eq!(
        probe["result"]["stdout"], "exec 13\nwrite 13\n",
        "the step saw EACCES for both: {probe}"
    );
    assert_probe_events(&probe["events"]);
    // A file step has no events: its path was decided before the job ran.
    assert!(result["steps"][0].get("events").is_none(), "{result}");
    // The job's events are every step's together.
    assert_probe_events(&result["events"]);
    let id = result["execution_id"].as_str().expect("id").to_string();
    let (status, stored) = get(&s, &format!("/v1/executions/{id}")).await;
    assert_eq!(status, 200, "{stored}");
    assert_eq!(stored["events"], result["events"], "{stored}");

    let data_dir = s.data_dir.clone();
    s.stop().await;
    let decisions: Vec<Value> = audit_tail(&data_dir)
        .into_iter()
        .filter(|r| r["event"] == "policy_decision" && r["execution_id"] == id.as_str())
        .collect();
    for (target, rule, decision) in [
        ("/workspace/locked.txt", "locked", "deny"),
        ("date", "logged-date", "log"),
    ] {
        assert!(
            decisions.iter().any(|r| r["outcome"]["target"] == target
                && r["outcome"]["rule"] == rule
                && r["outcome"]["decision"] == decision
                && r["outcome"]["policy"] == "jobfence"),
            "{target} {decision}: {decisions:?}"
        );
    }
    assert!(
        decisions.iter().any(|r| r["outcome"]["decision"] == "deny"
            && r["outcome"]["target"]
                .as_str()
                .is_some_and(|t| t.contains("id"))),
        "the denied exec: {decisions:?}"
    );
    assert!(
        decisions
            .iter()
            .all(|r| r["outcome"]["decision"] != "allow"),
        "{decisions:?}"
    );
}

const HELD: &str = r#"import os
os.chdir("/tmp")
try:
    open("/etc/hosts").read()
    print("hosts 0")
except OSError as e:
    print("hosts", e.errno)
"#;

/// A job whose second step reads /etc/hosts (held), and a third step after it.
fn held_job_body() -> Value {
    json!({"protocol_version": "1.0", "policy": "jobfence",
    "constraints": {"allowed_commands": ["python3"], "max_runtime_seconds": 90},
    "steps": [
        {"id": "write", "type": "write_file", "arguments": {"path": "held.py", "content": HELD}},
        {"id": "held", "type": "run_command", "arguments": {"command": "python3", "args": ["held.py"]}},
        {"id": "after", "type": "run_command", "arguments": {"command": "python3", "args": ["-c", "print('after')"]}}
    ]})
}

/// Starts the held job; once its read is listed in `/v1/approvals`, the listed entry and the
/// task that answers the job's result.
async fn start_held_job(s: &Service) -> (Value, tokio::task::JoinHandle<Value>) {
    let run = {
        let (client, url) = (s.client.clone(), s.url.clone());
        tokio::spawn(async move {
            let r = client
                .post(format!("{url}/v1/jobs"))
                .json(&held_job_body())
                .send()
                .await
                .expect("job");
            r.json::<Value>().await.expect("result")
        })
    };
    for _ in 0..300 {
        let (_, list) = get(s, "/v1/approvals").await;
        if let Some(op) = list["operations"].as_array().and_then(|o| o.first()) {
            assert!(!run.is_finished(), "the job waits for the decision");
            return (op.clone(), run);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("nothing was held");
}

/// Answers a held operation with `decision`.
async fn decide(s: &Service, held: &Value, decision: &str) {
    let approval = held["approval_id"].as_str().expect("approval id");
    let body = json!({"decision": decision, "reason": "test"});
    let (status, after) = s.post(&format!("/v1/approvals/{approval}"), &body).await;
    assert_eq!(status, 200, "{after}");
    assert_eq!(after["status"], "running", "{after}");
}

async fn result_of(run: tokio::task::JoinHandle<Value>) -> Value {
    tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the job ends")
        .expect("task")
}

/// Runs the held job, answers its held read with `decision`, and returns the held entry and the
/// job's result.
async fn held_job(s: &Service, decision: &str) -> (Value, Value) {
    let (held, run) = start_held_job(s).await;
    decide(s, &held, decision).await;
    (held, result_of(run).await)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_jobs_events_stream_live_while_it_runs() {
    use futures::StreamExt as _;
    let s = service().await;
    let (held, run) = start_held_job(&s).await;
    let id = held["execution_id"].as_str().expect("execution id");
    let response = s
        .client
        .get(format!("{}/v1/executions/{id}/events?types=blocked", s.url))
        .send()
        .await
        .expect("events");
    assert_eq!(response.status().as_u16(), 200);
    decide(&s, &held, "deny").await;
    let mut body = response.bytes_stream();
    let mut seen = String::new();
    let arrived = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(chunk) = body.next().await {
            seen.push_str(&String::from_utf8_lossy(&chunk.expect("chunk")));
            if seen.contains("event: blocked") && seen.contains("/etc/hosts") {
                return;
            }
        }
    })
    .await;
    assert!(arrived.is_ok(), "no blocked event arrived: {seen}");
    assert!(
        !seen.contains("event: file"),
        "only the kinds asked for: {seen}"
    );
    drop(body);
    let result = result_of(run).await;
    assert_eq!(
        result["steps"][1]["result"]["stdout"], "hosts 13\n",
        "{result}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operation_held_in_a_job_step_waits_for_the_operator_and_proceeds_or_fails() {
    let s = service().await;
    let (held, result) = held_job(&s, "approve").await;
    assert_eq!(held["operation"], "file_read", "{held}");
    assert_eq!(held["target"], "/etc/hosts", "{held}");
    assert_eq!(held["rule"], "held-read", "{held}");
    assert_eq!(held["execution_id"], result["execution_id"], "{held}");
    assert_eq!(result["status"], "success", "{result}");
    assert_eq!(
        result["steps"][1]["result"]["stdout"], "hosts 0\n",
        "{result}"
    );
    assert_eq!(
        result["steps"][2]["result"]["stdout"], "after\n",
        "{result}"
    );
    assert!(
        has(
            &result["steps"][1]["events"]["file_operations"],
            |f| f["path"] == "/etc/hosts" && f["decision"] == "approve"
        ),
        "{result}"
    );

    let (_, result) = held_job(&s, "deny").await;
    assert_eq!(
        result["steps"][1]["result"]["stdout"], "hosts 13\n",
        "the denied read failed with EACCES: {result}"
    );
    assert!(
        has(
            &result["steps"][1]["events"]["blocked_operations"],
            |b| b["target"] == "/etc/hosts" && b["errno"] == 13
        ),
        "{result}"
    );
    // The step itself succeeded (the script handled the error): the job went on.
    assert_eq!(
        result["steps"][2]["result"]["stdout"], "after\n",
        "{result}"
    );
    let (_, list) = get(&s, "/v1/approvals").await;
    assert_eq!(list["operations"], json!([]), "{list}");

    let data_dir = s.data_dir.clone();
    s.stop().await;
    let decisions: Vec<Value> = audit_tail(&data_dir)
        .into_iter()
        .filter(|r| r["event"] == "operation_decision")
        .collect();
    assert_eq!(decisions.len(), 2, "{decisions:?}");
    assert_eq!(decisions[0]["outcome"]["decision"], "approve");
    assert_eq!(decisions[1]["outcome"]["decision"], "deny");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_script_with_files_under_a_policy_runs_and_reports_its_events() {
    let s = service().await;
    let body = json!({"script_type": "python", "timeout": 60, "policy": "jobfence",
        "script_content": "import probe\n",
        "files": [{"path": "probe.py", "content": PROBE}],
        "artifacts": ["/workspace/probe.py"]});
    let (status, result) = s.post("/v1/execute", &body).await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["exit_code"], 0, "{result}");
    assert_eq!(result["stdout"], "exec 13\nwrite 13\n", "{result}");
    assert_eq!(result["policy"], "jobfence", "{result}");
    assert_probe_events(&result["events"]);
    assert_eq!(
        result["artifacts"].as_array().map(Vec::len),
        Some(1),
        "{result}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sessions_job_runs_under_the_sessions_policy() {
    let s = service().await;
    let (status, created) = s.post("/v1/sessions", &json!({"policy": "jobfence"})).await;
    assert_eq!(status, 201, "{created}");
    let id = created["session_id"].as_str().expect("id").to_string();
    let mut job = probe_job();
    job.as_object_mut().expect("object").remove("policy");
    // The session's policy decides the job's files before it reaches the container.
    let mut denied = job.clone();
    denied["steps"][0]["arguments"]["path"] = json!("locked.txt");
    let (status, out) = s.post(&format!("/v1/sessions/{id}/jobs"), &denied).await;
    assert_eq!(status, 403, "{out}");
    assert_eq!(out["error"]["type"], "policy_violation", "{out}");
    // A `log` rule on one of its files: the job runs, and its result lists the decision.
    job["steps"]
        .as_array_mut()
        .expect("steps")
        .push(json!({"id": "note", "type": "write_file",
            "arguments": {"path": "notes/n.txt", "content": "x"}}));
    let (status, result) = s.post(&format!("/v1/sessions/{id}/jobs"), &job).await;
    assert_eq!(status, 200, "{result}");
    let probe = &result["steps"][1];
    assert_eq!(probe["result"]["stdout"], "exec 13\nwrite 13\n", "{result}");
    assert_probe_events(&probe["events"]);
    assert_eq!(result["steps"][2]["status"], "success", "{result}");
    assert_eq!(
        result["events"]["file_operations"],
        json!([
            {"type": "file_create", "path": "/workspace/notes/n.txt", "bytes": null,
             "decision": "log", "rule": "noted"},
            {"type": "file_write", "path": "/workspace/notes/n.txt", "bytes": null,
             "decision": "log", "rule": "noted"},
        ]),
        "{result}"
    );
    // The session serves commands after its job, still under its policy.
    let (status, after) = s
        .post(
            &format!("/v1/sessions/{id}/exec"),
            &json!({"command": "echo hi > /workspace/locked.txt; echo rc=$?", "timeout": 30}),
        )
        .await;
    assert_eq!(status, 200, "{after}");
    assert_eq!(after["stdout"], "rc=1\n", "{after}");
    let job_id = result["job_id"].as_str().expect("job id").to_string();
    let data_dir = s.data_dir.clone();
    s.stop().await;
    let decisions: Vec<Value> = audit_tail(&data_dir)
        .into_iter()
        .filter(|r| r["event"] == "policy_decision" && r["execution_id"] == job_id.as_str())
        .collect();
    assert!(
        decisions
            .iter()
            .any(|r| r["outcome"]["session_id"] == id.as_str()
                && r["outcome"]["rule"] == "locked"
                && r["outcome"]["decision"] == "deny"),
        "{decisions:?}"
    );
}

/// Ordinary work: scripts in both languages (stdin, a non-zero exit, stderr), a job that writes,
/// runs, patches, reads and lists and returns an artifact, and a script with files and artifacts.
fn ordinary_work() -> Vec<(&'static str, Value)> {
    let app = "import json, sys\nprint('hello', sys.stdin.read().strip())\njson.dump({'n': 6 * 7}, open('out.json', 'w'))\n";
    let diff = "--- a/app.py\n+++ b/app.py\n@@ -1,3 +1,3 @@\n import json, sys\n-print('hello', sys.stdin.read().strip())\n+print('hi', sys.stdin.read().strip())\n json.dump({'n': 6 * 7}, open('out.json', 'w'))\n";
    vec![
        (
            "/v1/execute",
            json!({"script_type": "python", "timeout": 30, "stdin": "x\ny\n",
                "script_content": "import sys, json, csv, pathlib\nprint(sys.stdin.read().split())\nprint(sorted(p.name for p in pathlib.Path('/usr/lib/python3.11/json').glob('*.py'))[:2])\n"}),
        ),
        (
            "/v1/execute",
            json!({"script_type": "bash", "timeout": 30,
                "script_content": "set -e\ncd /tmp\nprintf 'a\\nb\\n' > f.txt\nwc -l < f.txt\nls /workspace >/dev/null\necho oops >&2\nexit 3\n"}),
        ),
        (
            "/v1/jobs",
            json!({"protocol_version": "1.0",
                "constraints": {"allowed_commands": ["python3", "ls"], "max_runtime_seconds": 60},
                "steps": [
                    {"id": "write", "type": "write_file", "arguments": {"path": "app.py", "content": app}},
                    {"id": "patch", "type": "apply_unified_diff", "arguments": {"diff": diff}},
                    {"id": "run", "type": "run_command", "arguments": {"command": "python3", "args": ["app.py"], "stdin": "there"}},
                    {"id": "ls", "type": "run_command", "arguments": {"command": "ls", "args": ["-1"]}},
                    {"id": "read", "type": "read_file", "arguments": {"path": "/workspace/out.json"}},
                    {"id": "list", "type": "list_tree", "arguments": {"path": "/workspace"}}
                ],
                "artifacts": ["/workspace/out.json"]}),
        ),
        (
            "/v1/execute",
            json!({"script_type": "python", "timeout": 30, "script_content": "import helper\nhelper.main()\n",
                "files": [{"path": "helper.py", "content": "def main():\n    open('report.txt', 'w').write('done')\n    print('ok')\n"}],
                "artifacts": ["report.txt"]}),
        ),
    ]
}

/// What must not change when the deployment enforces its default policy: the outputs, exit
/// codes, statuses, errors and artifacts (timings, ids and the events themselves may).
fn observable(result: &Value) -> Value {
    let steps: Vec<Value> = result["steps"]
        .as_array()
        .map(|steps| {
            steps
                .iter()
                .map(|s| {
                    json!([
                        s["id"],
                        s["status"],
                        s["error"],
                        s["result"]["stdout"],
                        s["result"]["stderr"],
                        s["result"]["exit_code"],
                        s["result"]["content"],
                        s["result"]["entries"].as_array().map(Vec::len)
                    ])
                })
                .collect()
        })
        .unwrap_or_default();
    let artifacts: Vec<Value> = result["artifacts"]
        .as_array()
        .map(|a| a.iter().map(|a| json!([a["path"], a["sha256"]])).collect())
        .unwrap_or_default();
    json!({"stdout": result["stdout"], "stderr": result["stderr"], "exit_code": result["exit_code"],
        "status": result["status"], "error": result["error"], "steps": steps, "artifacts": artifacts})
}

/// The cheap guard of "the default policy leaves ordinary work unchanged": the same requests
/// with `policy.enforce_default` off and on give the same observable results, and on, every one
/// ran under `default` with events. (The whole suite with it on: set
/// `SCRIPTGATE_POLICY__ENFORCE_DEFAULT=true`.)
#[tokio::test(flavor = "multi_thread")]
async fn ordinary_work_gives_the_same_results_with_the_default_policy_enforced() {
    let mut seen = Vec::new();
    for enforce in [false, true] {
        let s = Service::start(|c| {
            policies(c);
            c.policy.enforce_default = enforce;
        })
        .await;
        let mut results = Vec::new();
        for (path, body) in ordinary_work() {
            let (status, result) = s.post(path, &body).await;
            assert_eq!(status, 200, "{path} (enforced: {enforce}): {result}");
            if enforce {
                assert_eq!(result["policy"], "default", "{result}");
                assert!(result["events"]["processes"].is_array(), "{result}");
            } else {
                assert!(result["events"].is_null(), "{result}");
            }
            results.push(observable(&result));
        }
        s.stop().await;
        seen.push(results);
    }
    // The work did what it says (so equal results are not equally empty).
    let off = &seen[0];
    assert_eq!(
        off[0]["stdout"], "['x', 'y']\n['__init__.py', 'decoder.py']\n",
        "{off:?}"
    );
    assert_eq!(
        (&off[1]["stdout"], &off[1]["exit_code"]),
        (&json!("2\n"), &json!(3)),
        "{off:?}"
    );
    assert_eq!(off[2]["steps"][2][3], "hi there\n", "{off:?}");
    assert_eq!(
        off[2]["artifacts"].as_array().map(Vec::len),
        Some(1),
        "{off:?}"
    );
    assert_eq!(off[3]["stdout"], "ok\n", "{off:?}");
    for (i, (off, on)) in seen[0].iter().zip(&seen[1]).enumerate() {
        assert_eq!(off, on, "request {i}: off vs on");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_waiting_for_an_operator_still_ends_at_its_deadline() {
    let s = service().await;
    let mut job = held_job_body();
    job["steps"][1]["arguments"]["timeout_seconds"] = json!(3);
    // Nobody decides: the step's own deadline ends it, long before the approval would expire.
    let (status, result) = tokio::time::timeout(Duration::from_secs(60), s.post("/v1/jobs", &job))
        .await
        .expect("the job ends at its step's deadline");
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["status"], "timeout", "{result}");
    assert_eq!(result["steps"][1]["status"], "failure", "{result}");
    assert_eq!(result["steps"][1]["error"]["type"], "timeout", "{result}");
    assert_eq!(result["steps"][2]["status"], "skipped", "{result}");
    assert!(
        has(
            &result["steps"][1]["events"]["file_operations"],
            |f| f["path"] == "/etc/hosts" && f["decision"] == "approve"
        ),
        "the held read is in the step's events: {result}"
    );
    let (_, list) = get(&s, "/v1/approvals").await;
    assert_eq!(list["operations"], json!([]), "{list}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_file_under_approve_holds_the_job_until_an_operator_approves_then_it_runs() {
    let s = service().await;
    let job = json!({"protocol_version": "1.0", "policy": "jobfence",
    "constraints": {"allowed_commands": ["cat"], "max_runtime_seconds": 60},
    "steps": [
        {"id": "note", "type": "write_file", "arguments": {"path": "notes/why.txt", "content": "because\n"}},
        {"id": "deploy", "type": "write_file", "arguments": {"path": "deploy/app.yml", "content": "replicas: 2\n"}},
        {"id": "show", "type": "run_command", "arguments": {"command": "cat", "args": ["deploy/app.yml", "notes/why.txt"]}}
    ]});
    let (status, held) = s.post("/v1/jobs", &job).await;
    assert_eq!(status, 202, "{held}");
    assert_eq!(held["status"], "pending_approval", "{held}");
    let id = held["execution_id"].as_str().expect("id").to_string();
    let pending = pending_entry(&s, &id).await;
    assert!(
        has(&pending["policy_checks"], |c| c["kind"] == "file"
            && c["target"] == "write /workspace/deploy/app.yml"
            && c["decision"] == "approve"
            && c["message"]
                == "write of /workspace/deploy/app.yml changes a deployment"),
        "{pending}"
    );
    let (status, approved) = s
        .post(
            &format!("/v1/approvals/{id}"),
            &json!({"decision": "approve"}),
        )
        .await;
    assert_eq!(
        (status, approved["status"].clone()),
        (200, json!("queued")),
        "{approved}"
    );
    let (status, done) = get(&s, &format!("/v1/executions/{id}?wait=60")).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["status"], "completed", "{done}");
    let job_id = done["job_id"].as_str().expect("job id").to_string();
    let (status, result) = get(&s, &format!("/v1/jobs/{job_id}")).await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["status"], "success", "{result}");
    assert_eq!(
        result["steps"][2]["result"]["stdout"], "replicas: 2\nbecause\n",
        "{result}"
    );
    let files = &result["events"]["file_operations"];
    for (kind, path, decision, rule) in [
        (
            "file_write",
            "/workspace/deploy/app.yml",
            "approve",
            "held-deploy",
        ),
        ("file_write", "/workspace/notes/why.txt", "log", "noted"),
    ] {
        assert!(
            has(files, |f| f["type"] == kind
                && f["path"] == path
                && f["decision"] == decision
                && f["rule"] == rule),
            "{kind} {path}: {result}"
        );
    }

    let data_dir = s.data_dir.clone();
    s.stop().await;
    let decisions: Vec<Value> = audit_tail(&data_dir)
        .into_iter()
        .filter(|r| r["event"] == "policy_decision" && r["execution_id"] == id.as_str())
        .map(|r| r["outcome"].clone())
        .collect();
    for (target, decision) in [
        ("write /workspace/deploy/app.yml", "approve"),
        ("write /workspace/notes/why.txt", "log"),
    ] {
        assert!(
            decisions.iter().any(|d| d["operation"] == "file"
                && d["target"] == target
                && d["decision"] == decision
                && d["policy"] == "jobfence"),
            "{target}: {decisions:?}"
        );
    }
}
