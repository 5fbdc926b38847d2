//! The events of a run, bounded in the supervisor: each list keeps at most the job's cap (the
//! rest is only counted), a batch is sent when it is large or old enough, and nothing else is
//! held, so a million operations cost a counter, not memory.

use std::time::{Duration, Instant};

use scriptgate_policy::events::{
    BlockedOperation, Event, FileEvent, NetworkEvent, OperationType, ProcessEvent,
};
use scriptgate_supervisor::enforcement::{EventBatch, Omitted};

/// A batch goes out at this many events…
const BATCH_EVENTS: usize = 64;
/// …or this many bytes of (estimated) JSON…
const BATCH_BYTES: usize = 256 * 1024;
/// …or when its first event is this old.
pub(crate) const BATCH_AGE: Duration = Duration::from_millis(100);
/// Arguments and text kept per event (a command line can be megabytes).
pub(crate) const ARGV_EVENT_BYTES: usize = 4096;
pub(crate) const ARGV_EVENT_COUNT: usize = 64;

/// Where batches go (the host, through the supervisor's frames).
pub(crate) trait Sink: Send + Sync {
    fn events(&self, batch: &EventBatch);
    fn approval(&self, request: &scriptgate_supervisor::enforcement::ApprovalRequest);
}

#[derive(Debug)]
pub(crate) struct EventLog {
    cap: u64,
    kept: [u64; 4],
    batch: Vec<Event>,
    bytes: usize,
    omitted: Omitted,
    first: Option<Instant>,
}

impl EventLog {
    pub(crate) fn new(cap: u32) -> EventLog {
        EventLog {
            cap: u64::from(cap),
            kept: [0; 4],
            batch: Vec::new(),
            bytes: 0,
            omitted: Omitted::default(),
            first: None,
        }
    }

    fn list(event: &Event) -> usize {
        match event {
            Event::Process(_) => 0,
            Event::File(_) => 1,
            Event::Network(_) => 2,
            Event::Blocked(_) => 3,
        }
    }

    /// Whether an event of this list would be kept (so callers can skip building it).
    pub(crate) fn wants_file(&self) -> bool {
        self.kept[1] < self.cap
    }

    /// Counts a file event the cap leaves out (without building it).
    pub(crate) fn omit_file(&mut self) {
        self.omitted.file_operations += 1;
    }

    /// Keeps `event` if its list has room, else counts it. Sends the batch when it is full.
    pub(crate) fn push(&mut self, event: Event, sink: &dyn Sink) {
        let list = Self::list(&event);
        if self.kept[list] >= self.cap {
            let counter = match list {
                0 => &mut self.omitted.processes,
                1 => &mut self.omitted.file_operations,
                2 => &mut self.omitted.network_operations,
                _ => &mut self.omitted.blocked_operations,
            };
            *counter += 1;
            return;
        }
        self.kept[list] += 1;
        self.bytes += estimate(&event);
        self.batch.push(event);
        self.first.get_or_insert_with(Instant::now);
        if self.batch.len() >= BATCH_EVENTS || self.bytes >= BATCH_BYTES {
            self.flush(sink);
        }
    }

    /// When the pending batch must go out (for the monitor's poll timeout).
    pub(crate) fn due(&self) -> Option<Instant> {
        self.first.map(|t| t + BATCH_AGE)
    }

    /// Sends what is pending (events or counts), if anything.
    pub(crate) fn flush(&mut self, sink: &dyn Sink) {
        if self.batch.is_empty() && self.omitted.total() == 0 {
            return;
        }
        sink.events(&self.take());
    }

    /// The pending batch, emptied.
    pub(crate) fn take(&mut self) -> EventBatch {
        self.first = None;
        self.bytes = 0;
        EventBatch {
            events: std::mem::take(&mut self.batch),
            omitted: std::mem::take(&mut self.omitted),
            summary: None,
        }
    }
}

fn estimate(event: &Event) -> usize {
    96 + match event {
        Event::Process(p) => p.argv.iter().map(|a| a.len() + 4).sum::<usize>() + p.cwd.len(),
        Event::File(f) => f.path.len(),
        Event::Network(_) => 64,
        Event::Blocked(b) => b.target.len() + b.message.as_ref().map_or(0, String::len),
    }
}

/// Arguments as text for an event: at most [`ARGV_EVENT_COUNT`] of them and
/// [`ARGV_EVENT_BYTES`] in all, the cut marked with `…`.
pub(crate) fn argv_text(argv: &[Vec<u8>]) -> Vec<String> {
    let mut out = Vec::new();
    let mut total = 0;
    for (i, a) in argv.iter().enumerate() {
        if i >= ARGV_EVENT_COUNT || total >= ARGV_EVENT_BYTES {
            out.push("…".to_string());
            break;
        }
        let text = String::from_utf8_lossy(a);
        let room = ARGV_EVENT_BYTES - total;
        let kept: String = if text.len() > room {
            let mut cut = room;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            format!("{}…", &text[..cut])
        } else {
            text.into_owned()
        };
        total += kept.len();
        out.push(kept);
    }
    out
}

