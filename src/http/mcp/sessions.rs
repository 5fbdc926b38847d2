//! The MCP session tools: `session_create`, `session_exec`, `session_destroy`,
//! `session_upload_file` and `session_download_file` over the service's persistent sessions,
//! with the connection's implicit session for calls that name none.
//!
//! The implicit session is created on the first call without a `session_id` and destroyed when
//! the connection's server is dropped (the MCP session ends, or the stdio client goes away). A
//! transport without connection state (a stateless request) gets a fresh server per request,
//! so its implicit session lives for that one call: such clients name a session instead.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use rmcp::model::{CallToolResult, JsonObject};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{api_error, arguments};
use crate::auth::Caller;
use crate::http::error::ApiError;
use crate::http::session_exec::{CommandOut, ExecIn};
use crate::http::sessions::SessionCreateIn;
use crate::sessions::{FileBody, NewSession, Sessions, State};

/// Implicit sessions, one per agent: a connection's (destroyed with the connection's server),
/// or the stateless requests' (shared by every request of the service, ended by idle timeout).
#[derive(Debug)]
pub(crate) struct Implicit {
    sessions: Arc<Sessions>,
    /// Serialises creation, so concurrent first calls share one session.
    create: tokio::sync::Mutex<()>,
    current: Mutex<HashMap<String, (Caller, Uuid)>>,
}

impl Implicit {
    pub(crate) fn new(sessions: Arc<Sessions>) -> Arc<Implicit> {
        Arc::new(Implicit {
            sessions,
            create: tokio::sync::Mutex::new(()),
            current: Mutex::new(HashMap::new()),
        })
    }

    fn live(&self, caller: &Caller) -> Option<Uuid> {
        let id = self
            .current
            .lock()
            .expect("implicit lock")
            .get(&caller.name)
            .map(|(_, id)| *id)?;
        let session = self.sessions.get(caller, id).ok()?;
        (session.view().state != State::Stopped).then_some(id)
    }

    /// The caller's implicit session, started when there is none (or it stopped).
    async fn get_or_create(&self, caller: &Caller) -> Result<Uuid, ApiError> {
        if let Some(id) = self.live(caller) {
            return Ok(id);
        }
        let _one = self.create.lock().await;
        if let Some(id) = self.live(caller) {
            return Ok(id);
        }
        let session = self.sessions.create(caller, NewSession::default()).await?;
        self.current
            .lock()
            .expect("implicit lock")
            .insert(caller.name.clone(), (caller.clone(), session.id));
        Ok(session.id)
    }

    /// Forgets the caller's implicit session if it is `id` (destroyed by name).
    fn forget(&self, caller: &Caller, id: Uuid) {
        let mut current = self.current.lock().expect("implicit lock");
        if current.get(&caller.name).is_some_and(|(_, c)| *c == id) {
            current.remove(&caller.name);
        }
    }
}

impl Drop for Implicit {
    fn drop(&mut self) {
        let held: Vec<(Caller, Uuid)> = self
            .current
            .lock()
            .expect("implicit lock")
            .drain()
            .map(|(_, v)| v)
            .collect();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        for (caller, id) in held {
            let sessions = self.sessions.clone();
            runtime.spawn(async move {
                if let Err(e) = sessions.delete(&caller, id).await {
                    tracing::debug!(session_id = %id, error = %e, "implicit session already gone");
                }
                tracing::info!(session_id = %id, "the MCP connection ended: its session is destroyed");
            });
        }
    }
}

/// Tool arguments: the session, and the rest for the operation.
fn split(mut args: JsonObject) -> Result<(Option<Uuid>, JsonObject), CallToolResult> {
    let id = match args.remove("session_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(Uuid::parse_str(&s).map_err(|_| {
            api_error(&ApiError::Schema(format!(
                "session_id: `{s}` is not a UUID"
            )))
        })?),
        Some(other) => {
            return Err(api_error(&ApiError::Schema(format!(
                "session_id: expected a string, got {other}"
            ))));
        }
    };
    Ok((id, args))
}

/// The server's handle on sessions: the service's, the connection's implicit one, and the
/// implicit ones of stateless requests.
#[derive(Debug, Clone)]
pub(crate) struct SessionTools {
    pub sessions: Arc<Sessions>,
    pub connection: Arc<Implicit>,
    /// Shared by the HTTP transport's servers; `None` on stdio (always one connection).
    pub stateless: Option<Arc<Implicit>>,
}

/// One call: the tools, and whether it came without a connection (no `Mcp-Session-Id`).
pub(crate) struct SessionCall<'a> {
    pub tools: &'a SessionTools,
    pub stateless: bool,
}

