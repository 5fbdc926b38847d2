//! Expiry: the sweeper that stops sessions past their idle timeout or maximum duration and
//! forgets stopped ones past their retention.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Session, Sessions, State};

impl Session {
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

impl Sessions {
    pub(super) async fn sweep_loop(self: Arc<Self>) {
        let every = Duration::from_secs(self.settings.sweep_interval_secs.max(1));
        loop {
            tokio::select! {
                () = self.shutdown.cancelled() => return,
                () = tokio::time::sleep(every) => self.sweep().await,
            }
        }
    }

    /// Stops expired sessions and forgets stopped ones past their retention.
    pub(super) async fn sweep(&self) {
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
}