/// Builders for the four kinds, so call sites stay short.
pub(crate) fn process(pid: i32, argv: Vec<String>, cwd: String, v: &Judgement) -> Event {
    Event::Process(ProcessEvent {
        pid: pid as u32,
        argv,
        cwd,
        decision: v.decision,
        rule: v.rule.clone(),
    })
}

pub(crate) fn file(
    kind: scriptgate_policy::events::FileOperationType,
    path: &[u8],
    v: &Judgement,
) -> Event {
    Event::File(FileEvent {
        kind,
        path: String::from_utf8_lossy(path).into_owned(),
        bytes: None,
        decision: v.decision,
        rule: v.rule.clone(),
    })
}

pub(crate) fn connect(remote: std::net::IpAddr, port: u16, v: &Judgement) -> Event {
    Event::Network(NetworkEvent::NetConnect {
        domain: None,
        remote,
        port,
        bytes_sent: 0,
        bytes_received: 0,
        duration_ms: 0,
        decision: v.decision,
        rule: v.rule.clone(),
    })
}

pub(crate) fn blocked(
    kind: OperationType,
    pid: i32,
    target: String,
    v: &Judgement,
    errno: i32,
    message: Option<String>,
) -> Event {
    Event::Blocked(BlockedOperation {
        kind,
        pid: Some(pid as u32),
        target,
        decision: v.decision,
        rule: v.rule.clone(),
        message: message.or_else(|| v.message.clone()),
        errno: Some(errno),
    })
}

/// A decision as events and approvals carry it (owned: it outlives the policy borrow).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Judgement {
    pub(crate) decision: scriptgate_policy::Decision,
    pub(crate) rule: Option<String>,
    pub(crate) message: Option<String>,
}

impl Judgement {
    pub(crate) fn of<S: scriptgate_policy::Subject>(v: &scriptgate_policy::Verdict<'_, S>) -> Self {
        use scriptgate_policy::Decision;
        Judgement {
            decision: v.decision,
            rule: v.rule().map(str::to_string),
            // Messages only matter where something is refused, held or flagged.
            message: (v.decision != Decision::Allow)
                .then(|| v.message().map(|m| m.to_string()))
                .flatten(),
        }
    }

    /// The stricter of two: deny, then approve, then log, then allow.
    pub(crate) fn stricter(self, other: Judgement) -> Judgement {
        if rank(other.decision) > rank(self.decision) {
            other
        } else {
            self
        }
    }
}

fn rank(d: scriptgate_policy::Decision) -> u8 {
    use scriptgate_policy::Decision;
    match d {
        Decision::Allow => 0,
        Decision::Log => 1,
        Decision::Approve => 2,
        Decision::Deny => 3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scriptgate_policy::Decision;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Collect(Mutex<Vec<EventBatch>>);

    impl Sink for Collect {
        fn events(&self, batch: &EventBatch) {
            self.0.lock().expect("lock").push(batch.clone());
        }
        fn approval(&self, _: &scriptgate_supervisor::enforcement::ApprovalRequest) {}
    }

    fn allow() -> Judgement {
        Judgement {
            decision: Decision::Allow,
            rule: Some("r".into()),
            message: None,
        }
    }

    #[test]
    fn a_flood_is_counted_not_kept() {
        let sink = Collect::default();
        let mut log = EventLog::new(10);
        for i in 0..100_000 {
            let path = format!("/tmp/{i}");
            log.push(
                file(
                    scriptgate_policy::events::FileOperationType::FileRead,
                    path.as_bytes(),
                    &allow(),
                ),
                &sink,
            );
        }
        log.flush(&sink);
        let batches = sink.0.lock().expect("lock");
        let kept: usize = batches.iter().map(|b| b.events.len()).sum();
        let omitted: u64 = batches.iter().map(|b| b.omitted.file_operations).sum();
        assert_eq!(kept, 10);
        assert_eq!(omitted, 100_000 - 10);
        assert!(batches.len() <= 2, "{} batches", batches.len());
    }

    #[test]
    fn long_command_lines_are_cut_for_events() {
        let argv: Vec<Vec<u8>> = (0..1000).map(|i| format!("arg{i}").into_bytes()).collect();
        let text = argv_text(&argv);
        assert_eq!(text.len(), ARGV_EVENT_COUNT + 1);
        assert_eq!(text.last().map(String::as_str), Some("…"));
        let huge = vec![vec![b'x'; 10_000]];
        let text = argv_text(&huge);
        assert!(text[0].len() <= ARGV_EVENT_BYTES + 3 && text[0].ends_with('…'));
    }

    #[test]
    fn the_stricter_judgement_wins() {
        let j = |d| Judgement {
            decision: d,
            rule: None,
            message: None,
        };
        assert_eq!(
            j(Decision::Allow).stricter(j(Decision::Log)).decision,
            Decision::Log
        );
        assert_eq!(
            j(Decision::Deny).stricter(j(Decision::Approve)).decision,
            Decision::Deny
        );
        assert_eq!(
            j(Decision::Approve).stricter(j(Decision::Log)).decision,
            Decision::Approve
        );
    }
}
