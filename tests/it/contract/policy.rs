//! The `policy` field of execution requests and what results say about it: who may select which
//! policy (403 `policy_not_allowed`), unknown names (`schema_error` naming the valid ones), which
//! runs are enforced (an enforced run carries `events`), a sandbox that cannot enforce (fail
//! closed), and output secret redaction.

use scriptgate::config::Config;
use serde_json::{Value, json};

use crate::api::{call, stored};
use crate::fake::{Answer, FakeRunner};
use crate::harness::{self, Service};

const AGENT: &str = "agent-token-policy-4c2e9a";
const CI: &str = "agent-token-policy-ci-77ab1f";

fn secured(c: &mut Config) {
    harness::two_agents(c, AGENT, CI);
}

async fn post(s: &Service, path: &str, bearer: Option<&str>, body: Value) -> (u16, Value) {
    call(s, "POST", path, bearer, Some(body)).await
}

fn script(text: &str, policy: Option<&str>) -> Value {
    let mut body = json!({"script_content": text, "script_type": "python"});
    if let Some(p) = policy {
        body["policy"] = json!(p);
    }
    body
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_may_select_only_the_policies_it_is_given() {
    let s = Service::fake(FakeRunner::new(), secured).await;
    for path in ["/v1/execute", "/v1/executions"] {
        let (status, body) = post(&s, path, Some(AGENT), script("print(1)", Some("audit"))).await;
        assert_eq!(status, 403, "{path}: {body}");
        assert_eq!(body["error"]["type"], "policy_not_allowed", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("`audit`") && m.contains("it may select: default")),
            "{body}"
        );
    }
    // An unknown name is refused the same way: a token cannot probe for policies.
    let (status, body) = post(
        &s,
        "/v1/execute",
        Some(AGENT),
        script("print(1)", Some("nope")),
    )
    .await;
    assert_eq!(
        (status, body["error"]["type"].clone()),
        (403, json!("policy_not_allowed"))
    );
    // ci-bot's own list.
    let (status, body) = post(
        &s,
        "/v1/execute",
        Some(CI),
        script("print(1)", Some("audit")),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["policy"], "audit");
    assert_eq!(
        body["events"]["processes"][0]["argv"],
        json!(["python3"]),
        "{body}"
    );
    assert_eq!(s.runner().ran(), vec!["print(1)".to_string()]);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn without_authentication_an_unknown_policy_is_a_schema_error_naming_the_valid_ones() {
    let s = Service::fake(FakeRunner::new(), |_| {}).await;
    for path in ["/v1/execute", "/v1/executions"] {
        let (status, body) = post(&s, path, None, script("print(1)", Some("nope"))).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert_eq!(body["error"]["type"], "schema_error");
        assert_eq!(
            body["error"]["message"],
            "policy: no policy `nope` (there are: audit, default, strict)"
        );
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_under_a_policy_with_files_or_artifacts_goes_to_the_sandbox_under_it() {
    let extras = [
        json!({"files": [{"path": "a.txt", "content": "x"}]}),
        json!({"artifacts": ["/workspace/out.txt"]}),
    ];
    let with = |extra: &Value| {
        let mut body = script("print(1)", Some("strict"));
        body.as_object_mut()
            .expect("object")
            .extend(extra.as_object().expect("object").clone());
        body
    };
    // A sandbox that enforces runs it (as a job) under the policy.
    let s = Service::fake(FakeRunner::new(), |_| {}).await;
    for extra in &extras {
        let (status, out) = post(&s, "/v1/execute", None, with(extra)).await;
        assert_eq!(status, 200, "{out}");
        assert_eq!(out["policy"], "strict", "{out}");
        assert_eq!(out["success"], true, "{out}");
    }
    assert_eq!(s.runner().jobs().len(), 2, "both ran");
    s.stop().await;
    // One that cannot (as gVisor cannot) gets it with the policy and runs nothing, the reason in
    // the result.
    let s = Service::fake(
        FakeRunner::new().without_enforcement(),
        harness::unenforced_by_default,
    )
    .await;
    for extra in &extras {
        let (status, out) = post(&s, "/v1/execute", None, with(extra)).await;
        assert_eq!(status, 200, "{out}");
        assert_eq!(out["policy"], "strict", "{out}");
        assert_eq!(out["error"]["type"], "internal_error", "{out}");
        assert!(
            out["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("cannot enforce a run-time policy")),
            "{out}"
        );
    }
    assert!(s.runner().jobs().is_empty(), "nothing ran unenforced");
    // The same workspace without a policy runs.
    let mut body = script("print(1)", None);
    body["files"] = json!([{"path": "a.txt", "content": "x"}]);
    let (status, out) = post(&s, "/v1/execute", None, body).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(s.runner().jobs().len(), 1);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_naming_no_policy_is_not_enforced_unless_its_token_or_the_deployment_says_so() {
    let runner = FakeRunner::new().answering("print(1)", Answer::prints("1\n"));
    let s = Service::fake(runner, |c| {
        secured(c);
        harness::unenforced_by_default(c);
    })
    .await;
    let (status, body) = post(&s, "/v1/execute", Some(AGENT), script("print(1)", None)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["success"].clone(), body["stdout"].clone()),
        (json!(true), json!("1\n"))
    );
    assert!(
        body["policy"].is_null() && body["events"].is_null(),
        "{body}"
    );
    assert_eq!(body["redacted"], false);
    // ci-bot has a default of its own: enforced (the run carries its events).
    let (status, body) = post(&s, "/v1/execute", Some(CI), script("print(1)", None)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["policy"], "strict");
    assert_eq!(body["status"], "completed", "{body}");
    assert_eq!(
        body["events"]["processes"][0]["argv"],
        json!(["python3"]),
        "{body}"
    );
    assert_eq!(s.runner().ran().len(), 2);
    // The stored record says the same.
    let id = body["execution_id"].as_str().expect("id");
    let stored: Value = s
        .client
        .get(format!("{}/v1/executions/{id}", s.url))
        .bearer_auth(CI)
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(stored["policy"], "strict");
    s.stop().await;

    let s = Service::fake(FakeRunner::new(), |c| c.policy.enforce_default = true).await;
    let (_, body) = post(&s, "/v1/execute", None, script("print(2)", None)).await;
    assert_eq!(body["policy"], "default", "{body}");
    assert!(body["events"]["processes"].is_array(), "{body}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn secrets_in_output_are_redacted_unless_configured_off() {
    let token = format!("ghp_{}", "aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5");
    let answer = Answer {
        stdout: format!("the token is {token}\n"),
        stderr: format!("warning: {token} leaked\n"),
        exit_code: 0,
    };
    let runner = FakeRunner::new().answering("print(3)", answer.clone());
    let s = Service::fake(runner, |_| {}).await;
    let (status, body) = post(&s, "/v1/execute", None, script("print(3)", None)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["redacted"], true);
    assert_eq!(body["stdout"], "the token is ghp_***\n");
    assert_eq!(body["stderr"], "warning: ghp_*** leaked\n");
    let id = body["execution_id"].as_str().expect("id");
    let stored = stored(&s, id).await;
    assert_eq!(
        (stored["stdout"].clone(), stored["redacted"].clone()),
        (body["stdout"].clone(), json!(true))
    );
    let data_dir = s.data_dir.clone();
    s.stop().await;
    for file in ["scriptgate.db", "scriptgate.db-wal"] {
        let bytes = std::fs::read(data_dir.join(file)).unwrap_or_default();
        assert!(
            !bytes.windows(token.len()).any(|w| w == token.as_bytes()),
            "the secret is at rest in {file}"
        );
    }

    let runner = FakeRunner::new().answering("print(3)", answer);
    let s = Service::fake(runner, |c| c.execution.redact_output_secrets = false).await;
    let (_, body) = post(&s, "/v1/execute", None, script("print(3)", None)).await;
    assert_eq!(body["redacted"], false);
    assert_eq!(body["stdout"], format!("the token is {token}\n"));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_gets_its_tokens_policy_too_and_never_runs_unenforced() {
    let s = Service::fake(FakeRunner::new(), secured).await;
    let job = json!({"protocol_version": "1.0", "steps": [
        {"id": "l", "type": "list_tree", "arguments": {"path": "/workspace"}}]});
    // ci-bot's default policy applies to its jobs as to its scripts.
    let (status, body) = post(&s, "/v1/jobs", Some(CI), job.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["policy"], "strict", "{body}");
    assert_eq!(body["status"], "success", "{body}");
    assert_eq!(s.runner().jobs().len(), 1);
    // A policy the token may not select is 403 for jobs too.
    let mut named = job.clone();
    named["policy"] = json!("audit");
    let (status, body) = post(&s, "/v1/jobs", Some(AGENT), named).await;
    assert_eq!(
        (status, body["error"]["type"].clone()),
        (403, json!("policy_not_allowed"))
    );
    // Without a policy the job goes to the sandbox as before.
    let (status, body) = post(&s, "/v1/jobs", Some(AGENT), job.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["execution_id"].is_string(), "{body}");
    s.stop().await;

    // A sandbox that cannot enforce it (as gVisor cannot): the job fails, nothing ran.
    let s = Service::fake(FakeRunner::new().without_enforcement(), secured).await;
    let (status, body) = post(&s, "/v1/jobs", Some(CI), job).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["policy"], "strict", "{body}");
    assert_eq!(body["status"], "failure", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("cannot enforce a run-time policy")),
        "{body}"
    );
    assert!(s.runner().jobs().is_empty());
    s.stop().await;
}
