//! Operators: `GET /v1/approvals` (pending executions) and `POST /v1/approvals/{id}` (decide once).

use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use uuid::Uuid;

use super::auth::Authenticated;
use super::execute::ExecuteOut;
use super::{AppState, Json};
use crate::auth::Role;
use crate::error::ApiError;
use crate::executions::record::{Decision, ExecutionRecord};
use crate::script::Language;
use crate::validate::verdict::Verdict;

/// A pending execution, as an operator reviews it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PendingOut {
    pub execution_id: Uuid,
    pub agent: String,
    pub script_type: Language,
    pub script_content: String,
    pub script_sha256: String,
    pub stdin: String,
    pub timeout: u64,
    pub validation: Verdict,
    #[serde(with = "time::serde::rfc3339")]
    pub requested_at: OffsetDateTime,
    pub age_secs: u64,
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PendingList {
    pub pending: Vec<PendingOut>,
}

fn pending(r: &ExecutionRecord, timeout: std::time::Duration) -> PendingOut {
    let age = (OffsetDateTime::now_utc() - r.created_at)
        .whole_seconds()
        .max(0) as u64;
    PendingOut {
        execution_id: r.id,
        agent: r.agent.clone(),
        script_type: r.language,
        script_content: r.script.clone(),
        script_sha256: r.script_sha256.clone(),
        stdin: r.stdin.clone(),
        timeout: r.timeout_secs,
        validation: r.verdict.clone(),
        requested_at: r.created_at,
        age_secs: age,
        expires_at: r.created_at + timeout,
    }
}

pub async fn list(
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

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionIn {
    pub decision: Decision,
    #[serde(default)]
    pub reason: String,
}

pub async fn decide(
    State(state): State<AppState>,
    caller: Authenticated,
    Path(id): Path<String>,
    Json(body): Json<DecisionIn>,
) -> Result<axum::Json<ExecuteOut>, ApiError> {
    let operator = caller.require(Role::Operator)?;
    let id =
        Uuid::parse_str(&id).map_err(|_| ApiError::Schema(format!("id: `{id}` is not a UUID")))?;
    if body.reason.chars().count() > 2000 {
        return Err(ApiError::Schema("reason: at most 2000 characters".into()));
    }
    let rec = state
        .executions
        .decide(operator, id, body.decision, body.reason)
        .await?;
    Ok(axum::Json(ExecuteOut::from(&rec)))
}
