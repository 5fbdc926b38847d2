//! Persistent sessions: a long-lived, hardened sandbox per session that keeps its workspace,
//! working directory, exported environment and aliases across commands.
//!
//! ```text
//! create ─► creating ─► ready ⇄ busy ─► stopping ─► stopped (kept for `retention_secs`)
//!                         │ idle timeout, lifetime, command count, DELETE, a lost container
//!                         └────────────────────────────────────────────► stopping
//! ```
//! Every command passes the validation layers first (`command.rs`); files go through the
//! supervisor's path rules (`files.rs`). Session records live in this process: a restart removes
//! the containers of the previous process (the sandbox's start-up reaping of its instance), so a
//! session never outlives the process that accounts for it.

mod command;
mod files;
mod jobs;
mod words;

pub(crate) use command::{ExecRequest, Mode, RunningCommand, Started};
pub(crate) use files::{FileBody, FileFailure};

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::auth::{Caller, Role};
use crate::config::{ExecutionSettings, SessionSettings};
use crate::domain::record::ResourceUsage;
use crate::domain::session::SessionRecord;
use crate::sandbox::profiles::Profiles;
use crate::sandbox::sessions::{SessionBox, SessionSpec, ShellState};
use crate::sandbox::{Limits, Runner, SandboxError};
use crate::store::{Store, StoreError};
use crate::validate::Validator;

/// Where a session is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum State {
    Creating,
    Ready,
    Busy,
    Stopping,
    Stopped,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum SessionError {
    #[error("no session with this id")]
    NotFound,
    #[error("the session is running command {0}; wait for it or kill it")]
    Busy(Uuid),
    #[error("the session is stopped: {0}")]
    Stopped(String),
    #[error("no command with this id in the session")]
    CommandNotFound,
    /// The request does not fit the deployment's rules (names the field).
    #[error("{0}")]
    Invalid(String),
    /// Beyond the per-agent or total session cap.
    #[error("{0}")]
    TooMany(String),
    /// Refused by the validation layers (a secret in an upload).
    #[error("{0}")]
    Rejected(String),
    /// A file operation that failed, and how.
    #[error("{1}")]
    File(files::FileFailure, String),
    /// The sandbox could not be started.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
}

/// A request for a session, as the edge received it.
#[derive(Debug, Clone, Default)]
pub(crate) struct NewSession {
    pub profile: Option<String>,
    pub environment: BTreeMap<String, String>,
    pub idle_timeout_secs: Option<u64>,
    pub max_duration_secs: Option<u64>,
    pub max_commands: Option<u64>,
    pub memory_mb: Option<u64>,
    pub cpus: Option<f64>,
    pub workspace_mb: Option<u64>,
}

/// One session: what it was created with, and what it is now.
#[derive(Debug)]
pub(crate) struct Session {
    pub id: Uuid,
    pub agent: String,
    pub profile: String,
    /// The service node (its engine's instance label) that holds the container.
    pub node: String,
    pub created_at: OffsetDateTime,
    pub expires_at: OffsetDateTime,
    pub max_commands: u64,
    pub limits: Limits,
    deadline: Instant,
    live: Mutex<Live>,
}

#[derive(Debug)]
struct Live {
    state: State,
    reason: Option<String>,
    idle_timeout: Duration,
    shell: ShellState,
    last_activity_at: OffsetDateTime,
    last_activity: Instant,
    command_count: u64,
    current: Option<Arc<RunningCommand>>,
    history: VecDeque<Arc<RunningCommand>>,
    usage: ResourceUsage,
    container_id: Option<String>,
    sandbox: Option<Arc<dyn SessionBox>>,
    stopped_at: Option<Instant>,
}