impl SessionCall<'_> {
    fn implicit(&self) -> &Implicit {
        match (&self.tools.stateless, self.stateless) {
            (Some(shared), true) => shared,
            _ => &self.tools.connection,
        }
    }

    async fn target(&self, caller: &Caller, named: Option<Uuid>) -> Result<Uuid, CallToolResult> {
        match named {
            Some(id) => Ok(id),
            None => self
                .implicit()
                .get_or_create(caller)
                .await
                .map_err(|e| api_error(&e)),
        }
    }

    pub(crate) async fn create(&self, caller: &Caller, args: JsonObject) -> CallToolResult {
        let input: SessionCreateIn = match arguments(args) {
            Ok(i) => i,
            Err(e) => return e,
        };
        match self.tools.sessions.create(caller, input.into()).await {
            Ok(session) => {
                let v = session.view();
                CallToolResult::structured(json!({
                    "session_id": v.id,
                    "state": v.state,
                    "cwd": v.cwd,
                    "expires_at": v.expires_at.unix_timestamp(),
                    "idle_timeout_secs": v.idle_timeout_secs,
                }))
            }
            Err(e) => api_error(&e.into()),
        }
    }

    pub(crate) async fn exec(&self, caller: &Caller, args: JsonObject) -> CallToolResult {
        let (named, args) = match split(args) {
            Ok(s) => s,
            Err(e) => return e,
        };
        let request =
            match arguments::<ExecIn>(args).and_then(|i| i.check().map_err(|e| api_error(&e))) {
                Ok(r) => r,
                Err(e) => return e,
            };
        let id = match self.target(caller, named).await {
            Ok(id) => id,
            Err(e) => return e,
        };
        let started = match self.tools.sessions.exec(caller, id, request).await {
            Ok(s) => s,
            Err(e) => return api_error(&e.into()),
        };
        started.command.wait().await;
        let carry = self.tools.sessions.settings().result_output_bytes;
        let out = CommandOut::of(id, &started.command, carry);
        let value = serde_json::to_value(&out).unwrap_or(Value::Null);
        if out.success {
            CallToolResult::structured(value)
        } else {
            CallToolResult::structured_error(value)
        }
    }

    pub(crate) async fn destroy(&self, caller: &Caller, args: JsonObject) -> CallToolResult {
        let (named, rest) = match split(args) {
            Ok(s) => s,
            Err(e) => return e,
        };
        if let Some(extra) = rest.keys().next() {
            return api_error(&ApiError::Schema(format!("unknown field `{extra}`")));
        }
        let id = match named {
            Some(id) => id,
            None => match self.implicit().live(caller) {
                Some(id) => id,
                None => {
                    return CallToolResult::structured(
                        json!({"session_id": null, "state": "stopped"}),
                    );
                }
            },
        };
        match self.tools.sessions.delete(caller, id).await {
            Ok(()) => {
                self.implicit().forget(caller, id);
                CallToolResult::structured(json!({"session_id": id, "state": "stopped"}))
            }
            Err(e) => api_error(&e.into()),
        }
    }

    pub(crate) async fn upload(&self, caller: &Caller, args: JsonObject) -> CallToolResult {
        let (named, args) = match split(args) {
            Ok(s) => s,
            Err(e) => return e,
        };
        let input: UploadIn = match arguments(args) {
            Ok(i) => i,
            Err(e) => return e,
        };
        let data = match input.encoding {
            Encoding::Utf8 => input.content.into_bytes(),
            Encoding::Base64 => match base64::engine::general_purpose::STANDARD
                .decode(input.content.as_bytes())
            {
                Ok(d) => d,
                Err(e) => return api_error(&ApiError::Schema(format!("content: not base64: {e}"))),
            },
        };
        let id = match self.target(caller, named).await {
            Ok(id) => id,
            Err(e) => return e,
        };
        match self
            .tools
            .sessions
            .put_file(caller, id, &input.path, data)
            .await
        {
            Ok(FileBody::Done(done)) => {
                let mut value = serde_json::to_value(done).unwrap_or(Value::Null);
                if let Value::Object(o) = &mut value {
                    o.insert("session_id".into(), json!(id));
                }
                CallToolResult::structured(value)
            }
            Ok(FileBody::Bytes { .. }) => {
                api_error(&ApiError::Internal("an upload answered with bytes".into()))
            }
            Err(e) => api_error(&e.into()),
        }
    }

    pub(crate) async fn download(&self, caller: &Caller, args: JsonObject) -> CallToolResult {
        let (named, args) = match split(args) {
            Ok(s) => s,
            Err(e) => return e,
        };
        let input: DownloadIn = match arguments(args) {
            Ok(i) => i,
            Err(e) => return e,
        };
        let id = match self.target(caller, named).await {
            Ok(id) => id,
            Err(e) => return e,
        };
        match self.tools.sessions.get_file(caller, id, &input.path).await {
            Ok(FileBody::Bytes { data, sha256 }) => {
                // The digest of the bytes handed over, checked against the sandbox's.
                let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&data));
                if !sha256.is_empty() && sha256 != digest {
                    return api_error(&ApiError::Internal(
                        format!("`{}` changed while it was read", input.path).into(),
                    ));
                }
                let size = data.len();
                let (encoding, content) = match String::from_utf8(data) {
                    Ok(text) => ("utf8", text),
                    Err(e) => (
                        "base64",
                        base64::engine::general_purpose::STANDARD.encode(e.as_bytes()),
                    ),
                };
                CallToolResult::structured(json!({
                    "session_id": id,
                    "path": input.path,
                    "size_bytes": size,
                    "sha256": digest,
                    "encoding": encoding,
                    "content": content,
                }))
            }
            Ok(FileBody::Done(_)) => api_error(&ApiError::Internal(
                "a download answered without bytes".into(),
            )),
            Err(e) => api_error(&e.into()),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Encoding {
    #[default]
    Utf8,
    Base64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UploadIn {
    path: String,
    content: String,
    #[serde(default)]
    encoding: Encoding,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DownloadIn {
    path: String,
}
