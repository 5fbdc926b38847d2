//! What the egress proxy reports for one sandbox: the `network_operations` events (`dns_query`,
//! `net_connect`, `net_limit`), the `network_summary`, and the recorder that keeps both per
//! command and per session and streams each event live as it happens.

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::Mutex;

use serde::Serialize;
use time::OffsetDateTime;
use tokio::sync::broadcast;

use super::limits::LimitKind;

/// Events a live subscriber may fall behind by before it misses some (it is told how many).
const LIVE_BUFFER: usize = 1024;

/// The outcome recorded for a lookup or a connection, in the policy's vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Allow,
    /// Allowed by a `log` rule: flagged for the audit log.
    Log,
    Deny,
}

/// Why a connection was refused or failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// No rule matched (which denies).
    NoRule,
    /// A rule with `decision: deny` matched.
    Rule,
    /// Every address the name resolved to is in a denied range.
    DeniedRange,
    /// The request itself was unusable (bad host, port 0, no absolute URI, Host mismatch).
    BadRequest,
    Limit,
    /// An operator refused the connection.
    Operator,
    /// Nobody decided within the approval timeout.
    ApprovalTimeout,
    /// A rule asks for approval and nobody can give it for this sandbox.
    NoApprover,
    /// The name did not resolve.
    Resolve,
    /// The upstream did not accept the connection.
    Connect,
}

/// How an allowed connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ended {
    Closed,
    /// A byte limit cut it (see the `net_limit` event next to it).
    Limit,
    UpstreamError,
    /// The sandbox's egress was closed while it was open.
    Cancelled,
}

/// How the sandbox reached the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// Forward proxying of a plain HTTP request.
    Http,
    /// An HTTP `CONNECT` tunnel (TLS passes through untouched).
    Connect,
    Socks5,
}

/// The operator's answer to an `approve` rule, as the audit log needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApprovalRecord {
    pub approved: bool,
    /// Who decided (as the approver reported it); `None` on a timeout.
    pub by: Option<String>,
    pub waited_ms: u64,
}

/// Fields every event carries: which sandbox, its order, and when it was recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventMeta {
    pub sandbox: Arc<str>,
    /// Position in the sandbox's event sequence, from 1.
    pub seq: u64,
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
}

impl Default for EventMeta {
    fn default() -> Self {
        EventMeta {
            sandbox: Arc::from(""),
            seq: 0,
            at: OffsetDateTime::UNIX_EPOCH,
        }
    }
}

/// A name the proxy looked up (only names a rule let it look up).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DnsQuery {
    pub domain: String,
    pub answers: Vec<IpAddr>,
    /// `allow` when at least one answer may be connected to.
    pub decision: Decision,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub duration_ms: u64,
    #[serde(flatten)]
    pub meta: EventMeta,
}

/// One upstream connection (one forwarded HTTP request, one tunnel) or one refused attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetConnect {
    /// The host the client asked for (normalised name or address literal).
    pub domain: String,
    /// The address actually connected to; `None` when no connection was made.
    pub remote: Option<IpAddr>,
    pub port: u16,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub duration_ms: u64,
    pub decision: Decision,
    /// The rule that decided; `None` when none matched.
    pub rule: Option<String>,
    pub protocol: Protocol,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Status of the upstream's (last) response, forward proxying only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalRecord>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended: Option<Ended>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<LimitKind>,
    #[serde(flatten)]
    pub meta: EventMeta,
}

/// A limit was reached: the connection named by `domain`/`port` was refused or cut.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetLimit {
    pub limit: LimitKind,
    pub domain: String,
    pub port: u16,
    pub reason: String,
    #[serde(flatten)]
    pub meta: EventMeta,
}

/// One entry of `network_operations`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum NetworkEvent {
    DnsQuery(DnsQuery),
    NetConnect(NetConnect),
    NetLimit(NetLimit),
}

