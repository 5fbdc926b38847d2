//! Removes containers this instance left behind: all of them at start-up (a previous process
//! crashed), and on a timer any that nothing tracks (a removal that failed while the engine was down).

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bollard::query_parameters::ListContainersOptions;

use super::spec::{LABEL_INSTANCE, LABEL_MANAGED, LABEL_OWNER};
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

/// Removes containers of instances named `<prefix>…` whose creating process is gone: it ran on
/// this machine in this boot (same boot id) and its PID no longer exists. Processes that share
/// no instance name (one `scriptgate mcp` per client session) clean up after each other this
/// way; a live owner's containers are never touched.
pub(crate) async fn reap_dead_owners(inner: &Arc<Inner>, prefix: &str) -> usize {
    if inner.ensure_engine().await.is_err() {
        return 0;
    }
    let filters = HashMap::from([("label".to_string(), vec![format!("{LABEL_MANAGED}=true")])]);
    let Ok(containers) = inner
        .docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        }))
        .await
    else {
        return 0;
    };
    let boot = super::spec::boot_id();
    let orphans: Vec<String> = containers
        .into_iter()
        .filter(|c| {
            let labels = c.labels.as_ref();
            let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
            let ours = label(LABEL_INSTANCE).is_some_and(|i| i.starts_with(prefix))
                && label(LABEL_INSTANCE) != Some(inner.config.instance.as_str());
            let dead = label(LABEL_OWNER)
                .and_then(|o| o.split_once('/'))
                .is_some_and(|(b, pid)| {
                    b == boot
                        && pid.parse::<u32>().is_ok()
                        && !std::path::Path::new(&format!("/proc/{pid}")).exists()
                });
            ours && dead
        })
        .filter_map(|c| c.id)
        .collect();
    let count = orphans.len();
    futures::future::join_all(orphans.iter().map(|id| inner.cleaner.remove(id))).await;
    if count > 0 {
        tracing::info!(
            count,
            prefix,
            "removed containers of processes that are gone"
        );
    }
    count
}

pub(crate) fn spawn_periodic(inner: &Arc<Inner>) {
    tokio::spawn(periodic(Arc::downgrade(inner)));
    tokio::spawn(retry_failed(Arc::downgrade(inner)));
}

/// How often removals that failed (engine away) are retried.
const RETRY: Duration = Duration::from_secs(2);

/// Waits `period`; the sandbox then, unless it shut down or was dropped meanwhile. Background
/// loops hold only a weak reference between ticks, so they never keep a sandbox alive.
async fn tick(weak: &Weak<Inner>, period: Duration) -> Option<Arc<Inner>> {
    let cancelled = weak.upgrade()?.shutdown.clone();
    tokio::select! {
        _ = tokio::time::sleep(period) => {}
        _ = cancelled.cancelled() => return None,
    }
    weak.upgrade()
}

async fn retry_failed(weak: Weak<Inner>) {
    while let Some(inner) = tick(&weak, RETRY).await {
        if inner.cleaner.failed_count() > 0 && inner.ensure_engine().await.is_ok() {
            inner.cleaner.retry_failed().await;
        }
    }
}

async fn periodic(weak: Weak<Inner>) {
    while let Some(inner) = tick(&weak, PERIOD).await {
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
