//! A session's policy and egress events as clients read them: live while commands run (a
//! subscription to what the sandbox and the egress proxy report), and the history of the
//! commands the session still keeps, flattened into one paged list with the counts of what the
//! caps left out.

use scriptgate_policy::events::{Event, Events};
use tokio::sync::broadcast;
use uuid::Uuid;

use super::{SessionError, Sessions};
use crate::auth::Caller;
use crate::sandbox::egress::NetworkEvent;

/// One event of the history: which command it belongs to, and the event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EventEntry {
    pub command_id: Uuid,
    pub event: HistoryEvent,
}

/// An event of a command: what its run-time policy saw (the result's `events`), or a lookup or
/// connection through the egress proxy (the result's `network_operations`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HistoryEvent {
    Policy(Event),
    Egress(NetworkEvent),
}

impl HistoryEvent {
    /// `process`, `file`, `network` or `blocked`; the proxy's events are `network`, as on the
    /// session's stream.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            HistoryEvent::Policy(e) => e.kind(),
            HistoryEvent::Egress(_) => "network",
        }
    }
}

/// Events each list's cap left out, over the commands of the history.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Omitted {
    pub processes: u64,
    pub file_operations: u64,
    pub network_operations: u64,
    pub blocked_operations: u64,
}

/// One page of a session's event history.
#[derive(Debug, Clone)]
pub(crate) struct EventPage {
    pub entries: Vec<EventEntry>,
    pub offset: u64,
    /// Events of the asked kinds over the whole history.
    pub total: u64,
    pub omitted: Omitted,
    /// Commands the history holds (the oldest are forgotten beyond `sessions.history_commands`).
    pub commands: u64,
}

impl Sessions {
    /// A subscription to the events of the session's commands from now on (`None`: the session
    /// has no policy, or it stopped: there is nothing to stream).
    pub(crate) fn live_events(
        &self,
        caller: &Caller,
        id: Uuid,
    ) -> Result<Option<broadcast::Receiver<Event>>, SessionError> {
        let session = self.get(caller, id)?;
        let live = session.live.lock().expect("session lock");
        Ok(live.events.as_ref().map(broadcast::Sender::subscribe))
    }

    /// A subscription to the session's lookups and connections through the egress proxy from
    /// now on (`None`: the session has no network access, or it stopped).
    pub(crate) fn live_network(
        &self,
        caller: &Caller,
        id: Uuid,
    ) -> Result<Option<broadcast::Receiver<NetworkEvent>>, SessionError> {
        let session = self.get(caller, id)?;
        Ok(session.sandbox().ok().and_then(|s| s.network_events()))
    }

    /// The page `offset`..`offset + limit` of the events of `kinds` in the session's history,
    /// oldest command first; within a command, in the result's order (processes, file
    /// operations, network operations, blocked operations of the run-time policy, then the
    /// lookups and connections through the egress proxy).
    pub(crate) fn event_history(
        &self,
        caller: &Caller,
        id: Uuid,
        kinds: &[&str],
        offset: u64,
        limit: u64,
    ) -> Result<EventPage, SessionError> {
        let commands = self.history(caller, id)?;
        let mut page = EventPage {
            entries: Vec::new(),
            offset,
            total: 0,
            omitted: Omitted::default(),
            commands: commands.len() as u64,
        };
        for command in &commands {
            let record = command.snapshot();
            let mut events = Vec::new();
            if let Some(policy) = &record.events {
                count_omitted(&mut page.omitted, policy);
                events.extend(flatten(policy).into_iter().map(HistoryEvent::Policy));
            }
            if let Some(network) = record.network {
                page.omitted.network_operations += network.network_summary.events_dropped;
                events.extend(
                    network
                        .network_operations
                        .into_iter()
                        .map(HistoryEvent::Egress),
                );
            }
            for event in events {
                if !kinds.contains(&event.kind()) {
                    continue;
                }
                if page.total >= offset && (page.entries.len() as u64) < limit {
                    page.entries.push(EventEntry {
                        command_id: command.id,
                        event,
                    });
                }
                page.total += 1;
            }
        }
        Ok(page)
    }
}

fn count_omitted(o: &mut Omitted, e: &Events) {
    o.processes += e.processes.omitted();
    o.file_operations += e.file_operations.omitted();
    o.network_operations += e.network_operations.omitted();
    o.blocked_operations += e.blocked_operations.omitted();
}

/// The events of one result as one list, in the result's order.
fn flatten(e: &Events) -> Vec<Event> {
    let processes = e.processes.items().iter().cloned().map(Event::Process);
    let files = e.file_operations.items().iter().cloned().map(Event::File);
    let network = e
        .network_operations
        .items()
        .iter()
        .cloned()
        .map(Event::Network);
    let blocked = e
        .blocked_operations
        .items()
        .iter()
        .cloned()
        .map(Event::Blocked);
    processes
        .chain(files)
        .chain(network)
        .chain(blocked)
        .collect()
}

#[cfg(test)]
mod tests {
    use scriptgate_policy::Decision;
    use scriptgate_policy::events::ProcessEvent;

    use super::*;

    #[test]
    fn a_result_flattens_in_its_order_and_counts_what_its_caps_left_out() {
        let mut events = Events::with_cap(1);
        for pid in [1, 2] {
            events.push(Event::Process(ProcessEvent {
                pid,
                argv: vec!["true".into()],
                cwd: "/".into(),
                decision: Decision::Allow,
                rule: None,
            }));
        }
        let flat = flatten(&events);
        assert_eq!(flat.len(), 1);
        assert_eq!(flat[0].kind(), "process");
        let mut o = Omitted::default();
        count_omitted(&mut o, &events);
        assert_eq!(o.processes, 1);
    }
}