/// A session as `GET /v1/sessions/{id}` shows it.
#[derive(Debug, Clone)]
pub(crate) struct SessionView {
    pub id: Uuid,
    pub agent: String,
    pub profile: String,
    pub node: String,
    pub state: State,
    pub reason: Option<String>,
    pub cwd: String,
    pub environment: BTreeMap<String, String>,
    pub aliases: BTreeMap<String, String>,
    pub command_count: u64,
    pub max_commands: u64,
    pub current_command_id: Option<Uuid>,
    pub created_at: OffsetDateTime,
    pub last_activity_at: OffsetDateTime,
    pub expires_at: OffsetDateTime,
    pub idle_timeout_secs: u64,
    pub usage: ResourceUsage,
    pub limits: Limits,
}

impl Session {
    /// A session a previous process left: stopped, with its record's times and reason.
    fn stopped(r: SessionRecord) -> Session {
        let now = OffsetDateTime::now_utc();
        Session {
            id: r.id,
            agent: r.agent,
            profile: r.profile,
            node: r.node,
            created_at: r.created_at,
            expires_at: r.expires_at,
            max_commands: 0,
            limits: Limits::default(),
            deadline: Instant::now(),
            live: Mutex::new(Live {
                state: State::Stopped,
                reason: r.reason,
                idle_timeout: Duration::ZERO,
                shell: ShellState::default(),
                last_activity_at: r.stopped_at.unwrap_or(now),
                last_activity: Instant::now(),
                command_count: 0,
                current: None,
                history: VecDeque::new(),
                usage: ResourceUsage::default(),
                container_id: None,
                sandbox: None,
                // Retention counts from this start.
                stopped_at: Some(Instant::now()),
            }),
        }
    }

    /// What is kept of it across restarts.
    fn record(&self) -> SessionRecord {
        let live = self.live.lock().expect("session lock");
        SessionRecord {
            id: self.id,
            agent: self.agent.clone(),
            profile: self.profile.clone(),
            node: self.node.clone(),
            created_at: self.created_at,
            expires_at: self.expires_at,
            stopped_at: (live.state == State::Stopped).then(OffsetDateTime::now_utc),
            reason: live.reason.clone(),
        }
    }

    pub(crate) fn view(&self) -> SessionView {
        let live = self.live.lock().expect("session lock");
        SessionView {
            id: self.id,
            agent: self.agent.clone(),
            profile: self.profile.clone(),
            node: self.node.clone(),
            state: live.state,
            reason: live.reason.clone(),
            cwd: live.shell.cwd.clone(),
            environment: live.shell.env.clone(),
            aliases: live.shell.aliases.clone(),
            command_count: live.command_count,
            max_commands: self.max_commands,
            current_command_id: live.current.as_ref().map(|c| c.id),
            created_at: self.created_at,
            last_activity_at: live.last_activity_at,
            expires_at: self.expires_at,
            idle_timeout_secs: live.idle_timeout.as_secs(),
            usage: live.usage,
            limits: self.limits.clone(),
        }
    }

    fn state(&self) -> State {
        self.live.lock().expect("session lock").state
    }

    /// The sandbox when the session can serve (ready or busy).
    fn sandbox(&self) -> Result<Arc<dyn SessionBox>, SessionError> {
        let live = self.live.lock().expect("session lock");
        match (&live.sandbox, live.state) {
            (Some(sandbox), State::Ready | State::Busy) => Ok(sandbox.clone()),
            _ => Err(SessionError::Stopped(
                live.reason.clone().unwrap_or_else(|| "stopped".into()),
            )),
        }
    }

    fn touch(live: &mut Live) {
        live.last_activity = Instant::now();
        live.last_activity_at = OffsetDateTime::now_utc();
    }

    /// Why the session should stop now, if it should.
    fn expired(&self, now: Instant) -> Option<&'static str> {
        let live = self.live.lock().expect("session lock");
        if live.state != State::Ready && live.state != State::Busy {
            return None;
        }
        if now >= self.deadline {
            return Some("max_duration: the session reached its maximum duration");
        }
        if live.state == State::Ready && now.duration_since(live.last_activity) >= live.idle_timeout
        {
            return Some("idle_timeout: the session was idle for its idle timeout");
        }
        None
    }
}

