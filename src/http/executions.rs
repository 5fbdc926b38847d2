//! `POST /v1/executions` (accept, run in the background or after approval) and
//! `GET /v1/executions/{id}?wait=N` (long-poll for the result).

use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use uuid::Uuid;

use super::auth::Authenticated;
use super::execute::{ExecuteIn, ExecuteOut, SubmissionOut};
use super::{AppState, Json};
use crate::auth::Role;
use crate::error::ApiError;
use crate::executions::Submitted;

/// Longest long-poll.
pub const MAX_WAIT_SECS: u64 = 60;

pub async fn submit(
    State(state): State<AppState>,
    caller: Authenticated,
    Json(body): Json<ExecuteIn>,
) -> Result<(StatusCode, axum::Json<SubmissionOut>), ApiError> {
    let caller = caller.require(Role::Agent)?;
    let request = body.check(state.executions.gate().settings())?;
    let rec = match state.executions.submit(caller, request, false).await? {
        Submitted::Finished(rec) | Submitted::Accepted(rec) => rec,
    };
    Ok((StatusCode::ACCEPTED, axum::Json(SubmissionOut::from(&rec))))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitQuery {
    #[serde(default)]
    pub wait: Option<u64>,
}

pub async fn get(
    State(state): State<AppState>,
    caller: Authenticated,
    Path(id): Path<String>,
    Query(query): Query<WaitQuery>,
) -> Result<axum::Json<ExecuteOut>, ApiError> {
    let id =
        Uuid::parse_str(&id).map_err(|_| ApiError::Schema(format!("id: `{id}` is not a UUID")))?;
    let wait = query.wait.unwrap_or(0);
    if wait > MAX_WAIT_SECS {
        return Err(ApiError::Schema(format!(
            "wait: must be at most {MAX_WAIT_SECS} seconds, got {wait}"
        )));
    }
    let rec = state
        .executions
        .get(&caller.0, id, Duration::from_secs(wait))
        .await?;
    Ok(axum::Json(ExecuteOut::from(&rec)))
}
