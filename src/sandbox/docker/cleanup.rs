//! Container removal: which containers this process created and still owns, removal with
//! retries, and the [`Removal`] guard that removes a container whatever ends its run.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::{KillContainerOptions, RemoveContainerOptions};
use tokio_util::task::TaskTracker;

/// Removes containers, tracks which ones still exist, and keeps removal tasks for shutdown to await.
#[derive(Debug)]
pub(crate) struct Cleaner {
    pub(super) docker: Docker,
    live: Mutex<HashSet<String>>,
    /// Containers whose removal failed (the engine was away): retried every few seconds until the
    /// engine answers, so nothing lingers after it comes back.
    failed: Mutex<HashSet<String>>,
    pub(super) tasks: TaskTracker,
}

impl Cleaner {
    pub(super) fn new(docker: Docker) -> Self {
        Cleaner {
            docker,
            live: Mutex::new(HashSet::new()),
            failed: Mutex::new(HashSet::new()),
            tasks: TaskTracker::new(),
        }
    }

    pub(super) fn track(&self, id: &str) {
        self.live
            .lock()
            .expect("live set lock")
            .insert(id.to_string());
    }

    pub(super) fn is_live(&self, id: &str) -> bool {
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
    pub(super) async fn kill(&self, id: &str) {
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
    pub(super) fn new(cleaner: &Arc<Cleaner>, id: &str) -> Self {
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
