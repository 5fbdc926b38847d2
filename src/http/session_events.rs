//! The policy events of a session: `GET /v1/sessions/{id}/events` streams them as Server-Sent
//! Events while its commands run (`?types=` keeps some kinds, as for executions), and
//! `GET /v1/sessions/{id}/events/history` pages through those of the commands the session keeps
//! (the egress proxy's lookups and connections included, as `network`).

use std::convert::Infallible;

use axum::extract::State;
use axum::response::sse::{Event as SseEvent, Sse};
use futures::Stream;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::AppState;
use super::auth::Authenticated;
use super::error::{ApiError, ErrorBody};
use super::params::{IdParam, Query, page_limit};
use super::sse::{BadEventsQuery, EventsQuery, Relay, kinds, relayed, respond};
use crate::sessions::{EventEntry, EventPage, HistoryEvent};

/// The most events one history page holds (and its default size).
const MAX_PAGE: u64 = 1000;

/// The events of the session's commands as Server-Sent Events, from now until the session
/// stops: each `event:` is the kind (`process`, `file`, `network`, `blocked`; `lagged` with the
/// number of events a slow reader missed) and `data:` the event as in a command's `events`,
/// tagged (`{"kind", "event"}`); they belong to the command running at the time
/// (`current_command_id`). A session with network access adds every lookup and connection
/// through the egress proxy as a `network` event whose `data:` is the proxy's event as in a
/// command's `network_operations` (`{"type": "dns_query" | "net_connect" | "net_limit", …}`).
/// A session without a policy or network access (or a stopped one) gives an empty stream.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/events",
    tag = "sessions",
    operation_id = "stream_session_events",
    params(("id" = Uuid, Path, description = "The session id"), EventsQuery),
    responses(
        (status = 200, description = "A `text/event-stream` of the session's events.", content_type = "text/event-stream", body = String),
        BadEventsQuery,
        (status = 404, description = "No such session (or not this agent's).", body = ErrorBody,
            example = json!({"error": {"type": "session_not_found", "message": "no session with this id"}})),
    ),
    security(("agent_token" = []), ("operator_token" = []))
)]
pub(super) async fn stream(
    State(state): State<AppState>,
    caller: Authenticated,
    IdParam(id): IdParam,
    Query(query): Query<EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let kinds = kinds(query.types.as_deref())?;
    let policy = state.sessions.live_events(&caller.0, id)?;
    let network = state.sessions.live_network(&caller.0, id)?;
    // A session without a policy or network (or a stopped one) has no channel: that part ends
    // at once.
    let events = futures::stream::select(
        relayed(policy.map(|rx| Relay::new(rx, kinds.clone()))),
        relayed(network.map(|rx| Relay::new(rx, kinds))),
    );
    Ok(respond(events))
}

/// Which part of the history to read.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct HistoryQuery {
    /// Comma-separated kinds: `file`, `process`, `network`, `blocked` (default: all).
    #[param(
        example = "blocked",
        pattern = "^(file|process|network|blocked)(,(file|process|network|blocked))*$"
    )]
    pub types: Option<String>,
    /// Events to skip (default 0).
    #[serde(default)]
    pub offset: Option<u64>,
    /// Events at most (default and maximum 1000).
    #[serde(default)]
    pub limit: Option<u64>,
}

/// One event of the history.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub(super) struct EventEntryOut {
    pub command_id: Uuid,
    /// `process`, `file`, `network` or `blocked`.
    pub kind: String,
    /// The event as in a command's `events`; an event of the egress proxy (kind `network`) as in
    /// a command's `network_operations` (`{"type": "dns_query" | "net_connect" | "net_limit", …}`).
    #[schema(value_type = Object)]
    pub event: serde_json::Value,
}

impl From<EventEntry> for EventEntryOut {
    fn from(e: EventEntry) -> Self {
        let kind = e.event.kind().to_string();
        let event = match &e.event {
            HistoryEvent::Policy(policy) => match serde_json::to_value(policy) {
                Ok(serde_json::Value::Object(mut tagged)) => {
                    tagged.remove("event").unwrap_or_default()
                }
                _ => serde_json::Value::Null,
            },
            // As the session's stream sends it: `{"type": "dns_query" | "net_connect" | …}`.
            HistoryEvent::Egress(network) => {
                serde_json::to_value(network).unwrap_or(serde_json::Value::Null)
            }
        };
        EventEntryOut {
            command_id: e.command_id,
            kind,
            event,
        }
    }
}

/// Per list, events the caps (`policy.event_cap` per command) left out.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub(super) struct OmittedOut {
    pub processes: u64,
    pub file_operations: u64,
    pub network_operations: u64,
    pub blocked_operations: u64,
}

/// A page of a session's event history.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub(super) struct EventHistoryOut {
    pub session_id: Uuid,
    pub events: Vec<EventEntryOut>,
    pub offset: u64,
    /// Where the next page starts; null at the end.
    pub next_offset: Option<u64>,
    /// Events of the asked kinds in the whole history.
    pub total: u64,
    /// What the caps left out of the commands' results (not in any page); `network_operations`
    /// adds the proxy's events past `egress.max_events`.
    pub omitted: OmittedOut,
    /// Commands the history holds (the newest `sessions.history_commands`).
    pub commands: u64,
}

impl EventHistoryOut {
    fn of(session_id: Uuid, p: EventPage) -> Self {
        let end = p.offset + p.entries.len() as u64;
        EventHistoryOut {
            session_id,
            offset: p.offset,
            next_offset: (end < p.total).then_some(end),
            total: p.total,
            events: p.entries.into_iter().map(EventEntryOut::from).collect(),
            omitted: OmittedOut {
                processes: p.omitted.processes,
                file_operations: p.omitted.file_operations,
                network_operations: p.omitted.network_operations,
                blocked_operations: p.omitted.blocked_operations,
            },
            commands: p.commands,
        }
    }
}

/// The policy events of the session's past commands (those its history keeps), oldest command
/// first; within a command in its result's order (processes, file operations, network
/// operations, blocked operations), then the command's lookups and connections through the
/// egress proxy (kind `network`, as on the session's stream).
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/events/history",
    tag = "sessions",
    operation_id = "session_event_history",
    params(("id" = Uuid, Path, description = "The session id"), HistoryQuery),
    responses(
        (status = 200, description = "A page of events, with the totals and what the caps left out.", body = EventHistoryOut),
        (status = 400, description = "The id is not a UUID, `types` names an unknown kind, or `limit` is out of range.", body = ErrorBody),
        (status = 404, description = "No such session.", body = ErrorBody),
    ),
    security(("agent_token" = []), ("operator_token" = []))
)]
pub(super) async fn history(
    State(state): State<AppState>,
    caller: Authenticated,
    IdParam(id): IdParam,
    Query(q): Query<HistoryQuery>,
) -> Result<axum::Json<EventHistoryOut>, ApiError> {
    let kinds = kinds(q.types.as_deref())?;
    let limit = page_limit(q.limit, MAX_PAGE)?;
    let page = state
        .sessions
        .event_history(&caller.0, id, &kinds, q.offset.unwrap_or(0), limit)?;
    Ok(axum::Json(EventHistoryOut::of(id, page)))
}
