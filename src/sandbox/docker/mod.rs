//! The Docker implementation of [`Runner`], and the only code that talks to the engine (bollard).
//!
//! A run: create a hardened container ([`spec`]), attach, start, wait for the supervisor's `Ready`,
//! send the job, relay frames until `Exit` (`session`), answer, remove in the background. Warm
//! containers (`pool`) are the same containers prepared before the request. Every container id is
//! tracked from creation; a `Removal` guard removes it whatever happens (success, timeout, client
//! gone, engine error), and the `reaper` removes leftovers of a crash at start-up and on a timer.
//! (Just over 500 lines: the sandbox's lifecycle around `Inner` — start, prepare, lease, readiness,
//! shutdown — is one unit; its settings, [`DockerConfig`], are where it would split next.)

mod cleanup;
mod enforced;
mod engine;
pub mod images;
mod jobrun;
mod network;
mod pool;
mod reaper;
mod session;
mod sessionbox;
pub mod spec;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::query_parameters::{
    AttachContainerOptions, CreateContainerOptions, StartContainerOptions,
};
use futures::future::BoxFuture;
use scriptgate_supervisor::ArtifactRequest;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::egress::{EgressDir, EgressProxy, NetworkEvent, SandboxEgress};
use super::{
    EnforcedOutcome, Enforcement, JobOutcome, JobRun, Lease, Limits, NetworkAccess, Readiness,
    RunOutcome, RunSpec, Runner, SandboxError, SandboxStats,
};
use crate::domain::script::Language;
use crate::sandbox::profiles::{Profile, ProfileConfig, ProfileConfigError, Profiles};
pub(crate) use cleanup::{Cleaner, Removal, short};
pub(crate) use engine::classify;
use engine::client;
pub use engine::connect;
pub use pool::PoolConfig;
use session::Prepared;
use tokio::sync::broadcast;

/// Settings of the Docker sandbox (`[sandbox]` in the config file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DockerConfig {
    /// Engine address (`unix:///var/run/docker.sock`, `tcp://…`); default: `DOCKER_HOST`, then the
    /// local socket.
    pub host: Option<String>,
    /// Containers are labelled with this; start-up only reaps containers of its own instance, so
    /// several services can share one engine.
    pub instance: String,
    pub python_image: String,
    pub bash_image: String,
    /// An OCI runtime registered with the engine, e.g. `runsc` (gVisor). With any runtime but
    /// runc the supervisor and the script run as different uids ([`spec::separate_identities`]).
    pub runtime: Option<String>,
    pub limits: Limits,
    /// How long a container may take to start and report ready.
    pub start_timeout_secs: u64,
    pub pool: PoolConfig,
    /// What any job may ask for at most (`[sandbox.jobs]`).
    pub jobs: crate::sandbox::job::Maxima,
    /// Runner profiles (`[[sandbox.profiles]]`), besides or replacing the built-in `minimal` and
    /// `data` ([`profiles`](crate::sandbox::profiles)).
    pub profiles: Vec<ProfileConfig>,
    /// Start Python ready for a run-time policy (its filter in place from the start), so runs
    /// with a policy keep the warm start; runs without one then pay a few microseconds per file
    /// operation. Off: a run with a policy starts its interpreter again under the filter.
    pub enforcement_ready: bool,
}

impl Default for DockerConfig {
    fn default() -> Self {
        DockerConfig {
            host: None,
            instance: "default".into(),
            python_image: images::DEFAULT_IMAGE.into(),
            bash_image: images::DEFAULT_IMAGE.into(),
            runtime: None,
            limits: Limits::default(),
            start_timeout_secs: 30,
            pool: PoolConfig::default(),
            jobs: crate::sandbox::job::Maxima::default(),
            profiles: Vec::new(),
            enforcement_ready: false,
        }
    }
}

impl DockerConfig {
    /// The built-in and configured profiles, checked.
    pub fn resolved_profiles(&self) -> Result<Profiles, ProfileConfigError> {
        Profiles::resolve(
            &self.python_image,
            &self.bash_image,
            self.pool.size,
            &self.profiles,
        )
    }

    pub fn image(&self, language: Language) -> &str {
        match language {
            Language::Python => &self.python_image,
            Language::Bash => &self.bash_image,
        }
    }
}

/// Runs scripts in one-use Docker containers.
#[derive(Debug, Clone)]
pub struct DockerSandbox {
    inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    docker: Docker,
    /// Whether the API version was negotiated (it is retried until the engine answers once).
    negotiated: std::sync::atomic::AtomicBool,
    config: DockerConfig,
    profiles: Profiles,
    cleaner: Arc<Cleaner>,
    pool: pool::Pool,
    shutdown: CancellationToken,
    /// The service's egress proxy (`None`: no run gets network access).
    egress: Option<network::Egress>,
}

