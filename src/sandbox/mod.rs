//! The sandbox boundary: every run gets a fresh, hardened container that is killed at its deadline
//! and always removed. Validation is defence in depth; this is the boundary.
//!
//! [`Runner`] is the seam the rest of the service depends on; [`docker::DockerSandbox`] implements
//! it against a real engine (and is the only code that talks to Docker). A [`Lease`] runs either a
//! script ([`Lease::run`]) or a job of the job protocol ([`Lease::run_job`], [`jobs`]). A script
//! run can carry a run-time policy ([`Lease::run_enforced`], [`Enforcement`]): the supervisor
//! decides every exec, file operation and connect of the script, the outcome carries the events,
//! and operations the policy holds for approval reach the caller as [`ApprovalAsk`]s.
//!
//! Past 500 lines: the `Runner`/`Lease` seam and the values that cross it are read together by
//! every caller; the engine code lives in `docker/`.

#![warn(unreachable_pub)]

pub mod docker;
pub mod egress;
pub(crate) mod held;
pub mod jobs;
mod output;
pub mod profiles;
pub mod sessions;

use std::time::Duration;

use futures::future::BoxFuture;
use scriptgate_policy::events::{Event, Events};
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, mpsc, oneshot};
use uuid::Uuid;

pub use crate::domain::record::Provenance;
use crate::domain::script::Language;
use crate::domain::verdict::{Severity, Verdict};
use crate::domain::work::ScriptRun;
pub use jobs::{ArtifactFile, JobOutcome, JobRun, job, job_sha256};
pub use output::CappedText;
pub use scriptgate_supervisor::Usage;
pub use scriptgate_supervisor::enforcement::{ApprovalRequest, ApprovalVerdict, EnforceSummary};

/// Container limits. Every one is configurable; the defaults are the service's contract.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    pub memory_mb: u64,
    pub cpus: f64,
    pub pids: i64,
    /// Size of the tmpfs at /tmp.
    pub tmpfs_mb: u64,
    /// Size of the tmpfs at /workspace (jobs' files); the largest file (fsize) is the larger of
    /// the two. /tmp, /workspace and /dev/shm are the only writable places.
    pub workspace_mb: u64,
    pub shm_mb: u64,
    pub nofile: i64,
    /// Bytes of stdout and of stderr kept per run; the rest is discarded and flagged.
    pub output_bytes: u64,
    /// Plot images returned per run at most (profiles with `plots`).
    pub max_images: u32,
    /// Largest plot image returned, in bytes (at most 1 MiB - 1 KiB, one protocol frame).
    pub max_image_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_mb: 512,
            cpus: 1.0,
            pids: 100,
            tmpfs_mb: 64,
            workspace_mb: 256,
            shm_mb: 64,
            nofile: 1024,
            output_bytes: 1 << 20,
            max_images: 8,
            max_image_bytes: scriptgate_supervisor::MAX_ARTIFACT,
        }
    }
}

/// What a lease runs. The fields are private and the one constructor takes a passing verdict for
/// the same language, so no script reaches a container without one.
#[derive(Debug, Clone)]
pub struct RunSpec {
    script: String,
    stdin: String,
    timeout: Duration,
}

/// The verdict does not let the script (or the job) run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("no passing verdict for this run")]
pub struct NotCleared;

impl RunSpec {
    /// The run of `work`, when `verdict` passed it.
    pub fn cleared(work: &ScriptRun, verdict: &Verdict) -> Result<RunSpec, NotCleared> {
        let passed = verdict.valid
            && verdict.layer.is_none()
            && verdict.language == work.script.language
            && verdict
                .findings
                .iter()
                .all(|f| f.severity != Severity::Block);
        if !passed {
            return Err(NotCleared);
        }
        Ok(RunSpec {
            script: work.script.text.clone(),
            stdin: work.stdin.clone(),
            timeout: work.timeout(),
        })
    }

    pub fn script(&self) -> &str {
        &self.script
    }

