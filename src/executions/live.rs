//! Live events of running executions: each run under a policy or with network access publishes
//! its events here while it runs, for `GET /v1/executions/{id}/events`. Nothing is kept: a
//! subscriber sees what happens after it subscribed, the result keeps the whole (capped) record.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use scriptgate_policy::events::Event;
use serde::Serialize;
use tokio::sync::broadcast;
use tokio_util::task::AbortOnDropHandle;
use uuid::Uuid;

use super::{ExecError, Executions};
use crate::auth::Caller;

/// Events buffered per subscriber before a slow one starts missing them.
const BUFFER: usize = 1024;

/// One event of a running execution: a decision of its run-time policy, or a lookup or
/// connection of its egress proxy (as in the result's `network_operations`).
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub(crate) enum LiveEvent {
    Policy(Event),
    Egress(crate::sandbox::egress::NetworkEvent),
}

impl LiveEvent {
    /// The kind `?types=` filters on (the proxy's events are `network`).
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            LiveEvent::Policy(e) => e.kind(),
            LiveEvent::Egress(_) => "network",
        }
    }
}

/// Forwards every event of `rx` to `tx` until `rx` closes or the handle drops; a slow reader
/// skips what it missed (the result keeps everything).
pub(super) fn bridge<T: Clone + Send + 'static>(
    mut rx: broadcast::Receiver<T>,
    tx: broadcast::Sender<LiveEvent>,
    wrap: fn(T) -> LiveEvent,
) -> AbortOnDropHandle<()> {
    AbortOnDropHandle::new(tokio::spawn(async move {
        loop {
            match rx.recv().await {
                Ok(event) => {
                    let _ = tx.send(wrap(event));
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }))
}

/// The channels of the runs publishing now.
#[derive(Debug, Default, Clone)]
pub(super) struct Live {
    runs: Arc<Mutex<HashMap<Uuid, broadcast::Sender<LiveEvent>>>>,
}

/// Publishes one run's events until dropped (the run ended: subscribers' streams end).
#[derive(Debug)]
pub(super) struct Publishing {
    live: Live,
    id: Uuid,
}

impl Drop for Publishing {
    fn drop(&mut self) {
        self.live.lock().remove(&self.id);
    }
}

impl Live {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, broadcast::Sender<LiveEvent>>> {
        self.runs.lock().expect("live events lock")
    }

    /// The sender run `id` publishes on while the returned guard lives.
    pub(super) fn publish(&self, id: Uuid) -> (broadcast::Sender<LiveEvent>, Publishing) {
        let (tx, _) = broadcast::channel(BUFFER);
        self.lock().insert(id, tx.clone());
        let guard = Publishing {
            live: self.clone(),
            id,
        };
        (tx, guard)
    }
}

/// What a subscriber to an execution's events gets now.
#[derive(Debug)]
pub(crate) enum Watch {
    /// Its run is publishing.
    Events(broadcast::Receiver<LiveEvent>),
    /// Not yet running (queued, pending approval, starting): ask again.
    NotYet,
    /// It ended, or it runs without a policy: there is nothing to stream.
    Over,
}

impl Executions {
    /// The live events of execution `id`, if `caller` may see it.
    pub(crate) async fn watch_events(&self, caller: &Caller, id: Uuid) -> Result<Watch, ExecError> {
        let rec = self.get(caller, id, std::time::Duration::ZERO).await?;
        if let Some(tx) = self.live.lock().get(&id) {
            return Ok(Watch::Events(tx.subscribe()));
        }
        if rec.status.is_terminal() || (rec.run.policy().is_none() && !self.network_opted_in(&rec))
        {
            return Ok(Watch::Over);
        }
        Ok(Watch::NotYet)
    }
}
