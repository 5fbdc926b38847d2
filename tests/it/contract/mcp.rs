//! The MCP server's contract, driven by the official MCP Python SDK (not written here) at `/mcp` of
//! the live service over the fake runner: initialize, list tools (input and output schemas),
//! execute, a failed run and a validation failure as structured tool errors, bad arguments, an
//! unknown tool; and `/mcp` behind the bearer tokens. The same client drives `scriptgate mcp` on
//! stdio against the real engine (`mcp` beside this module).

use std::process::Command;

use crate::fake::{Answer, FakeRunner};
use crate::harness::{self, Service, token};

const AGENT: &str = "agent-token-mcp-3b7e";
const OPERATOR: &str = "operator-token-mcp-1a9c";

async fn secured() -> Service {
    // What `tests/py/mcp_client.py` runs, answered as the real sandbox answers it.
    let runner = FakeRunner::new()
        .answering(
            "print('hello from mcp')",
            Answer::prints("hello from mcp\n"),
        )
        .answering(
            "echo $((2+3)) >&2; exit 3",
            Answer {
                stdout: String::new(),
                stderr: "5\n".into(),
                exit_code: 3,
            },
        );
    Service::fake(runner, |c| {
        c.agent_tokens = vec![token("mcp-agent", AGENT)];
        c.operator_tokens = vec![token("mcp-operator", OPERATOR)];
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_uses_the_http_endpoint() {
    let s = secured().await;
    for mode in ["legacy", "auto"] {
        let mut client = Command::new(harness::python());
        client.arg(harness::py_script("mcp_client.py")).args([
            "http",
            &format!("{}/mcp", s.url),
            AGENT,
            mode,
        ]);
        let out = harness::run_ok(client).await;
        assert!(out.trim_end().ends_with("OK"), "{mode}: {out}");
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_http_endpoint_needs_an_agent_token() {
    let s = secured().await;
    let initialize = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "0"}}
    });
    let post = |token: Option<&str>| {
        let mut req = s
            .client
            .post(format!("{}/mcp", s.url))
            .header("accept", "application/json, text/event-stream")
            .json(&initialize);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send()
    };
    let none = post(None).await.expect("request");
    assert_eq!(none.status(), 401);
    assert_eq!(
        none.headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok()),
        Some("Bearer")
    );
    let body: serde_json::Value = none.json().await.expect("typed error");
    assert_eq!(body["error"]["type"], "unauthorized");
    assert_eq!(post(Some("wrong")).await.expect("request").status(), 401);
    let operator = post(Some(OPERATOR)).await.expect("request");
    assert_eq!(operator.status(), 403);
    let agent = post(Some(AGENT)).await.expect("request");
    assert_eq!(agent.status(), 200);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_uses_the_session_tools_and_the_connection_owns_its_session() {
    let s = secured().await;
    for mode in ["legacy", "auto"] {
        let mut client = Command::new(harness::python());
        client
            .arg(harness::py_script("mcp_sessions_client.py"))
            .args(["http", &format!("{}/mcp", s.url), AGENT, mode]);
        let out = harness::run_ok(client).await;
        assert!(out.trim_end().ends_with("OK"), "{mode}: {out}");
        let implicit = out
            .lines()
            .find_map(|l| l.strip_prefix("implicit: "))
            .unwrap_or_else(|| panic!("{mode}: no implicit session in {out}"))
            .trim()
            .to_string();
        if mode == "auto" {
            // The SDK's negotiation picks the stateless transport: no connection owns the
            // session, which lives until its idle timeout (or a delete).
            let gone = s
                .client
                .delete(format!("{}/v1/sessions/{implicit}", s.url))
                .bearer_auth(AGENT)
                .send()
                .await
                .expect("request");
            assert_eq!(gone.status(), 204, "{mode}");
            continue;
        }
        // The connection ended: its implicit session is destroyed (its record stays, stopped).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let view: serde_json::Value = s
                .client
                .get(format!("{}/v1/sessions/{implicit}", s.url))
                .bearer_auth(AGENT)
                .send()
                .await
                .expect("request")
                .json()
                .await
                .expect("json");
            if view["state"] == "stopped" {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{mode}: the implicit session outlived its connection: {view}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    s.stop().await;
}