/// The sessions of this service.
#[derive(Debug)]
pub(crate) struct Sessions {
    runner: Arc<dyn Runner>,
    validator: Validator,
    settings: SessionSettings,
    execution: ExecutionSettings,
    limits: Limits,
    profiles: Arc<Profiles>,
    node: String,
    store: Store,
    map: Mutex<HashMap<Uuid, Arc<Session>>>,
    tasks: TaskTracker,
    shutdown: CancellationToken,
}

/// What [`Sessions`] is built from.
#[derive(Debug)]
pub(crate) struct SessionDeps {
    pub runner: Arc<dyn Runner>,
    pub validator: Validator,
    pub settings: SessionSettings,
    pub execution: ExecutionSettings,
    /// The deployment's container limits: a session may ask for less, never for more.
    pub limits: Limits,
    pub profiles: Arc<Profiles>,
    pub node: String,
    pub store: Store,
}

impl Sessions {
    /// The sessions service, with its expiry sweeper running. Sessions a previous process left
    /// alive are recorded as stopped: their containers were removed by the sandbox's start-up
    /// reaping of this instance, so none is left unaccounted for.
    pub(crate) async fn start(deps: SessionDeps) -> Result<Arc<Sessions>, StoreError> {
        let this = Arc::new(Sessions {
            runner: deps.runner,
            validator: deps.validator,
            settings: deps.settings,
            execution: deps.execution,
            limits: deps.limits,
            profiles: deps.profiles,
            node: deps.node,
            store: deps.store,
            map: Mutex::new(HashMap::new()),
            tasks: TaskTracker::new(),
            shutdown: CancellationToken::new(),
        });
        this.recover().await?;
        let sweeper = this.clone();
        this.tasks.spawn(async move { sweeper.sweep_loop().await });
        Ok(this)
    }

    /// Loads the records of the previous process: stopped ones within the retention period as
    /// they are, live ones marked stopped (`service_restarted`).
    async fn recover(&self) -> Result<(), StoreError> {
        let retention = Duration::from_secs(self.settings.retention_secs);
        let records = self
            .store
            .sessions_since(OffsetDateTime::now_utc() - retention)
            .await?;
        let mut restarted = 0;
        for mut record in records {
            if record.stopped_at.is_none() {
                record.stopped_at = Some(OffsetDateTime::now_utc());
                record.reason = Some(
                    "service_restarted: the service restarted; the session's container was removed at start-up".into(),
                );
                self.store.save_session(&record).await?;
                restarted += 1;
            }
            let session = Arc::new(Session::stopped(record));
            self.map
                .lock()
                .expect("sessions lock")
                .insert(session.id, session);
        }
        if restarted > 0 {
            tracing::info!(
                restarted,
                "sessions of the previous process recorded as stopped"
            );
        }
        Ok(())
    }

    /// Writes the session's record (a failure is logged: the session itself goes on).
    async fn persist(&self, session: &Session) {
        if let Err(e) = self.store.save_session(&session.record()).await {
            tracing::warn!(session_id = %session.id, error = %e, "could not record the session");
        }
    }

    pub(crate) fn settings(&self) -> &SessionSettings {
        &self.settings
    }

    /// Starts a session for `caller`.
    pub(crate) async fn create(
        &self,
        caller: &Caller,
        new: NewSession,
    ) -> Result<Arc<Session>, SessionError> {
        let checked = self.check(new)?;
        let session = self.admit(caller, &checked)?;
        let spec = SessionSpec {
            session_id: session.id,
            profile: session.profile.clone(),
            env: checked.environment,
            expires_at_ms: u64::try_from(session.expires_at.unix_timestamp_nanos() / 1_000_000)
                .unwrap_or(0),
            output_limit: self.settings.output_keep_bytes,
            limits: session.limits.clone(),
            owner: caller.name.clone(),
        };
        match self.runner.open_session(spec).await {
            Ok(sandbox) => {
                let stale = {
                    let mut live = session.live.lock().expect("session lock");
                    if live.state == State::Creating {
                        live.state = State::Ready;
                        live.container_id = Some(sandbox.container_id().to_string());
                        live.sandbox = Some(sandbox.clone());
                        Session::touch(&mut live);
                        false
                    } else {
                        true
                    }
                };
                if stale {
                    // Deleted while it was being created: its container goes at once.
                    sandbox.close().await;
                }
                self.persist(&session).await;
                tracing::info!(session_id = %session.id, agent = %session.agent, "session ready");
                Ok(session)
            }
            Err(e) => {
                self.mark_stopped(&session, format!("failed to start: {e}"));
                self.persist(&session).await;
                Err(SessionError::Sandbox(e))
            }
        }
    }

