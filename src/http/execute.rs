//! `POST /v1/execute`: validate and run a script, answer with the typed result.

use axum::extract::State;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{AppState, Json};
use crate::config::ExecutionSettings;
use crate::error::ApiError;
use crate::gate::{ExecuteRequest, ExecutionError, ExecutionResult, GateError};
use crate::script::{Language, Script};
use crate::validate::verdict::Verdict;

/// The request body.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecuteIn {
    pub script_content: String,
    pub script_type: Language,
    /// Seconds; defaults to the configured default.
    #[serde(default)]
    pub timeout: Option<u64>,
    #[serde(default)]
    pub stdin: Option<String>,
}

impl ExecuteIn {
    /// The checked request (raw wire values become domain types only here).
    pub fn check(self, settings: &ExecutionSettings) -> Result<ExecuteRequest, ApiError> {
        let timeout = self.timeout.unwrap_or(settings.default_timeout_secs);
        if !(1..=settings.max_timeout_secs).contains(&timeout) {
            return Err(ApiError::Schema(format!(
                "timeout: must be between 1 and {} seconds, got {timeout}",
                settings.max_timeout_secs
            )));
        }
        let stdin = self.stdin.unwrap_or_default();
        if stdin.len() > settings.max_stdin_bytes {
            return Err(ApiError::Schema(format!(
                "stdin: must be at most {} bytes, got {}",
                settings.max_stdin_bytes,
                stdin.len()
            )));
        }
        Ok(ExecuteRequest {
            script: Script::new(self.script_type, self.script_content),
            timeout: std::time::Duration::from_secs(timeout),
            stdin,
            execution_id: None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceUsage {
    pub cpu_time_ms: u64,
    pub max_memory_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimingsMs {
    pub validate: u64,
    pub queue: u64,
    pub create: u64,
    pub start: u64,
    pub run: u64,
    pub cleanup: u64,
}

/// The result of a processed script.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecuteOut {
    pub execution_id: Uuid,
    pub success: bool,
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub timeout: bool,
    pub duration_ms: u64,
    pub validation_failed: bool,
    pub validation: Verdict,
    pub error: Option<ExecutionError>,
    pub resource_usage: ResourceUsage,
    pub timings_ms: TimingsMs,
    /// Served by a container started before the request.
    pub warm: bool,
}

fn ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl From<ExecutionResult> for ExecuteOut {
    fn from(r: ExecutionResult) -> Self {
        let success = r.success();
        let validation_failed = !r.verdict.valid;
        let o = r.outcome.as_ref();
        ExecuteOut {
            execution_id: r.execution_id,
            success,
            exit_code: o.and_then(|o| o.exit_code),
            stdout: o.map(|o| o.stdout.text()).unwrap_or_default(),
            stderr: o.map(|o| o.stderr.text()).unwrap_or_default(),
            stdout_truncated: o.is_some_and(|o| o.stdout.truncated()),
            stderr_truncated: o.is_some_and(|o| o.stderr.truncated()),
            timeout: o.is_some_and(|o| o.timed_out),
            duration_ms: ms(r.duration),
            validation_failed,
            validation: r.verdict,
            error: r.error,
            resource_usage: ResourceUsage {
                cpu_time_ms: o.map_or(0, |o| o.usage.cpu_time_ms),
                max_memory_bytes: o.map_or(0, |o| o.usage.max_memory_bytes),
            },
            timings_ms: TimingsMs {
                validate: ms(r.timings.validate),
                queue: ms(r.timings.queue),
                create: ms(r.timings.create),
                start: ms(r.timings.start),
                run: ms(r.timings.run),
                cleanup: ms(r.timings.cleanup),
            },
            warm: o.is_some_and(|o| o.warm),
        }
    }
}

impl From<GateError> for ApiError {
    fn from(e: GateError) -> Self {
        match e {
            GateError::Overloaded { retry_after_secs } => ApiError::Overloaded { retry_after_secs },
            GateError::Unavailable(m) => ApiError::EngineUnavailable(m),
        }
    }
}

pub async fn execute(
    State(state): State<AppState>,
    Json(body): Json<ExecuteIn>,
) -> Result<axum::Json<ExecuteOut>, ApiError> {
    let request = body.check(state.gate.settings())?;
    let result = state.gate.execute(request).await?;
    Ok(axum::Json(result.into()))
}
