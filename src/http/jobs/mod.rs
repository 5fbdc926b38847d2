//! Jobs of the job protocol: `POST /v1/jobs` (run one; 200 with its result, or 202 when an
//! operator must approve it first), `GET /v1/jobs/{job_id}` (its result, long-polling with
//! `?wait=`) and `GET /v1/jobs/{job_id}/artifacts/{path}` (a file it returned).
//!
//! The body is the job itself, read by the protocol's own parser (`protocol_version` first): a
//! malformed job is a 400 `schema_error` before any record or container exists. Everything after
//! is the executions lifecycle, as for scripts. The wire shapes the OpenAPI document shows are in
//! [`schema`]; the answers are the protocol's result with the execution's id and the verdicts on
//! the job's content beside it.

pub(crate) mod schema;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::auth::Authenticated;
use super::error::{ApiError, ErrorBody};
use super::execute::{Links, check_policy_files};
use super::executions::{MAX_WAIT_SECS, WaitQuery};
use super::json::RawJson;
use super::params::{JobIdParam, Query};
use super::{AppState, artifacts};
use crate::auth::{Caller, Role};
use crate::domain::content::ContentVerdict;
use crate::domain::network::NetworkGrant;
use crate::domain::record::{ExecutionRecord, JobResult, Status};
use crate::domain::work::{JobWork, Work};
use crate::executions::{Executions, Submitted, job_result};
use crate::sandbox::JOB_LANGUAGE;
use crate::sandbox::job;
use crate::sandbox::profiles::Profiles;

/// A job's result: the protocol's result object, with the execution that ran it and what the
/// service's validation found in the job's content.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct JobOut {
    #[serde(flatten)]
    pub result: JobResult,
    /// The execution that ran the job (its audit trail, approvals and `/v1/executions/{id}`).
    pub execution_id: Uuid,
    /// The verdict on each program, file, diff or argument of the job that validation checked
    /// (programs always; other text when something was found).
    pub validation: Vec<ContentVerdict>,
    /// The run-time policy its commands ran under (absent without one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// Every `run_command` step's events together (and the file steps' and artifact globs'
    /// `log` and `approve` decisions), as `/v1/execute` reports a script's (absent
    /// without a policy; each step's own are in its result).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<scriptgate_policy::events::Events>,
    /// Every lookup and connection of the job's steps through the egress proxy, in order (only
    /// for a job with network access).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_operations: Option<Vec<serde_json::Value>>,
    /// Totals of the job's network activity (only for a job with network access).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_summary: Option<crate::domain::network::NetworkSummary>,
}

impl JobOut {
    /// The answer for a job's record once it ended (`None` before).
    pub(crate) fn of(rec: &ExecutionRecord) -> Option<JobOut> {
        let network = rec.result.as_ref().and_then(|r| r.network.clone());
        let (network_operations, network_summary) = match network {
            Some(n) => (Some(n.network_operations), Some(n.network_summary)),
            None => (None, None),
        };
        Some(JobOut {
            result: job_result(rec)?,
            execution_id: rec.id,
            validation: rec.contents.clone(),
            policy: rec.run.policy().map(str::to_string),
            events: rec.result.as_ref().and_then(|r| r.events.clone()),
            network_operations,
            network_summary,
        })
    }
}

/// 202 body: a job accepted and not finished (waiting for an operator, queued or running).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub(crate) struct JobSubmissionOut {
    pub job_id: Uuid,
    pub execution_id: Uuid,
    pub status: Status,
    pub links: Links,
}

impl JobSubmissionOut {
    fn of(rec: &ExecutionRecord) -> JobSubmissionOut {
        let job_id = rec.job_id().unwrap_or(rec.id);
        JobSubmissionOut {
            job_id,
            execution_id: rec.id,
            status: rec.status,
            links: Links {
                this: format!("/v1/jobs/{job_id}"),
                approval: (rec.status == Status::PendingApproval)
                    .then(|| format!("/v1/approvals/{}", rec.id)),
            },
        }
    }
}

/// The answer for a job's record: 200 with its result once it ended, else 202 with where to
/// read it.
pub(crate) fn answer(rec: &ExecutionRecord) -> Response {
    match JobOut::of(rec) {
        Some(out) => axum::Json(out).into_response(),
        None => (StatusCode::ACCEPTED, axum::Json(JobSubmissionOut::of(rec))).into_response(),
    }
}

