//! Warm containers: started, attached and ready before any request, each used exactly once.
//!
//! A request takes the oldest ready container of its language (or runs cold when there is none);
//! a refill task starts replacements in the background, evicts containers that died or grew old, and
//! backs off while the engine is unavailable. Nothing is reused: a taken container is removed after
//! its run like any other.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use uuid::Uuid;

use super::Inner;
use super::session::Prepared;
use crate::domain::script::Language;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoolConfig {
    /// Ready containers kept per language; 0 disables the pool (every run is cold).
    pub size: usize,
    /// Containers older than this are replaced (picks up rebuilt images and keeps the pool fresh).
    pub max_age_secs: u64,
    /// Containers started at once per language while refilling.
    pub parallel_starts: usize,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            size: 2,
            max_age_secs: 600,
            parallel_starts: 2,
        }
    }
}

#[derive(Debug)]
pub(crate) struct Pool {
    config: PoolConfig,
    ready: [Mutex<VecDeque<Prepared>>; 2],
    starting: [AtomicUsize; 2],
    failures: AtomicU32,
    wake: Arc<Notify>,
}

fn slot(language: Language) -> usize {
    usize::from(language == Language::Bash)
}

impl Pool {
    pub fn new(config: &PoolConfig) -> Self {
        Pool {
            config: config.clone(),
            ready: [Mutex::new(VecDeque::new()), Mutex::new(VecDeque::new())],
            starting: [AtomicUsize::new(0), AtomicUsize::new(0)],
            failures: AtomicU32::new(0),
            wake: Arc::new(Notify::new()),
        }
    }

    fn max_age(&self) -> Duration {
        Duration::from_secs(self.config.max_age_secs)
    }

    /// A ready container for `language`, if one is waiting.
    pub fn take(&self, language: Language) -> Option<Prepared> {
        if self.config.size == 0 {
            return None;
        }
        let taken = {
            let mut queue = self.ready[slot(language)].lock().expect("pool lock");
            let mut found = None;
            while let Some(p) = queue.pop_front() {
                if p.alive() && p.ready_at.elapsed() < self.max_age() {
                    found = Some(p);
                    break;
                }
                // Dead or stale: dropping it removes the container.
            }
            found
        };
        self.wake.notify_one();
        taken.map(Prepared::into_warm)
    }

    pub fn ready_count(&self) -> usize {
        self.ready
            .iter()
            .map(|q| q.lock().expect("pool lock").len())
            .sum()
    }

    /// Discards every waiting container (each is removed as it drops).
    pub fn drain(&self) {
        for q in &self.ready {
            let drained: Vec<Prepared> = q.lock().expect("pool lock").drain(..).collect();
            drop(drained);
        }
        self.wake.notify_waiters();
    }

    fn evict_unusable(&self, language: Language) {
        let mut queue = self.ready[slot(language)].lock().expect("pool lock");
        let max_age = self.max_age();
        queue.retain(|p| p.alive() && p.ready_at.elapsed() < max_age);
    }

    fn missing(&self, language: Language) -> usize {
        let ready = self.ready[slot(language)].lock().expect("pool lock").len();
        let starting = self.starting[slot(language)].load(Ordering::SeqCst);
        self.config.size.saturating_sub(ready + starting)
    }
}

/// Starts the background task that keeps the pool full (nothing when the pool is disabled).
pub(crate) fn spawn_refill(inner: &Arc<Inner>) {
    if inner.pool.config.size == 0 {
        return;
    }
    tokio::spawn(refill(Arc::downgrade(inner)));
}

async fn refill(weak: Weak<Inner>) {
    loop {
        let Some(inner) = weak.upgrade() else { return };
        if inner.shutdown.is_cancelled() {
            return;
        }
        let failures = inner.pool.failures.load(Ordering::SeqCst);
        if failures == 0 {
            for language in Language::ALL {
                inner.pool.evict_unusable(language);
                let starting = inner.pool.starting[slot(language)].load(Ordering::SeqCst);
                let room = inner
                    .pool
                    .config
                    .parallel_starts
                    .max(1)
                    .saturating_sub(starting);
                for _ in 0..inner.pool.missing(language).min(room) {
                    inner.pool.starting[slot(language)].fetch_add(1, Ordering::SeqCst);
                    // Tracked: shutdown waits for starts in progress, which then remove their container.
                    inner
                        .cleaner
                        .tasks
                        .spawn(start_one(inner.clone(), language));
                }
            }
        }
        // Waiting holds no strong reference, so a dropped sandbox ends this task.
        let pause = match failures {
            0 => Duration::from_secs(30),
            // The engine is failing: retry soon (recovery within seconds once it is back).
            n => Duration::from_millis(250 * u64::from(n.min(8))),
        };
        let wake = inner.pool.wake.clone();
        let cancelled = inner.shutdown.clone();
        drop(inner);
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(pause) => {
                if let Some(inner) = weak.upgrade() {
                    // After a pause, try again even if the last start failed.
                    inner.pool.failures.store(0, Ordering::SeqCst);
                }
            }
            _ = cancelled.cancelled() => return,
        }
    }
}

async fn start_one(inner: Arc<Inner>, language: Language) {
    match inner.prepare(language, Uuid::new_v4()).await {
        Ok(prepared) if !inner.shutdown.is_cancelled() => {
            inner.pool.failures.store(0, Ordering::SeqCst);
            inner.pool.ready[slot(language)]
                .lock()
                .expect("pool lock")
                .push_back(prepared);
        }
        Ok(_) => {}
        Err(e) => {
            let n = inner.pool.failures.fetch_add(1, Ordering::SeqCst);
            if n == 0 {
                tracing::warn!(%language, error = %e, "could not start a warm container; retrying");
            }
        }
    }
    inner.pool.starting[slot(language)].fetch_sub(1, Ordering::SeqCst);
    inner.pool.wake.notify_one();
}
