//! A session's files: upload (`PUT`, raw body), download (`GET`, raw bytes), delete, and the
//! listing in the `list_tree` shape of the job protocol. `{path}` is relative to `/workspace`.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use uuid::Uuid;

use super::AppState;
use super::auth::Authenticated;
use super::error::{ApiError, ErrorBody};
use super::params::{IdParam, Query};
use crate::auth::Role;
use crate::sessions::FileBody;

/// The largest upload (one message of the session's stream).
pub(super) const MAX_UPLOAD: usize = 64 << 20;

fn parse(raw: &(String, String)) -> Result<(Uuid, String), ApiError> {
    let id = Uuid::parse_str(&raw.0)
        .map_err(|_| ApiError::Schema(format!("id: `{}` is not a UUID", raw.0)))?;
    Ok((id, raw.1.clone()))
}

fn json(body: FileBody) -> Response {
    match body {
        FileBody::Done(done) => axum::Json(done).into_response(),
        FileBody::Bytes { data, sha256 } => (
            [
                (header::CONTENT_TYPE, "application/octet-stream".to_string()),
                (header::HeaderName::from_static("x-content-sha256"), sha256),
            ],
            data,
        )
            .into_response(),
    }
}

/// Upload a file (the raw body), replacing it whole or not at all. Text is secret-scanned.
#[utoipa::path(
    put,
    path = "/v1/sessions/{id}/files/{path}",
    tag = "sessions",
    operation_id = "session_file_upload",
    params(
        ("id" = Uuid, Path, description = "The session id"),
        ("path" = String, Path, description = "Relative to /workspace, e.g. `src/main.py`"),
    ),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses(
        (status = 200, description = "Written: `{kind: written, path, size_bytes, sha256, created}`.", body = serde_json::Value),
        (status = 400, description = "The path leaves the workspace or crosses a symlink (`invalid_path`).", body = ErrorBody),
        (status = 403, description = "The token does not have the role this operation needs (`forbidden`), or the session's policy refuses it (`policy_violation`, with the `rule` and its message; `file_rules` decide an upload as `write` and `create`, a download as `read`, a delete as `delete`, a listing as `list`), before the container is asked.", body = ErrorBody,
            example = json!({"error": {"type": "policy_violation", "rule": "locked", "message": "/workspace/locked/a.txt is locked"}})),
        (status = 404, description = "No such session.", body = ErrorBody),
        (status = 409, description = "The session is stopped.", body = ErrorBody),
        (status = 422, description = "The upload holds a secret (`validation_failed`).", body = ErrorBody),
        (status = 507, description = "It does not fit (`workspace_full`); nothing was written.", body = ErrorBody),
    ),
    security(("agent_token" = []))
)]
pub(super) async fn upload(
    State(state): State<AppState>,
    caller: Authenticated,
    Path(raw): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let caller = caller.require(Role::Agent)?;
    let (id, path) = parse(&raw)?;
    let done = state
        .sessions
        .put_file(caller, id, &path, body.to_vec())
        .await?;
    Ok(json(done))
}

/// Download a file's bytes (with `x-content-sha256`).
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/files/{path}",
    tag = "sessions",
    operation_id = "session_file_download",
    params(
        ("id" = Uuid, Path, description = "The session id"),
        ("path" = String, Path, description = "Relative to /workspace"),
    ),
    responses(
        (status = 409, description = "`session_busy` or `session_stopped`.", body = ErrorBody),
        (status = 200, description = "The file's bytes.", content_type = "application/octet-stream"),
        (status = 400, description = "`invalid_path`.", body = ErrorBody),
        (status = 403, description = "The token does not have the role this operation needs (`forbidden`), or the session's policy refuses it (`policy_violation`, with the `rule` and its message; `file_rules` decide an upload as `write` and `create`, a download as `read`, a delete as `delete`, a listing as `list`), before the container is asked.", body = ErrorBody,
            example = json!({"error": {"type": "policy_violation", "rule": "locked", "message": "/workspace/locked/a.txt is locked"}})),
        (status = 404, description = "No such session (`session_not_found`) or file (`file_not_found`).", body = ErrorBody),
    ),
    security(("agent_token" = []))
)]
pub(super) async fn download(
    State(state): State<AppState>,
    caller: Authenticated,
    Path(raw): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let caller = caller.require(Role::Agent)?;
    let (id, path) = parse(&raw)?;
    Ok(json(state.sessions.get_file(caller, id, &path).await?))
}

/// Delete a file, or a directory and everything in it.
#[utoipa::path(
    delete,
    path = "/v1/sessions/{id}/files/{path}",
    tag = "sessions",
    operation_id = "session_file_delete",
    params(
        ("id" = Uuid, Path, description = "The session id"),
        ("path" = String, Path, description = "Relative to /workspace"),
    ),
    responses(
        (status = 204, description = "Deleted."),
        (status = 409, description = "`session_stopped`.", body = ErrorBody),
        (status = 400, description = "`invalid_path`.", body = ErrorBody),
        (status = 403, description = "The token does not have the role this operation needs (`forbidden`), or the session's policy refuses it (`policy_violation`, with the `rule` and its message; `file_rules` decide an upload as `write` and `create`, a download as `read`, a delete as `delete`, a listing as `list`), before the container is asked.", body = ErrorBody,
            example = json!({"error": {"type": "policy_violation", "rule": "locked", "message": "/workspace/locked/a.txt is locked"}})),
        (status = 404, description = "No such session or file.", body = ErrorBody),
    ),
    security(("agent_token" = []))
)]
pub(super) async fn remove(
    State(state): State<AppState>,
    caller: Authenticated,
    Path(raw): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let caller = caller.require(Role::Agent)?;
    let (id, path) = parse(&raw)?;
    state.sessions.delete_file(caller, id, &path).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Where to list.
#[derive(Debug, Clone, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct ListQuery {
    /// An absolute path under /workspace or /tmp (default /workspace).
    #[serde(default)]
    pub path: Option<String>,
    /// Levels below it (default 2, at most 16).
    #[serde(default)]
    pub depth: Option<u32>,
}

/// List files in the `list_tree` shape of the job protocol (`{tree, entries, truncated}`).
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/files",
    tag = "sessions",
    operation_id = "session_file_list",
    params(("id" = Uuid, Path, description = "The session id"), ListQuery),
    responses(
        (status = 409, description = "`session_busy` or `session_stopped`.", body = ErrorBody),
        (status = 200, description = "`{kind: listed, tree, entries, truncated}`.", body = serde_json::Value),
        (status = 400, description = "`invalid_path`, or a depth out of range.", body = ErrorBody),
        (status = 403, description = "The token does not have the role this operation needs (`forbidden`), or the session's policy refuses it (`policy_violation`, with the `rule` and its message; `file_rules` decide an upload as `write` and `create`, a download as `read`, a delete as `delete`, a listing as `list`), before the container is asked.", body = ErrorBody,
            example = json!({"error": {"type": "policy_violation", "rule": "locked", "message": "/workspace/locked/a.txt is locked"}})),
        (status = 404, description = "No such session.", body = ErrorBody),
    ),
    security(("agent_token" = []))
)]
pub(super) async fn list(
    State(state): State<AppState>,
    caller: Authenticated,
    IdParam(id): IdParam,
    Query(q): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let caller = caller.require(Role::Agent)?;
    let path = q.path.unwrap_or_else(|| "/workspace".into());
    let listed = state
        .sessions
        .list_files(caller, id, &path, q.depth.unwrap_or(2))
        .await?;
    Ok(json(listed))
}
