//! Operators: `GET /v1/approvals` (pending executions) and `POST /v1/approvals/{id}` (decide once).

use axum::extract::State;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use uuid::Uuid;

use super::auth::Authenticated;
use super::error::{ApiError, ErrorBody};
use super::execute::ExecuteOut;
use super::params::IdParam;
use super::{AppState, Json};
use crate::auth::Role;
use crate::domain::record::{Decision, ExecutionRecord};
use crate::domain::script::Language;
use crate::domain::verdict::Verdict;
use crate::domain::work::WorkspaceFile;

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

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub(super) struct PendingList {
    pub pending: Vec<PendingOut>,
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
        (status = 200, description = "The pending executions, with script, verdict and expiry.", body = PendingList),
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

/// Approve (it is queued and runs) or deny a pending execution; a decision is final.
#[utoipa::path(
    post,
    path = "/v1/approvals/{id}",
    tag = "approvals",
    operation_id = "decide_approval",
    params(("id" = uuid::Uuid, Path, description = "The execution id")),
    request_body = DecisionIn,
    responses(
        (status = 200, description = "The execution after the decision (`queued` when approved, `denied` when denied).", body = ExecuteOut),
        (status = 400, description = "The id is not a UUID or the body does not match the schema.", body = ErrorBody,
            example = json!({"error": {"type": "schema_error", "message": "decision: unknown variant `maybe`, expected `approve` or `deny`"}})),
        (status = 404, description = "No such execution.", body = ErrorBody,
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
) -> Result<axum::Json<ExecuteOut>, ApiError> {
    let operator = caller.require(Role::Operator)?;
    if body.reason.chars().count() > 2000 {
        return Err(ApiError::Schema("reason: at most 2000 characters".into()));
    }
    let rec = state
        .executions
        .decide(operator, id, body.decision, body.reason)
        .await?;
    Ok(axum::Json(ExecuteOut::from(&rec)))
}
