//! `GET /v1/executions/{id}/artifacts/{path}`: the bytes of a file a run returned, checked
//! against the sha256 its result lists.

use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::auth::Authenticated;
use super::error::{ApiError, ErrorBody};
use crate::artifacts::ArtifactError;

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
        (status = 200, description = "The file's bytes, with its MIME type and an `x-content-sha256` header.", content_type = "application/octet-stream"),
        (status = 400, description = "The id is not a UUID.", body = ErrorBody,
            example = json!({"error": {"type": "schema_error", "message": "id: `abc` is not a UUID"}})),
        (status = 404, description = "No such execution, no such artifact, or it expired.", body = ErrorBody,
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
    let wanted = format!("/{path}");
    let artifact = rec
        .result
        .as_ref()
        .and_then(|r| r.artifacts.iter().find(|a| a.path == wanted))
        .ok_or_else(|| ApiError::NotFound(format!("no artifact `{path}` in this execution")))?;
    let data = state
        .executions
        .artifact(&artifact.sha256)
        .await
        .map_err(|e| match e {
            ArtifactError::NotFound => ApiError::NotFound(format!("artifact `{path}` has expired")),
            other => other.into(),
        })?;
    Ok((
        [
            (header::CONTENT_TYPE, artifact.mime_type.clone()),
            (
                header::HeaderName::from_static("x-content-sha256"),
                artifact.sha256.clone(),
            ),
        ],
        data,
    )
        .into_response())
}
