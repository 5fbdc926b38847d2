//! Commands of a session: `exec` (the result once it ended), `exec/stream` (Server-Sent Events:
//! the command id, output chunks as they are produced, then the result), `kill`, paged
//! `output`, and the `history`.

use axum::extract::{Path, State};
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use uuid::Uuid;

use super::auth::Authenticated;
use super::error::{ApiError, ErrorBody};
use super::params::{IdParam, Query, page_limit};
use super::sse::respond;
use super::{AppState, Json};
use crate::auth::{Caller, Role};
use crate::domain::record::{ExecutionError, ResourceUsage};
use crate::domain::script::Language;
use crate::domain::verdict::Verdict;
use crate::sandbox::sessions::OutputStream;
use crate::sessions::{ExecRequest, Mode, RunningCommand, Started};

/// One command: exactly one of `command` (a bash command line), `argv`, or `script_content`
/// with `script_type`.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"command": "cd src && export MODE=test && ls"}))]
pub(super) struct ExecIn {
    /// A bash command line, run in the session's working directory and environment; `cd`,
    /// `export`, `unset` and `alias` in it carry into the next commands.
    #[serde(default)]
    pub command: Option<String>,
    /// A program and its arguments, run without a shell.
    #[serde(default)]
    pub argv: Option<Vec<String>>,
    /// A script, run by its interpreter (`script_type`).
    #[serde(default)]
    pub script_content: Option<String>,
    #[serde(default)]
    pub script_type: Option<Language>,
    /// Deadline in seconds (1 to `execution.max_timeout_secs`); the command is killed at it and
    /// the session stays usable.
    #[serde(default, deserialize_with = "super::json::whole_number")]
    #[schema(minimum = 1)]
    pub timeout: Option<u64>,
    #[serde(default)]
    pub stdin: Option<String>,
}

impl ExecIn {
    pub(super) fn check(self) -> Result<ExecRequest, ApiError> {
        let mode = match (
            self.command,
            self.argv,
            self.script_content,
            self.script_type,
        ) {
            (Some(line), None, None, None) => Mode::Line(line),
            (None, Some(argv), None, None) => Mode::Argv(argv),
            (None, None, Some(source), Some(language)) => Mode::Script { language, source },
            (None, None, Some(_), None) => {
                return Err(ApiError::Schema(
                    "script_type: required with script_content".into(),
                ));
            }
            _ => {
                return Err(ApiError::Schema(
                    "exactly one of `command`, `argv` or `script_content` (with `script_type`) is required".into(),
                ));
            }
        };
        Ok(ExecRequest {
            mode,
            timeout_secs: self.timeout,
            stdin: self.stdin,
        })
    }
}

/// The result of a session command: the fields of `/v1/execute`'s result, plus the command id,
/// the working directory after it and the totals of its output.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub(super) struct CommandOut {
    pub command_id: Uuid,
    pub session_id: Uuid,
    /// `command`, `argv` or `script`.
    pub kind: String,
    /// What was validated and ran (a command line with the session's aliases expanded).
    pub command: String,
    pub success: bool,
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// The result carries less than the command wrote: page through the rest with
    /// `…/commands/{command_id}/output`.
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub stdout_total_bytes: u64,
    pub stderr_total_bytes: u64,
    pub timeout: bool,
    pub duration_ms: u64,
    pub validation_failed: bool,
    pub validation: Verdict,
    /// `validation_failed`, `timeout`, `killed`, `resource_limit_exceeded`,
    /// `execution_failure`, `internal_error`; null on success.
    pub error: Option<ExecutionError>,
    pub resource_usage: ResourceUsage,
    /// The working directory after the command.
    pub cwd: String,
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub ended_at: Option<OffsetDateTime>,
    /// State the command reported that was not kept (names that load code, …).
    pub warnings: Vec<String>,
    /// What the command's processes did, as the session's run-time policy decided it (null
    /// when the session has no policy, or the command never ran): `processes`
    /// `[{pid, argv, cwd, decision, rule}]`, `file_operations` `[{type, path, bytes, decision,
    /// rule}]`, `network_operations`, `blocked_operations` `[{type, pid, target, decision, rule,
    /// message, errno}]`; each list keeps at most `policy.event_cap` items and `omitted` counts
    /// the rest per list, as in `/v1/execute`.
    #[schema(value_type = Option<Object>)]
    pub events: Option<scriptgate_policy::events::Events>,
    /// The command's lookups and connections through the egress proxy, in order, as
    /// `network_operations` of `/v1/execute` (null when the session has no network access, or
    /// the command never ran). A `net_connect` cut by a byte limit carries `limit`
    /// (`command_bytes`, `session_bytes`); a connection refused by one is a `net_limit` event.
    #[schema(value_type = Option<Vec<Object>>)]
    pub network_operations: Option<Vec<serde_json::Value>>,
    /// Totals of the command's network activity (null without network access).
    pub network_summary: Option<crate::domain::network::NetworkSummary>,
}