    pub fn stdin(&self) -> &str {
        &self.stdin
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// A run-time policy for one run ([`Lease::run_enforced`]).
#[derive(Debug, Clone)]
pub struct Enforcement {
    /// The policy, as the supervisor receives it (it compiles it again).
    pub policy: scriptgate_policy::WirePolicy,
    /// Events kept per list in the outcome (the rest are counted as omitted).
    pub event_cap: u32,
    /// How long an operation held for approval waits before it fails.
    pub approval_timeout: Duration,
    /// Where held operations go; without a receiver every `approve` operation is denied at once.
    pub approvals: Option<mpsc::Sender<ApprovalAsk>>,
    /// Where each event goes as the supervisor reports it (in batches of at most a few hundred
    /// milliseconds), for live streams; a slow receiver misses events, never slows the run.
    pub live: Option<broadcast::Sender<Event>>,
    /// Command lines (`[name, args…]`) an operator approved before the run: their `execve` is not
    /// held again (the supervisor reports it as `log`, rule `approved-before-run`).
    pub approved_commands: Vec<Vec<String>>,
}

/// An operation held in the sandbox until `answer` is sent (or dropped: denied). The run's
/// deadline keeps running while it waits.
#[derive(Debug)]
pub struct ApprovalAsk {
    pub request: ApprovalRequest,
    pub answer: oneshot::Sender<ApprovalVerdict>,
}

/// One script to run, for one-step callers ([`RunnerExt::run`]).
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// Fixed when the execution was recorded before it ran (approvals); otherwise the sandbox
    /// assigns one (the id of the container it uses).
    pub execution_id: Option<Uuid>,
    pub language: Language,
    pub spec: RunSpec,
}

/// How long each phase took. Phases served by a warm container before the request count zero;
/// cleanup counts only what the request waited for (removal usually happens after the response).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timings {
    pub create: Duration,
    pub start: Duration,
    pub run: Duration,
    pub cleanup: Duration,
}

/// What happened in the container.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub execution_id: Uuid,
    pub container_id: String,
    /// `None` when the script did not finish (timeout, or the container died).
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: CappedText,
    pub stderr: CappedText,
    pub timed_out: bool,
    pub oom_killed: bool,
    /// The container died without the supervisor reporting an exit (message for the caller).
    pub crashed: Option<String>,
    pub usage: Usage,
    pub timings: Timings,
    /// Served by a container started before the request.
    pub warm: bool,
    /// Files the run returned (plots of a profile with `plots`), in the order they were made.
    pub files: Vec<OutputFile>,
    /// Files left out (over `limits.max_images` or `limits.max_image_bytes`).
    pub files_dropped: u32,
    pub provenance: Provenance,
    /// What the run did through the egress proxy (runs with network access only).
    pub network: Option<egress::NetworkReport>,
}

/// What a run under a run-time policy yields ([`Lease::run_enforced`]): the run's outcome and
/// what its processes did, as the policy decided it.
#[derive(Debug, Clone)]
pub struct EnforcedOutcome {
    pub outcome: RunOutcome,
    /// The events (`None` when the script never ran: a sandbox that cannot enforce the policy).
    pub events: Option<Events>,
    /// How the policy was enforced (`None` when the run ended before the supervisor said).
    pub summary: Option<EnforceSummary>,
}

impl RunOutcome {
    /// An outcome for a run that never started (`crashed` says why).
    pub fn not_run(execution_id: Uuid, reason: String) -> RunOutcome {
        RunOutcome {
            execution_id,
            container_id: String::new(),
            exit_code: None,
            signal: None,
            stdout: CappedText::new(0),
            stderr: CappedText::new(0),
            timed_out: false,
            oom_killed: false,
            crashed: Some(reason),
            usage: Usage::default(),
            timings: Timings::default(),
            warm: false,
            files: Vec::new(),
            files_dropped: 0,
            provenance: Provenance::default(),
            network: None,
        }
    }
}

/// A file a run returned, as its container sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputFile {
    /// Absolute path in the container.
    pub path: String,
    pub data: Vec<u8>,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum SandboxError {
    /// The engine cannot be reached (stopped, socket missing, connection refused).
    #[error("container engine unavailable: {0}")]
    EngineUnavailable(String),
    #[error("runner image `{0}` is not present; build it with `scriptgate images build`")]
    ImageMissing(String),
    /// The container did not become ready (supervisor failed or took too long).
    #[error("sandbox failed to start: {0}")]
    StartFailed(String),
    /// A run-time policy was asked for and this sandbox cannot enforce one (nothing ran).
    #[error("{0}")]
    PolicyUnavailable(String),
    /// The engine answered with an error we do not expect.
    #[error("container engine error: {0}")]
    Engine(#[source] EngineFault),
    /// A run asked for network access and the egress proxy cannot give it (none configured, it
    /// stopped, its socket does not answer, or the runtime cannot reach it).
    #[error("network access unavailable: {0}")]
    NetworkUnavailable(String),
}

/// An engine error, kept whole (with its own sources) for logs.
#[derive(Debug, Clone)]
pub struct EngineFault(std::sync::Arc<dyn std::error::Error + Send + Sync>);

impl EngineFault {
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        EngineFault(std::sync::Arc::new(error))
    }
}

