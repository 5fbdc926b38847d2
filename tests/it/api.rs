//! The requests tests make of a running service and the checks of what it answered and recorded
//! that several test files share: reads, session commands, the audit chain.

use serde_json::{Value, json};

use crate::harness::Service;

/// `GET path`: the status and the JSON body (null when there is none).
pub async fn get(s: &Service, path: &str) -> (u16, Value) {
    let r = s
        .client
        .get(format!("{}{path}", s.url))
        .send()
        .await
        .expect("request");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// `GET path`: its JSON body, whatever the status.
pub async fn get_json(s: &Service, path: &str) -> Value {
    s.client
        .get(format!("{}{path}", s.url))
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json")
}

/// `method path` with an optional bearer token and JSON body: the status and the JSON answer
/// (null when there is none).
pub async fn call(
    s: &Service,
    method: &str,
    path: &str,
    bearer: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = s
        .client
        .request(method.parse().expect("method"), format!("{}{path}", s.url));
    if let Some(t) = bearer {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let response = req.send().await.expect("request");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The stored record of execution `id` (`GET /v1/executions/{id}`).
pub async fn stored(s: &Service, id: &str) -> Value {
    get_json(s, &format!("/v1/executions/{id}")).await
}

/// `POST path` with `body` in a task of its own, for requests that wait (for an operator, for
/// the test): the JSON answer, whatever its status.
pub fn post_in_background(s: &Service, path: &str, body: Value) -> tokio::task::JoinHandle<Value> {
    let request = s.client.post(format!("{}{path}", s.url)).json(&body);
    tokio::spawn(async move {
        let response = request.send().await.expect("request");
        response.json::<Value>().await.expect("json")
    })
}

/// The first operation `/v1/approvals` lists in `list` (`operations` or `session_operations`)
/// once one is held; null when none is within 30 s (a bound on a hang).
pub async fn first_held(s: &Service, list: &str) -> Value {
    for _ in 0..300 {
        let (status, approvals) = get(s, "/v1/approvals").await;
        assert_eq!(status, 200, "{approvals}");
        if let Some(op) = approvals[list].as_array().and_then(|ops| ops.first()) {
            return op.clone();
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Value::Null
}

/// Whether some item of the JSON array `list` satisfies `pred`.
pub fn has(list: &Value, pred: impl Fn(&Value) -> bool) -> bool {
    list.as_array().is_some_and(|items| items.iter().any(pred))
}

/// The audit chain of a stopped service's data directory (`scriptgate audit tail`), one record
/// a line.
pub fn audit_tail(data_dir: &std::path::Path) -> Vec<Value> {
    let tail = std::process::Command::new(env!("CARGO_BIN_EXE_scriptgate"))
        .args(["audit", "tail", "-n", "1000", "--data-dir"])
        .arg(data_dir)
        .output()
        .expect("audit tail");
    String::from_utf8_lossy(&tail.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// `scriptgate audit verify` of a stopped service's data directory succeeds: the chain holds.
pub fn assert_audit_verifies(data_dir: &std::path::Path) {
    let verify = std::process::Command::new(env!("CARGO_BIN_EXE_scriptgate"))
        .args(["audit", "verify", "--data-dir"])
        .arg(data_dir)
        .output()
        .expect("verify");
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
}

/// Sessions: create one, run commands in it.
pub mod session {
    use super::*;

    /// Creates a session with `body`; it answers 201 and is ready. Its id.
    pub async fn create(s: &Service, body: Value) -> String {
        let (status, out) = s.post("/v1/sessions", &body).await;
        assert_eq!(status, 201, "{out}");
        assert_eq!(out["state"], "ready", "{out}");
        out["session_id"].as_str().expect("id").to_string()
    }

    /// `POST /v1/sessions/{id}/exec` with `body`; it answers 200. The command's result.
    pub async fn exec(s: &Service, id: &str, body: Value) -> Value {
        let (status, out) = s.post(&format!("/v1/sessions/{id}/exec"), &body).await;
        assert_eq!(status, 200, "{out}");
        out
    }

    /// Runs the bash line `command` (30 s timeout). Its result.
    pub async fn line(s: &Service, id: &str, command: &str) -> Value {
        exec(s, id, json!({"command": command, "timeout": 30})).await
    }
}

/// The entry `/v1/approvals` lists under `pending` for an execution (panics when it is not there).
pub async fn pending_entry(s: &Service, execution_id: &str) -> Value {
    let list = get_json(s, "/v1/approvals").await;
    list["pending"]
        .as_array()
        .and_then(|p| p.iter().find(|e| e["execution_id"] == execution_id))
        .unwrap_or_else(|| panic!("not listed: {list}"))
        .clone()
}
