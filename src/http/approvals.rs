//! Operators: `GET /v1/approvals` (pending executions, and operations held inside running
//! executions and session commands) and `POST /v1/approvals/{id}` (decide once).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use uuid::Uuid;

use super::auth::Authenticated;
use super::error::{ApiError, ErrorBody};
use super::execute::ExecuteOut;
use super::params::IdParam;
use super::{AppState, Json};
use crate::auth::Role;
use crate::domain::record::{Decision, ExecutionRecord, PolicyCheck};
use crate::domain::script::Language;
use crate::domain::verdict::Verdict;
use crate::domain::work::WorkspaceFile;
use crate::executions::HeldOperation;
use crate::sandbox::held;
use crate::sessions::HeldOperation as SessionHeldOperation;

/// A pending execution, as an operator reviews it: a script (with the files it writes and the
/// globs it returns), or a job (`job`, with `validation` merging the verdicts on its content).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub(super) struct PendingOut {
    pub execution_id: Uuid,
    pub agent: String,
    /// The script's language; null for a job.
    pub script_type: Option<Language>,
    /// The script; empty for a job.
    pub script_content: String,
    /// The sha256 of the script (of the job document for a job).
    pub script_sha256: String,
    pub stdin: String,
    /// Seconds: the script's timeout, or the job's `max_runtime_seconds`.
    pub timeout: u64,
    pub validation: Verdict,
    /// What the run's policy decided before the run other than `allow`: an `approve` here is
    /// why the execution waits (the command or finding, the rule, its rendered message).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policy_checks: Vec<PolicyCheck>,
    /// The files a script writes into `/workspace` before it runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<PendingFile>,
    /// The artifact globs a script returns.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<String>,
    /// The job document, as submitted (with its `job_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>, nullable = false)]
    pub job: Option<serde_json::Value>,
    #[serde(with = "time::serde::rfc3339")]
    pub requested_at: OffsetDateTime,
    pub age_secs: u64,
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
}

/// A file a pending script run writes.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub(super) struct PendingFile {
    pub path: String,
    pub content: String,
    /// `utf8` or `base64`.
    pub encoding: String,
}

/// What both lists show of a held operation: who asked, for what, and until when.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub(super) struct HeldRequestOut {
    pub agent: String,
    /// `exec`, `file_read`, `file_write`, `file_create`, `file_delete`, …, `net_connect`.
    #[schema(value_type = String)]
    pub operation: scriptgate_policy::events::OperationType,
    /// The path, the command line, or `address:port`.
    pub target: String,
    /// Executions: the program (resolved path) and its arguments.
    pub command: Option<String>,
    pub argv: Option<Vec<String>>,
    /// The working directory of the process that asked.
    pub cwd: String,
    pub pid: u32,
    pub rule: Option<String>,
    pub message: Option<String>,
    /// The last command lines the run (or the session's command) executed, oldest first.
    pub recent_commands: Vec<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub requested_at: OffsetDateTime,
    /// After this the operation fails (`EACCES`) and leaves the list.
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
}

impl<O> From<held::HeldOperation<O>> for HeldRequestOut {
    fn from(h: held::HeldOperation<O>) -> Self {
        let r = h.request;
        HeldRequestOut {
            agent: h.agent,
            operation: r.operation,
            target: r.target,
            command: r.command,
            argv: r.argv,
            cwd: r.cwd,
            pid: r.pid,
            rule: r.rule,
            message: r.message,
            recent_commands: r.recent_commands,
            requested_at: h.requested_at,
            expires_at: h.expires_at,
        }
    }
}

/// An operation a run-time policy holds (an `approve` rule) inside a running execution: the
/// process waits for the decision while the execution's deadline keeps running.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub(super) struct HeldOperationOut {
    /// Decide it at `POST /v1/approvals/{approval_id}`.
    pub approval_id: Uuid,
    pub execution_id: Uuid,
    #[serde(flatten)]
    pub request: HeldRequestOut,
}

impl From<HeldOperation> for HeldOperationOut {
    fn from(h: HeldOperation) -> Self {
        HeldOperationOut {
            approval_id: h.id,
            execution_id: h.owner,
            request: h.into(),
        }
    }
}

/// An operation a session's run-time policy holds (an `approve` rule) inside a running command:
/// the process waits for the decision while the command's deadline keeps running.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub(super) struct SessionOperationOut {
    /// Decide it at `POST /v1/approvals/{approval_id}`.
    pub approval_id: Uuid,
    pub session_id: Uuid,
    /// The command that asked.
    pub command_id: Option<Uuid>,
    #[serde(flatten)]
    pub request: HeldRequestOut,
}