    /// A session `caller` may see (agents see their own; operators all).
    pub(crate) fn get(&self, caller: &Caller, id: Uuid) -> Result<Arc<Session>, SessionError> {
        let session = self
            .map
            .lock()
            .expect("sessions lock")
            .get(&id)
            .cloned()
            .ok_or(SessionError::NotFound)?;
        if !caller.is(Role::Operator) && session.agent != caller.name {
            return Err(SessionError::NotFound);
        }
        Ok(session)
    }

    pub(crate) fn list(&self, caller: &Caller) -> Vec<SessionView> {
        let mut all: Vec<SessionView> = self
            .map
            .lock()
            .expect("sessions lock")
            .values()
            .filter(|s| caller.is(Role::Operator) || s.agent == caller.name)
            .map(|s| s.view())
            .collect();
        all.sort_by_key(|s| s.created_at);
        all
    }

    /// `PATCH`: the idle timeout and the exported environment (`None` unsets a name), between
    /// commands.
    pub(crate) async fn patch(
        &self,
        caller: &Caller,
        id: Uuid,
        idle_timeout_secs: Option<u64>,
        environment: BTreeMap<String, Option<String>>,
    ) -> Result<Arc<Session>, SessionError> {
        let session = self.get(caller, id)?;
        let idle = match idle_timeout_secs {
            Some(v) if !(1..=self.settings.max_idle_timeout_secs).contains(&v) => {
                return Err(SessionError::Invalid(format!(
                    "idle_timeout_secs: must be between 1 and {}, got {v}",
                    self.settings.max_idle_timeout_secs
                )));
            }
            other => other.map(Duration::from_secs),
        };
        let set: BTreeMap<String, String> = environment
            .iter()
            .filter_map(|(k, v)| v.clone().map(|v| (k.clone(), v)))
            .collect();
        let unset: Vec<String> = environment
            .iter()
            .filter(|(_, v)| v.is_none())
            .map(|(k, _)| k.clone())
            .collect();
        self.check_environment(&set)?;
        let sandbox = {
            let live = session.live.lock().expect("session lock");
            command::ensure_serving(&live)?;
            live.sandbox.clone()
        };
        if !environment.is_empty() {
            let sandbox = sandbox.ok_or_else(|| SessionError::Stopped("stopped".into()))?;
            let shell = sandbox.set_env(set, unset).await.map_err(|e| match e {
                crate::sandbox::sessions::SessionFault::Refused(_) => {
                    SessionError::Busy(Uuid::nil())
                }
                lost => SessionError::Stopped(lost.to_string()),
            })?;
            session.live.lock().expect("session lock").shell = shell;
        }
        let mut live = session.live.lock().expect("session lock");
        if let Some(idle) = idle {
            live.idle_timeout = idle;
        }
        Session::touch(&mut live);
        drop(live);
        Ok(session)
    }

    /// Stops the session (killing a running command) and removes its container; its record
    /// stays, `stopped`, for the retention period.
    pub(crate) async fn delete(&self, caller: &Caller, id: Uuid) -> Result<(), SessionError> {
        let session = self.get(caller, id)?;
        self.stop(&session, "deleted: the session was deleted".into())
            .await;
        Ok(())
    }

