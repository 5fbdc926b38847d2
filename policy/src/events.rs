//! The events of a run (what every process executed, opened and connected to, and what was
//! blocked), in the shape results carry them: four lists, each capped, with counts of what the
//! caps left out.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::model::{Decision, Operation};

/// A list cap for results that do not configure one.
pub const DEFAULT_EVENT_CAP: usize = 1000;

/// An execution (`execve`), allowed or not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessEvent {
    pub pid: u32,
    pub argv: Vec<String>,
    pub cwd: String,
    pub decision: Decision,
    /// The rule that decided; `null` for a section's default.
    pub rule: Option<String>,
}

/// The `type` of a file operation event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileOperationType {
    FileRead,
    FileWrite,
    FileCreate,
    FileDelete,
    FileList,
    FileStat,
    FileExec,
}

impl From<Operation> for FileOperationType {
    fn from(op: Operation) -> Self {
        match op {
            Operation::Read => FileOperationType::FileRead,
            Operation::Write => FileOperationType::FileWrite,
            Operation::Create => FileOperationType::FileCreate,
            Operation::Delete => FileOperationType::FileDelete,
            Operation::List => FileOperationType::FileList,
            Operation::Stat => FileOperationType::FileStat,
            Operation::Exec => FileOperationType::FileExec,
        }
    }
}

/// A file operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEvent {
    #[serde(rename = "type")]
    pub kind: FileOperationType,
    pub path: String,
    /// Bytes read or written through it, when known.
    pub bytes: Option<u64>,
    pub decision: Decision,
    pub rule: Option<String>,
}

/// A network operation, tagged by `type`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum NetworkEvent {
    DnsQuery {
        domain: String,
        answers: Vec<IpAddr>,
        decision: Decision,
    },
    NetConnect {
        /// The name the address was resolved from, when known.
        domain: Option<String>,
        remote: IpAddr,
        port: u16,
        bytes_sent: u64,
        bytes_received: u64,
        duration_ms: u64,
        decision: Decision,
        rule: Option<String>,
    },
}

/// The `type` of a blocked operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationType {
    FileRead,
    FileWrite,
    FileCreate,
    FileDelete,
    FileList,
    FileStat,
    FileExec,
    Exec,
    DnsQuery,
    NetConnect,
}

impl From<FileOperationType> for OperationType {
    fn from(t: FileOperationType) -> Self {
        match t {
            FileOperationType::FileRead => OperationType::FileRead,
            FileOperationType::FileWrite => OperationType::FileWrite,
            FileOperationType::FileCreate => OperationType::FileCreate,
            FileOperationType::FileDelete => OperationType::FileDelete,
            FileOperationType::FileList => OperationType::FileList,
            FileOperationType::FileStat => OperationType::FileStat,
            FileOperationType::FileExec => OperationType::FileExec,
        }
    }
}

/// An operation that failed because of the policy: denied, or `approve` denied or expired.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockedOperation {
    #[serde(rename = "type")]
    pub kind: OperationType,
    pub pid: Option<u32>,
    /// The path, the command line, or `host:port`.
    pub target: String,
    pub decision: Decision,
    pub rule: Option<String>,
    pub message: Option<String>,
    /// The error the process got (`EACCES` = 13, `EPERM` = 1…), when it got one.
    pub errno: Option<i32>,
}

/// One event, as streamed (`kind` is what `?types=` filters on).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "event", rename_all = "snake_case")]
pub enum Event {
    Process(ProcessEvent),
    File(FileEvent),
    Network(NetworkEvent),
    Blocked(BlockedOperation),
}

impl Event {
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Process(_) => "process",
            Event::File(_) => "file",
            Event::Network(_) => "network",
            Event::Blocked(_) => "blocked",
        }
    }
}

/// A list that keeps its first `cap` items and counts the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CappedList<T> {
    items: Vec<T>,
    cap: usize,
    omitted: u64,
}

impl<T> CappedList<T> {
    pub fn new(cap: usize) -> Self {
        CappedList {
            items: Vec::new(),
            cap,
            omitted: 0,
        }
    }

    /// Keeps `item` if there is room (true), else counts it.
    pub fn push(&mut self, item: T) -> bool {
        if self.items.len() < self.cap {
            self.items.push(item);
            true
        } else {
            self.omitted += 1;
            false
        }
    }

    pub fn items(&self) -> &[T] {
        &self.items
    }

    /// Counts `n` more items left out (by a cap applied before the items reached this list).
    pub fn add_omitted(&mut self, n: u64) {
        self.omitted = self.omitted.saturating_add(n);
    }

    /// How many items the cap left out.
    pub fn omitted(&self) -> u64 {
        self.omitted
    }

    pub fn cap(&self) -> usize {
        self.cap
    }
}

/// The events of one result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "EventsWire", from = "EventsWire")]
pub struct Events {
    pub processes: CappedList<ProcessEvent>,
    pub file_operations: CappedList<FileEvent>,
    pub network_operations: CappedList<NetworkEvent>,
    pub blocked_operations: CappedList<BlockedOperation>,
}

impl Events {
    /// Empty lists of at most `cap` items each.
    pub fn with_cap(cap: usize) -> Events {
        Events {
            processes: CappedList::new(cap),
            file_operations: CappedList::new(cap),
            network_operations: CappedList::new(cap),
            blocked_operations: CappedList::new(cap),
        }
    }

