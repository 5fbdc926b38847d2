//! Removes containers this instance left behind: all of them at start-up (a previous process
//! crashed), and on a timer any that nothing tracks (a removal that failed while the engine was down).

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bollard::query_parameters::ListContainersOptions;

use super::spec::{LABEL_INSTANCE, LABEL_MANAGED};
use super::{Inner, classify, short};
use crate::sandbox::SandboxError;

/// A container is only reaped by the timer once it is older than this (it may be mid-creation).
const GRACE: Duration = Duration::from_secs(60);
const PERIOD: Duration = Duration::from_secs(60);

/// (id, creation time in Unix seconds) of every container of this instance.
async fn list(inner: &Inner) -> Result<Vec<(String, i64)>, SandboxError> {
    let filters = HashMap::from([(
        "label".to_string(),
        vec![
            format!("{LABEL_MANAGED}=true"),
            format!("{LABEL_INSTANCE}={}", inner.config.instance),
        ],
    )]);
    let containers = inner
        .docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        }))
        .await
        .map_err(classify)?;
    Ok(containers
        .into_iter()
        .filter_map(|c| Some((c.id?, c.created.unwrap_or(0))))
        .collect())
}

pub(crate) async fn reap_leftovers(inner: &Arc<Inner>) {
    if inner.ensure_engine().await.is_err() {
        // The periodic reaper removes them once the engine answers.
        return;
    }
    match list(inner).await {
        Ok(found) if found.is_empty() => {}
        Ok(found) => {
            let count = found.len();
            let removals = found.iter().map(|(id, _)| inner.cleaner.remove(id));
            futures::future::join_all(removals).await;
            tracing::info!(count, instance = %inner.config.instance, "removed containers left over from a previous run");
        }
        Err(e) => tracing::warn!(error = %e, "could not list leftover containers"),
    }
}

pub(crate) fn spawn_periodic(inner: &Arc<Inner>) {
    tokio::spawn(periodic(Arc::downgrade(inner)));
}

async fn periodic(weak: Weak<Inner>) {
    loop {
        let Some(cancelled) = weak.upgrade().map(|i| i.shutdown.clone()) else {
            return;
        };
        tokio::select! {
            _ = tokio::time::sleep(PERIOD) => {}
            _ = cancelled.cancelled() => return,
        }
        let Some(inner) = weak.upgrade() else { return };
        if inner.ensure_engine().await.is_err() {
            continue;
        }
        let Ok(found) = list(&inner).await else {
            continue;
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        for (id, created) in found {
            let old_enough = now - created > GRACE.as_secs() as i64;
            if old_enough && !inner.cleaner.is_live(&id) {
                tracing::warn!(container = %short(&id), "removing an untracked container");
                inner.cleaner.remove(&id).await;
            }
        }
    }
}
