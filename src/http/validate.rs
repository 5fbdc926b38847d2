//! `POST /v1/validate`: the verdict of the validation layers, without running anything.

use axum::extract::State;
use serde::Deserialize;

use super::auth::Authenticated;
use super::error::{ApiError, ErrorBody};
use super::{AppState, Json};
use crate::auth::Role;
use crate::domain::script::{Language, Script};
use crate::domain::verdict::Verdict;

/// A script to check. Unknown fields are rejected.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"script_content": "import os\nos.system(input())\n", "script_type": "python"}))]
pub(crate) struct ValidateIn {
    /// The script source: not empty, no NUL characters.
    #[schema(min_length = 1, pattern = "^[^\\x00]*$")]
    pub script_content: String,
    pub script_type: Language,
}

/// Run the validation layers on a script without running it.
#[utoipa::path(
    post,
    path = "/v1/validate",
    tag = "execute",
    operation_id = "validate_script",
    request_body = ValidateIn,
    responses(
        (status = 200, description = "The verdict: `valid`, the first layer that rejected the script, and every finding of that layer (warn findings of later layers too).",
            body = Verdict, example = json!(crate::http::openapi::example_rejected())),
        (status = 400, description = "The body does not match the schema; the message names the field.", body = ErrorBody,
            example = json!({"error": {"type": "schema_error", "message": "missing field `script_type`"}})),
    ),
    security(("agent_token" = []))
)]
pub(super) async fn validate(
    State(state): State<AppState>,
    caller: Authenticated,
    Json(body): Json<ValidateIn>,
) -> Result<axum::Json<Verdict>, ApiError> {
    caller.require(Role::Agent)?;
    super::execute::check_script_text(&body.script_content)?;
    let script = Script::new(body.script_type, body.script_content);
    Ok(axum::Json(state.executions.validate(script).await))
}
