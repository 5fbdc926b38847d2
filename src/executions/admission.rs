//! Admission: how many runs hold a sandbox at once, and how long callers may wait for a slot.
//! Synchronous callers wait in a bounded queue (beyond it, or after the queue timeout, the answer
//! is "overloaded"); accepted background work waits as long as it takes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::ExecutionSettings;

/// A run slot, held until the run is recorded.
pub(super) type Slot = OwnedSemaphorePermit;

/// Why no slot was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refused {
    #[error("too many executions in progress")]
    Overloaded { retry_after_secs: u64 },
    #[error("the service is shutting down")]
    ShuttingDown,
}

/// Bounded concurrency with a bounded queue in front of it.
#[derive(Debug)]
pub(super) struct Admission {
    slots: Arc<Semaphore>,
    waiting: AtomicUsize,
    max_queue: usize,
    queue_timeout: Duration,
}

/// One caller in the queue, counted until it leaves (with or without a slot).
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Admission {
    pub(super) fn new(settings: &ExecutionSettings) -> Admission {
        Admission {
            slots: Arc::new(Semaphore::new(settings.max_concurrent)),
            waiting: AtomicUsize::new(0),
            max_queue: settings.max_queue,
            queue_timeout: Duration::from_secs(settings.queue_timeout_secs),
        }
    }

    /// A slot for a caller that is waiting on the line.
    pub(super) async fn admit(&self) -> Result<Slot, Refused> {
        if let Ok(slot) = self.slots.clone().try_acquire_owned() {
            return Ok(slot);
        }
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= self.max_queue {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(Refused::Overloaded {
                retry_after_secs: 1,
            });
        }
        let _waiting = Waiting(&self.waiting);
        match tokio::time::timeout(self.queue_timeout, self.slots.clone().acquire_owned()).await {
            Ok(Ok(slot)) => Ok(slot),
            Ok(Err(_)) => Err(Refused::ShuttingDown),
            Err(_) => Err(Refused::Overloaded {
                retry_after_secs: 2,
            }),
        }
    }

    /// A slot for accepted background work: it waits as long as it takes.
    pub(super) async fn admit_background(&self) -> Result<Slot, Refused> {
        self.slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Refused::ShuttingDown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(max_concurrent: usize, max_queue: usize) -> Admission {
        Admission::new(&ExecutionSettings {
            max_concurrent,
            max_queue,
            queue_timeout_secs: 30,
            ..ExecutionSettings::default()
        })
    }

    #[tokio::test]
    async fn beyond_the_slots_and_the_queue_a_caller_is_refused() {
        let a = admission(1, 0);
        let held = a.admit().await.expect("a free slot");
        assert_eq!(
            a.admit().await.err(),
            Some(Refused::Overloaded {
                retry_after_secs: 1
            })
        );
        drop(held);
        assert!(a.admit().await.is_ok(), "the slot is free again");
    }

    #[tokio::test]
    async fn a_queued_caller_gets_the_slot_that_frees_up() {
        let a = Arc::new(admission(1, 1));
        let held = a.admit().await.expect("a free slot");
        let queued = tokio::spawn({
            let a = a.clone();
            async move { a.admit().await.map(drop) }
        });
        while a.waiting.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            a.admit().await.err(),
            Some(Refused::Overloaded {
                retry_after_secs: 1
            }),
            "the queue holds one"
        );
        drop(held);
        assert_eq!(queued.await.expect("joined"), Ok(()));
        assert_eq!(a.waiting.load(Ordering::SeqCst), 0);
    }
}
