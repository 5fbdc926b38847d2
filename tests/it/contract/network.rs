//! The `network` field of execution, job and session requests: malformed names and ports are `schema_error`s,
//! anything wider than the run's policy is 403 `network_not_allowed`, and a run whose sandbox
//! has no egress proxy fails at once with `network_unavailable` (never runs without it, never
//! hangs).

use serde_json::{Value, json};

use crate::fake::FakeRunner;
use crate::harness::Service;

/// The deployment default for these tests: two names on 443, nothing else.
const BOUND: &str = r#"
version: 1
name: netbound
network_rules:
  - {name: pypi, domains: [pypi.org, "*.pythonhosted.org"], ports: [443], decision: allow}
  - {name: rest, decision: deny}
"#;

async fn service() -> Service {
    Service::setup()
        .policy("netbound", BOUND)
        .config(|c| {
            c.policy.default = "netbound".into();
            // The deployment default grants network only; it is not enforced on every run (the
            // suite may run with `enforce_default` on, and this policy has no file rules).
            c.policy.enforce_default = false;
        })
        .fake(FakeRunner::new())
        .await
}

fn body(network: Value) -> Value {
    json!({"script_content": "print(1)", "script_type": "python", "network": network})
}

#[tokio::test]
async fn malformed_network_fields_are_schema_errors() {
    let s = service().await;
    for network in [
        json!({"allowed_domains": ["exa mple.org"]}),
        json!({"allowed_domains": ["*.*.pythonhosted.org"]}),
        json!({"allowed_domains": [".pythonhosted.org"]}),
        json!({"allowed_domains": []}),
        json!({"allowed_domains": ["pypi.org"], "allowed_ports": [0]}),
        json!({"allowed_domains": ["pypi.org"], "allowed_ports": [70000]}),
        json!({"allowed_domains": ["pypi.org"], "blocked_domains": ["a..b"]}),
        json!({"allowed_domains": ["pypi.org"], "cidrs": ["10.0.0.0/8"]}),
        json!("pypi.org"),
    ] {
        let (status, answer) = s.post("/v1/execute", &body(network.clone())).await;
        assert_eq!(status, 400, "{network}: {answer}");
        assert_eq!(
            answer["error"]["type"], "schema_error",
            "{network}: {answer}"
        );
    }
    assert!(s.runner().ran().is_empty(), "nothing ran");
    s.stop().await;
}

#[tokio::test]
async fn a_request_can_narrow_the_policy_but_never_widen_it() {
    let s = service().await;
    for (network, why) in [
        (
            json!({"allowed_domains": ["example.org"]}),
            "a name the policy does not list",
        ),
        (json!({"allowed_domains": ["*"]}), "everything"),
        (
            json!({"allowed_domains": ["*.pypi.org"]}),
            "names below an allowed one",
        ),
        (
            json!({"allowed_domains": ["pypi.org"]}),
            "port 80 by default",
        ),
        (
            json!({"allowed_domains": ["pypi.org"], "allowed_ports": [443, 22]}),
            "another port",
        ),
    ] {
        for path in ["/v1/execute", "/v1/executions"] {
            let (status, answer) = s.post(path, &body(network.clone())).await;
            assert_eq!(status, 403, "{why} on {path}: {answer}");
            assert_eq!(answer["error"]["type"], "network_not_allowed", "{answer}");
        }
    }
    // Under a policy without network rules for names, nothing may be asked for.
    let strict = json!({"script_content": "print(1)", "script_type": "python", "policy": "strict",
        "network": {"allowed_domains": ["pypi.org"], "allowed_ports": [443]}});
    let (status, answer) = s.post("/v1/execute", &strict).await;
    assert_eq!(status, 403, "{answer}");
    assert!(s.runner().ran().is_empty(), "nothing ran");
    s.stop().await;
}

#[tokio::test]
async fn a_granted_run_without_an_egress_proxy_fails_fast_and_typed() {
    let s = service().await;
    let network = json!({"allowed_domains": ["pypi.org", "files.pythonhosted.org"],
                         "blocked_domains": ["evil.pythonhosted.org"], "allowed_ports": [443]});
    let (status, answer) = s.post("/v1/execute", &body(network)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["status"], "failed", "{answer}");
    assert_eq!(answer["error"]["type"], "network_unavailable", "{answer}");
    assert!(
        s.runner().ran().is_empty(),
        "the script never runs without its network"
    );
    // A run with files, a job and a session with `network` fail the same way: never without it.
    let network = json!({"allowed_domains": ["pypi.org"], "allowed_ports": [443]});
    let with_files = json!({"script_content": "print(1)", "script_type": "python",
        "files": [{"path": "a.txt", "content": "x"}], "network": network});
    let (status, answer) = s.post("/v1/execute", &with_files).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["error"]["type"], "network_unavailable", "{answer}");
    let job = json!({"protocol_version": "1.0", "network": network,
        "constraints": {"allowed_commands": ["python3"]},
        "steps": [{"id": "run", "type": "run_command",
                   "arguments": {"command": "python3", "args": ["-c", "print(1)"]}}]});
    let (status, answer) = s.post("/v1/jobs", &job).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["status"], "failure", "{answer}");
    assert_eq!(answer["error"]["type"], "internal_error", "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("egress")),
        "{answer}"
    );
    assert!(s.runner().ran().is_empty(), "nothing ran");
    let (status, answer) = s.post("/v1/sessions", &json!({"network": network})).await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["error"]["type"], "network_unavailable", "{answer}");
    // A job sent to a session has the session's network, never its own.
    let (status, session) = s.post("/v1/sessions", &json!({})).await;
    assert_eq!(status, 201, "{session}");
    let id = session["session_id"].as_str().expect("session id");
    let (status, answer) = s.post(&format!("/v1/sessions/{id}/jobs"), &job).await;
    assert_eq!(
        (status, answer["error"]["type"].as_str()),
        (400, Some("schema_error")),
        "{answer}"
    );
    // Wider than the policy: 403 for jobs and sessions as for scripts.
    let wide = json!({"allowed_domains": ["example.org"], "allowed_ports": [443]});
    let mut wide_job = job.clone();
    wide_job["network"] = wide.clone();
    let (status, answer) = s.post("/v1/jobs", &wide_job).await;
    assert_eq!(
        (status, answer["error"]["type"].as_str()),
        (403, Some("network_not_allowed")),
        "{answer}"
    );
    let (status, answer) = s.post("/v1/sessions", &json!({"network": wide})).await;
    assert_eq!(
        (status, answer["error"]["type"].as_str()),
        (403, Some("network_not_allowed")),
        "{answer}"
    );
    // Without `network`, the same service runs scripts as before.
    let (status, answer) = s
        .post(
            "/v1/execute",
            &json!({"script_content": "print(1)", "script_type": "python"}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["network_summary"].is_null(), "{answer}");
    s.stop().await;
}
