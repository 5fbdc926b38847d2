//! `GET /v1/tools`: the tool definitions agent frameworks load (see [`super::catalog`]).

use std::collections::BTreeMap;

use axum::extract::State;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::AppState;
use super::auth::Authenticated;
use super::catalog::ToolMeta;
use super::error::{ApiError, ErrorBody};
use super::params::Query;

/// Which shape to return.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub(super) enum ToolFormat {
    /// OpenAI function calling: `{"type": "function", "function": {…}}`.
    Openai,
    /// Anthropic tool use: `{name, description, input_schema}`.
    Anthropic,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct ToolsQuery {
    /// Only this format; both when absent.
    pub format: Option<ToolFormat>,
}

/// Tool definitions keyed by format, and what each tool implies, keyed by tool name.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct ToolsOut {
    /// OpenAI function-calling tools (absent when another format was asked for).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, value_type = Option<Vec<Object>>)]
    pub openai: Option<Vec<Value>>,
    /// Anthropic tools (absent when another format was asked for).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, value_type = Option<Vec<Object>>)]
    pub anthropic: Option<Vec<Value>>,
    /// Risk level, approval requirement and HTTP endpoint of each tool.
    pub metadata: BTreeMap<String, ToolMeta>,
}

/// The `execute_script` and `validate_script` tool definitions, with the configured limits.
#[utoipa::path(
    get,
    path = "/v1/tools",
    tag = "tools",
    operation_id = "list_tools",
    params(ToolsQuery),
    responses(
        (status = 200, description = "Tool definitions in the requested format(s).", body = ToolsOut),
        (status = 400, description = "Unknown format.", body = ErrorBody,
            example = json!({"error": {"type": "schema_error", "message": "query string: unknown variant `gemini`, expected `openai` or `anthropic`"}})),
    ),
    security(("agent_token" = []), ("operator_token" = []))
)]
pub(super) async fn list(
    State(state): State<AppState>,
    _caller: Authenticated,
    Query(query): Query<ToolsQuery>,
) -> Result<axum::Json<ToolsOut>, ApiError> {
    let catalog = &state.tools;
    let wants = |f: ToolFormat| query.format.is_none_or(|q| q == f);
    Ok(axum::Json(ToolsOut {
        openai: wants(ToolFormat::Openai).then(|| catalog.openai()),
        anthropic: wants(ToolFormat::Anthropic).then(|| catalog.anthropic()),
        metadata: catalog
            .tools
            .iter()
            .map(|t| (t.name.to_string(), t.meta.clone()))
            .collect(),
    }))
}