impl std::fmt::Display for EngineFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for EngineFault {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// Whether the sandbox can take runs now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Readiness {
    pub engine: bool,
    /// (image, present)
    pub images: Vec<(String, bool)>,
    pub detail: Option<String>,
}

impl Readiness {
    pub fn ready(&self) -> bool {
        self.engine && self.images.iter().all(|(_, present)| *present)
    }
}

/// A runner profile and the image behind it, as the engine reports it now.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProfileStatus {
    pub profile: profiles::Profile,
    /// Every image of the profile is present.
    pub available: bool,
    /// Content id of the profile's (Python) image.
    pub image_digest: Option<String>,
    /// What the image build recorded (`images/profile/info.py`: Python and package versions).
    pub built: Option<serde_json::Value>,
    /// Warm containers waiting.
    pub pool_ready: usize,
}

/// Gauges of the sandbox's state, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SandboxStats {
    pub containers_in_flight: u64,
    pub pool_ready: u64,
}

/// What a run with network access gets ([`Lease::open_network`]): the egress policy it is held
/// to (the deployment's policy and the request's narrowing, together), its limits and who decides
/// `approve` rules.
#[derive(Debug, Clone)]
pub struct NetworkAccess {
    pub policy: std::sync::Arc<dyn egress::EgressPolicy>,
    pub limits: egress::NetLimits,
    pub approver: Option<std::sync::Arc<dyn egress::NetworkApprover>>,
}

/// A sandbox held for one run. Its execution id is known before the script runs (so the run can
/// be recorded first); dropping a lease without running it discards the sandbox.
pub trait Lease: std::fmt::Debug + Send {
    fn execution_id(&self) -> Uuid;
    /// Started before the request (a warm container).
    fn warm(&self) -> bool;
    /// Runs the script; always yields an outcome (a dying sandbox is part of the outcome).
    fn run(self: Box<Self>, spec: RunSpec) -> BoxFuture<'static, RunOutcome>;
    /// Gives the coming run network access through the egress proxy, checked end to end (the
    /// proxy answers on this sandbox's socket) before it returns; the outcome then carries
    /// [`RunOutcome::network`]. The receiver streams each event as it happens. Sandboxes without
    /// an egress proxy refuse, and so does one whose proxy is dead: the run must not start.
    fn open_network(
        &mut self,
        access: NetworkAccess,
    ) -> BoxFuture<'_, Result<broadcast::Receiver<egress::NetworkEvent>, SandboxError>> {
        drop(access);
        Box::pin(async {
            Err(SandboxError::NetworkUnavailable(
                "this sandbox has no egress proxy".into(),
            ))
        })
    }
    /// Runs the script under a run-time policy. A sandbox that cannot enforce it never runs the
    /// script: the outcome says so in `crashed` (fail closed).
    fn run_enforced(
        self: Box<Self>,
        spec: RunSpec,
        enforcement: Enforcement,
    ) -> BoxFuture<'static, EnforcedOutcome> {
        let id = self.execution_id();
        drop((spec, enforcement));
        Box::pin(async move {
            EnforcedOutcome {
                outcome: RunOutcome::not_run(
                    id,
                    "this sandbox cannot enforce a run-time policy".into(),
                ),
                events: None,
                summary: None,
            }
        })
    }
    /// Runs a job instead of a script; always yields an outcome with a complete result (a dying
    /// sandbox is part of it). Leases that cannot run jobs answer with an `internal_error`.
    fn run_job(self: Box<Self>, run: JobRun) -> BoxFuture<'static, JobOutcome> {
        let id = self.execution_id();
        Box::pin(async move {
            let error = job::JobError::internal("this sandbox does not run jobs");
            JobOutcome::not_run(&run, id, error)
        })
    }
}

