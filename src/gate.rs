//! The execution path's building blocks, independent of HTTP and storage: validation (on the
//! blocking pool), admission (bounded concurrency, bounded queue for synchronous callers), sandbox
//! acquisition, and the classification of outcomes into typed errors.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use uuid::Uuid;

use crate::config::ExecutionSettings;
pub use crate::domain::record::{ErrorKind, ExecutionError};
use crate::domain::script::{Language, Script};
use crate::domain::verdict::{Finding, Layer, Severity, Verdict};
use crate::sandbox::{Lease, RunOutcome, Runner, SandboxError};
use crate::validate::Validator;

/// A checked execution request (raw wire values become this only at the HTTP edge).
#[derive(Debug, Clone)]
pub struct ExecuteRequest {
    pub script: Script,
    pub timeout: Duration,
    pub stdin: String,
    /// The runner profile (checked at the edge against the deployment's profiles).
    pub profile: String,
}

/// The gate cannot take the work now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    #[error("too many executions in progress")]
    Overloaded { retry_after_secs: u64 },
    /// The engine or the runner image is not available (retry later).
    #[error("{0}")]
    Unavailable(String),
    /// The sandbox failed to start for another reason.
    #[error("{0}")]
    SandboxFailed(String),
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

    /// Runs at once (for metrics).
    pub fn running(&self) -> usize {
        self.settings.max_concurrent - self.admission.slots.available_permits()
    }

    /// Validation is CPU work of up to a few milliseconds: it runs on the blocking pool.
    pub async fn validate(&self, script: Script) -> Verdict {
        let validator = self.validator.clone();
        let language = script.language;
        let verdict = tokio::task::spawn_blocking(move || validator.validate(&script))
            .await
            .unwrap_or_else(|e| {
                // A panic in validation must not take the request down: fail closed.
                tracing::error!(error = %e, "validation task failed");
                Verdict {
                    language,
                    valid: false,
                    layer: Some(Layer::Syntax),
                    findings: vec![Finding {
                        layer: Layer::Syntax,
                        rule: "validator-failure".into(),
                        severity: Severity::Block,
                        message: "the script could not be validated".into(),
                        line: 1,
                        column: 1,
                    }],
                }
            });
        crate::metrics::validated(&verdict);
        verdict
    }

    /// A slot for a caller that is waiting on the line: beyond the queue bound (or after the
    /// queue timeout) the answer is "overloaded".
    pub async fn admit(&self) -> Result<OwnedSemaphorePermit, GateError> {
        let a = &self.admission;
        if let Ok(permit) = a.slots.clone().try_acquire_owned() {
            return Ok(permit);
        }
        if a.waiting.fetch_add(1, Ordering::SeqCst) >= a.max_queue {
            a.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(GateError::Overloaded {
                retry_after_secs: 1,
            });
        }
        let _waiting = Waiting(&a.waiting);
        match tokio::time::timeout(a.queue_timeout, a.slots.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) => Err(GateError::Unavailable(
                "the service is shutting down".into(),
            )),
            Err(_) => Err(GateError::Overloaded {
                retry_after_secs: 2,
            }),
        }
    }

    /// A slot for accepted background work: it waits as long as it takes.
    pub async fn admit_background(&self) -> Result<OwnedSemaphorePermit, GateError> {
        self.admission
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| GateError::Unavailable("the service is shutting down".into()))
    }

    pub async fn acquire(
        &self,
        language: Language,
        execution_id: Option<Uuid>,
    ) -> Result<Box<dyn Lease>, GateError> {
        self.acquire_in(
            crate::sandbox::profiles::DEFAULT_PROFILE,
            language,
            execution_id,
        )
        .await
    }

    /// [`Gate::acquire`] in a runner profile.
    pub async fn acquire_in(
        &self,
        profile: &str,
        language: Language,
        execution_id: Option<Uuid>,
    ) -> Result<Box<dyn Lease>, GateError> {
        self.runner
            .acquire_in(profile, language, execution_id)
            .await
            .map_err(|e| match e {
                SandboxError::EngineUnavailable(_) | SandboxError::ImageMissing(_) => {
                    GateError::Unavailable(e.to_string())
                }
                other => {
                    tracing::error!(error = %other, "sandbox failure");
                    GateError::SandboxFailed(other.to_string())
                }
            })
    }

    /// The typed error for a run's outcome (`None`: it succeeded).
    pub fn classify(&self, o: &RunOutcome, timeout: Duration) -> Option<ExecutionError> {
        let error = |kind, message: String| Some(ExecutionError::new(kind, message));
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
