//! What survives a restart: each session's record in the store, and the start-up pass that
//! records the sessions of the previous process as stopped (the sandbox's start-up reaping of
//! this instance removed their containers, so none is left unaccounted for).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use time::OffsetDateTime;

use super::session::Live;
use super::{Session, Sessions, State};
use crate::domain::record::ResourceUsage;
use crate::domain::session::SessionRecord;
use crate::sandbox::Limits;
use crate::sandbox::sessions::ShellState;
use crate::store::StoreError;

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
            policy: r.policy,
            network: None,
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
                events: None,
                approvals: None,
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
            policy: self.policy.clone(),
        }
    }
}

impl Sessions {
    /// Loads the records of the previous process: stopped ones within the retention period as
    /// they are, live ones marked stopped (`service_restarted`).
    pub(super) async fn recover(&self) -> Result<(), StoreError> {
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
    pub(super) async fn persist(&self, session: &Session) {
        if let Err(e) = self.store.save_session(&session.record()).await {
            tracing::warn!(session_id = %session.id, error = %e, "could not record the session");
        }
    }
}
