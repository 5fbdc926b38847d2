//! `GET /healthz` (the process answers) and `GET /readyz` (the engine and runner images are there).

use axum::extract::State;
use axum::http::StatusCode;
use serde::Serialize;

use super::AppState;

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct Health {
    pub status: &'static str,
}

/// The process answers (liveness).
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "health",
    operation_id = "healthz",
    responses((status = 200, description = "Alive.", body = Health, example = json!({"status": "ok"}))),
    security(())
)]
pub(super) async fn healthz() -> axum::Json<Health> {
    axum::Json(Health { status: "ok" })
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct ImageState {
    pub image: String,
    pub present: bool,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct ReadyOut {
    pub ready: bool,
    pub engine: bool,
    pub images: Vec<ImageState>,
    /// Warm containers waiting for a run (all languages).
    pub pool_ready: u64,
    /// Containers that exist now (warm, running, or being removed).
    pub containers: u64,
    pub detail: Option<String>,
}

/// The engine answers and the runner images are present (readiness).
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "health",
    operation_id = "readyz",
    responses(
        (status = 200, description = "Ready to run scripts.", body = ReadyOut),
        (status = 503, description = "Not ready: `detail` says why (engine down, image missing).", body = ReadyOut),
    ),
    security(())
)]
pub(super) async fn readyz(State(state): State<AppState>) -> (StatusCode, axum::Json<ReadyOut>) {
    let r = state.executions.readiness().await;
    let stats = state.executions.sandbox_stats();
    let ready = r.ready();
    let body = ReadyOut {
        ready,
        engine: r.engine,
        images: r
            .images
            .into_iter()
            .map(|(image, present)| ImageState { image, present })
            .collect(),
        pool_ready: stats.pool_ready,
        containers: stats.containers_in_flight,
        detail: r.detail,
    };
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(body))
}

/// Prometheus metrics (text exposition format).
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "health",
    operation_id = "metrics",
    responses(
        (status = 200, description = "Prometheus text format: `scriptgate_executions_total{outcome}`, `scriptgate_validations_total{language,result}`, `scriptgate_validation_rejections_total{layer,rule}`, `scriptgate_stage_seconds{stage}` (histogram: validate, queue, run), `scriptgate_containers_in_flight`, `scriptgate_pool_ready`.",
            body = String, content_type = "text/plain; version=0.0.4",
            example = "# TYPE scriptgate_executions_total counter\nscriptgate_executions_total{outcome=\"success\"} 12\n"),
    ),
    security(())
)]
pub(super) async fn metrics(State(state): State<AppState>) -> impl axum::response::IntoResponse {
    let stats = state.executions.sandbox_stats();
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        crate::metrics::render(&stats),
    )
}
