//! `GET /v1/executions/{id}/events`: the events of a run under a policy as Server-Sent Events,
//! while it runs (`?types=` keeps some kinds). The stream waits while the execution is not yet
//! running and ends when its run ends; the result keeps the whole (capped) record.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::Stream;
use serde::Deserialize;
use tokio::sync::broadcast::{self, error::RecvError};
use uuid::Uuid;

use super::AppState;
use super::auth::Authenticated;
use super::error::{ApiError, ErrorBody};
use super::params::{IdParam, Query};
use crate::auth::Caller;
use crate::executions::{Executions, LiveEvent, Watch};

/// How often a stream waiting for its execution to start looks again.
const START_POLL: Duration = Duration::from_millis(100);

const KINDS: [&str; 4] = ["file", "process", "network", "blocked"];

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

/// Where a stream is.
enum Phase {
    /// The execution is not running yet.
    Waiting,
    Streaming(broadcast::Receiver<LiveEvent>),
}

struct Watcher {
    executions: Arc<Executions>,
    caller: Caller,
    id: Uuid,
    kinds: Vec<&'static str>,
    phase: Phase,
}

impl Watcher {
    /// The next SSE event, or `None` when the run is over.
    async fn next(mut self) -> Option<(Result<SseEvent, Infallible>, Watcher)> {
        loop {
            match &mut self.phase {
                Phase::Waiting => match self.executions.watch_events(&self.caller, self.id).await {
                    Ok(Watch::Events(rx)) => self.phase = Phase::Streaming(rx),
                    Ok(Watch::NotYet) => tokio::time::sleep(START_POLL).await,
                    Ok(Watch::Over) | Err(_) => return None,
                },
                Phase::Streaming(rx) => match rx.recv().await {
                    Ok(event) if self.kinds.contains(&event.kind()) => {
                        let sse = SseEvent::default().event(event.kind()).json_data(&event);
                        return sse.ok().map(|e| (Ok(e), self));
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(missed)) => {
                        let e = SseEvent::default().event("lagged").data(missed.to_string());
                        return Some((Ok(e), self));
                    }
                    Err(RecvError::Closed) => return None,
                },
            }
        }
    }
}

/// The events of a running execution as Server-Sent Events: each `event:` is the kind
/// (`process`, `file`, `network`, `blocked`; `lagged` with the number of events a slow reader
/// missed) and `data:` the event as in the result's `events`, tagged (`{"kind", "event"}`). The
/// stream waits while the execution is queued or held, and ends with its run; an execution
/// without a policy (or one that ended) gives an empty stream.
#[utoipa::path(
    get,
    path = "/v1/executions/{id}/events",
    tag = "execute",
    operation_id = "stream_execution_events",
    params(("id" = uuid::Uuid, Path, description = "The execution id"), EventsQuery),
    responses(
        (status = 200, description = "A `text/event-stream` of the run's events.", content_type = "text/event-stream", body = String),
        (status = 400, description = "The id is not a UUID, or `types` names an unknown kind.", body = ErrorBody,
            example = json!({"error": {"type": "schema_error", "message": "types: unknown kind `disk` (there are: file, process, network, blocked)"}})),
        (status = 404, description = "No such execution (or not this agent's).", body = ErrorBody,
            example = json!({"error": {"type": "not_found", "message": "no such execution"}})),
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
    let caller = caller.0;
    // Unknown (or someone else's) executions answer 404 before the stream starts.
    state.executions.watch_events(&caller, id).await?;
    let start = Watcher {
        executions: state.executions.clone(),
        caller,
        id,
        kinds,
        phase: Phase::Waiting,
    };
    let events = futures::stream::unfold(start, Watcher::next);
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
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