impl CommandOut {
    pub(super) fn of(session_id: Uuid, c: &RunningCommand, carry: u64) -> Self {
        let r = c.snapshot();
        let cut = |b: &[u8]| {
            let n = b.len().min(usize::try_from(carry).unwrap_or(usize::MAX));
            String::from_utf8_lossy(&b[..n]).into_owned()
        };
        let total = |kept: &[u8], total: u64| total.max(kept.len() as u64);
        let network_operations = r.network.as_ref().map(|n| {
            n.network_operations
                .iter()
                .filter_map(|e| serde_json::to_value(e).ok())
                .collect()
        });
        let network_summary = r.network.as_ref().map(|n| n.network_summary.clone());
        CommandOut {
            command_id: c.id,
            session_id,
            kind: c.kind.to_string(),
            command: c.text.clone(),
            success: r.ended_at.is_some() && r.error.is_none(),
            exit_code: r.exit_code,
            stdout: cut(&r.stdout),
            stderr: cut(&r.stderr),
            stdout_truncated: total(&r.stdout, r.stdout_total) > carry.min(r.stdout.len() as u64),
            stderr_truncated: total(&r.stderr, r.stderr_total) > carry.min(r.stderr.len() as u64),
            stdout_total_bytes: total(&r.stdout, r.stdout_total),
            stderr_total_bytes: total(&r.stderr, r.stderr_total),
            timeout: r.timed_out,
            duration_ms: r.duration_ms,
            validation_failed: !c.verdict.valid,
            validation: c.verdict.clone(),
            error: r.error,
            resource_usage: r.usage,
            cwd: r.cwd,
            started_at: c.started_at,
            ended_at: r.ended_at,
            warnings: r.warnings,
            events: r.events,
            network_operations,
            network_summary,
        }
    }
}

fn ids(raw: &(String, String)) -> Result<(Uuid, Uuid), ApiError> {
    let parse = |name: &str, v: &str| {
        Uuid::parse_str(v).map_err(|_| ApiError::Schema(format!("{name}: `{v}` is not a UUID")))
    };
    Ok((parse("id", &raw.0)?, parse("command_id", &raw.1)?))
}

async fn start(
    state: &AppState,
    caller: &Caller,
    id: Uuid,
    body: ExecIn,
) -> Result<Started, ApiError> {
    let request = body.check()?;
    Ok(state.sessions.exec(caller, id, request).await?)
}

/// Run one command in the session and answer with its result once it ended.
#[utoipa::path(
    post,
    path = "/v1/sessions/{id}/exec",
    tag = "sessions",
    operation_id = "session_exec",
    params(("id" = Uuid, Path, description = "The session id")),
    request_body = ExecIn,
    responses(
        (status = 200, description = "The command was validated and, if valid, ran. A failing validation, a non-zero exit, a timeout or a kill is still 200: read `success` and `error`; the session stays usable.", body = CommandOut),
        (status = 400, description = "The body does not match the schema.", body = ErrorBody),
        (status = 404, description = "No such session.", body = ErrorBody,
            example = json!({"error": {"type": "session_not_found", "message": "no session with this id"}})),
        (status = 409, description = "Another command runs (`session_busy`), or the session is stopped (`session_stopped`).", body = ErrorBody,
            example = json!({"error": {"type": "session_busy", "message": "the session is running command 5f0c…; wait for it or kill it"}})),
    ),
    security(("agent_token" = []))
)]
pub(super) async fn exec(
    State(state): State<AppState>,
    caller: Authenticated,
    IdParam(id): IdParam,
    Json(body): Json<ExecIn>,
) -> Result<axum::Json<CommandOut>, ApiError> {
    let caller = caller.require(Role::Agent)?;
    let started = start(&state, caller, id, body).await?;
    started.command.wait().await;
    let carry = state.sessions.settings().result_output_bytes;
    Ok(axum::Json(CommandOut::of(id, &started.command, carry)))
}

