//! One session: what it was created with and what it is now (state, shell, history, sandbox),
//! and the view `GET /v1/sessions/{id}` shows of it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use scriptgate_policy::events::Event;
use time::OffsetDateTime;
use tokio::sync::broadcast;
use uuid::Uuid;

use super::{RunningCommand, SessionError, State};
use crate::domain::record::ResourceUsage;
use crate::sandbox::Limits;
use crate::sandbox::sessions::{SessionBox, ShellState};

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
    /// The run-time policy every command runs under.
    pub policy: Option<String>,
    /// The network access every command has (`None`: none).
    pub network: Option<super::SessionNetwork>,
    pub(super) deadline: Instant,
    pub(super) live: Mutex<Live>,
}

#[derive(Debug)]
pub(super) struct Live {
    pub(super) state: State,
    pub(super) reason: Option<String>,
    pub(super) idle_timeout: Duration,
    pub(super) shell: ShellState,
    pub(super) last_activity_at: OffsetDateTime,
    pub(super) last_activity: Instant,
    pub(super) command_count: u64,
    pub(super) current: Option<Arc<RunningCommand>>,
    pub(super) history: VecDeque<Arc<RunningCommand>>,
    pub(super) usage: ResourceUsage,
    pub(super) container_id: Option<String>,
    pub(super) sandbox: Option<Arc<dyn SessionBox>>,
    pub(super) stopped_at: Option<Instant>,
    /// Where the sandbox publishes the policy's events while the session serves; dropped when
    /// it stops, which ends the live streams.
    pub(super) events: Option<broadcast::Sender<Event>>,
    /// Files the operations the policy holds for approval while the session serves.
    pub(super) approvals: Option<tokio_util::task::AbortOnDropHandle<()>>,
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
    pub policy: Option<String>,
    pub network: Option<super::SessionNetwork>,
}

impl Session {
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
            policy: self.policy.clone(),
            network: self.network.clone(),
        }
    }

    pub(super) fn state(&self) -> State {
        self.live.lock().expect("session lock").state
    }

    /// The sandbox when the session can serve (ready or busy).
    pub(super) fn sandbox(&self) -> Result<Arc<dyn SessionBox>, SessionError> {
        let live = self.live.lock().expect("session lock");
        match (&live.sandbox, live.state) {
            (Some(sandbox), State::Ready | State::Busy) => Ok(sandbox.clone()),
            _ => Err(SessionError::Stopped(
                live.reason.clone().unwrap_or_else(|| "stopped".into()),
            )),
        }
    }

    pub(super) fn touch(live: &mut Live) {
        live.last_activity = Instant::now();
        live.last_activity_at = OffsetDateTime::now_utc();
    }
}