impl DockerSandbox {
    /// Connects, removes containers left by a previous crash of this instance, and starts the
    /// warm pool and the periodic reaper. An engine that is down now is not an error: readiness
    /// reports it, runs answer `engine_unavailable`, and everything resumes once it is back.
    pub async fn start(config: DockerConfig) -> Result<Self, SandboxError> {
        Self::start_with_egress(config, None, false).await
    }

    /// [`DockerSandbox::start`] with the service's egress proxy: every container gets its egress
    /// directory mounted (see `network`), and runs may ask for network access. Under a runtime
    /// other than runc, runs are refused network access unless `host_uds` says the runtime was
    /// set up to reach host Unix sockets.
    pub async fn start_with_egress(
        config: DockerConfig,
        egress: Option<EgressProxy>,
        host_uds: bool,
    ) -> Result<Self, SandboxError> {
        let egress =
            egress.map(|proxy| network::Egress::new(proxy, config.runtime.as_deref(), host_uds));
        let docker = client(config.host.as_deref())?;
        let negotiated = match docker.clone().negotiate_version().await {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(error = %classify(e), "container engine not reachable yet");
                false
            }
        };
        let cleaner = Arc::new(Cleaner::new(docker.clone()));
        let profiles = config
            .resolved_profiles()
            .map_err(|e| SandboxError::StartFailed(e.to_string()))?;
        let inner = Arc::new(Inner {
            pool: pool::Pool::new(&config.pool, &profiles),
            profiles,
            negotiated: std::sync::atomic::AtomicBool::new(negotiated),
            docker,
            config,
            cleaner,
            shutdown: CancellationToken::new(),
            egress,
        });
        reaper::reap_leftovers(&inner).await;
        reaper::spawn_periodic(&inner);
        pool::spawn_refill(&inner);
        Ok(DockerSandbox { inner })
    }

    pub fn config(&self) -> &DockerConfig {
        &self.inner.config
    }

    pub fn profiles(&self) -> &Profiles {
        &self.inner.profiles
    }

    /// The address ranges of the engine's networks (for the egress proxy to deny).
    pub async fn engine_networks(&self) -> Vec<ipnet::IpNet> {
        network::engine_networks(&self.inner.docker).await
    }

    /// Removes containers of other instances named `<prefix>…` whose creating process has died
    /// on this machine (see `reaper::reap_dead_owners`); returns how many.
    pub async fn reap_dead_owners(&self, prefix: &str) -> usize {
        reaper::reap_dead_owners(&self.inner, prefix).await
    }
}

