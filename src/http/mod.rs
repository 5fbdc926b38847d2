//! The HTTP front end: routes, the JSON extractor and wire types (`…In` / `…Out`), one file per
//! resource. Handlers authenticate the caller, convert wire types to checked domain types and call
//! the executions service; nothing below this module knows about axum (`tests/layering.rs`).

mod approvals;
mod artifacts;
mod auth;
pub(crate) mod catalog;
pub(crate) mod error;
mod events;
mod execute;
mod executions;
mod health;
pub mod healthcheck;
mod json;
pub mod mcp;
pub mod openapi;
mod params;
mod profiles;
mod tools;
mod validate;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, Request};
use axum::routing::{get, post};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

use crate::auth::Authenticator;
use crate::executions::Executions;
use error::ApiError;
pub(crate) use execute::{ExecuteIn, ExecuteOut, check_script_text};
pub(crate) use json::{Json, parse as parse_json};
pub(crate) use validate::ValidateIn;

#[derive(Debug, Clone)]
pub(crate) struct AppState {
    pub(crate) executions: Arc<Executions>,
    pub(crate) auth: Arc<Authenticator>,
    pub(crate) tools: Arc<catalog::Catalog>,
    /// The deployment's runner profiles.
    pub(crate) profiles: Arc<crate::sandbox::profiles::Profiles>,
    /// The MCP endpoint's settings; `None` when it is off.
    pub(crate) mcp: Option<mcp::HttpSettings>,
}

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

pub(crate) fn router(state: AppState) -> Router {
    let max_body = state.executions.settings().max_body_bytes;
    // MCP has its own body limit (4 MiB) and JSON-RPC errors; it shares authentication.
    let mcp = mcp::route::routes(&state);
    Router::new()
        .route("/v1/execute", post(execute::execute))
        .route("/v1/validate", post(validate::validate))
        .route("/v1/executions", post(executions::submit))
        .route("/v1/executions/{id}", get(executions::get))
        .route("/v1/executions/{id}/events", get(events::stream))
        .route(
            "/v1/executions/{id}/artifacts/{*path}",
            get(artifacts::download),
        )
        .route("/v1/profiles", get(profiles::list))
        .route("/v1/approvals", get(approvals::list))
        .route("/v1/approvals/{id}", post(approvals::decide))
        .route("/v1/tools", get(tools::list))
        .route("/openapi.json", get(openapi::serve_json))
        .route("/openapi.yaml", get(openapi::serve_yaml))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .merge(mcp)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(max_body))
        .layer(axum::Extension(json::BodyLimit(max_body)))
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(TraceLayer::new_for_http().make_span_with(|req: &Request<_>| {
            let id = req
                .headers()
                .get(&REQUEST_ID)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            tracing::info_span!("request", method = %req.method(), path = %req.uri().path(), request_id = %id)
        }))
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
        .with_state(state)
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::NotFound(format!("no route for {}", uri.path()))
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::MethodNotAllowed(format!("{method} is not allowed on {}", uri.path()))
}
