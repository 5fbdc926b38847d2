//! `GET /v1/executions/{id}/artifacts/{path}` (and a job's `GET /v1/jobs/{job_id}/artifacts/{path}`):
//! the bytes of a file a run returned, streamed once they are checked against the sha256 its
//! result lists (a blob that does not match is never sent).

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::auth::Authenticated;
use super::error::{ApiError, ErrorBody};
use crate::artifacts::ArtifactError;
use crate::domain::record::ExecutionRecord;

#[utoipa::path(
    get,
    path = "/v1/executions/{id}/artifacts/{path}",
    tag = "execute",
    operation_id = "get_artifact",
    params(
        ("id" = uuid::Uuid, Path, description = "The execution id"),
        ("path" = String, Path, description = "The artifact's `path` without its leading slash, e.g. `tmp/.scriptgate-plots/figure-001.png`"),
    ),
    responses(
        (status = 200, description = "The file's bytes, with its MIME type, its length and an `x-content-sha256` header (checked before the first byte is sent).", content_type = "application/octet-stream"),
        (status = 400, description = "The id is not a UUID.", body = ErrorBody,
            example = json!({"error": {"type": "schema_error", "message": "id: `abc` is not a UUID"}})),
        (status = 404, description = "No such execution, no such artifact, or it expired (`artifacts.retention_secs`).", body = ErrorBody,
            example = json!({"error": {"type": "not_found", "message": "no artifact `tmp/x.png` in this execution"}})),
    ),
    security(("agent_token" = []), ("operator_token" = []))
)]
pub(super) async fn download(
    State(state): State<AppState>,
    caller: Authenticated,
    Path((id, path)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let id = uuid::Uuid::parse_str(&id)
        .map_err(|_| ApiError::Schema(format!("id: `{id}` is not a UUID")))?;
    let rec = state
        .executions
        .get(&caller.0, id, std::time::Duration::ZERO)
        .await?;
    stream(&state, &rec, &path, "execution").await
}

/// The artifact at `/{path}` of `rec`, streamed from the store after its sha256 is checked.
pub(super) async fn stream(
    state: &AppState,
    rec: &ExecutionRecord,
    path: &str,
    of: &str,
) -> Result<Response, ApiError> {
    let wanted = format!("/{path}");
    let artifact = rec
        .result
        .as_ref()
        .and_then(|r| r.artifacts.iter().find(|a| a.path == wanted))
        .ok_or_else(|| ApiError::NotFound(format!("no artifact `{path}` in this {of}")))?;
    let (file, size) = state
        .executions
        .artifact_file(&artifact.sha256)
        .await
        .map_err(|e| match e {
            ArtifactError::NotFound => ApiError::NotFound(format!("artifact `{path}` has expired")),
            other => other.into(),
        })?;
    let body = Body::from_stream(tokio_util::io::ReaderStream::new(
        tokio::fs::File::from_std(file),
    ));
    Ok((
        [
            (header::CONTENT_TYPE, artifact.mime_type.clone()),
            (header::CONTENT_LENGTH, size.to_string()),
            (
                header::HeaderName::from_static("x-content-sha256"),
                artifact.sha256.clone(),
            ),
        ],
        body,
    )
        .into_response())
}
