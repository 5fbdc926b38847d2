//! The Server-Sent Events machinery of the event streams (`GET /v1/executions/{id}/events`,
//! `GET /v1/sessions/{id}/events`): the `?types=` filter, and the relay that turns a broadcast
//! subscription into SSE events (`event:` the kind, `data:` the event; `lagged` with the number
//! of events a slow reader missed).

use std::convert::Infallible;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::Stream;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast::{self, error::RecvError};

use super::error::{ApiError, ErrorBody};
use crate::executions::LiveEvent;

/// The kinds of event a stream carries and `?types=` names.
const KINDS: [&str; 4] = ["file", "process", "network", "blocked"];

/// The query string of an event stream.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct EventsQuery {
    /// Comma-separated kinds to stream: `file`, `process`, `network`, `blocked` (default: all).
    #[param(
        example = "file,blocked",
        pattern = "^(file|process|network|blocked)(,(file|process|network|blocked))*$"
    )]
    pub types: Option<String>,
}

/// The 400 of an event stream: a malformed id or an unknown kind in `types`. Handlers name it in
/// `responses(…)`; it only describes the contract, no value of it is built.
#[derive(utoipa::IntoResponses)]
#[response(status = 400, description = "The id is not a UUID, or `types` names an unknown kind.",
    example = json!({"error": {"type": "schema_error", "message": "types: unknown kind `disk` (there are: file, process, network, blocked)"}}))]
#[expect(
    dead_code,
    reason = "describes responses for the OpenAPI document only"
)]
pub(super) struct BadEventsQuery(ErrorBody);

/// The kinds `types` names (all without it).
pub(super) fn kinds(types: Option<&str>) -> Result<Vec<&'static str>, ApiError> {
    let Some(types) = types else {
        return Ok(KINDS.to_vec());
    };
    types
        .split(',')
        .map(|t| {
            KINDS.into_iter().find(|k| *k == t).ok_or_else(|| {
                ApiError::Schema(format!(
                    "types: unknown kind `{t}` (there are: {})",
                    KINDS.join(", ")
                ))
            })
        })
        .collect()
}

/// An event a stream relays: its kind is the SSE `event:` and what `?types=` filters on.
pub(super) trait Kinded: Serialize + Clone {
    fn kind(&self) -> &'static str;
}

impl Kinded for scriptgate_policy::events::Event {
    fn kind(&self) -> &'static str {
        scriptgate_policy::events::Event::kind(self)
    }
}

/// The egress proxy's events are `network` (as on `/v1/executions/{id}/events`).
impl Kinded for crate::sandbox::egress::NetworkEvent {
    fn kind(&self) -> &'static str {
        "network"
    }
}

impl Kinded for LiveEvent {
    fn kind(&self) -> &'static str {
        LiveEvent::kind(self)
    }
}

/// A subscription relayed as SSE events of the kinds asked for.
pub(super) struct Relay<E> {
    rx: broadcast::Receiver<E>,
    kinds: Vec<&'static str>,
}

impl<E: Kinded> Relay<E> {
    pub(super) fn new(rx: broadcast::Receiver<E>, kinds: Vec<&'static str>) -> Self {
        Relay { rx, kinds }
    }

    /// The next SSE event, or `None` when the channel closed (or an event does not serialize).
    pub(super) async fn next(&mut self) -> Option<SseEvent> {
        loop {
            match self.rx.recv().await {
                Ok(event) if self.kinds.contains(&event.kind()) => {
                    return SseEvent::default()
                        .event(event.kind())
                        .json_data(&event)
                        .ok();
                }
                Ok(_) => {}
                Err(RecvError::Lagged(missed)) => {
                    return Some(SseEvent::default().event("lagged").data(missed.to_string()));
                }
                Err(RecvError::Closed) => return None,
            }
        }
    }
}

/// The response of an event stream: its events, kept alive while it waits.
/// The SSE events of a relay (none without one) until its channel closes.
pub(super) fn relayed<E: Kinded + Send + 'static>(
    relay: Option<Relay<E>>,
) -> impl Stream<Item = SseEvent> + Send + 'static {
    futures::stream::unfold(relay, |relay| async move {
        let mut relay = relay?;
        relay.next().await.map(|e| (e, Some(relay)))
    })
}

pub(super) fn respond<S: Stream<Item = SseEvent> + Send + 'static>(
    events: S,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    use futures::StreamExt as _;
    Sse::new(events.map(Ok)).keep_alive(KeepAlive::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_name_known_kinds_only() {
        assert_eq!(kinds(None).expect("all"), KINDS.to_vec());
        assert_eq!(
            kinds(Some("file,blocked")).expect("two"),
            vec!["file", "blocked"]
        );
        // Exactly the documented pattern: no spaces, no empty kinds.
        assert!(kinds(Some("file, blocked")).is_err());
        assert!(kinds(Some("file,")).is_err());
        let err = kinds(Some("file,disk")).expect_err("unknown");
        assert_eq!(
            err.to_string(),
            "types: unknown kind `disk` (there are: file, process, network, blocked)"
        );
    }
}