impl NetworkEvent {
    pub fn meta(&self) -> &EventMeta {
        match self {
            NetworkEvent::DnsQuery(e) => &e.meta,
            NetworkEvent::NetConnect(e) => &e.meta,
            NetworkEvent::NetLimit(e) => &e.meta,
        }
    }

    fn meta_mut(&mut self) -> &mut EventMeta {
        match self {
            NetworkEvent::DnsQuery(e) => &mut e.meta,
            NetworkEvent::NetConnect(e) => &mut e.meta,
            NetworkEvent::NetLimit(e) => &mut e.meta,
        }
    }

    /// Whether the audit log records it: denials, approvals (given or refused), `log` rules and
    /// limits.
    pub fn needs_audit(&self) -> bool {
        match self {
            NetworkEvent::NetConnect(c) => {
                c.decision != Decision::Allow || c.approval.is_some() || c.limit.is_some()
            }
            NetworkEvent::NetLimit(_) => true,
            NetworkEvent::DnsQuery(_) => false,
        }
    }
}

pub use crate::domain::network::NetworkSummary;

/// The events and summary of a command or a session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NetworkReport {
    pub network_operations: Vec<NetworkEvent>,
    pub network_summary: NetworkSummary,
}

#[derive(Debug, Default)]
struct Tally {
    summary: NetworkSummary,
    destinations: HashSet<String>,
}

impl Tally {
    fn add(&mut self, event: &NetworkEvent) {
        let s = &mut self.summary;
        match event {
            NetworkEvent::DnsQuery(_) => s.dns_queries += 1,
            NetworkEvent::NetConnect(c) => {
                s.bytes_sent += c.bytes_sent;
                s.bytes_received += c.bytes_received;
                if c.decision == Decision::Deny {
                    s.blocked += 1;
                } else if c.remote.is_some() {
                    s.connections += 1;
                    self.destinations.insert(format!("{}:{}", c.domain, c.port));
                    s.unique_destinations = self.destinations.len() as u64;
                }
            }
            NetworkEvent::NetLimit(_) => {}
        }
    }
}

#[derive(Debug, Default)]
struct State {
    seq: u64,
    events: Vec<NetworkEvent>,
    command_start: usize,
    session: Tally,
    command: Tally,
}

/// Keeps one sandbox's events (up to `max_events`) and sends each to live subscribers.
#[derive(Debug)]
pub(crate) struct Recorder {
    sandbox: Arc<str>,
    max_events: usize,
    live: broadcast::Sender<NetworkEvent>,
    state: Mutex<State>,
}

