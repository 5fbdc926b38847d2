//! `POST /v1/executions` (accept, run in the background or after approval) and
//! `GET /v1/executions/{id}?wait=N` (long-poll for the result).

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;

use super::auth::Authenticated;
use super::error::{ApiError, ErrorBody};
use super::execute::{ExecuteIn, ExecuteOut, SubmissionOut};
use super::params::{IdParam, Query};
use super::{AppState, Json};
use crate::auth::Role;
use crate::executions::Submitted;

/// Longest long-poll.
pub(super) const MAX_WAIT_SECS: u64 = 60;

/// Accept a script and return at once; it is validated and run in the background (or after
/// approval). Read the result at `links.self`.
#[utoipa::path(
    post,
    path = "/v1/executions",
    tag = "execute",
    operation_id = "submit_execution",
    request_body = ExecuteIn,
    responses(
        (status = 202, description = "Accepted: queued, or pending approval.", body = SubmissionOut,
            example = json!(crate::http::openapi::example_submission())),
        (status = 400, description = "The body does not match the schema; the message names the field.", body = ErrorBody,
            example = json!({"error": {"type": "schema_error", "message": "timeout: must be between 1 and 300 seconds, got 0"}})),
        (status = 403, description = "The token may not select the `policy` the request names (`policy_not_allowed`), the run's policy denies one of its `files` (create, write) or `artifacts` (read) by its `file_rules` (`policy_violation`), or `network` asks for more than the run's policy allows (`network_not_allowed`).", body = ErrorBody,
            example = json!({"error": {"type": "policy_not_allowed", "message": "policy `audit` is not one this token may select (it may select: default)"}})),
        crate::http::openapi::AdmissionResponses,
    ),
    security(("agent_token" = []))
)]
pub(super) async fn submit(
    State(state): State<AppState>,
    caller: Authenticated,
    Json(body): Json<ExecuteIn>,
) -> Result<(StatusCode, axum::Json<SubmissionOut>), ApiError> {
    let caller = caller.require(Role::Agent)?;
    let request = body.into_run(&state.executions, &state.profiles, caller)?;
    let rec = match state.executions.submit(caller, request, false).await? {
        Submitted::Finished(rec) | Submitted::Accepted(rec) => rec,
    };
    Ok((StatusCode::ACCEPTED, axum::Json(SubmissionOut::from(&rec))))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct WaitQuery {
    /// Seconds to wait for the execution to finish (long-poll), 0 to 60; default 0.
    #[serde(default)]
    #[param(minimum = 0, maximum = 60)]
    pub wait: Option<u64>,
}

/// An execution's current state and, once finished, its result. Agents see their own
/// executions; operators see all.
#[utoipa::path(
    get,
    path = "/v1/executions/{id}",
    tag = "execute",
    operation_id = "get_execution",
    params(("id" = uuid::Uuid, Path, description = "The execution id"), WaitQuery),
    responses(
        (status = 200, description = "The execution (the same object `/v1/execute` answers with).",
            body = ExecuteOut, example = json!(crate::http::openapi::example_result())),
        (status = 400, description = "The id is not a UUID, or `wait` is out of range.", body = ErrorBody,
            example = json!({"error": {"type": "schema_error", "message": "id: `abc` is not a UUID"}})),
        (status = 404, description = "No such execution (or not this agent's).", body = ErrorBody,
            example = json!({"error": {"type": "not_found", "message": "no such execution"}})),
    ),
    security(("agent_token" = []), ("operator_token" = []))
)]
pub(super) async fn get(
    State(state): State<AppState>,
    caller: Authenticated,
    IdParam(id): IdParam,
    Query(query): Query<WaitQuery>,
) -> Result<axum::Json<ExecuteOut>, ApiError> {
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
