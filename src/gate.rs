//! The execution path, independent of HTTP: validate → admit (bounded concurrency and queue) →
//! run in the sandbox → a typed result. Every processed script yields an [`ExecutionResult`]; only
//! "cannot take work now" conditions are errors ([`GateError`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use uuid::Uuid;

use crate::config::ExecutionSettings;
use crate::sandbox::{RunOutcome, RunRequest, Runner, SandboxError};
use crate::script::Script;
use crate::validate::Validator;
use crate::validate::verdict::Verdict;

/// A checked execution request.
#[derive(Debug, Clone)]
pub struct ExecuteRequest {
    pub script: Script,
    pub timeout: Duration,
    pub stdin: String,
    /// Set when the execution was recorded before it runs (approvals).
    pub execution_id: Option<Uuid>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    ValidationFailed,
    Timeout,
    ResourceLimitExceeded,
    ExecutionFailure,
    InternalError,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ExecutionError {
    #[serde(rename = "type")]
    pub kind: ErrorKind,
    pub message: String,
}

/// Time spent in each stage of one execution.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StageTimings {
    pub validate: Duration,
    pub queue: Duration,
    pub create: Duration,
    pub start: Duration,
    pub run: Duration,
    pub cleanup: Duration,
}

/// The result of one processed script (valid or not).
#[derive(Debug, Clone)]
pub struct ExecutionResult {
    pub execution_id: Uuid,
    pub verdict: Verdict,
    /// `None` when the script was not run (validation failed, or the sandbox failed to start).
    pub outcome: Option<RunOutcome>,
    pub error: Option<ExecutionError>,
    pub timings: StageTimings,
    pub duration: Duration,
}

impl ExecutionResult {
    pub fn success(&self) -> bool {
        self.error.is_none()
    }
}

/// The gate cannot take the work now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    #[error("too many executions in progress")]
    Overloaded { retry_after_secs: u64 },
    #[error("{0}")]
    Unavailable(String),
}

/// Bounded concurrency with a bounded queue in front of it.
#[derive(Debug)]
struct Admission {
    slots: Arc<Semaphore>,
    waiting: AtomicUsize,
    max_queue: usize,
    queue_timeout: Duration,
}

struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Admission {
    async fn admit(&self) -> Result<OwnedSemaphorePermit, GateError> {
        if let Ok(permit) = self.slots.clone().try_acquire_owned() {
            return Ok(permit);
        }
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= self.max_queue {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(GateError::Overloaded {
                retry_after_secs: 1,
            });
        }
        let _waiting = Waiting(&self.waiting);
        match tokio::time::timeout(self.queue_timeout, self.slots.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) => Err(GateError::Unavailable(
                "the service is shutting down".into(),
            )),
            Err(_) => Err(GateError::Overloaded {
                retry_after_secs: 2,
            }),
        }
    }
}

/// Validation, admission and the sandbox, composed.
#[derive(Debug)]
pub struct Gate {
    validator: Validator,
    runner: Arc<dyn Runner>,
    admission: Admission,
    settings: ExecutionSettings,
    memory_mb: u64,
}

impl Gate {
    pub fn new(
        validator: Validator,
        runner: Arc<dyn Runner>,
        settings: ExecutionSettings,
        memory_mb: u64,
    ) -> Self {
        Gate {
            admission: Admission {
                slots: Arc::new(Semaphore::new(settings.max_concurrent)),
                waiting: AtomicUsize::new(0),
                max_queue: settings.max_queue,
                queue_timeout: Duration::from_secs(settings.queue_timeout_secs),
            },
            validator,
            runner,
            settings,
            memory_mb,
        }
    }

    pub fn settings(&self) -> &ExecutionSettings {
        &self.settings
    }

    pub fn validator(&self) -> &Validator {
        &self.validator
    }

    pub fn runner(&self) -> &Arc<dyn Runner> {
        &self.runner
    }

