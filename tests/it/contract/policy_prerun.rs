//! A run's policy before the run, over HTTP: the commands validation finds in a script (nested
//! ones too) against `command_rules`, and the findings `validation_rules` raise. `deny` is a 200
//! result with `policy_violation` and nothing runs; `approve` holds the execution in
//! `/v1/approvals` with the rule's message; `log` runs and is audited. And the host-side file
//! APIs: the files a script or a job moves in and out, against `file_rules` (403).

use serde_json::{Value, json};

use crate::api::{audit_tail, get_json, pending_entry};
use crate::fake::{Answer, FakeRunner};
use crate::harness::{self, Service};

/// `curl` waits for an operator, `rm` is logged, `pip install` is denied.
const GATE: &str = r#"
version: 1
name: gate
file_rules:
  - {name: no-secrets-in, paths: ["/workspace/secrets/**"], operations: [create, write], decision: deny, message: "{operation} of {path}: secrets stay out"}
  - {name: no-keys-out, paths: ["**/*.key"], operations: [read], decision: deny}
  - {name: all, paths: ["/**"], operations: ["*"], decision: allow}
command_rules:
  - {name: no-installs, commands: [pip, "pip3*"], args_pattern: ["install{, *}"], decision: deny, message: "{command} {args}: no installs here"}
  - {name: fetch-needs-an-operator, commands: [curl], decision: approve, message: "{command} {args} fetches from the network"}
  - {name: removals-are-noted, commands: [rm], decision: log}
  - {name: anything-else, commands: ["*"], decision: allow}
network_rules:
  - {name: none, decision: deny}
"#;

/// A service whose sandbox cannot enforce a policy (as gVisor cannot): a run that passes the
/// pre-run checks reaches it under its policy and fails closed, so "nothing ran unenforced" is
/// visible in every test here.
async fn service(runner: FakeRunner) -> Service {
    Service::setup()
        .policy("gate", GATE)
        .config(harness::unenforced_by_default)
        .fake(runner.without_enforcement())
        .await
}

fn bash(text: &str, policy: &str) -> Value {
    json!({"script_content": text, "script_type": "bash", "policy": policy})
}