/// Runs scripts in isolated, one-use environments.
pub trait Runner: std::fmt::Debug + Send + Sync + 'static {
    /// A ready sandbox for `language`: warm when one is waiting and no id is imposed, otherwise
    /// started now and labelled with `execution_id` (or a new id).
    fn acquire(
        &self,
        language: Language,
        execution_id: Option<Uuid>,
    ) -> BoxFuture<'_, Result<Box<dyn Lease>, SandboxError>>;
    /// [`Runner::acquire`] in a runner profile (one that [`profiles::Profiles::select`] returned).
    /// Runners without profiles serve every one from their only environment.
    fn acquire_in(
        &self,
        profile: &str,
        language: Language,
        execution_id: Option<Uuid>,
    ) -> BoxFuture<'_, Result<Box<dyn Lease>, SandboxError>> {
        let _ = profile;
        self.acquire(language, execution_id)
    }
    fn readiness(&self) -> BoxFuture<'_, Readiness>;
    /// Each runner profile with what its image holds (runners without profiles: none).
    fn profile_status(&self) -> BoxFuture<'_, Vec<ProfileStatus>> {
        Box::pin(async { Vec::new() })
    }
    fn stats(&self) -> SandboxStats;
    /// A started session container (`sessions`); runners without sessions refuse.
    fn open_session(
        &self,
        spec: sessions::SessionSpec,
    ) -> BoxFuture<'_, Result<std::sync::Arc<dyn sessions::SessionBox>, SandboxError>> {
        let _ = spec;
        Box::pin(async {
            Err(SandboxError::StartFailed(
                "this sandbox does not run sessions".into(),
            ))
        })
    }
    /// Stops taking runs, discards warm containers and waits until every container is removed.
    fn shutdown(&self) -> BoxFuture<'_, ()>;
}

/// One-step runs: acquire, then run.
pub trait RunnerExt: Runner {
    fn run(&self, request: RunRequest) -> BoxFuture<'_, Result<RunOutcome, SandboxError>> {
        Box::pin(async move {
            let lease = self.acquire(request.language, request.execution_id).await?;
            Ok(lease.run(request.spec).await)
        })
    }

    /// A job in the runner profile it names (or the default one), in a fresh or warm container.
    fn run_job(&self, run: JobRun) -> BoxFuture<'_, Result<JobOutcome, SandboxError>> {
        Box::pin(async move {
            let profile = run
                .job()
                .profile()
                .unwrap_or(profiles::DEFAULT_PROFILE)
                .to_string();
            let lease = self.acquire_in(&profile, JOB_LANGUAGE, None).await?;
            Ok(lease.run_job(run).await)
        })
    }
}

impl<T: Runner + ?Sized> RunnerExt for T {}

/// The language whose container a job runs in: Bash, whose containers start no interpreter
/// before a script arrives, so nothing is discarded when a job arrives instead.
pub const JOB_LANGUAGE: Language = Language::Bash;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::script::Script;
    use crate::domain::verdict::{Finding, Layer};

    fn work(language: Language) -> ScriptRun {
        ScriptRun::new(
            Script::new(language, "echo hi"),
            String::new(),
            Duration::from_secs(3),
            profiles::DEFAULT_PROFILE.into(),
        )
    }

    fn verdict(language: Language, finding: Option<Severity>) -> Verdict {
        let findings: Vec<Finding> = finding
            .into_iter()
            .map(|severity| Finding {
                layer: Layer::Dangerous,
                rule: "r".into(),
                severity,
                message: "m".into(),
                line: 1,
                column: 1,
            })
            .collect();
        let blocked = findings.iter().any(|f| f.severity == Severity::Block);
        Verdict {
            language,
            valid: !blocked,
            layer: blocked.then_some(Layer::Dangerous),
            findings,
        }
    }

    #[test]
    fn only_a_passing_verdict_for_the_same_language_clears_a_run() {
        let bash = work(Language::Bash);
        let spec = RunSpec::cleared(&bash, &verdict(Language::Bash, None)).expect("cleared");
        assert_eq!(
            (spec.script(), spec.timeout()),
            ("echo hi", Duration::from_secs(3))
        );
        assert!(RunSpec::cleared(&bash, &verdict(Language::Bash, Some(Severity::Warn))).is_ok());
        assert_eq!(
            RunSpec::cleared(&bash, &verdict(Language::Bash, Some(Severity::Block))).err(),
            Some(NotCleared)
        );
        assert_eq!(
            RunSpec::cleared(&bash, &verdict(Language::Python, None)).err(),
            Some(NotCleared)
        );
        // A verdict edited to look valid still carries its blocking finding.
        let mut forged = verdict(Language::Bash, Some(Severity::Block));
        forged.valid = true;
        forged.layer = None;
        assert_eq!(RunSpec::cleared(&bash, &forged).err(), Some(NotCleared));
    }
}
