//! `POST /v1/validate`: the verdict of the validation layers, without running anything.

use axum::extract::State;
use serde::Deserialize;

use super::{AppState, Json};
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
    Json(body): Json<ValidateIn>,
) -> Result<axum::Json<Verdict>, ApiError> {
    let verdict = state
        .gate
        .validate(Script::new(body.script_type, body.script_content))
        .await;
    Ok(axum::Json(verdict))
}
