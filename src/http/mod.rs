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
pub(crate) mod jobs;
mod json;
pub mod mcp;
pub mod openapi;
mod params;
mod profiles;
mod session_events;
mod session_exec;
mod session_files;
mod session_jobs;
mod sessions;
mod sse;
mod tools;
mod validate;
mod workspace;

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
    pub(crate) sessions: Arc<crate::sessions::Sessions>,
    pub(crate) auth: Arc<Authenticator>,
    pub(crate) tools: Arc<catalog::Catalog>,
    /// The deployment's runner profiles.
    pub(crate) profiles: Arc<crate::sandbox::profiles::Profiles>,
    /// The MCP endpoint's settings; `None` when it is off.
    pub(crate) mcp: Option<mcp::HttpSettings>,
}

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// How much of an oversized job is read and discarded before the 413, so that even a job far
/// over `sandbox.jobs.max_job_bytes` (a 200 MB `write_file`) gets the typed answer.
const JOB_DRAIN: usize = 256 << 20;

pub(crate) fn router(state: AppState) -> Router {
    let max_body = state.executions.settings().max_body_bytes;
    let job_limit = json::BodyLimit {
        bytes: usize::try_from(state.executions.job_maxima().max_job_bytes).unwrap_or(usize::MAX),
        setting: "sandbox.jobs.max_job_bytes",
        drain: JOB_DRAIN,
    };
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
        .route(
            "/v1/jobs",
            post(jobs::submit).layer(axum::Extension(job_limit)),
        )
        .route("/v1/jobs/{job_id}", get(jobs::get))
        .route("/v1/jobs/{job_id}/artifacts/{*path}", get(jobs::artifact))
        .route("/v1/profiles", get(profiles::list))
        .route("/v1/sessions", post(sessions::create).get(sessions::list))
        .route(
            "/v1/sessions/{id}",
            get(sessions::get)
                .delete(sessions::delete)
                .patch(sessions::patch),
        )
        .route("/v1/sessions/{id}/exec", post(session_exec::exec))
        .route("/v1/sessions/{id}/exec/stream", post(session_exec::exec_stream))
        .route(
            "/v1/sessions/{id}/commands/{command_id}/kill",
            post(session_exec::kill),
        )
        .route(
            "/v1/sessions/{id}/commands/{command_id}/output",
            get(session_exec::output),
        )
        .route("/v1/sessions/{id}/history", get(session_exec::history))
        .route(
            "/v1/sessions/{id}/jobs",
            post(session_jobs::run).layer(axum::Extension(job_limit)),
        )
        .route("/v1/sessions/{id}/events", get(session_events::stream))
        .route(
            "/v1/sessions/{id}/events/history",
            get(session_events::history),
        )
        .route("/v1/sessions/{id}/files", get(session_files::list))
        .route(
            "/v1/sessions/{id}/files/{*path}",
            get(session_files::download)
                .put(session_files::upload)
                .delete(session_files::remove)
                .layer(DefaultBodyLimit::max(session_files::MAX_UPLOAD)),
        )
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
        .layer(axum::Extension(json::BodyLimit::new(
            max_body,
            "execution.max_body_bytes",
        )))
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