impl Recorder {
    pub(crate) fn new(sandbox: Arc<str>, max_events: usize) -> Recorder {
        Recorder {
            sandbox,
            max_events,
            live: broadcast::channel(LIVE_BUFFER).0,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stamps `event` (sandbox, sequence number, time), keeps it and streams it.
    pub(crate) fn record(&self, mut event: NetworkEvent) {
        let mut state = self.lock();
        state.seq += 1;
        *event.meta_mut() = EventMeta {
            sandbox: self.sandbox.clone(),
            seq: state.seq,
            at: OffsetDateTime::now_utc(),
        };
        state.session.add(&event);
        state.command.add(&event);
        if state.events.len() < self.max_events {
            state.events.push(event.clone());
        } else {
            state.session.summary.events_dropped += 1;
            state.command.summary.events_dropped += 1;
        }
        // Sent under the lock so that live order is sequence order; no receiver is not an error.
        let _ = self.live.send(event);
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<NetworkEvent> {
        self.live.subscribe()
    }

    pub(crate) fn begin_command(&self) {
        let mut state = self.lock();
        state.command_start = state.events.len();
        state.command = Tally::default();
    }

    pub(crate) fn command_report(&self) -> NetworkReport {
        let state = self.lock();
        NetworkReport {
            network_operations: state.events[state.command_start..].to_vec(),
            network_summary: state.command.summary.clone(),
        }
    }

    pub(crate) fn session_report(&self) -> NetworkReport {
        let state = self.lock();
        NetworkReport {
            network_operations: state.events.clone(),
            network_summary: state.session.summary.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connect(domain: &str, decision: Decision, remote: Option<&str>, bytes: u64) -> NetworkEvent {
        NetworkEvent::NetConnect(NetConnect {
            domain: domain.into(),
            remote: remote.map(|r| r.parse().expect("ip")),
            port: 443,
            bytes_sent: bytes,
            bytes_received: 2 * bytes,
            duration_ms: 1,
            decision,
            rule: Some("r".into()),
            protocol: Protocol::Connect,
            method: None,
            status: None,
            cause: None,
            reason: None,
            approval: None,
            ended: Some(Ended::Closed),
            limit: None,
            meta: EventMeta::default(),
        })
    }

    #[test]
    fn events_serialise_with_the_documented_names() {
        let recorder = Recorder::new("sb-1".into(), 10);
        recorder.record(NetworkEvent::DnsQuery(DnsQuery {
            domain: "allowed.test".into(),
            answers: vec!["192.0.2.1".parse().expect("ip")],
            decision: Decision::Allow,
            reason: None,
            duration_ms: 0,
            meta: EventMeta::default(),
        }));
        recorder.record(connect(
            "allowed.test",
            Decision::Allow,
            Some("192.0.2.1"),
            10,
        ));
        let report = recorder.session_report();
        let json = serde_json::to_value(&report).expect("json");
        let ops = json["network_operations"].as_array().expect("list");
        assert_eq!(ops[0]["type"], "dns_query");
        assert_eq!(ops[0]["answers"][0], "192.0.2.1");
        assert_eq!(ops[0]["decision"], "allow");
        assert_eq!(ops[0]["sandbox"], "sb-1");
        assert_eq!(ops[0]["seq"], 1);
        let c = &ops[1];
        for key in [
            "type",
            "domain",
            "remote",
            "port",
            "bytes_sent",
            "bytes_received",
            "duration_ms",
            "decision",
            "rule",
        ] {
            assert!(c.get(key).is_some(), "net_connect lacks {key}: {c}");
        }
        assert_eq!(c["type"], "net_connect");
        let summary = &json["network_summary"];
        for key in [
            "connections",
            "dns_queries",
            "bytes_sent",
            "bytes_received",
            "blocked",
            "unique_destinations",
        ] {
            assert!(summary.get(key).is_some(), "summary lacks {key}");
        }
    }

    #[test]
    fn summaries_count_per_command_and_per_session() {
        let recorder = Recorder::new("sb".into(), 3);
        let mut live = recorder.subscribe();
        recorder.record(connect("a.test", Decision::Allow, Some("192.0.2.1"), 10));
        recorder.record(connect("a.test", Decision::Log, Some("192.0.2.1"), 5));
        recorder.begin_command();
        recorder.record(connect("b.test", Decision::Deny, None, 0));
        recorder.record(connect("c.test", Decision::Allow, Some("192.0.2.3"), 1));
        let command = recorder.command_report();
        assert_eq!(command.network_operations.len(), 1, "capped at max_events");
        assert_eq!(
            command.network_summary,
            NetworkSummary {
                connections: 1,
                dns_queries: 0,
                bytes_sent: 1,
                bytes_received: 2,
                blocked: 1,
                unique_destinations: 1,
                events_dropped: 1,
            }
        );
        let session = recorder.session_report().network_summary;
        assert_eq!(
            (
                session.connections,
                session.unique_destinations,
                session.blocked
            ),
            (3, 2, 1)
        );
        assert_eq!(session.bytes_sent, 16);
        let seqs: Vec<u64> = (0..4)
            .map(|_| live.try_recv().expect("streamed").meta().seq)
            .collect();
        assert_eq!(
            seqs,
            [1, 2, 3, 4],
            "every event is streamed, dropped or not"
        );
    }
}