impl From<SessionHeldOperation> for SessionOperationOut {
    fn from(h: SessionHeldOperation) -> Self {
        SessionOperationOut {
            approval_id: h.id,
            session_id: h.owner.session_id,
            command_id: h.owner.command_id,
            request: h.into(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub(super) struct PendingList {
    pub pending: Vec<PendingOut>,
    /// Operations held inside running executions by their run-time policy, oldest first.
    pub operations: Vec<HeldOperationOut>,
    /// Operations held inside running session commands by their session's policy, oldest first.
    pub session_operations: Vec<SessionOperationOut>,
}

fn pending(r: &ExecutionRecord, timeout: std::time::Duration) -> PendingOut {
    let age = (OffsetDateTime::now_utc() - r.created_at)
        .whole_seconds()
        .max(0) as u64;
    let script = r.run.script();
    PendingOut {
        execution_id: r.id,
        agent: r.agent.clone(),
        script_type: script.map(|s| s.script.language),
        script_content: script.map(|s| s.script.text.clone()).unwrap_or_default(),
        script_sha256: r.script_sha256.clone(),
        stdin: script.map(|s| s.stdin.clone()).unwrap_or_default(),
        timeout: r.run.timeout_secs(),
        validation: r.verdict.clone(),
        policy_checks: r.policy_checks.clone(),
        files: script
            .map(|s| s.files.iter().map(pending_file).collect())
            .unwrap_or_default(),
        artifacts: script.map(|s| s.artifacts.clone()).unwrap_or_default(),
        job: r.run.job().map(|j| j.job.clone()),
        requested_at: r.created_at,
        age_secs: age,
        expires_at: r.created_at + timeout,
    }
}

fn pending_file(f: &WorkspaceFile) -> PendingFile {
    PendingFile {
        path: f.path.clone(),
        content: f.content.clone(),
        encoding: if f.base64 { "base64" } else { "utf8" }.into(),
    }
}

/// Executions waiting for an operator's decision, oldest first.
#[utoipa::path(
    get,
    path = "/v1/approvals",
    tag = "approvals",
    operation_id = "list_pending_approvals",
    responses(
        (status = 200, description = "The pending executions, with script, verdict and expiry, and the operations held inside running executions by their run-time policy.", body = PendingList),
    ),
    security(("operator_token" = []))
)]
pub(super) async fn list(
    State(state): State<AppState>,
    caller: Authenticated,
) -> Result<axum::Json<PendingList>, ApiError> {
    caller.require(Role::Operator)?;
    let timeout = state.executions.policy().timeout;
    let records = state.executions.pending().await?;
    Ok(axum::Json(PendingList {
        pending: records.iter().map(|r| pending(r, timeout)).collect(),
        operations: state
            .executions
            .held_operations()
            .into_iter()
            .map(HeldOperationOut::from)
            .collect(),
        session_operations: state
            .sessions
            .held_operations()
            .into_iter()
            .map(SessionOperationOut::from)
            .collect(),
    }))
}

/// An operator's decision. Unknown fields are rejected.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"decision": "approve", "reason": "reviewed: reads a CSV and prints a summary"}))]
pub(super) struct DecisionIn {
    pub decision: Decision,
    /// Why (kept in the record and the audit log), at most 2000 characters.
    #[serde(default)]
    #[schema(max_length = 2000)]
    pub reason: String,
}

/// Approve (it is queued and runs) or deny a pending execution, or an operation held inside a
/// running one (`approval_id` of `operations`: it proceeds, or fails with `EACCES`) or inside a
/// session command (`approval_id` of `session_operations`: 204); a decision is final.
#[utoipa::path(
    post,
    path = "/v1/approvals/{id}",
    tag = "approvals",
    operation_id = "decide_approval",
    params(("id" = uuid::Uuid, Path, description = "The execution id, or the `approval_id` of a held operation")),
    request_body = DecisionIn,
    responses(
        (status = 200, description = "The execution after the decision (`queued` when approved, `denied` when denied; still `running` after a decision on a held operation).", body = ExecuteOut),
        (status = 204, description = "An operation a session command held was decided: it proceeds or fails with `EACCES`; the command's result and events show it."),
        (status = 400, description = "The id is not a UUID or the body does not match the schema.", body = ErrorBody,
            example = json!({"error": {"type": "schema_error", "message": "decision: unknown variant `maybe`, expected `approve` or `deny`"}})),
        (status = 404, description = "No such execution (or the held operation is no longer waiting: decided, expired, or its run ended).", body = ErrorBody,
            example = json!({"error": {"type": "not_found", "message": "no such execution"}})),
        (status = 409, description = "The execution is not pending approval (already decided, expired or never held).", body = ErrorBody,
            example = json!({"error": {"type": "conflict", "message": "the execution is denied and cannot be decided"}})),
    ),
    security(("operator_token" = []))
)]
pub(super) async fn decide(
    State(state): State<AppState>,
    caller: Authenticated,
    IdParam(id): IdParam,
    Json(body): Json<DecisionIn>,
) -> Result<Response, ApiError> {
    let operator = caller.require(Role::Operator)?;
    if body.reason.chars().count() > 2000 {
        return Err(ApiError::Schema("reason: at most 2000 characters".into()));
    }
    if state.executions.is_held_operation(id) {
        let rec = state
            .executions
            .decide_operation(operator, id, body.decision, body.reason)
            .await?;
        return Ok(axum::Json(ExecuteOut::from(&rec)).into_response());
    }
    if state.sessions.is_held_operation(id) {
        state
            .sessions
            .decide_operation(operator, id, body.decision, &body.reason)
            .await
            .map_err(|_| ApiError::NotFound("the held operation is no longer waiting".into()))?;
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let rec = state
        .executions
        .decide(operator, id, body.decision, body.reason)
        .await?;
    Ok(axum::Json(ExecuteOut::from(&rec)).into_response())
}