/// A job from a request body: parsed by the protocol's parser, with its `job_id` (generated when
/// absent) written into the document, in a known runner profile.
pub(crate) fn intake(bytes: &[u8], profiles: &Profiles) -> Result<Work, ApiError> {
    let parsed = job::parse(bytes).map_err(|e| ApiError::Schema(e.message().to_string()))?;
    let profile = profiles
        .select(parsed.profile.as_deref(), JOB_LANGUAGE)
        .map_err(|e| ApiError::Schema(format!("profile: {e}")))?
        .name
        .clone();
    let job_id = parsed.job_id.unwrap_or_else(Uuid::new_v4);
    let mut document: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::Schema(format!("the job is not JSON: {e}")))?;
    document["job_id"] = serde_json::Value::String(job_id.to_string());
    let network = network_field(&document)?;
    Ok(Work::Job(JobWork {
        job_id,
        job: document,
        profile,
        timeout_secs: parsed.constraints.max_runtime_seconds,
        policy: parsed.policy,
        network,
    }))
}

/// The job's `network` field (the protocol's parser leaves it to the service).
fn network_field(document: &serde_json::Value) -> Result<Option<NetworkGrant>, ApiError> {
    match document.get("network") {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(value) => NetworkGrant::deserialize(value)
            .map(Some)
            .map_err(|e| ApiError::Schema(format!("network: {e}"))),
    }
}

/// The job with the run-time policy chosen for `caller` (its `policy` field, else the token's
/// default, else the deployment's when enforced), its `network` checked against what that policy
/// allows (403 `network_not_allowed` beyond it), its files decided by that policy (see
/// [`check_policy_files`]).
pub(crate) fn with_policy(
    work: Work,
    executions: &Executions,
    caller: &Caller,
) -> Result<Work, ApiError> {
    let Work::Job(mut job) = work else {
        return Ok(work);
    };
    job.policy = executions.choose_policy(caller, job.policy.as_deref())?;
    if let Some(grant) = &job.network {
        executions.check_network(job.policy.as_deref(), grant)?;
    }
    let work = Work::Job(job);
    check_policy_files(executions, &work)?;
    Ok(work)
}

/// Run a job of the job protocol in a one-use container and answer with its complete result.
#[utoipa::path(
    post,
    path = "/v1/jobs",
    tag = "jobs",
    operation_id = "run_job",
    request_body(content = schema::JobIn, description = "A job of the job protocol (1.x). The body is at most `sandbox.jobs.max_job_bytes`.",
        example = json!(schema::example_job())),
    responses(
        (status = 200, description = "The job was checked and, unless something refused it, ran. Read `status` (`success`, `failure`, `timeout`) and each step's `status` and `error`. A job that breaks a constraint the service sees before running (a path outside `allowed_paths`, a command not allowed, a deployment maximum) or whose content fails validation (a secret, a dangerous program) is 200 with `status` `failure`: the offending step fails with its typed error, every other step is `skipped`, nothing ran.",
            body = schema::JobOutDoc, example = json!(schema::example_result())),
        (status = 202, description = "Held for operator approval: read the result at `links.self` (`?wait=N` long-polls).",
            body = JobSubmissionOut, example = json!(schema::example_submission())),
        (status = 400, description = "Not a well-formed job (`schema_error`): not JSON, an unknown or malformed `protocol_version`, an unknown step type, a missing argument or a wrong type, an unknown field at 1.0, an unknown `profile`. Nothing was recorded or run.", body = ErrorBody,
            example = json!({"error": {"type": "schema_error", "message": "protocol version 2.0 is not supported (this agent speaks 1.x)"}})),
        (status = 403, description = "The token may not select the `policy` the job names (`policy_not_allowed`), its `network` asks for more than its policy allows (`network_not_allowed`), or the job's policy denies one of its files (`policy_violation`: a `write_file`, `read_file`, `apply_unified_diff` or `list_tree` path, or an artifact glob). Nothing was recorded or run.", body = ErrorBody,
            example = json!({"error": {"type": "policy_violation", "message": "the policy `strict` denies read of /workspace/.ssh/id_rsa: rule `credentials`: /workspace/.ssh/id_rsa holds credentials: read refused"}})),
        (status = 409, description = "The `job_id` is already used by another job.", body = ErrorBody,
            example = json!({"error": {"type": "conflict", "message": "job_id 6f0b1a52-4f1b-4c55-9d3c-3e2a1b0c9d8e is already used by another job"}})),
        crate::http::openapi::AdmissionResponses,
    ),
    security(("agent_token" = []))
)]
pub(super) async fn submit(
    State(state): State<AppState>,
    caller: Authenticated,
    RawJson(body): RawJson,
) -> Result<Response, ApiError> {
    let caller = caller.require(Role::Agent)?;
    let work = with_policy(intake(&body, &state.profiles)?, &state.executions, caller)?;
    Ok(match state.executions.submit(caller, work, true).await? {
        Submitted::Finished(rec) | Submitted::Accepted(rec) => answer(&rec),
    })
}