    async fn stop(&self, session: &Session, reason: String) {
        let sandbox = {
            let mut live = session.live.lock().expect("session lock");
            if matches!(live.state, State::Stopping | State::Stopped) {
                return;
            }
            live.state = State::Stopping;
            live.reason = Some(reason.clone());
            live.sandbox.take()
        };
        if let Some(sandbox) = sandbox {
            sandbox.close().await;
        }
        self.mark_stopped(session, reason);
        self.persist(session).await;
    }

    fn mark_stopped(&self, session: &Session, reason: String) {
        let mut live = session.live.lock().expect("session lock");
        live.state = State::Stopped;
        live.reason.get_or_insert(reason);
        live.sandbox = None;
        live.stopped_at = Some(Instant::now());
        tracing::info!(session_id = %session.id, reason = live.reason.as_deref().unwrap_or(""), "session stopped");
    }

    /// Checks a request against the deployment's maxima.
    fn check(&self, new: NewSession) -> Result<Checked, SessionError> {
        let s = &self.settings;
        let bounded = |name: &str, value: Option<u64>, default: u64, max: u64| match value {
            None => Ok(default.min(max)),
            Some(v) if (1..=max).contains(&v) => Ok(v),
            Some(v) => Err(SessionError::Invalid(format!(
                "{name}: must be between 1 and {max}, got {v}"
            ))),
        };
        let idle = bounded(
            "idle_timeout_secs",
            new.idle_timeout_secs,
            s.default_idle_timeout_secs,
            s.max_idle_timeout_secs,
        )?;
        let duration = bounded(
            "max_duration_secs",
            new.max_duration_secs,
            s.default_max_duration_secs,
            s.max_duration_secs,
        )?;
        let max_commands = bounded(
            "max_commands",
            new.max_commands,
            s.max_commands,
            s.max_commands,
        )?;
        let mut limits = self.limits.clone();
        limits.memory_mb = bounded(
            "limits.memory_mb",
            new.memory_mb,
            limits.memory_mb,
            limits.memory_mb,
        )?;
        limits.workspace_mb = bounded(
            "limits.workspace_mb",
            new.workspace_mb,
            limits.workspace_mb,
            limits.workspace_mb,
        )?;
        if let Some(cpus) = new.cpus {
            if !(cpus > 0.0 && cpus <= self.limits.cpus) {
                return Err(SessionError::Invalid(format!(
                    "limits.cpus: must be above 0 and at most {}, got {cpus}",
                    self.limits.cpus
                )));
            }
            limits.cpus = cpus;
        }
        let profile = self
            .profiles
            .select(
                new.profile.as_deref(),
                crate::domain::script::Language::Bash,
            )
            .map_err(|e| SessionError::Invalid(e.to_string()))?
            .name
            .clone();
        self.check_environment(&new.environment)?;
        Ok(Checked {
            profile,
            environment: new.environment,
            idle: Duration::from_secs(idle),
            duration: Duration::from_secs(duration),
            max_commands,
            limits,
        })
    }

    /// Environment names as for jobs (none that loads code), values without secrets.
    fn check_environment(&self, env: &BTreeMap<String, String>) -> Result<(), SessionError> {
        for (name, value) in env {
            if let Some(why) = env_refusal(name, value) {
                return Err(SessionError::Invalid(format!("environment: {why}")));
            }
            if let Some(f) = self.validator.scan_secrets(value).first() {
                return Err(SessionError::Invalid(format!(
                    "environment.{name}: the value holds a secret ({}: {})",
                    f.rule, f.message
                )));
            }
        }
        Ok(())
    }

