//! The life of a session after admission: its sandbox started, its settings changed between
//! commands, and its stop (on request, at expiry, when the service stops) with the container
//! removed and the record kept.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::{NewSession, Session, SessionError, Sessions, State, command};
use crate::auth::Caller;
use crate::sandbox::sessions::SessionSpec;

impl Sessions {
    /// Starts a session for `caller`.
    pub(crate) async fn create(
        &self,
        caller: &Caller,
        new: NewSession,
    ) -> Result<Arc<Session>, SessionError> {
        let policy = self.choose_policy(caller, new.policy.as_deref())?;
        let enforcement = policy.as_deref().map(|p| self.enforcement(p)).transpose()?;
        let network =
            self.check_network(policy.as_deref(), new.network.clone(), new.max_network_mb)?;
        let checked = self.check(new)?;
        let session = self.admit(caller, &checked, policy, network)?;
        let (mut enforcement, events) = enforcement.unzip();
        let held = (enforcement.is_some() || session.network.is_some())
            .then(|| self.held.channel(&session));
        let (asks, approvals) = held.unzip();
        if let Some(e) = enforcement.as_mut() {
            e.approvals = asks.clone();
        }
        let network = match (&session.network, asks) {
            (Some(n), Some(asks)) => {
                match self.network_access(session.policy.as_deref(), n, asks) {
                    Ok(access) => Some(access),
                    Err(e) => {
                        self.mark_stopped(&session, format!("failed to start: {e}"));
                        self.persist(&session).await;
                        return Err(e);
                    }
                }
            }
            _ => None,
        };
        let spec = SessionSpec {
            session_id: session.id,
            profile: session.profile.clone(),
            env: checked.environment,
            expires_at_ms: u64::try_from(session.expires_at.unix_timestamp_nanos() / 1_000_000)
                .unwrap_or(0),
            output_limit: self.settings.output_keep_bytes,
            limits: session.limits.clone(),
            owner: caller.name.clone(),
            enforcement,
            network,
        };
        match self.runner.open_session(spec).await {
            Ok(sandbox) => {
                let stale = {
                    let mut live = session.live.lock().expect("session lock");
                    if live.state == State::Creating {
                        live.state = State::Ready;
                        live.container_id = Some(sandbox.container_id().to_string());
                        live.sandbox = Some(sandbox.clone());
                        live.events = events;
                        live.approvals = approvals;
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

    pub(super) async fn stop(&self, session: &Session, reason: String) {
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
        live.events = None;
        live.approvals = None;
        live.stopped_at = Some(Instant::now());
        self.held.withdraw(session.id);
        tracing::info!(session_id = %session.id, reason = live.reason.as_deref().unwrap_or(""), "session stopped");
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
