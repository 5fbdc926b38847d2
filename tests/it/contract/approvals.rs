//! Operator approval, agent/operator auth, asynchronous executions, durable state and the audit
//! log, over real HTTP against the real service over the fake runner. `the_readme_walkthrough`
//! makes exactly the calls of README's curl walkthrough.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use scriptgate::config::Config;
use scriptgate::domain::record::ApprovalMode;
use serde_json::{Value, json};

use crate::api::{assert_audit_verifies, call};
use crate::fake::{Answer, FakeRunner};
use crate::harness::{Service, token};

const AGENT: &str = "agent-token-2f9c1e7a5b3d";
const OTHER_AGENT: &str = "agent-token-other-7d1a0c";
const OPERATOR: &str = "operator-token-8e4b6a2c1f";

fn secured(c: &mut Config, mode: ApprovalMode) {
    c.agent_tokens = vec![
        token("research-bot", AGENT),
        token("other-bot", OTHER_AGENT),
    ];
    c.operator_tokens = vec![token("alice", OPERATOR)];
    c.approval = mode;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_readme_walkthrough() {
    let runner = FakeRunner::new().answering("print(6 * 7)", Answer::prints("42\n"));
    let s = Service::fake(runner, |c| secured(c, ApprovalMode::Always)).await;
    // 1. The agent submits.
    let (status, submitted) = call(
        &s,
        "POST",
        "/v1/executions",
        Some(AGENT),
        Some(json!({"script_content": "print(6 * 7)", "script_type": "python", "timeout": 30})),
    )
    .await;
    assert_eq!(status, 202, "{submitted}");
    assert_eq!(submitted["status"], "pending_approval");
    let id = submitted["execution_id"].as_str().expect("id").to_string();
    assert_eq!(submitted["links"]["self"], format!("/v1/executions/{id}"));
    assert_eq!(
        submitted["links"]["approval"],
        format!("/v1/approvals/{id}")
    );
    // 2. The operator lists pending approvals.
    let (status, list) = call(&s, "GET", "/v1/approvals", Some(OPERATOR), None).await;
    assert_eq!(status, 200);
    let pending = &list["pending"][0];
    assert_eq!(pending["execution_id"], id.as_str());
    assert_eq!(pending["agent"], "research-bot");
    assert_eq!(pending["script_content"], "print(6 * 7)");
    assert_eq!(pending["validation"]["valid"], true);
    // 3. The operator approves.
    let (status, decided) = call(
        &s,
        "POST",
        &format!("/v1/approvals/{id}"),
        Some(OPERATOR),
        Some(json!({"decision": "approve", "reason": "looks fine"})),
    )
    .await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["approval"]["decision"], "approve");
    // 4. The agent reads the result (long-poll).
    let (status, result) = call(
        &s,
        "GET",
        &format!("/v1/executions/{id}?wait=30"),
        Some(AGENT),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(result["status"], "completed", "{result}");
    assert_eq!(result["success"], true);
    assert_eq!(result["stdout"], "42\n");
    assert_eq!(result["approval"]["by"], "alice");
    assert_eq!(result["approval"]["reason"], "looks fine");
    assert!(
        result["approval"]["at"]
            .as_str()
            .is_some_and(|t| t.contains('T'))
    );
    // A second decision is a conflict.
    let (status, conflict) = call(
        &s,
        "POST",
        &format!("/v1/approvals/{id}"),
        Some(OPERATOR),
        Some(json!({"decision": "deny", "reason": "too late"})),
    )
    .await;
    assert_eq!(status, 409, "{conflict}");
    assert_eq!(
        conflict,
        json!({"error": {"type": "conflict", "message": "the execution is completed and cannot be decided"}}),
        "the answer README's walkthrough shows"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn tokens_and_roles_are_enforced() {
    let s = Service::fake(FakeRunner::new(), |c| secured(c, ApprovalMode::Never)).await;
    let exec = json!({"script_content": "print(1)", "script_type": "python"});
    let some_id = uuid::Uuid::new_v4();
    type Case<'a> = (&'a str, String, Option<Value>, Option<&'a str>, u16);
    let cases: Vec<Case<'_>> = vec![
        ("POST", "/v1/execute".into(), Some(exec.clone()), None, 401),
        (
            "POST",
            "/v1/execute".into(),
            Some(exec.clone()),
            Some("wrong-token-000000000"),
            401,
        ),
        ("POST", "/v1/validate".into(), Some(exec.clone()), None, 401),
        (
            "POST",
            "/v1/executions".into(),
            Some(exec.clone()),
            None,
            401,
        ),
        ("GET", format!("/v1/executions/{some_id}"), None, None, 401),
        ("GET", "/v1/approvals".into(), None, None, 401),
        ("GET", "/v1/approvals".into(), None, Some(AGENT), 403),
        (
            "POST",
            format!("/v1/approvals/{some_id}"),
            Some(json!({"decision": "approve"})),
            Some(AGENT),
            403,
        ),
        (
            "POST",
            "/v1/execute".into(),
            Some(exec.clone()),
            Some(OPERATOR),
            403,
        ),
        ("GET", "/v1/approvals".into(), None, Some(OPERATOR), 200),
        (
            "POST",
            "/v1/validate".into(),
            Some(exec.clone()),
            Some(AGENT),
            200,
        ),
        (
            "POST",
            "/v1/execute".into(),
            Some(exec.clone()),
            Some(AGENT),
            200,
        ),
    ];
    for (method, path, body, bearer, want) in cases {
        let (status, r) = call(&s, method, &path, bearer, body).await;
        assert_eq!(status, want, "{method} {path} with {bearer:?}: {r}");
        if want == 401 {
            assert_eq!(r["error"]["type"], "unauthorized");
        }
        if want == 403 {
            assert_eq!(r["error"]["type"], "forbidden");
        }
    }
    let response = s
        .client
        .post(format!("{}/v1/execute", s.url))
        .json(&exec)
        .send()
        .await
        .expect("request");
    assert_eq!(
        response
            .headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok()),
        Some("Bearer")
    );
    // Health endpoints stay open for orchestrators.
    assert_eq!(call(&s, "GET", "/healthz", None, None).await.0, 200);
    // An agent cannot read another agent's execution; an operator can.
    let (_, mine) = call(&s, "POST", "/v1/execute", Some(AGENT), Some(exec)).await;
    let id = mine["execution_id"].as_str().expect("id");
    assert_eq!(
        call(
            &s,
            "GET",
            &format!("/v1/executions/{id}"),
            Some(OTHER_AGENT),
            None
        )
        .await
        .0,
        404
    );
    assert_eq!(
        call(
            &s,
            "GET",
            &format!("/v1/executions/{id}"),
            Some(AGENT),
            None
        )
        .await
        .0,
        200
    );
    assert_eq!(
        call(
            &s,
            "GET",
            &format!("/v1/executions/{id}"),
            Some(OPERATOR),
            None
        )
        .await
        .0,
        200
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn execute_answers_202_when_approval_is_required_and_denials_are_recorded() {
    let s = Service::fake(FakeRunner::new(), |c| secured(c, ApprovalMode::Always)).await;
    let (status, accepted) = call(
        &s,
        "POST",
        "/v1/execute",
        Some(AGENT),
        Some(json!({"script_content": "echo hi", "script_type": "bash"})),
    )
    .await;
    assert_eq!(status, 202, "{accepted}");
    assert_eq!(accepted["status"], "pending_approval");
    let id = accepted["execution_id"].as_str().expect("id");
    let (status, denied) = call(
        &s,
        "POST",
        &format!("/v1/approvals/{id}"),
        Some(OPERATOR),
        Some(json!({"decision": "deny", "reason": "not today"})),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(denied["status"], "denied");
    assert_eq!(denied["error"]["type"], "denied");
    assert!(
        denied["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("not today")
    );
    let (_, read) = call(
        &s,
        "GET",
        &format!("/v1/executions/{id}"),
        Some(AGENT),
        None,
    )
    .await;
    assert_eq!(read["status"], "denied");
    assert!(read["exit_code"].is_null());
    // Validation failures never wait for an operator.
    let (status, rejected) = call(
        &s,
        "POST",
        "/v1/execute",
        Some(AGENT),
        Some(json!({"script_content": "import os\nos.system(input())", "script_type": "python"})),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(rejected["error"]["type"], "validation_failed");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn on_warn_holds_only_scripts_with_warnings() {
    let s = Service::fake(FakeRunner::new(), |c| secured(c, ApprovalMode::OnWarn)).await;
    let (status, clean) = call(
        &s,
        "POST",
        "/v1/execute",
        Some(AGENT),
        Some(json!({"script_content": "print('ok')", "script_type": "python"})),
    )
    .await;
    assert_eq!(
        (status, clean["status"].as_str()),
        (200, Some("completed")),
        "{clean}"
    );
    let (status, held) = call(
        &s,
        "POST",
        "/v1/execute",
        Some(AGENT),
        Some(json!({"script_content": "import os\npid = os.fork()\n", "script_type": "python"})),
    )
    .await;
    assert_eq!(status, 202, "{held}");
    assert_eq!(held["status"], "pending_approval");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn undecided_approvals_expire() {
    let s = Service::fake(FakeRunner::new(), |c| {
        secured(c, ApprovalMode::Always);
        c.approval_timeout_secs = 1;
    })
    .await;
    let (_, accepted) = call(
        &s,
        "POST",
        "/v1/executions",
        Some(AGENT),
        Some(json!({"script_content": "echo hi", "script_type": "bash"})),
    )
    .await;
    let id = accepted["execution_id"].as_str().expect("id");
    // The long-poll wakes when the execution expires (a bound on a hang: it would otherwise
    // answer at its 60 s deadline).
    let (_, read) = tokio::time::timeout(
        Duration::from_secs(30),
        call(
            &s,
            "GET",
            &format!("/v1/executions/{id}?wait=60"),
            Some(AGENT),
            None,
        ),
    )
    .await
    .expect("the long-poll wakes at the expiry");
    assert_eq!(read["status"], "expired", "{read}");
    assert_eq!(read["error"]["type"], "approval_timeout");
    let (status, _) = call(
        &s,
        "POST",
        &format!("/v1/approvals/{id}"),
        Some(OPERATOR),
        Some(json!({"decision": "approve"})),
    )
    .await;
    assert_eq!(status, 409, "an expired execution cannot be approved");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pending_approval_survives_a_restart() {
    let data_dir = tempfile::tempdir().expect("dir").keep();
    let instance = crate::harness::instance();
    let configure = |c: &mut Config| {
        secured(c, ApprovalMode::Always);
        c.data_dir = Some(data_dir.clone());
        c.sandbox.instance = instance.clone();
    };
    let first = Service::fake(FakeRunner::new(), configure).await;
    let (_, accepted) = call(
        &first,
        "POST",
        "/v1/executions",
        Some(AGENT),
        Some(json!({"script_content": "echo survived", "script_type": "bash"})),
    )
    .await;
    let id = accepted["execution_id"].as_str().expect("id").to_string();
    first.stop().await;
    let answer = Answer::prints("survived\n");
    let second = Service::fake(
        FakeRunner::new().answering("echo survived", answer),
        configure,
    )
    .await;
    let (_, list) = call(&second, "GET", "/v1/approvals", Some(OPERATOR), None).await;
    assert_eq!(list["pending"][0]["execution_id"], id.as_str(), "{list}");
    let (status, _) = call(
        &second,
        "POST",
        &format!("/v1/approvals/{id}"),
        Some(OPERATOR),
        Some(json!({"decision": "approve", "reason": "after restart"})),
    )
    .await;
    assert_eq!(status, 200);
    let (_, result) = call(
        &second,
        "GET",
        &format!("/v1/executions/{id}?wait=30"),
        Some(AGENT),
        None,
    )
    .await;
    assert_eq!(result["stdout"], "survived\n", "{result}");
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_audit_log_chains_and_tampering_is_detected() {
    let s = Service::fake(FakeRunner::new(), |c| secured(c, ApprovalMode::Never)).await;
    for script in [
        "print(1)",
        "import os\nos.system(input())",
        "print('AKIA' + 'IOSFODNN7EXAMPL2')",
    ] {
        call(
            &s,
            "POST",
            "/v1/execute",
            Some(AGENT),
            Some(json!({"script_content": script, "script_type": "python"})),
        )
        .await;
    }
    let secret = format!("ghp_{}", "aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5");
    call(
        &s,
        "POST",
        "/v1/execute",
        Some(AGENT),
        Some(json!({"script_content": format!("token = '{secret}'"), "script_type": "python"})),
    )
    .await;
    let data_dir = s.data_dir.clone();
    s.stop().await;
    let scriptgate = env!("CARGO_BIN_EXE_scriptgate");
    let dir = data_dir.display().to_string();
    assert_audit_verifies(&data_dir);
    let tail = std::process::Command::new(scriptgate)
        .args(["audit", "tail", "-n", "100", "--data-dir", &dir])
        .output()
        .expect("tail");
    let records: Vec<Value> = String::from_utf8_lossy(&tail.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    let events: Vec<&str> = records.iter().filter_map(|r| r["event"].as_str()).collect();
    for e in ["request", "validation", "run_started", "run_finished"] {
        assert!(events.contains(&e), "{e} in {events:?}");
    }
    assert!(
        records
            .iter()
            .all(|r| r["actor"].is_string() && r["hash"].is_string())
    );
    assert!(records.iter().any(|r| r["actor"] == "research-bot"));
    let all = String::from_utf8_lossy(&tail.stdout);
    assert!(!all.contains(&secret), "secrets are never stored in clear");
    for file in ["scriptgate.db", "scriptgate.db-wal"] {
        let bytes = std::fs::read(data_dir.join(file)).unwrap_or_default();
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "the secret is in {file}"
        );
    }
    // Tamper with one record's outcome.
    let conn = rusqlite::Connection::open(data_dir.join("scriptgate.db")).expect("db");
    conn.execute(
        "UPDATE audit SET outcome = '{\"valid\":true}' WHERE seq = 3",
        [],
    )
    .expect("tamper");
    drop(conn);
    let verify = std::process::Command::new(scriptgate)
        .args(["audit", "verify", "--data-dir", &dir])
        .output()
        .expect("verify");
    let out = String::from_utf8_lossy(&verify.stdout);
    assert_eq!(verify.status.code(), Some(1), "{out}");
    assert!(out.contains("broken at record 3"), "{out}");
}

/// The ids of the "execution finished" log lines emitted on this thread.
#[derive(Debug, Clone, Default)]
struct FinishedLines(Arc<Mutex<Vec<String>>>);

impl FinishedLines {
    fn of(&self, id: &str) -> usize {
        self.0
            .lock()
            .expect("lines lock")
            .iter()
            .filter(|i| *i == id)
            .count()
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for FinishedLines {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        #[derive(Default)]
        struct Fields {
            message: String,
            execution_id: String,
        }
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                match field.name() {
                    "message" => self.message = format!("{value:?}"),
                    "execution_id" => self.execution_id = format!("{value:?}"),
                    _ => {}
                }
            }
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        if fields.message == "execution finished" {
            self.0.lock().expect("lines lock").push(fields.execution_id);
        }
    }
}

/// Every way an execution ends logs "execution finished" once for it, and nothing that is not an
/// end does: an approval (pending → queued), a worker taking it (queued → running). The service
/// runs on this test's single thread, so the thread's log subscriber sees all of it.
#[tokio::test]
async fn an_execution_finishes_exactly_once() {
    use tracing_subscriber::layer::SubscriberExt as _;
    let lines = FinishedLines::default();
    let _logs =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(lines.clone()));
    let s = Service::fake(FakeRunner::new(), |c| {
        secured(c, ApprovalMode::OnWarn);
        c.approval_timeout_secs = 5;
    })
    .await;
    let submit = |path: &'static str, script: &'static str| {
        let s = &s;
        async move {
            let body = json!({"script_content": script, "script_type": "python"});
            let (status, r) = call(s, "POST", path, Some(AGENT), Some(body)).await;
            assert!(status == 200 || status == 202, "{status}: {r}");
            r["execution_id"].as_str().expect("id").to_string()
        }
    };
    let read = |id: String| {
        let s = &s;
        async move {
            let path = format!("/v1/executions/{id}?wait=30");
            call(s, "GET", &path, Some(AGENT), None).await.1
        }
    };
    let ran = submit("/v1/execute", "print(1)").await;
    let rejected = submit("/v1/execute", "import os\nos.system(input())\n").await;
    let queued = submit("/v1/executions", "print(2)").await;
    assert_eq!(read(queued.clone()).await["status"], "completed");
    // `os.fork` warns: held for an operator under `on_warn`.
    let approved = submit("/v1/execute", "import os\npid = os.fork()  # BLOCK\n").await;
    let denied = submit("/v1/execute", "import os\npid = os.fork()\n").await;
    let expired = submit("/v1/executions", "import os\npid = os.fork()  # EXIT 1\n").await;
    let decide = |id: String, decision: &'static str| {
        let s = &s;
        async move {
            let path = format!("/v1/approvals/{id}");
            let body = json!({"decision": decision});
            call(s, "POST", &path, Some(OPERATOR), Some(body)).await
        }
    };
    let (status, r) = decide(approved.clone(), "approve").await;
    assert_eq!((status, r["status"].as_str()), (200, Some("queued")), "{r}");
    // Approved and taken by a worker, it is queued, then running: neither is an end.
    while s.runner().ran().len() < 3 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(lines.of(&approved), 0, "an approval is not an end");
    s.runner().release.notify_one();
    assert_eq!(read(approved.clone()).await["status"], "completed");
    assert_eq!(decide(denied.clone(), "deny").await.0, 200);
    assert_eq!(read(expired.clone()).await["status"], "expired");
    for id in [&ran, &rejected, &queued, &approved, &denied, &expired] {
        assert_eq!(lines.of(id), 1, "execution {id}");
    }
    s.stop().await;
}

/// Work accepted under one set of rules and resumed by a service with stricter ones (queued when
/// it stopped, or approved after the restart) is validated again before it runs; work that still
/// passes runs.
#[tokio::test(flavor = "multi_thread")]
async fn resumed_work_is_validated_again_under_the_current_rules() {
    let data_dir = tempfile::tempdir().expect("dir").keep();
    let lenient = |c: &mut Config| {
        secured(c, ApprovalMode::OnWarn);
        c.data_dir = Some(data_dir.clone());
    };
    // The engine is away: accepted work stays queued until the service stops.
    let first = Service::fake(FakeRunner::new().down(), lenient).await;
    let long = "print('a script longer than the new limit')";
    let submit = |s: &Service, path: &'static str, script: &'static str| {
        let body = json!({"script_content": script, "script_type": "python"});
        let s = s
            .client
            .post(format!("{}{path}", s.url))
            .bearer_auth(AGENT)
            .json(&body);
        async move {
            let r: Value = s.send().await.expect("request").json().await.expect("JSON");
            (
                r["status"].as_str().unwrap_or("").to_string(),
                r["execution_id"].as_str().expect("id").to_string(),
            )
        }
    };
    let (status, queued_long) = submit(&first, "/v1/executions", long).await;
    assert_eq!(status, "queued");
    let (_, queued_short) = submit(&first, "/v1/executions", "print(1)").await;
    let (status, held) = submit(
        &first,
        "/v1/executions",
        "import os\npid = os.fork()  # approved later",
    )
    .await;
    assert_eq!(status, "pending_approval");
    first.stop().await;

    let second = Service::fake(FakeRunner::new(), |c| {
        lenient(c);
        c.validation.max_chars = 30;
    })
    .await;
    let (status, r) = call(
        &second,
        "POST",
        &format!("/v1/approvals/{held}"),
        Some(OPERATOR),
        Some(json!({"decision": "approve"})),
    )
    .await;
    assert_eq!((status, r["status"].as_str()), (200, Some("queued")), "{r}");
    for id in [&queued_long, &held] {
        let (_, r) = call(
            &second,
            "GET",
            &format!("/v1/executions/{id}?wait=30"),
            Some(AGENT),
            None,
        )
        .await;
        assert_eq!(r["status"], "completed", "{r}");
        assert_eq!(r["error"]["type"], "validation_failed", "{r}");
        assert_eq!(r["validation"]["layer"], "size", "{r}");
    }
    let (_, r) = call(
        &second,
        "GET",
        &format!("/v1/executions/{queued_short}?wait=30"),
        Some(AGENT),
        None,
    )
    .await;
    assert_eq!(
        (r["status"].as_str(), r["success"].as_bool()),
        (Some("completed"), Some(true)),
        "{r}"
    );
    assert_eq!(
        second.runner().ran(),
        vec!["print(1)".to_string()],
        "only the script that still passes ran"
    );
    second.stop().await;
}