    /// Registers a new session within the caps.
    fn admit(&self, caller: &Caller, c: &Checked) -> Result<Arc<Session>, SessionError> {
        let mut map = self.map.lock().expect("sessions lock");
        let active = |s: &&Arc<Session>| s.state() != State::Stopped;
        let total = map.values().filter(active).count();
        if total >= self.settings.max_total {
            return Err(SessionError::TooMany(format!(
                "the service holds its maximum of {} sessions; delete one or retry later",
                self.settings.max_total
            )));
        }
        let mine = map
            .values()
            .filter(active)
            .filter(|s| s.agent == caller.name)
            .count();
        if mine >= self.settings.max_per_agent {
            return Err(SessionError::TooMany(format!(
                "agent `{}` holds its maximum of {} sessions; delete one first",
                caller.name, self.settings.max_per_agent
            )));
        }
        let now = OffsetDateTime::now_utc();
        let session = Arc::new(Session {
            id: Uuid::new_v4(),
            agent: caller.name.clone(),
            profile: c.profile.clone(),
            node: self.node.clone(),
            created_at: now,
            expires_at: now + c.duration,
            max_commands: c.max_commands,
            limits: c.limits.clone(),
            deadline: Instant::now() + c.duration,
            live: Mutex::new(Live {
                state: State::Creating,
                reason: None,
                idle_timeout: c.idle,
                shell: ShellState {
                    cwd: "/workspace".into(),
                    env: c.environment.clone(),
                    aliases: BTreeMap::new(),
                },
                last_activity_at: now,
                last_activity: Instant::now(),
                command_count: 0,
                current: None,
                history: VecDeque::new(),
                usage: ResourceUsage::default(),
                container_id: None,
                sandbox: None,
                stopped_at: None,
            }),
        });
        map.insert(session.id, session.clone());
        Ok(session)
    }

    async fn sweep_loop(self: Arc<Self>) {
        let every = Duration::from_secs(self.settings.sweep_interval_secs.max(1));
        loop {
            tokio::select! {
                () = self.shutdown.cancelled() => return,
                () = tokio::time::sleep(every) => self.sweep().await,
            }
        }
    }

    /// Stops expired sessions and forgets stopped ones past their retention.
    async fn sweep(&self) {
        let now = Instant::now();
        let retention = Duration::from_secs(self.settings.retention_secs);
        let all: Vec<Arc<Session>> = {
            let mut map = self.map.lock().expect("sessions lock");
            map.retain(|_, s| {
                let live = s.live.lock().expect("session lock");
                live.stopped_at
                    .is_none_or(|at| now.duration_since(at) < retention)
            });
            map.values().cloned().collect()
        };
        for session in all {
            if let Some(reason) = session.expired(now) {
                self.stop(&session, reason.into()).await;
            }
        }
    }

    /// Stops every session and removes its container (the service is stopping).
    pub(crate) async fn shutdown(&self) {
        self.shutdown.cancel();
        self.tasks.close();
        self.tasks.wait().await;
        let all: Vec<Arc<Session>> = self
            .map
            .lock()
            .expect("sessions lock")
            .values()
            .cloned()
            .collect();
        for session in all {
            self.stop(&session, "service_stopped: the service stopped".into())
                .await;
        }
    }
}

/// A request after its checks.
#[derive(Debug)]
struct Checked {
    profile: String,
    environment: BTreeMap<String, String>,
    idle: Duration,
    duration: Duration,
    max_commands: u64,
    limits: Limits,
}

/// Why an environment variable may not be part of a session: the job protocol's list of names
/// that load code, and the prompts that run code in a shell.
pub(crate) fn env_refusal(name: &str, value: &str) -> Option<String> {
    if ["PS0", "PS1", "PS2", "PS3", "PS4"].contains(&name) {
        return Some(format!("`{name}` is refused: a prompt runs code"));
    }
    scriptgate_supervisor::job::env::refusal(
        name,
        value,
        scriptgate_supervisor::job::env::IMAGE_PATH,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_load_code_are_refused() {
        assert!(env_refusal("LD_PRELOAD", "/x.so").is_some());
        assert!(env_refusal("BASH_ENV", "/x").is_some());
        assert!(env_refusal("PS1", "$(id)").is_some());
        assert!(env_refusal("PROJECT", "demo").is_none());
    }
}