/// The same as `exec`, as Server-Sent Events: `command` (`{command_id}`, first), `stdout` and
/// `stderr` (`{data}`, as produced), then one `result` with the whole result.
#[utoipa::path(
    post,
    path = "/v1/sessions/{id}/exec/stream",
    tag = "sessions",
    operation_id = "session_exec_stream",
    params(("id" = Uuid, Path, description = "The session id")),
    request_body = ExecIn,
    responses(
        (status = 400, description = "An id is not a UUID, or a parameter is out of range.", body = ErrorBody),
        (status = 200, description = "`text/event-stream`: `command`, then `stdout`/`stderr` chunks, then `result` (a `CommandOut`).", content_type = "text/event-stream"),
        (status = 404, description = "No such session.", body = ErrorBody),
        (status = 409, description = "`session_busy` or `session_stopped`.", body = ErrorBody),
    ),
    security(("agent_token" = []))
)]
pub(super) async fn exec_stream(
    State(state): State<AppState>,
    caller: Authenticated,
    IdParam(id): IdParam,
    Json(body): Json<ExecIn>,
) -> Result<Response, ApiError> {
    let caller = caller.require(Role::Agent)?;
    let started = start(&state, caller, id, body).await?;
    let carry = state.sessions.settings().result_output_bytes;
    Ok(respond(events(id, started, carry)).into_response())
}

fn events(id: Uuid, started: Started, carry: u64) -> impl Stream<Item = Event> {
    fn json(name: &str, value: serde_json::Value) -> Event {
        Event::default().event(name).data(value.to_string())
    }
    let first = json(
        "command",
        serde_json::json!({"command_id": started.command.id, "session_id": id}),
    );
    let rest = futures::stream::unfold(Some(started), move |state| async move {
        let mut started = state?;
        match started.chunks.recv().await {
            Some(chunk) => {
                let name = match chunk.stream {
                    OutputStream::Stdout => "stdout",
                    OutputStream::Stderr => "stderr",
                };
                let data = serde_json::json!({"data": String::from_utf8_lossy(&chunk.bytes)});
                Some((json(name, data), Some(started)))
            }
            None => {
                // The output ends with the command; the result follows it.
                started.command.wait().await;
                let out = CommandOut::of(id, &started.command, carry);
                let value = serde_json::to_value(out).unwrap_or_default();
                Some((json("result", value), None))
            }
        }
    });
    futures::stream::once(async move { first }).chain(rest)
}

/// Kill a running command: it ends with error type `killed`; the session stays usable.
#[utoipa::path(
    post,
    path = "/v1/sessions/{id}/commands/{command_id}/kill",
    tag = "sessions",
    operation_id = "session_kill",
    params(
        ("id" = Uuid, Path, description = "The session id"),
        ("command_id" = Uuid, Path, description = "The command id"),
    ),
    responses(
        (status = 409, description = "`session_busy` or `session_stopped`.", body = ErrorBody),
        (status = 400, description = "An id is not a UUID, or a parameter is out of range.", body = ErrorBody),
        (status = 200, description = "The command has ended (killed, or it had ended before).", body = CommandOut),
        (status = 404, description = "No such session (`session_not_found`) or command (`command_not_found`).", body = ErrorBody),
    ),
    security(("agent_token" = []))
)]
pub(super) async fn kill(
    State(state): State<AppState>,
    caller: Authenticated,
    Path(raw): Path<(String, String)>,
) -> Result<axum::Json<CommandOut>, ApiError> {
    let caller = caller.require(Role::Agent)?;
    let (id, command_id) = ids(&raw)?;
    let command = state.sessions.kill(caller, id, command_id).await?;
    let carry = state.sessions.settings().result_output_bytes;
    Ok(axum::Json(CommandOut::of(id, &command, carry)))
}

/// Which output to page through.
#[derive(Debug, Clone, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct OutputQuery {
    /// `stdout` (default) or `stderr`.
    #[serde(default)]
    #[param(value_type = Option<String>)]
    pub stream: Option<String>,
    /// Byte offset into the kept output.
    #[serde(default)]
    pub offset: Option<u64>,
    /// Bytes at most (default and maximum 1 MiB).
    #[serde(default)]
    pub limit: Option<u64>,
}