    /// Files `event` in its list; false when the cap left it out.
    pub fn push(&mut self, event: Event) -> bool {
        match event {
            Event::Process(e) => self.processes.push(e),
            Event::File(e) => self.file_operations.push(e),
            Event::Network(e) => self.network_operations.push(e),
            Event::Blocked(e) => self.blocked_operations.push(e),
        }
    }
}

/// The wire shape: the four lists, and what each left out.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct EventsWire {
    processes: Vec<ProcessEvent>,
    file_operations: Vec<FileEvent>,
    network_operations: Vec<NetworkEvent>,
    blocked_operations: Vec<BlockedOperation>,
    omitted: Omitted,
}

/// How many events of each list the cap left out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Omitted {
    processes: u64,
    file_operations: u64,
    network_operations: u64,
    blocked_operations: u64,
}

impl From<Events> for EventsWire {
    fn from(e: Events) -> Self {
        EventsWire {
            omitted: Omitted {
                processes: e.processes.omitted,
                file_operations: e.file_operations.omitted,
                network_operations: e.network_operations.omitted,
                blocked_operations: e.blocked_operations.omitted,
            },
            processes: e.processes.items,
            file_operations: e.file_operations.items,
            network_operations: e.network_operations.items,
            blocked_operations: e.blocked_operations.items,
        }
    }
}

impl From<EventsWire> for Events {
    /// A received list keeps what it carries: its cap is its length.
    fn from(w: EventsWire) -> Self {
        fn list<T>(items: Vec<T>, omitted: u64) -> CappedList<T> {
            CappedList {
                cap: items.len(),
                items,
                omitted,
            }
        }
        Events {
            processes: list(w.processes, w.omitted.processes),
            file_operations: list(w.file_operations, w.omitted.file_operations),
            network_operations: list(w.network_operations, w.omitted.network_operations),
            blocked_operations: list(w.blocked_operations, w.omitted.blocked_operations),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str) -> Event {
        Event::File(FileEvent {
            kind: Operation::Read.into(),
            path: path.into(),
            bytes: Some(12),
            decision: Decision::Allow,
            rule: Some("read-system".into()),
        })
    }

    #[test]
    fn lists_keep_their_first_items_and_count_the_rest() {
        let mut events = Events::with_cap(2);
        for i in 0..5 {
            events.push(file(&format!("/f{i}")));
        }
        assert_eq!(events.file_operations.items().len(), 2);
        assert_eq!(events.file_operations.omitted(), 3);
        assert_eq!(events.file_operations.items()[1].path, "/f1");
        assert_eq!(events.processes.omitted(), 0);
    }

    #[test]
    fn the_wire_shape_uses_the_field_names_of_the_contract() {
        let mut events = Events::with_cap(1);
        events.push(file("/etc/hostname"));
        events.push(file("/etc/hosts"));
        events.push(Event::Process(ProcessEvent {
            pid: 7,
            argv: vec!["ls".into(), "-l".into()],
            cwd: "/tmp".into(),
            decision: Decision::Log,
            rule: None,
        }));
        events.push(Event::Network(NetworkEvent::NetConnect {
            domain: Some("example.com".into()),
            remote: "93.184.216.34".parse().expect("ip"),
            port: 443,
            bytes_sent: 1,
            bytes_received: 2,
            duration_ms: 3,
            decision: Decision::Deny,
            rule: Some("no-network".into()),
        }));
        events.push(Event::Blocked(BlockedOperation {
            kind: OperationType::NetConnect,
            pid: Some(7),
            target: "example.com:443".into(),
            decision: Decision::Deny,
            rule: Some("no-network".into()),
            message: Some("no network".into()),
            errno: Some(13),
        }));
        let json = serde_json::to_value(&events).expect("serializes");
        assert_eq!(json["file_operations"][0]["type"], "file_read");
        assert_eq!(json["file_operations"][0]["bytes"], 12);
        assert_eq!(json["omitted"]["file_operations"], 1);
        assert_eq!(json["processes"][0]["argv"][1], "-l");
        assert!(json["processes"][0]["rule"].is_null());
        let net = &json["network_operations"][0];
        assert_eq!(net["type"], "net_connect");
        for key in [
            "domain",
            "remote",
            "port",
            "bytes_sent",
            "bytes_received",
            "duration_ms",
        ] {
            assert!(net.get(key).is_some(), "{key}");
        }
        assert_eq!(json["blocked_operations"][0]["type"], "net_connect");
        let dns = serde_json::to_value(NetworkEvent::DnsQuery {
            domain: "pypi.org".into(),
            answers: vec![],
            decision: Decision::Deny,
        })
        .expect("serializes");
        assert_eq!(dns["type"], "dns_query");
        let back: Events = serde_json::from_value(json).expect("deserializes");
        assert_eq!(back.file_operations.omitted(), 1);
        assert_eq!(back.network_operations.items().len(), 1);
    }

    #[test]
    fn a_streamed_event_names_its_kind() {
        let json = serde_json::to_value(file("/x")).expect("serializes");
        assert_eq!(json["kind"], "file");
        assert_eq!(json["event"]["path"], "/x");
        assert_eq!(file("/x").kind(), "file");
    }
}
