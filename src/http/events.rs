//! `GET /v1/executions/{id}/events`: the events of a run under a policy as Server-Sent Events,
//! while it runs (`?types=` keeps some kinds). The stream waits while the execution is not yet
//! running and ends when its run ends; the result keeps the whole (capped) record.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event as SseEvent, Sse};
use futures::Stream;
use uuid::Uuid;

use super::AppState;
use super::auth::Authenticated;
use super::error::{ApiError, ErrorBody};
use super::params::{IdParam, Query};
use super::sse::{BadEventsQuery, EventsQuery, Relay, kinds, respond};
use crate::auth::Caller;
use crate::executions::{Executions, LiveEvent, Watch};

/// How often a stream waiting for its execution to start looks again.
const START_POLL: Duration = Duration::from_millis(100);

/// Where a stream is.
enum Phase {
    /// The execution is not running yet.
    Waiting,
    Streaming(Relay<LiveEvent>),
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
    async fn next(mut self) -> Option<(SseEvent, Watcher)> {
        loop {
            match &mut self.phase {
                Phase::Waiting => match self.executions.watch_events(&self.caller, self.id).await {
                    Ok(Watch::Events(rx)) => {
                        self.phase = Phase::Streaming(Relay::new(rx, self.kinds.clone()));
                    }
                    Ok(Watch::NotYet) => tokio::time::sleep(START_POLL).await,
                    Ok(Watch::Over) | Err(_) => return None,
                },
                Phase::Streaming(relay) => return relay.next().await.map(|e| (e, self)),
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
        BadEventsQuery,
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
    Ok(respond(futures::stream::unfold(start, Watcher::next)))
}
