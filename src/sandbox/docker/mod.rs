//! The Docker implementation of [`Runner`], and the only code that talks to the engine (bollard).
//!
//! A run: create a hardened container ([`spec`]), attach, start, wait for the supervisor's `Ready`,
//! send the job, relay frames until `Exit` (`session`), answer, remove in the background. Warm
//! containers (`pool`) are the same containers prepared before the request. Every container id is
//! tracked from creation; a `Removal` guard removes it whatever happens (success, timeout, client
//! gone, engine error), and the `reaper` removes leftovers of a crash at start-up and on a timer.

pub mod images;
mod jobrun;
mod pool;
mod reaper;
mod session;
mod sessionbox;
pub mod spec;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::query_parameters::{
    AttachContainerOptions, CreateContainerOptions, KillContainerOptions, RemoveContainerOptions,
    StartContainerOptions,
};
use futures::future::BoxFuture;
use scriptgate_supervisor::ArtifactRequest;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use super::{
    JobOutcome, JobRun, Lease, Limits, Readiness, RunOutcome, RunSpec, Runner, SandboxError,
    SandboxStats,
};
use crate::domain::script::Language;
use crate::sandbox::profiles::{Profile, ProfileConfig, Profiles};
pub use pool::PoolConfig;
use session::Prepared;

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
        }
    }
}

impl DockerConfig {
    /// The built-in and configured profiles, checked.
    pub fn resolved_profiles(&self) -> Result<Profiles, String> {
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

/// A client for the engine named by `host` (or the local defaults); no request is made yet.
fn client(host: Option<&str>) -> Result<Docker, SandboxError> {
    match host {
        Some(h) => Docker::connect_with_host(h),
        None => Docker::connect_with_local_defaults(),
    }
    .map_err(classify)
}

/// Connects to the engine and negotiates the API version, so a newer client works with an older
/// engine (the version is shared by every clone of the client).
pub async fn connect(host: Option<&str>) -> Result<Docker, SandboxError> {
    client(host)?.negotiate_version().await.map_err(classify)
}

/// Engine errors as the service reports them.
pub(crate) fn classify(e: bollard::errors::Error) -> SandboxError {
    use bollard::errors::Error as E;
    match e {
        E::DockerResponseServerError {
            status_code: 404,
            message,
        } if message.contains("No such image") => {
            let image = message.rsplit(':').next().unwrap_or("").trim().to_string();
            SandboxError::ImageMissing(if image.is_empty() { message } else { image })
        }
        E::DockerResponseServerError {
            status_code,
            message,
        } => SandboxError::Engine(super::EngineFault::new(E::DockerResponseServerError {
            status_code,
            message,
        })),
        E::IOError { .. }
        | E::HyperResponseError { .. }
        | E::HyperLegacyError { .. }
        | E::SocketNotFoundError(_)
        | E::RequestTimeoutError
        | E::HttpClientError { .. } => SandboxError::EngineUnavailable(e.to_string()),
        other => SandboxError::Engine(super::EngineFault::new(other)),
    }
}

/// Removes containers, tracks which ones still exist, and keeps removal tasks for shutdown to await.
#[derive(Debug)]
pub(crate) struct Cleaner {
    docker: Docker,
    live: Mutex<HashSet<String>>,
    /// Containers whose removal failed (the engine was away): retried every few seconds until the
    /// engine answers, so nothing lingers after it comes back.
    failed: Mutex<HashSet<String>>,
    tasks: TaskTracker,
}

impl Cleaner {
    fn track(&self, id: &str) {
        self.live
            .lock()
            .expect("live set lock")
            .insert(id.to_string());
    }

    fn is_live(&self, id: &str) -> bool {
        self.live.lock().expect("live set lock").contains(id)
    }

    pub(crate) fn live_count(&self) -> usize {
        self.live.lock().expect("live set lock").len()
    }

    /// Kills and removes a container (volumes included), retrying while the engine is flaky; if it
    /// still fails, the container goes to the failed set, which [`Cleaner::retry_failed`] empties.
    pub(crate) async fn remove(&self, id: &str) {
        let mut removed = false;
        for attempt in 0..5u32 {
            if self.try_remove(id).await {
                removed = true;
                break;
            }
            tracing::warn!(container = %short(id), attempt, "container removal failed");
            tokio::time::sleep(Duration::from_millis(200 * 2u64.pow(attempt))).await;
        }
        if !removed {
            self.failed
                .lock()
                .expect("failed set lock")
                .insert(id.to_string());
        }
        self.live.lock().expect("live set lock").remove(id);
    }

    /// One removal attempt; true when the container is gone (or being removed by someone else).
    async fn try_remove(&self, id: &str) -> bool {
        let options = RemoveContainerOptions {
            force: true,
            v: true,
            link: false,
        };
        match self.docker.remove_container(id, Some(options)).await {
            Ok(()) => true,
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => true,
            // "removal already in progress": the other removal will finish it.
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 409, ..
            }) => true,
            Err(_) => false,
        }
    }

