//! Persistent sessions: a long-lived, hardened sandbox per session that keeps its workspace,
//! working directory, exported environment and aliases across commands.
//!
//! ```text
//! create ─► creating ─► ready ⇄ busy ─► stopping ─► stopped (kept for `retention_secs`)
//!                         │ idle timeout, lifetime, command count, DELETE, a lost container
//!                         └────────────────────────────────────────────► stopping
//! ```
//! This module owns the registry of sessions (who may see which) and its error type; each
//! responsibility lives in a file of its own: one session's state (`session.rs`), what a request
//! may ask for and how many sessions may exist (`caps.rs`), creation, changes and stopping
//! (`lifecycle.rs`), expiry (`expiry.rs`), what survives a restart (`recovery.rs`), commands
//! (`command.rs`, `record.rs`), files (`files.rs`), the run-time policy every command runs under
//! (`policy.rs`) and its events, live and past (`events.rs`).

mod caps;
mod command;
mod events;
mod expiry;
mod filerules;
mod files;
mod held;
mod jobs;
mod lifecycle;
mod network;
mod policy;
mod record;
mod recovery;
mod session;
mod words;

pub(crate) use caps::NewSession;
pub(crate) use command::{ExecRequest, Mode, Started};
pub(crate) use events::{EventEntry, EventPage, HistoryEvent};
pub(crate) use files::{FileBody, FileFailure};
pub(crate) use held::HeldOperation;
pub(crate) use network::SessionNetwork;
pub(crate) use record::RunningCommand;
pub(crate) use session::{Session, SessionView};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::auth::{Caller, Role};
use crate::config::{ExecutionSettings, SessionSettings};
use crate::policy::{Policies, PolicyChoiceError};
use crate::sandbox::profiles::Profiles;
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
    /// The session's policy refuses the operation (`file_rules` on the files API).
    #[error("{message}")]
    Denied {
        rule: Option<String>,
        message: String,
    },
    /// The session's policy holds the operation for an operator (`approve` in `file_rules` on the
    /// files API, which answers at once and so cannot wait for one).
    #[error("{message}")]
    ApprovalRequired {
        rule: Option<String>,
        message: String,
    },
    /// The `policy` the request named (or the caller's default) is not one it may have.
    #[error(transparent)]
    Policy(#[from] PolicyChoiceError),
    /// The `network` the request asked for is malformed or wider than its policy allows.
    #[error(transparent)]
    Network(#[from] crate::sandbox::egress::bound::NetworkChoiceError),
    /// The sandbox could not be started.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
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
    policies: Policies,
    /// Authentication is off: every caller may select any policy.
    open_policies: bool,
    /// Limits and approval timeout of sessions with network access (`egress`).
    network: crate::sandbox::egress::bound::NetworkSettings,
    held: held::Held,
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
    /// The deployment's run-time policies, and whether any caller may select any of them
    /// (authentication is off).
    pub policies: Policies,
    pub open_policies: bool,
    /// Limits and approval timeout of sessions with network access (`egress`).
    pub network: crate::sandbox::egress::bound::NetworkSettings,
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
            policies: deps.policies,
            open_policies: deps.open_policies,
            network: deps.network,
            held: held::Held::default(),
            map: Mutex::new(HashMap::new()),
            tasks: TaskTracker::new(),
            shutdown: CancellationToken::new(),
        });
        this.recover().await?;
        let sweeper = this.clone();
        this.tasks.spawn(async move { sweeper.sweep_loop().await });
        Ok(this)
    }

    pub(crate) fn settings(&self) -> &SessionSettings {
        &self.settings
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
}