#[tokio::test(flavor = "multi_thread")]
async fn a_denied_command_nested_in_a_runner_refuses_the_run_with_the_rule_and_its_message() {
    let s = service(FakeRunner::new()).await;
    let script = "echo start\nls /tmp | xargs sh -c 'pip install requests'\n";
    for path in ["/v1/execute", "/v1/executions"] {
        let (status, mut out) = s.post(path, &bash(script, "gate")).await;
        if path == "/v1/executions" {
            assert_eq!((status, out["status"].clone()), (202, json!("completed")));
            let id = out["execution_id"].as_str().expect("id").to_string();
            out = get_json(&s, &format!("/v1/executions/{id}")).await;
        } else {
            assert_eq!(status, 200, "{out}");
        }
        assert_eq!(out["status"], "completed", "{out}");
        assert_eq!(out["error"]["type"], "policy_violation", "{out}");
        assert_eq!(
            out["error"]["message"],
            "the policy `gate` denies the command `pip install requests` (line 2): rule \
             `no-installs`: pip install requests: no installs here"
        );
        assert_eq!(out["validation_failed"], false, "validation itself passed");
        assert_eq!(
            out["policy_checks"],
            json!([{"kind": "command", "target": "pip install requests", "decision": "deny",
                "rule": "no-installs", "message": "pip install requests: no installs here",
                "line": 2, "column": 24}])
        );
    }
    // The built-in `strict` lists its programs: one it does not list is denied by its last rule,
    // also behind `find -exec` and inside a command substitution.
    for script in ["find /tmp -exec shred {} \\;\n", "echo \"$(hostid)\"\n"] {
        let (status, out) = s.post("/v1/execute", &bash(script, "strict")).await;
        assert_eq!(
            (status, out["error"]["type"].clone()),
            (200, json!("policy_violation")),
            "{script}: {out}"
        );
        assert!(
            out["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("rule `unlisted-programs`")
                    && m.contains("is not on the strict policy's list of programs")),
            "{out}"
        );
    }
    assert!(s.runner().ran().is_empty(), "nothing ran");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approve_command_holds_the_run_with_its_message_and_log_is_audited() {
    let script = "rm -f /tmp/old\ncurl -s https://example.com/data\n";
    let s = service(FakeRunner::new()).await;
    let (status, accepted) = s.post("/v1/execute", &bash(script, "gate")).await;
    assert_eq!(status, 202, "{accepted}");
    assert_eq!(accepted["status"], "pending_approval");
    let id = accepted["execution_id"].as_str().expect("id").to_string();
    let pending = pending_entry(&s, &id).await;
    assert_eq!(
        pending["policy_checks"],
        json!([
            {"kind": "command", "target": "rm -f /tmp/old", "decision": "log",
             "rule": "removals-are-noted", "message": null, "line": 1, "column": 1},
            {"kind": "command", "target": "curl -s https://example.com/data", "decision": "approve",
             "rule": "fetch-needs-an-operator",
             "message": "curl -s https://example.com/data fetches from the network",
             "line": 2, "column": 1,
             "argv": ["curl", "-s", "https://example.com/data"]},
        ]),
        "{pending}"
    );
    let (status, denied) = s
        .post(
            &format!("/v1/approvals/{id}"),
            &json!({"decision": "deny", "reason": "no fetching"}),
        )
        .await;
    assert_eq!(status, 200, "{denied}");
    assert_eq!(denied["status"], "denied");

    // Approved, it is not held again when a worker takes it: it goes to the sandbox (which here
    // cannot enforce, so the run fails closed instead of running unenforced).
    let (_, accepted) = s.post("/v1/execute", &bash(script, "gate")).await;
    let id2 = accepted["execution_id"].as_str().expect("id").to_string();
    let (status, approved) = s
        .post(
            &format!("/v1/approvals/{id2}"),
            &json!({"decision": "approve"}),
        )
        .await;
    assert_eq!(status, 200, "{approved}");
    let done = get_json(&s, &format!("/v1/executions/{id2}?wait=30")).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["type"], "internal_error", "{done}");
    assert_eq!(done["policy_checks"].as_array().map(Vec::len), Some(2));

    let data_dir = s.data_dir.clone();
    s.stop().await;
    let entries = audit_tail(&data_dir);
    let of = |exec: &str| -> Vec<Value> {
        entries
            .iter()
            .filter(|e| e["execution_id"] == exec && e["event"] == "policy_decision")
            .map(|e| e["outcome"].clone())
            .collect()
    };
    assert_eq!(
        of(&id),
        [
            json!({"policy": "gate", "operation": "command", "target": "rm -f /tmp/old",
                "decision": "log", "rule": "removals-are-noted", "line": 1}),
            json!({"policy": "gate", "operation": "command",
                "target": "curl -s https://example.com/data", "decision": "approve",
                "rule": "fetch-needs-an-operator", "line": 2}),
        ]
    );
    let requested = entries
        .iter()
        .find(|e| e["execution_id"] == id.as_str() && e["event"] == "approval_requested")
        .expect("an approval request");
    assert_eq!(
        requested["outcome"],
        json!({"mode": "never", "policy": "gate"})
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_script_without_a_policy_is_not_checked_before_the_run() {
    let runner = FakeRunner::new().answering("rm -f /tmp/x\n", Answer::prints(""));
    let s = service(runner).await;
    // Without a policy nothing is decided before the run (the fake runs it).
    let (status, out) = s
        .post(
            "/v1/execute",
            &json!({"script_content": "rm -f /tmp/x\n", "script_type": "bash"}),
        )
        .await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["policy_checks"], json!([]));
    assert_eq!(out["success"], true, "{out}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn validation_rules_raise_findings_to_approve_or_deny() {
    let s = Service::fake(FakeRunner::new(), |_| {}).await;
    let python =
        |text: &str| json!({"script_content": text, "script_type": "python", "policy": "strict"});
    // `python-fork` is a warning; `strict` raises it to approve: held, with its message.
    let (status, held) = s
        .post("/v1/execute", &python("import os\npid = os.fork()\n"))
        .await;
    assert_eq!(status, 202, "{held}");
    let list = get_json(&s, "/v1/approvals").await;
    let checks = &list["pending"][0]["policy_checks"];
    assert_eq!(
        checks,
        &json!([{"kind": "finding", "target": "python-fork", "decision": "approve",
            "rule": "dynamic-code-needs-an-operator",
            "message": "python-fork: held for an operator under the strict policy",
            "line": 2, "column": 7}]),
        "{list}"
    );
    // Without the policy the same warning neither holds nor blocks.
    let (status, free) = s
        .post(
            "/v1/execute",
            &json!({"script_content": "import os\npid = os.fork()\n", "script_type": "python"}),
        )
        .await;
    assert_eq!(status, 200, "{free}");
    assert_eq!(free["validation_failed"], false, "{free}");
    // `python-credential-read` is a warning; `strict` raises it to deny: the verdict blocks.
    let (status, out) = s
        .post(
            "/v1/execute",
            &python("print(open('/root/.aws/credentials').read())\n"),
        )
        .await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["error"]["type"], "policy_violation", "{out}");
    assert_eq!(out["validation_failed"], true, "{out}");
    let finding = out["validation"]["findings"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["rule"] == "python-credential-read"))
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(finding["severity"], "block", "{out}");
    assert!(
        out["error"]["message"].as_str().is_some_and(|m| m.contains(
            "rule `no-credential-reads-or-cover-ups`: python-credential-read: refused under the strict policy"
        )),
        "{out}"
    );
    assert_eq!(
        s.runner().ran(),
        ["import os\npid = os.fork()\n"],
        "only the run without a policy ran"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn files_in_and_out_are_decided_by_file_rules_before_anything_is_recorded() {
    let s = service(FakeRunner::new()).await;
    let mut script = json!({"script_content": "print(1)", "script_type": "python", "policy": "gate",
        "files": [{"path": "notes.txt", "content": "x"}, {"path": "secrets/token", "content": "x"}]});
    let (status, out) = s.post("/v1/execute", &script).await;
    assert_eq!(status, 403, "{out}");
    assert_eq!(out["error"]["type"], "policy_violation");
    assert_eq!(
        out["error"]["message"],
        "the policy `gate` denies create of /workspace/secrets/token: rule `no-secrets-in`: \
         create of /workspace/secrets/token: secrets stay out"
    );
    script["files"] = json!([]);
    script["artifacts"] = json!(["out/*.key"]);
    let (status, out) = s.post("/v1/executions", &script).await;
    assert_eq!(status, 403, "{out}");
    assert!(
        out["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("read of /workspace/out/*.key: rule `no-keys-out`")),
        "{out}"
    );
    // Allowed files: the run goes to the sandbox under its policy (the fake cannot enforce one,
    // so nothing runs: fail closed).
    script["artifacts"] = json!(["out/*.txt"]);
    let (status, out) = s.post("/v1/execute", &script).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["policy"], "gate", "{out}");
    assert!(
        out["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("cannot enforce a run-time policy")),
        "{out}"
    );

    let job = |path: &str, policy: Option<&str>| {
        let mut job = json!({"protocol_version": "1.0", "steps": [
            {"id": "w", "type": "write_file", "arguments": {"path": path, "content": "x"}},
            {"id": "r", "type": "read_file", "arguments": {"path": "a/b.key"}}]});
        if let Some(p) = policy {
            job["policy"] = json!(p);
        }
        job
    };
    let (status, out) = s.post("/v1/jobs", &job("secrets/x", Some("gate"))).await;
    assert_eq!(status, 403, "{out}");
    assert_eq!(out["error"]["type"], "policy_violation");
    assert!(
        out["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with(
                "the policy `gate` denies create of /workspace/secrets/x: rule `no-secrets-in`"
            )),
        "{out}"
    );
    let (status, out) = s.post("/v1/jobs", &job("notes.txt", Some("gate"))).await;
    assert_eq!(status, 403, "{out}");
    assert!(
        out["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("denies read of /workspace/a/b.key")),
        "{out}"
    );
    // A job whose files pass goes to the sandbox under its policy; the fake cannot enforce one,
    // so nothing runs and the result says why.
    let clean = json!({"protocol_version": "1.0", "policy": "gate", "steps": [
        {"id": "w", "type": "write_file", "arguments": {"path": "notes.txt", "content": "x"}}]});
    let (status, out) = s.post("/v1/jobs", &clean).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["status"], "failure", "{out}");
    assert_eq!(out["policy"], "gate", "{out}");
    assert_eq!(out["steps"][0]["status"], "skipped", "{out}");
    assert!(
        out["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("cannot enforce a run-time policy")),
        "{out}"
    );
    let (status, out) = s.post("/v1/jobs", &job("notes.txt", Some("nope"))).await;
    assert_eq!(status, 400, "{out}");
    assert!(
        out["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no policy `nope`")),
        "{out}"
    );
    assert!(s.runner().ran().is_empty(), "nothing ran");
    let list = get_json(&s, "/v1/approvals").await;
    assert_eq!(list["pending"], json!([]), "nothing was recorded");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn approved_work_is_decided_again_under_the_policy_of_the_service_that_runs_it() {
    let data_dir = tempfile::tempdir().expect("data dir").keep();
    let policies = tempfile::tempdir().expect("policies dir").keep();
    std::fs::write(policies.join("gate.yml"), GATE).expect("policy file");
    let config = |c: &mut scriptgate::config::Config| {
        c.data_dir = Some(data_dir.clone());
        c.policy.policies_dir = Some(policies.clone());
    };
    let first = Service::fake(FakeRunner::new(), config).await;
    let (status, held) = first
        .post(
            "/v1/execute",
            &bash("curl -s https://example.com\n", "gate"),
        )
        .await;
    assert_eq!(status, 202, "{held}");
    let id = held["execution_id"].as_str().expect("id").to_string();
    first.stop().await;
    // The deployment now denies what it held before.
    let stricter = GATE.replace(
        "name: fetch-needs-an-operator, commands: [curl], decision: approve",
        "name: fetch-needs-an-operator, commands: [curl], decision: deny",
    );
    assert_ne!(stricter, GATE);
    std::fs::write(policies.join("gate.yml"), stricter).expect("policy file");
    let second = Service::fake(FakeRunner::new(), config).await;
    let (status, approved) = second
        .post(
            &format!("/v1/approvals/{id}"),
            &json!({"decision": "approve"}),
        )
        .await;
    assert_eq!((status, approved["status"].clone()), (200, json!("queued")));
    let done = get_json(&second, &format!("/v1/executions/{id}?wait=30")).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["error"]["type"], "policy_violation", "{done}");
    assert_eq!(done["policy_checks"][0]["decision"], "deny", "{done}");
    assert!(second.runner().ran().is_empty(), "nothing ran");
    second.stop().await;
}

/// Files the service moves that an operator decides on (`deploy/`), or that are only noted.
const FILES: &str = r#"
version: 1
name: files
file_rules:
  - {name: deploys-need-an-operator, paths: ["/workspace/deploy/**"], operations: [create, write], decision: approve, message: "{operation} of {path} changes a deployment"}
  - {name: notes-are-noted, paths: ["/workspace/notes/**"], operations: ["*"], decision: log}
  - {name: all, paths: ["/**"], operations: ["*"], decision: allow}
command_rules:
  - {name: anything, commands: ["*"], decision: allow}
"#;

#[tokio::test(flavor = "multi_thread")]
async fn approve_on_a_host_file_holds_the_run_and_log_is_audited_and_listed() {
    let dir = tempfile::tempdir().expect("policies dir").keep();
    std::fs::write(dir.join("files.yml"), FILES).expect("policy file");
    let s = Service::fake(FakeRunner::new().without_enforcement(), move |c| {
        c.policy.policies_dir = Some(dir)
    })
    .await;
    let job = json!({"protocol_version": "1.0", "policy": "files", "steps": [
        {"id": "n", "type": "read_file", "arguments": {"path": "notes/todo.txt"}},
        {"id": "w", "type": "write_file", "arguments": {"path": "deploy/app.yml", "content": "x"}}]});
    let (status, held) = s.post("/v1/jobs", &job).await;
    assert_eq!(status, 202, "{held}");
    assert_eq!(held["status"], "pending_approval", "{held}");
    let id = held["execution_id"].as_str().expect("id").to_string();
    let pending = pending_entry(&s, &id).await;
    assert_eq!(
        pending["policy_checks"],
        json!([
            {"kind": "file", "target": "read /workspace/notes/todo.txt", "decision": "log",
             "rule": "notes-are-noted", "message": null, "line": 0, "column": 0},
            {"kind": "file", "target": "create /workspace/deploy/app.yml", "decision": "approve",
             "rule": "deploys-need-an-operator",
             "message": "create of /workspace/deploy/app.yml changes a deployment",
             "line": 0, "column": 0},
            {"kind": "file", "target": "write /workspace/deploy/app.yml", "decision": "approve",
             "rule": "deploys-need-an-operator",
             "message": "write of /workspace/deploy/app.yml changes a deployment",
             "line": 0, "column": 0},
        ]),
        "{pending}"
    );
    // A script's files and artifacts: the same.
    let script = json!({"script_content": "print(1)", "script_type": "python", "policy": "files",
        "files": [{"path": "deploy/run.sh", "content": "x"}], "artifacts": ["notes/*.md"]});
    let (status, script_held) = s.post("/v1/execute", &script).await;
    assert_eq!(status, 202, "{script_held}");
    assert_eq!(script_held["status"], "pending_approval", "{script_held}");
    // Only logged: it goes on to the sandbox (which here cannot enforce, so it fails closed).
    let logged = json!({"protocol_version": "1.0", "policy": "files", "steps": [
        {"id": "n", "type": "write_file", "arguments": {"path": "notes/a.txt", "content": "x"}}]});
    let (status, out) = s.post("/v1/jobs", &logged).await;
    assert_eq!(status, 200, "{out}");
    let logged_id = out["execution_id"].as_str().expect("id").to_string();
    let done = get_json(&s, &format!("/v1/executions/{logged_id}")).await;
    assert_eq!(
        done["events"]["file_operations"],
        json!([
            {"type": "file_create", "path": "/workspace/notes/a.txt", "bytes": null,
             "decision": "log", "rule": "notes-are-noted"},
            {"type": "file_write", "path": "/workspace/notes/a.txt", "bytes": null,
             "decision": "log", "rule": "notes-are-noted"},
        ]),
        "{done}"
    );
    // Approved, the job goes to the sandbox.
    let (status, approved) = s
        .post(
            &format!("/v1/approvals/{id}"),
            &json!({"decision": "approve"}),
        )
        .await;
    assert_eq!((status, approved["status"].clone()), (200, json!("queued")));
    let done = get_json(&s, &format!("/v1/executions/{id}?wait=30")).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert!(s.runner().ran().is_empty(), "nothing ran unenforced");

    let data_dir = s.data_dir.clone();
    s.stop().await;
    let entries = audit_tail(&data_dir);
    let decisions: Vec<Value> = entries
        .iter()
        .filter(|e| e["execution_id"] == logged_id.as_str() && e["event"] == "policy_decision")
        .map(|e| e["outcome"].clone())
        .collect();
    assert_eq!(
        decisions,
        [
            json!({"policy": "files", "operation": "file", "target": "create /workspace/notes/a.txt",
                "decision": "log", "rule": "notes-are-noted", "line": 0}),
            json!({"policy": "files", "operation": "file", "target": "write /workspace/notes/a.txt",
                "decision": "log", "rule": "notes-are-noted", "line": 0}),
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn os_system_and_os_popen_command_lines_are_decided_before_the_run() {
    let s = service(FakeRunner::new()).await;
    let python =
        |text: &str| json!({"script_content": text, "script_type": "python", "policy": "gate"});
    let (status, out) = s
        .post(
            "/v1/execute",
            &python("import os\nos.system('echo hi && pip install requests')\n"),
        )
        .await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["error"]["type"], "policy_violation", "{out}");
    assert_eq!(
        out["error"]["message"],
        "the policy `gate` denies the command `pip install requests` (line 2): rule \
         `no-installs`: pip install requests: no installs here"
    );
    // An `approve` holds the run for an operator, its decision listed with the pending entry (a
    // constant command line is checked as Bash, not refused for being a command line).
    let (status, held) = s
        .post(
            "/v1/execute",
            &python("import os\nprint(os.popen('curl -s https://example.com').read())\n"),
        )
        .await;
    assert_eq!(status, 202, "{held}");
    assert_eq!(held["status"], "pending_approval", "{held}");
    let id = held["execution_id"].as_str().expect("id").to_string();
    let pending = pending_entry(&s, &id).await;
    assert_eq!(
        pending["policy_checks"],
        json!([{"kind": "command", "target": "curl -s https://example.com", "decision": "approve",
            "rule": "fetch-needs-an-operator",
            "message": "curl -s https://example.com fetches from the network",
            "line": 2, "column": 17, "argv": ["curl", "-s", "https://example.com"]}]),
        "{pending}"
    );
    assert!(s.runner().ran().is_empty(), "nothing ran");
    s.stop().await;
}
