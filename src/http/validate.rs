//! `POST /v1/validate`: the verdict of the validation layers, without running anything.

use axum::extract::State;
use serde::Deserialize;

use super::auth::Authenticated;
use super::{AppState, Json};
use crate::auth::Role;
use crate::error::ApiError;
use crate::script::{Language, Script};
use crate::validate::verdict::Verdict;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValidateIn {
    pub script_content: String,
    pub script_type: Language,
}

pub async fn validate(
    State(state): State<AppState>,
    caller: Authenticated,
    Json(body): Json<ValidateIn>,
) -> Result<axum::Json<Verdict>, ApiError> {
    caller.require(Role::Agent)?;
    let script = Script::new(body.script_type, body.script_content);
    Ok(axum::Json(state.executions.gate().validate(script).await))
}
