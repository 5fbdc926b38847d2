//! `scriptgate exec --stream`: `POST /v1/execute` answers once the run has ended, so a one-shot
//! run whose output should arrive as it is produced runs in a session of its own instead:
//! created, the script streamed over `…/exec/stream`, then destroyed (also when streaming
//! failed). The script passes the same validation layers there; should the client die midway,
//! the session's short idle timeout removes it.

use std::process::ExitCode;

use reqwest::Method;
use serde_json::json;

use super::{Client, ClientError, Work, relay};

/// Idle time after which the service removes a session this client could not destroy.
const IDLE_TIMEOUT_SECS: u64 = 60;

/// Runs `work` once, printing its output as it is produced.
pub(super) async fn streamed(client: &Client, work: Work) -> Result<ExitCode, ClientError> {
    let mut body = work.script_body()?;
    if let Some(t) = work.timeout {
        body["timeout"] = json!(t);
    }
    if let Some(s) = work.stdin_text()? {
        body["stdin"] = json!(s);
    }
    let created = client
        .json(
            client
                .request(Method::POST, "/v1/sessions")
                .json(&json!({"idle_timeout_secs": IDLE_TIMEOUT_SECS})),
        )
        .await?;
    let id = created["session_id"]
        .as_str()
        .ok_or_else(|| ClientError::Usage("the service answered no session_id".into()))?
        .to_string();
    let path = format!("/v1/sessions/{id}/exec/stream");
    let ran = match client
        .send(client.request(Method::POST, &path).json(&body))
        .await
    {
        Ok(response) => relay(response, client.target.json).await,
        Err(e) => Err(e),
    };
    let destroyed = client
        .send(client.request(Method::DELETE, &format!("/v1/sessions/{id}")))
        .await;
    let code = ran?;
    destroyed?;
    Ok(code)
}
