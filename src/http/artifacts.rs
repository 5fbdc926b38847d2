//! `GET /v1/executions/{id}/artifacts/{path}`: the bytes of a file a run returned, checked
//! against the sha256 its result lists.

use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::auth::Authenticated;
use crate::artifacts::ArtifactError;
use crate::error::{ApiError, ErrorBody};

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
pub async fn download(
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
    let store = state.executions.artifacts().clone();
    let sha = artifact.sha256.clone();
    let data = tokio::task::spawn_blocking(move || store.get(&sha))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .map_err(|e| match e {
            ArtifactError::NotFound => ApiError::NotFound(format!("artifact `{path}` has expired")),
            other => ApiError::Internal(other.to_string()),
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
