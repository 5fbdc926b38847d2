//! A command an operator approved before the run is not asked again at run time, against the real
//! engine over HTTP: a Bash script whose command an `approve` rule holds waits for an operator
//! before the run; once approved, its `execve` of exactly that command line runs (reported as
//! `log`, rule `approved-before-run`) while another argument list of the same program, only known
//! at run time, is still held inside the run. Both sandbox calls carry it: a plain script run and
//! a script run with `files` (the job path).
//!
//! Runs the image under test (`RUNNER_IMAGE_UNDER_TEST`), whose supervisor enforces policies.

use std::time::Duration;

use scriptgate::config::Config;
use serde_json::{Value, json};

use crate::api::{get, has, pending_entry};
use crate::harness::{self, Service};

/// `uname` waits for an operator; everything else is allowed.
const ASKFIRST: &str = r#"
version: 1
name: askfirst
file_rules:
  - {name: everything, paths: ["/**"], operations: ["*"], decision: allow}
command_rules:
  - {name: ask-uname, commands: [uname], decision: approve, message: "{command} {args}?"}
  - {name: ask-python, commands: [python3, python3.11], decision: approve}
  - {name: any-program, commands: ["*"], decision: allow}
network_rules:
  - {name: no-network, decision: deny}
"#;

/// `uname -s` is known before the run; the second `uname`'s argument only at run time.
const SCRIPT: &str = "uname -s\nuname \"$(tr s r <<< -s)\" || echo second refused\n";

fn policies(config: &mut Config) {
    let dir = tempfile::tempdir().expect("policies dir").keep();
    std::fs::write(dir.join("askfirst.yml"), ASKFIRST).expect("policy file");
    config.policy.policies_dir = Some(dir);
    config.sandbox.python_image = harness::runner_image();
    config.sandbox.bash_image = harness::runner_image();
}

/// The first operation held inside a run, once `/v1/approvals` lists it.
async fn first_held_operation(s: &Service) -> Value {
    for _ in 0..600 {
        let (_, list) = get(s, "/v1/approvals").await;
        if let Some(op) = list["operations"].as_array().and_then(|o| o.first()) {
            return op.clone();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("nothing was held at run time");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_approved_before_the_run_is_not_held_again_another_argv_still_is() {
    approved_then_run(
        json!({"script_type": "bash", "timeout": 60, "policy": "askfirst",
        "script_content": SCRIPT}),
    )
    .await;
}

/// The same through the job path (a script run with `files`).
#[tokio::test(flavor = "multi_thread")]
async fn a_script_with_files_approved_before_the_run_is_not_held_again() {
    approved_then_run(
        json!({"script_type": "bash", "timeout": 60, "policy": "askfirst",
        "script_content": SCRIPT, "files": [{"path": "note.txt", "content": "x"}]}),
    )
    .await;
}

/// A name approved as the script wrote it (`python3`) runs the file its symlink leads to
/// (`python3.11`, which the rule also names) without a second hold.
#[tokio::test(flavor = "multi_thread")]
async fn an_approved_name_reached_through_a_symlink_is_not_held_again() {
    let s = Service::start(policies).await;
    let body = json!({"script_type": "bash", "timeout": 20, "policy": "askfirst",
        "script_content": "python3 -c 'print(6 * 7)'\n"});
    let (status, held) = s.post("/v1/execute", &body).await;
    assert_eq!(status, 202, "{held}");
    let id = held["execution_id"].as_str().expect("id").to_string();
    let (status, approved) = s
        .post(
            &format!("/v1/approvals/{id}"),
            &json!({"decision": "approve"}),
        )
        .await;
    assert_eq!((status, approved["status"].clone()), (200, json!("queued")));
    // Held again inside the run, it would wait until the run's deadline and fail.
    let (status, done) = get(&s, &format!("/v1/executions/{id}?wait=60")).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["stdout"], "42\n", "{done}");
    assert!(
        has(&done["events"]["processes"], |p| p["argv"]
            == json!(["python3", "-c", "print(6 * 7)"])
            && p["decision"] == "log"
            && p["rule"] == "approved-before-run"),
        "{done}"
    );
    s.stop().await;
}

/// Submits `body` (running [`SCRIPT`]), approves it before the run, refuses the second `uname`
/// held inside the run, and checks what the result shows.
async fn approved_then_run(body: Value) {
    let s = Service::start(policies).await;
    let (status, held) = s.post("/v1/execute", &body).await;
    assert_eq!(status, 202, "{held}");
    assert_eq!(held["status"], "pending_approval", "{held}");
    let id = held["execution_id"].as_str().expect("id").to_string();
    let pending = pending_entry(&s, &id).await;
    let checks = &pending["policy_checks"];
    assert!(
        has(checks, |c| c["target"] == "uname -s"
            && c["decision"] == "approve"
            && c["argv"] == json!(["uname", "-s"])),
        "{pending}"
    );
    // The second one is held too, but its argument is not known before the run.
    assert!(
        has(checks, |c| c["decision"] == "approve"
            && c["target"] != "uname -s"
            && c.get("argv").is_none()),
        "{pending}"
    );

    let (status, approved) = s
        .post(
            &format!("/v1/approvals/{id}"),
            &json!({"decision": "approve"}),
        )
        .await;
    assert_eq!((status, approved["status"].clone()), (200, json!("queued")));

    // Inside the run, the first operation held is the second `uname` (the approved one ran):
    // the operator refuses it.
    let op = first_held_operation(&s).await;
    assert_eq!(op["argv"], json!(["uname", "-r"]), "{op}");
    let approval = op["approval_id"].as_str().expect("approval id");
    let (status, after) = s
        .post(
            &format!("/v1/approvals/{approval}"),
            &json!({"decision": "deny", "reason": "not this one"}),
        )
        .await;
    assert_eq!(status, 200, "{after}");

    let (status, done) = get(&s, &format!("/v1/executions/{id}?wait=60")).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["stdout"], "Linux\nsecond refused\n", "{done}");
    let processes = &done["events"]["processes"];
    assert!(
        has(processes, |p| p["argv"] == json!(["uname", "-s"])
            && p["decision"] == "log"
            && p["rule"] == "approved-before-run"),
        "{done}"
    );
    assert!(
        has(processes, |p| p["argv"] == json!(["uname", "-r"])
            && p["decision"] == "approve"
            && p["rule"] == "ask-uname"),
        "{done}"
    );
    assert!(
        has(&done["events"]["blocked_operations"], |b| b["errno"] == 13),
        "{done}"
    );
    let (_, list) = get(&s, "/v1/approvals").await;
    assert_eq!(list["operations"], json!([]), "{list}");
    s.stop().await;
}