    /// Validation is CPU work of up to a few milliseconds: it runs on the blocking pool.
    pub async fn validate(&self, script: Script) -> Verdict {
        let validator = self.validator.clone();
        let fallback = script.language;
        tokio::task::spawn_blocking(move || validator.validate(&script))
            .await
            .unwrap_or_else(|e| {
                // A panic in validation must not take the request down with a 500: fail closed.
                tracing::error!(error = %e, "validation task failed");
                Verdict {
                    language: fallback,
                    valid: false,
                    layer: Some(crate::validate::verdict::Layer::Syntax),
                    findings: vec![crate::validate::verdict::Finding {
                        layer: crate::validate::verdict::Layer::Syntax,
                        rule: "validator-failure".into(),
                        severity: crate::validate::verdict::Severity::Block,
                        message: "the script could not be validated".into(),
                        line: 1,
                        column: 1,
                    }],
                }
            })
    }

    pub async fn execute(&self, request: ExecuteRequest) -> Result<ExecutionResult, GateError> {
        let started = Instant::now();
        let verdict = self.validate(request.script.clone()).await;
        let mut timings = StageTimings {
            validate: started.elapsed(),
            ..StageTimings::default()
        };
        if !verdict.valid {
            let message = verdict.summary();
            return Ok(ExecutionResult {
                execution_id: request.execution_id.unwrap_or_else(Uuid::new_v4),
                verdict,
                outcome: None,
                error: Some(ExecutionError {
                    kind: ErrorKind::ValidationFailed,
                    message,
                }),
                timings,
                duration: started.elapsed(),
            });
        }
        let queued = Instant::now();
        let _permit = self.admission.admit().await?;
        timings.queue = queued.elapsed();
        let run = RunRequest {
            execution_id: request.execution_id,
            language: request.script.language,
            script: request.script.text,
            stdin: request.stdin,
            timeout: request.timeout,
        };
        match self.runner.run(run).await {
            Ok(outcome) => {
                timings.create = outcome.timings.create;
                timings.start = outcome.timings.start;
                timings.run = outcome.timings.run;
                timings.cleanup = outcome.timings.cleanup;
                let error = self.classify(&outcome, request.timeout);
                Ok(ExecutionResult {
                    execution_id: outcome.execution_id,
                    verdict,
                    outcome: Some(outcome),
                    error,
                    timings,
                    duration: started.elapsed(),
                })
            }
            Err(e @ (SandboxError::EngineUnavailable(_) | SandboxError::ImageMissing(_))) => {
                Err(GateError::Unavailable(e.to_string()))
            }
            Err(e) => {
                tracing::error!(error = %e, "sandbox failure");
                Ok(ExecutionResult {
                    execution_id: request.execution_id.unwrap_or_else(Uuid::new_v4),
                    verdict,
                    outcome: None,
                    error: Some(ExecutionError {
                        kind: ErrorKind::InternalError,
                        message: "the sandbox failed to start".into(),
                    }),
                    timings,
                    duration: started.elapsed(),
                })
            }
        }
    }

    fn classify(&self, o: &RunOutcome, timeout: Duration) -> Option<ExecutionError> {
        let error = |kind, message: String| Some(ExecutionError { kind, message });
        if o.timed_out {
            return error(
                ErrorKind::Timeout,
                format!(
                    "the script did not finish within {}s and was killed",
                    timeout.as_secs()
                ),
            );
        }
        if o.oom_killed {
            return error(
                ErrorKind::ResourceLimitExceeded,
                format!(
                    "the script exceeded the memory limit ({} MiB) and was killed",
                    self.memory_mb
                ),
            );
        }
        if let Some(reason) = &o.crashed {
            tracing::warn!(execution_id = %o.execution_id, %reason, "container ended without an exit report");
            return error(
                ErrorKind::InternalError,
                "the sandbox stopped unexpectedly".into(),
            );
        }
        match (o.exit_code, o.signal) {
            (Some(0), _) => None,
            (Some(code), Some(sig)) => error(
                ErrorKind::ExecutionFailure,
                format!("the script was killed by signal {sig} (exit code {code})"),
            ),
            (Some(code), None) => error(
                ErrorKind::ExecutionFailure,
                format!("the script exited with code {code}"),
            ),
            (None, _) => error(
                ErrorKind::InternalError,
                "the script's exit status is unknown".into(),
            ),
        }
    }
}
