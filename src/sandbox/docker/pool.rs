//! Warm containers: started, attached and ready before any request, each used exactly once.
//!
//! Each runner profile has its own pool per language (sized by the profile's `pool_size`), with its
//! own failure back-off, so a profile whose image is missing does not hold up the others.
//! A request takes the oldest ready container of its profile and language (or runs cold when there is none);
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
use crate::sandbox::profiles::{Profile, Profiles};

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

/// The warm containers of one profile and language.
#[derive(Debug)]
struct Slot {
    profile: Profile,
    language: Language,
    size: usize,
    ready: Mutex<VecDeque<Prepared>>,
    starting: AtomicUsize,
    failures: AtomicU32,
}

#[derive(Debug)]
pub(crate) struct Pool {
    config: PoolConfig,
    slots: Vec<Slot>,
    wake: Arc<Notify>,
}

impl Pool {
    pub(super) fn new(config: &PoolConfig, profiles: &Profiles) -> Self {
        let slots = profiles
            .all()
            .iter()
            .flat_map(|p| {
                p.languages.iter().map(|l| Slot {
                    profile: p.clone(),
                    language: *l,
                    size: p.pool_size,
                    ready: Mutex::new(VecDeque::new()),
                    starting: AtomicUsize::new(0),
                    failures: AtomicU32::new(0),
                })
            })
            .filter(|s| s.size > 0)
            .collect();
        Pool {
            config: config.clone(),
            slots,
            wake: Arc::new(Notify::new()),
        }
    }

    fn max_age(&self) -> Duration {
        Duration::from_secs(self.config.max_age_secs)
    }

    fn slot(&self, profile: &str, language: Language) -> Option<&Slot> {
        self.slots
            .iter()
            .find(|s| s.profile.name == profile && s.language == language)
    }

    /// A ready container of `profile` for `language`, if one is waiting.
    pub(super) fn take(&self, profile: &str, language: Language) -> Option<Prepared> {
        let slot = self.slot(profile, language)?;
        let taken = {
            let mut queue = slot.ready.lock().expect("pool lock");
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

    pub(super) fn ready_count(&self) -> usize {
        self.slots
            .iter()
            .map(|s| s.ready.lock().expect("pool lock").len())
            .sum()
    }

    /// Ready containers of one profile (all languages).
    pub(super) fn ready_in(&self, profile: &str) -> usize {
        self.slots
            .iter()
            .filter(|s| s.profile.name == profile)
            .map(|s| s.ready.lock().expect("pool lock").len())
            .sum()
    }

    /// Discards every waiting container (each is removed as it drops).
    pub(super) fn drain(&self) {
        for s in &self.slots {
            let drained: Vec<Prepared> = s.ready.lock().expect("pool lock").drain(..).collect();
            drop(drained);
        }
        self.wake.notify_waiters();
    }
}

impl Slot {
    fn evict_unusable(&self, max_age: Duration) {
        let mut queue = self.ready.lock().expect("pool lock");
        queue.retain(|p| p.alive() && p.ready_at.elapsed() < max_age);
    }

    fn missing(&self) -> usize {
        let ready = self.ready.lock().expect("pool lock").len();
        let starting = self.starting.load(Ordering::SeqCst);
        self.size.saturating_sub(ready + starting)
    }
}

/// Starts the background task that keeps the pools full (nothing when every pool is disabled).
pub(crate) fn spawn_refill(inner: &Arc<Inner>) {
    if inner.pool.slots.is_empty() {
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
        let max_age = inner.pool.max_age();
        let mut worst = 0;
        for (index, slot) in inner.pool.slots.iter().enumerate() {
            let failures = slot.failures.load(Ordering::SeqCst);
            worst = worst.max(failures);
            if failures > 0 {
                continue;
            }
            slot.evict_unusable(max_age);
            let starting = slot.starting.load(Ordering::SeqCst);
            let room = inner
                .pool
                .config
                .parallel_starts
                .max(1)
                .saturating_sub(starting);
            for _ in 0..slot.missing().min(room) {
                slot.starting.fetch_add(1, Ordering::SeqCst);
                // Tracked: shutdown waits for starts in progress, which then remove their container.
                inner.cleaner.tasks.spawn(start_one(inner.clone(), index));
            }
        }
        // Waiting holds no strong reference, so a dropped sandbox ends this task.
        let pause = match worst {
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
                    for slot in &inner.pool.slots {
                        slot.failures.store(0, Ordering::SeqCst);
                    }
                }
            }
            _ = cancelled.cancelled() => return,
        }
    }
}

async fn start_one(inner: Arc<Inner>, index: usize) {
    let slot = &inner.pool.slots[index];
    let language = slot.language;
    match inner.prepare(&slot.profile, language, Uuid::new_v4()).await {
        Ok(prepared) if !inner.shutdown.is_cancelled() => {
            slot.failures.store(0, Ordering::SeqCst);
            slot.ready.lock().expect("pool lock").push_back(prepared);
        }
        Ok(_) => {}
        Err(e) => {
            let n = slot.failures.fetch_add(1, Ordering::SeqCst);
            if n == 0 {
                tracing::warn!(profile = %slot.profile.name, %language, error = %e,
                    "could not start a warm container; retrying");
            }
        }
    }
    slot.starting.fetch_sub(1, Ordering::SeqCst);
    inner.pool.wake.notify_one();
}