impl Inner {
    /// Negotiates the API version if that has not succeeded yet.
    async fn ensure_engine(&self) -> Result<(), SandboxError> {
        use std::sync::atomic::Ordering;
        if self.negotiated.load(Ordering::SeqCst) {
            return Ok(());
        }
        self.docker
            .clone()
            .negotiate_version()
            .await
            .map_err(classify)?;
        self.negotiated.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// A started container whose supervisor reported ready.
    async fn prepare(
        self: &Arc<Self>,
        profile: &Profile,
        language: Language,
        execution_id: Uuid,
    ) -> Result<Prepared, SandboxError> {
        self.prepare_in(&self.config, profile, language, execution_id)
            .await
    }

    /// [`Inner::prepare`] with other settings than the sandbox's own (a session's limits).
    async fn prepare_in(
        self: &Arc<Self>,
        config: &DockerConfig,
        profile: &Profile,
        language: Language,
        execution_id: Uuid,
    ) -> Result<Prepared, SandboxError> {
        self.ensure_engine().await?;
        let started = Instant::now();
        let egress_dir = match &self.egress {
            Some(egress) => egress.reserve().await?,
            None => None,
        };
        let bind = egress_dir.as_ref().map(EgressDir::bind);
        let body = spec::container(config, profile, language, execution_id, bind);
        let created = self
            .docker
            .create_container(Some(CreateContainerOptions::default()), body)
            .await
            .map_err(classify)?;
        // From here on the container is removed whatever happens.
        let removal = Removal::new(&self.cleaner, &created.id);
        let digest = self
            .docker
            .inspect_container(&created.id, None)
            .await
            .ok()
            .and_then(|c| c.image);
        let create = started.elapsed();
        let attach = self
            .docker
            .attach_container(
                &created.id,
                Some(AttachContainerOptions {
                    stdin: true,
                    stdout: true,
                    stderr: true,
                    stream: true,
                    logs: false,
                    detach_keys: None,
                }),
            )
            .await
            .map_err(classify)?;
        self.docker
            .start_container(&created.id, None::<StartContainerOptions>)
            .await
            .map_err(classify)?;
        let timeout = Duration::from_secs(config.start_timeout_secs);
        let script_uid = spec::separate_identities(config).then(|| spec::sandbox_uid(execution_id));
        let prepared = session::Prepared::ready(
            created.id,
            execution_id,
            language,
            script_uid,
            attach,
            removal,
            timeout,
        )
        .await?;
        let files = profile.plots.then(|| ArtifactRequest {
            dir: spec::PLOT_DIR.to_string(),
            max_count: config.limits.max_images,
            max_bytes: config
                .limits
                .max_image_bytes
                .min(scriptgate_supervisor::MAX_ARTIFACT),
        });
        Ok(prepared
            .with_egress(egress_dir)
            .with_origin(&profile.name, profile.image(language), digest, files)
            .with_timings(create, started.elapsed() - create))
    }

    async fn acquire(
        self: &Arc<Self>,
        profile: &str,
        language: Language,
        execution_id: Option<Uuid>,
    ) -> Result<DockerLease, SandboxError> {
        if self.shutdown.is_cancelled() {
            return Err(SandboxError::EngineUnavailable(
                "the service is shutting down".into(),
            ));
        }
        let profile = self
            .profiles
            .select(Some(profile), language)
            .map_err(|e| SandboxError::StartFailed(e.to_string()))?
            .clone();
        let warm = match execution_id {
            // A warm container already carries its own execution id label.
            None => self.pool.take(&profile.name, language),
            Some(_) => None,
        };
        let prepared = match warm {
            Some(p) => p,
            None => {
                self.prepare(
                    &profile,
                    language,
                    execution_id.unwrap_or_else(Uuid::new_v4),
                )
                .await?
            }
        };
        Ok(DockerLease {
            prepared,
            cleaner: self.cleaner.clone(),
            output_limit: self.config.limits.output_bytes,
            egress: self.egress.clone(),
            network: None,
        })
    }
}

/// A ready container held for one run.
#[derive(Debug)]
struct DockerLease {
    prepared: Prepared,
    cleaner: Arc<Cleaner>,
    output_limit: u64,
    egress: Option<network::Egress>,
    /// The run's network access, once opened.
    network: Option<SandboxEgress>,
}

/// The run's network report in its outcome, once the run is over (the socket closes first, so
/// nothing is counted after the outcome).
async fn with_network(mut outcome: RunOutcome, network: Option<SandboxEgress>) -> RunOutcome {
    if let Some(egress) = network {
        outcome.network = Some(egress.close().await);
    }
    outcome
}

impl Lease for DockerLease {
    fn execution_id(&self) -> Uuid {
        self.prepared.execution_id
    }

    fn warm(&self) -> bool {
        self.prepared.is_warm()
    }

    fn run(self: Box<Self>, spec: RunSpec) -> BoxFuture<'static, RunOutcome> {
        let DockerLease {
            prepared,
            cleaner,
            output_limit,
            network,
            ..
        } = *self;
        Box::pin(async move {
            let ran = prepared.execute(&spec, None, &cleaner, output_limit).await;
            with_network(ran.outcome, network).await
        })
    }

    fn open_network(
        &mut self,
        access: NetworkAccess,
    ) -> BoxFuture<'_, Result<broadcast::Receiver<NetworkEvent>, SandboxError>> {
        Box::pin(async move {
            let Some(egress) = &self.egress else {
                return Err(SandboxError::NetworkUnavailable(
                    "the service runs no egress proxy".into(),
                ));
            };
            let opened = egress.open(&mut self.prepared, access).await?;
            let events = opened.subscribe();
            self.network = Some(opened);
            Ok(events)
        })
    }

    fn run_enforced(
        self: Box<Self>,
        spec: RunSpec,
        enforcement: Enforcement,
    ) -> BoxFuture<'static, EnforcedOutcome> {
        let DockerLease {
            prepared,
            cleaner,
            output_limit,
            network,
            ..
        } = *self;
        Box::pin(async move {
            let mut ran = prepared
                .execute(&spec, Some(enforcement), &cleaner, output_limit)
                .await;
            ran.outcome = with_network(ran.outcome, network).await;
            ran
        })
    }

    fn run_job(self: Box<Self>, run: JobRun) -> BoxFuture<'static, JobOutcome> {
        let DockerLease {
            prepared,
            cleaner,
            network,
            ..
        } = *self;
        Box::pin(async move {
            let mut outcome = prepared.execute_job(&run, &cleaner).await;
            if let Some(egress) = network {
                outcome.network = Some(egress.close().await);
            }
            outcome
        })
    }
}

