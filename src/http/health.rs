//! `GET /healthz` (the process answers) and `GET /readyz` (the engine and runner images are there).

use axum::extract::State;
use axum::http::StatusCode;
use serde::Serialize;

use super::AppState;

#[derive(Debug, Serialize)]
pub struct Health {
    pub status: &'static str,
}

pub async fn healthz() -> axum::Json<Health> {
    axum::Json(Health { status: "ok" })
}

#[derive(Debug, Serialize)]
pub struct ImageState {
    pub image: String,
    pub present: bool,
}

#[derive(Debug, Serialize)]
pub struct ReadyOut {
    pub ready: bool,
    pub engine: bool,
    pub images: Vec<ImageState>,
    /// Warm containers waiting for a run (all languages).
    pub pool_ready: u64,
    /// Containers that exist now (warm, running, or being removed).
    pub containers: u64,
    pub detail: Option<String>,
}

pub async fn readyz(State(state): State<AppState>) -> (StatusCode, axum::Json<ReadyOut>) {
    let runner = state.executions.gate().runner();
    let r = runner.readiness().await;
    let stats = runner.stats();
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