/// A job's result once it ended (202 while it waits for an operator, is queued or runs). Agents
/// see their own jobs; operators see all.
#[utoipa::path(
    get,
    path = "/v1/jobs/{job_id}",
    tag = "jobs",
    operation_id = "get_job",
    params(("job_id" = uuid::Uuid, Path, description = "The job's `job_id`"), WaitQuery),
    responses(
        (status = 200, description = "The job ended: its complete result (as `POST /v1/jobs` answers). A job an operator denied, or whose approval expired, fails with a `policy_violation` and every step skipped.",
            body = schema::JobOutDoc, example = json!(schema::example_result())),
        (status = 202, description = "Not finished yet (`pending_approval`, `queued` or `running`).",
            body = JobSubmissionOut, example = json!(schema::example_submission())),
        (status = 400, description = "The id is not a UUID, or `wait` is out of range.", body = ErrorBody,
            example = json!({"error": {"type": "schema_error", "message": "job_id: `abc` is not a UUID"}})),
        (status = 404, description = "No such job (or not this agent's).", body = ErrorBody,
            example = json!({"error": {"type": "not_found", "message": "no such execution"}})),
    ),
    security(("agent_token" = []), ("operator_token" = []))
)]
pub(super) async fn get(
    State(state): State<AppState>,
    caller: Authenticated,
    JobIdParam(job_id): JobIdParam,
    Query(query): Query<WaitQuery>,
) -> Result<Response, ApiError> {
    let wait = query.wait.unwrap_or(0);
    if wait > MAX_WAIT_SECS {
        return Err(ApiError::Schema(format!(
            "wait: must be at most {MAX_WAIT_SECS} seconds, got {wait}"
        )));
    }
    let wait = std::time::Duration::from_secs(wait);
    let rec = state.executions.get_job(&caller.0, job_id, wait).await?;
    Ok(answer(&rec))
}

/// A file a job returned, streamed after its sha256 is checked.
#[utoipa::path(
    get,
    path = "/v1/jobs/{job_id}/artifacts/{path}",
    tag = "jobs",
    operation_id = "get_job_artifact",
    params(
        ("job_id" = uuid::Uuid, Path, description = "The job's `job_id`"),
        ("path" = String, Path, description = "The artifact's `path` without its leading slash, e.g. `workspace/report.json`"),
    ),
    responses(
        (status = 200, description = "The file's bytes, with its MIME type, its length and an `x-content-sha256` header (checked before the first byte is sent).", content_type = "application/octet-stream"),
        (status = 400, description = "The id is not a UUID.", body = ErrorBody,
            example = json!({"error": {"type": "schema_error", "message": "job_id: `abc` is not a UUID"}})),
        (status = 404, description = "No such job, no such artifact, or it expired (`artifacts.retention_secs`).", body = ErrorBody,
            example = json!({"error": {"type": "not_found", "message": "no artifact `workspace/report.json` in this job"}})),
    ),
    security(("agent_token" = []), ("operator_token" = []))
)]
pub(super) async fn artifact(
    State(state): State<AppState>,
    caller: Authenticated,
    Path((job_id, path)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let job_id = Uuid::parse_str(&job_id)
        .map_err(|_| ApiError::Schema(format!("job_id: `{job_id}` is not a UUID")))?;
    let rec = state
        .executions
        .get_job(&caller.0, job_id, std::time::Duration::ZERO)
        .await?;
    artifacts::stream(&state, &rec, &path, "job").await
}