/// A page of a command's output.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub(super) struct OutputOut {
    pub command_id: Uuid,
    pub stream: String,
    pub offset: u64,
    /// The page: UTF-8 text when it is valid UTF-8, base64 otherwise (`encoding`).
    pub data: String,
    /// `utf-8` or `base64`.
    pub encoding: String,
    /// Bytes in this page.
    pub length: u64,
    /// Where the next page starts; null at the end of what was kept.
    pub next_offset: Option<u64>,
    /// Bytes the command wrote to the stream.
    pub total_bytes: u64,
    /// Bytes the service kept (`sessions.output_keep_bytes` at most); less than `total_bytes`
    /// when it kept less.
    pub kept_bytes: u64,
    /// The command has ended (a running command's page may grow).
    pub finished: bool,
}

const MAX_PAGE: u64 = 1 << 20;

/// Page through a command's output beyond what its result carried.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/commands/{command_id}/output",
    tag = "sessions",
    operation_id = "session_output",
    params(
        ("id" = Uuid, Path, description = "The session id"),
        ("command_id" = Uuid, Path, description = "The command id"),
        OutputQuery,
    ),
    responses(
        (status = 400, description = "An id is not a UUID, or a parameter is out of range.", body = ErrorBody),
        (status = 200, description = "A page with the totals.", body = OutputOut),
        (status = 404, description = "No such session or command.", body = ErrorBody),
    ),
    security(("agent_token" = []), ("operator_token" = []))
)]
pub(super) async fn output(
    State(state): State<AppState>,
    caller: Authenticated,
    Path(raw): Path<(String, String)>,
    Query(q): Query<OutputQuery>,
) -> Result<axum::Json<OutputOut>, ApiError> {
    let (id, command_id) = ids(&raw)?;
    let stream = match q.stream.as_deref().unwrap_or("stdout") {
        "stdout" => OutputStream::Stdout,
        "stderr" => OutputStream::Stderr,
        other => {
            return Err(ApiError::Schema(format!(
                "stream: `{other}` is not `stdout` or `stderr`"
            )));
        }
    };
    let limit = page_limit(q.limit, MAX_PAGE)?;
    let command = state.sessions.command(&caller.0, id, command_id)?;
    let page = command.page(stream, q.offset.unwrap_or(0), limit);
    let length = page.data.len() as u64;
    let end = page.offset + length;
    let (data, encoding) = match String::from_utf8(page.data) {
        Ok(text) => (text, "utf-8"),
        Err(e) => (data_encoding::BASE64.encode(e.as_bytes()), "base64"),
    };
    Ok(axum::Json(OutputOut {
        command_id,
        stream: q.stream.unwrap_or_else(|| "stdout".into()),
        offset: page.offset,
        data,
        encoding: encoding.into(),
        length,
        next_offset: (end < page.kept_bytes).then_some(end),
        total_bytes: page.total_bytes,
        kept_bytes: page.kept_bytes,
        finished: page.finished,
    }))
}

/// One command of the history.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub(super) struct HistoryEntry {
    pub command_id: Uuid,
    pub kind: String,
    pub command: String,
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub ended_at: Option<OffsetDateTime>,
    pub exit_code: Option<i32>,
    pub error: Option<ExecutionError>,
    pub running: bool,
    pub stdout_total_bytes: u64,
    pub stderr_total_bytes: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub(super) struct HistoryOut {
    pub commands: Vec<HistoryEntry>,
}

/// The session's commands, oldest first (the newest `sessions.history_commands`).
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/history",
    tag = "sessions",
    operation_id = "session_history",
    params(("id" = Uuid, Path, description = "The session id")),
    responses(
        (status = 400, description = "An id is not a UUID, or a parameter is out of range.", body = ErrorBody),
        (status = 200, description = "The commands.", body = HistoryOut),
        (status = 404, description = "No such session.", body = ErrorBody),
    ),
    security(("agent_token" = []), ("operator_token" = []))
)]
pub(super) async fn history(
    State(state): State<AppState>,
    caller: Authenticated,
    IdParam(id): IdParam,
) -> Result<axum::Json<HistoryOut>, ApiError> {
    let commands = state
        .sessions
        .history(&caller.0, id)?
        .iter()
        .map(|c| {
            let r = c.snapshot();
            HistoryEntry {
                command_id: c.id,
                kind: c.kind.to_string(),
                command: c.text.clone(),
                started_at: c.started_at,
                ended_at: r.ended_at,
                exit_code: r.exit_code,
                error: r.error,
                running: !c.finished(),
                stdout_total_bytes: r.stdout_total.max(r.stdout.len() as u64),
                stderr_total_bytes: r.stderr_total.max(r.stderr.len() as u64),
            }
        })
        .collect();
    Ok(axum::Json(HistoryOut { commands }))
}