impl Runner for DockerSandbox {
    fn acquire(
        &self,
        language: Language,
        execution_id: Option<Uuid>,
    ) -> BoxFuture<'_, Result<Box<dyn Lease>, SandboxError>> {
        self.acquire_in(
            crate::sandbox::profiles::DEFAULT_PROFILE,
            language,
            execution_id,
        )
    }

    fn acquire_in(
        &self,
        profile: &str,
        language: Language,
        execution_id: Option<Uuid>,
    ) -> BoxFuture<'_, Result<Box<dyn Lease>, SandboxError>> {
        let profile = profile.to_string();
        Box::pin(async move {
            let lease = self.inner.acquire(&profile, language, execution_id).await?;
            Ok(Box::new(lease) as Box<dyn Lease>)
        })
    }

    fn readiness(&self) -> BoxFuture<'_, Readiness> {
        Box::pin(async move {
            // Only the default profile's images decide readiness: another profile whose image is
            // missing answers `engine_unavailable` for its own runs (and `/v1/profiles` says so).
            let images: Vec<String> = self
                .inner
                .profiles
                .default_profile()
                .images()
                .into_iter()
                .map(String::from)
                .collect();
            if let Err(e) = self.inner.ensure_engine().await {
                return Readiness {
                    engine: false,
                    images: images.into_iter().map(|i| (i, false)).collect(),
                    detail: Some(e.to_string()),
                };
            }
            if let Err(e) = self.inner.docker.ping().await {
                return Readiness {
                    engine: false,
                    images: images.into_iter().map(|i| (i, false)).collect(),
                    detail: Some(classify(e).to_string()),
                };
            }
            let mut present = Vec::new();
            for image in images {
                let ok = self.inner.docker.inspect_image(&image).await.is_ok();
                present.push((image, ok));
            }
            let detail = present
                .iter()
                .find(|(_, ok)| !ok)
                .map(|(i, _)| SandboxError::ImageMissing(i.clone()).to_string());
            Readiness {
                engine: true,
                images: present,
                detail,
            }
        })
    }

    fn profile_status(&self) -> BoxFuture<'_, Vec<super::ProfileStatus>> {
        Box::pin(async move {
            let mut out = Vec::new();
            for profile in self.inner.profiles.all() {
                let mut available = true;
                let mut first = None;
                for image in profile.images() {
                    match self.inner.docker.inspect_image(image).await {
                        Ok(i) => {
                            first.get_or_insert(i);
                        }
                        Err(_) => available = false,
                    }
                }
                let built = first
                    .as_ref()
                    .and_then(|i| i.config.as_ref())
                    .and_then(|c| c.labels.as_ref())
                    .and_then(|l| l.get(images::INFO_LABEL))
                    .and_then(|v| serde_json::from_str(v).ok());
                out.push(super::ProfileStatus {
                    profile: profile.clone(),
                    available,
                    image_digest: first.and_then(|i| i.id),
                    built,
                    pool_ready: self.inner.pool.ready_in(&profile.name),
                });
            }
            out
        })
    }

    fn open_session(
        &self,
        spec: crate::sandbox::sessions::SessionSpec,
    ) -> BoxFuture<'_, Result<Arc<dyn crate::sandbox::sessions::SessionBox>, SandboxError>> {
        Box::pin(async move {
            if self.inner.shutdown.is_cancelled() {
                return Err(SandboxError::EngineUnavailable(
                    "the service is shutting down".into(),
                ));
            }
            let session = self.inner.open_session(spec).await?;
            Ok(Arc::new(session) as Arc<dyn crate::sandbox::sessions::SessionBox>)
        })
    }

    fn stats(&self) -> SandboxStats {
        SandboxStats {
            containers_in_flight: self.inner.cleaner.live_count() as u64,
            pool_ready: self.inner.pool.ready_count() as u64,
        }
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.inner.shutdown.cancel();
            self.inner.pool.drain();
            self.inner.cleaner.tasks.close();
            if tokio::time::timeout(Duration::from_secs(30), self.inner.cleaner.tasks.wait())
                .await
                .is_err()
            {
                tracing::warn!(
                    remaining = self.inner.cleaner.live_count(),
                    "container removal did not finish in time"
                );
            }
            // Last chance for removals that failed while the engine was away (start-up reaping
            // of this instance catches whatever is still left).
            let owed = self.inner.cleaner.retry_failed().await;
            if owed > 0 {
                tracing::warn!(
                    owed,
                    "containers could not be removed: the engine is unavailable"
                );
            }
        })
    }
}
