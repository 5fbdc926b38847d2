//! `POST /v1/sessions/{id}/jobs`: a job of the job protocol run in a session's workspace, checked
//! and validated exactly as `POST /v1/jobs` checks one (the protocol's parser, the deployment's
//! maxima, every program and file through validation), answered with the same complete result
//! (per-step results; artifacts with their sha256, checked as they arrived). The files stay in
//! the session: read them with `GET /v1/sessions/{id}/files/{path}`.
//!
//! A session job is not an execution: nothing waits for an operator. A job the deployment's
//! approval policy would hold is refused (403 `approval_required`); run it with `POST /v1/jobs`.

use axum::extract::State;
use axum::http::StatusCode;
use scriptgate_policy::events::Events;
use serde::Serialize;
use uuid::Uuid;

use super::auth::Authenticated;
use super::error::{ApiError, ErrorBody};
use super::json::RawJson;
use super::params::IdParam;
use super::{AppState, jobs};
use crate::auth::{Caller, Role};
use crate::domain::content::ContentVerdict;
use crate::domain::record::JobResult;
use crate::domain::work::{JobWork, Work};
use crate::executions::check::{Cleared, Refusal};
use crate::sessions::Session;

/// A session job's result: the protocol's result object, with the session that ran it and what
/// validation found in the job's content.
#[derive(Debug, Clone, Serialize)]
pub(super) struct SessionJobOut {
    #[serde(flatten)]
    pub result: JobResult,
    pub session_id: Uuid,
    /// The verdict on each program, file, diff or argument of the job that validation checked.
    pub validation: Vec<ContentVerdict>,
    /// The session's policy's `log` decisions on the job's files, made before it ran
    /// (`file_operations`, as `POST /v1/jobs` lists them on its execution); absent when there
    /// are none. What its commands did is in each step's `events`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<Events>,
}

/// The files `work` writes, reads, patches, lists or returns, against the session's policy's
/// `file_rules`, as `POST /v1/jobs` decides them under the job's: a `deny` is 403
/// `policy_violation`; an `approve` is 403 `approval_required` (a session's job answers
/// synchronously and is not held for an operator: `POST /v1/jobs` holds one); each `approve` and
/// `log` is audited under the session and comes back as an event for the result. Its commands
/// then run under the session's policy.
async fn session_policy_files(
    state: &AppState,
    caller: &Caller,
    session: &Session,
    work: &Work,
) -> Result<Option<Events>, ApiError> {
    let (Work::Job(job), Some(policy)) = (work, session.policy.as_deref()) else {
        return Ok(None);
    };
    let under = Work::Job(JobWork {
        policy: Some(policy.to_string()),
        ..job.clone()
    });
    let checks = state.executions.policy_files(&under)?;
    Ok(state
        .sessions
        .job_file_decisions(caller, session, &checks)
        .await?)
}

/// Run a job of the job protocol in the session's workspace and answer with its result.
#[utoipa::path(
    post,
    path = "/v1/sessions/{id}/jobs",
    tag = "sessions",
    operation_id = "session_run_job",
    params(("id" = Uuid, Path, description = "The session id")),
    request_body(content = jobs::schema::JobIn, description = "A job of the job protocol (1.x), as for `POST /v1/jobs`; it runs in the session's container (its profile), in its workspace. At most `sandbox.jobs.max_job_bytes`."),
    responses(
        (status = 200, description = "The job's complete result, as `POST /v1/jobs` answers it, with `session_id` in place of `execution_id` and, when the session's policy logged any of its files before it ran, `events` (their `file_operations`). A job refused before it ran (a constraint, a deployment maximum, content that fails validation) is 200 with `status` `failure`, the offending step failed and every other step `skipped`. Artifacts carry their sha256; their files stay in the session.", body = serde_json::Value),
        (status = 400, description = "Not a well-formed job (`schema_error`).", body = ErrorBody),
        (status = 403, description = "The deployment's approval policy would hold this job (`approval_required`): run it with `POST /v1/jobs`; or the session's run-time policy denies one of its files (`policy_violation`: a `write_file`, `read_file`, `apply_unified_diff` or `list_tree` path, or an artifact glob). Under the session's policy its `run_command` steps run under that policy, each step's result carrying its `events`.", body = ErrorBody),
        (status = 404, description = "No such session (`session_not_found`).", body = ErrorBody),
        (status = 409, description = "A command or job runs (`session_busy`), or the session is stopped (`session_stopped`).", body = ErrorBody),
        (status = 413, description = "The job is larger than `sandbox.jobs.max_job_bytes`.", body = ErrorBody),
    ),
    security(("agent_token" = []))
)]
pub(super) async fn run(
    State(state): State<AppState>,
    caller: Authenticated,
    IdParam(id): IdParam,
    RawJson(body): RawJson,
) -> Result<axum::Json<SessionJobOut>, ApiError> {
    let caller = caller.require(Role::Agent)?;
    // The session first: an unknown one answers before any validation work.
    let session = state.sessions.get(caller, id)?;
    let work = jobs::intake(&body, &state.profiles)?;
    if work.network().is_some() {
        return Err(ApiError::Schema(
            "network: a job in a session has its session's network access (set `network` when \
             creating the session)"
                .into(),
        ));
    }
    let logged = session_policy_files(&state, caller, &session, &work).await?;
    let checked = state.executions.check(&work).await;
    let (verdict, contents) = (checked.verdict, checked.contents);
    let answer = |result: JobResult| SessionJobOut {
        result,
        session_id: id,
        validation: contents.clone(),
        events: logged.clone(),
    };
    let run = match checked.outcome {
        Ok(Cleared::Job(run)) => run,
        Err(Refusal::Refused {
            result: Some(result),
            ..
        }) => return Ok(axum::Json(answer(*result))),
        Ok(Cleared::Script(_)) | Err(_) => {
            return Err(ApiError::Internal(
                "a job's check answered without a job result".into(),
            ));
        }
    };
    if state.executions.policy().requires(&verdict) {
        return Err(ApiError::Session {
            status: StatusCode::FORBIDDEN,
            kind: "approval_required",
            message:
                "the approval policy holds this job for an operator; run it with POST /v1/jobs"
                    .into(),
        });
    }
    let end = state.sessions.run_job(caller, id, *run).await?;
    Ok(axum::Json(answer(end.result)))
}