    /// Retries the removals that failed; returns how many containers are still waiting.
    pub(crate) async fn retry_failed(&self) -> usize {
        let ids: Vec<String> = self
            .failed
            .lock()
            .expect("failed set lock")
            .iter()
            .cloned()
            .collect();
        for id in ids {
            if self.try_remove(&id).await {
                self.failed.lock().expect("failed set lock").remove(&id);
                tracing::info!(container = %short(&id), "removed a container once the engine was back");
            }
        }
        self.failed.lock().expect("failed set lock").len()
    }

    /// Containers whose removal is still owed.
    pub(crate) fn failed_count(&self) -> usize {
        self.failed.lock().expect("failed set lock").len()
    }

    /// Removes in the background; shutdown waits for it.
    pub(crate) fn remove_later(self: &Arc<Self>, id: String) {
        let this = self.clone();
        self.tasks.spawn(async move { this.remove(&id).await });
    }

    /// SIGKILL now (the deadline), removal follows.
    async fn kill(&self, id: &str) {
        let options = KillContainerOptions {
            signal: "SIGKILL".into(),
        };
        let _ = tokio::time::timeout(
            Duration::from_secs(2),
            self.docker.kill_container(id, Some(options)),
        )
        .await;
    }
}

/// Removes its container when dropped, unless it was already removed.
#[derive(Debug)]
pub(crate) struct Removal {
    cleaner: Arc<Cleaner>,
    id: Option<String>,
}

impl Removal {
    fn new(cleaner: &Arc<Cleaner>, id: &str) -> Self {
        cleaner.track(id);
        Removal {
            cleaner: cleaner.clone(),
            id: Some(id.to_string()),
        }
    }
}

impl Drop for Removal {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.cleaner.remove_later(id);
        }
    }
}

pub(crate) fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
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
}

impl DockerSandbox {
    /// Connects, removes containers left by a previous crash of this instance, and starts the
    /// warm pool and the periodic reaper. An engine that is down now is not an error: readiness
    /// reports it, runs answer `engine_unavailable`, and everything resumes once it is back.
    pub async fn start(config: DockerConfig) -> Result<Self, SandboxError> {
        let docker = client(config.host.as_deref())?;
        let negotiated = match docker.clone().negotiate_version().await {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(error = %classify(e), "container engine not reachable yet");
                false
            }
        };
        let cleaner = Arc::new(Cleaner {
            docker: docker.clone(),
            live: Mutex::new(HashSet::new()),
            failed: Mutex::new(HashSet::new()),
            tasks: TaskTracker::new(),
        });
        let profiles = config
            .resolved_profiles()
            .map_err(SandboxError::StartFailed)?;
        let inner = Arc::new(Inner {
            pool: pool::Pool::new(&config.pool, &profiles),
            profiles,
            negotiated: std::sync::atomic::AtomicBool::new(negotiated),
            docker,
            config,
            cleaner,
            shutdown: CancellationToken::new(),
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
        let body = spec::container(config, profile, language, execution_id);
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
        })
    }
}

/// A ready container held for one run.
#[derive(Debug)]
struct DockerLease {
    prepared: Prepared,
    cleaner: Arc<Cleaner>,
    output_limit: u64,
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
        } = *self;
        Box::pin(async move { prepared.execute(&spec, &cleaner, output_limit).await })
    }

    fn run_job(self: Box<Self>, run: JobRun) -> BoxFuture<'static, JobOutcome> {
        let DockerLease {
            prepared, cleaner, ..
        } = *self;
        Box::pin(async move { prepared.execute_job(&run, &cleaner).await })
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
