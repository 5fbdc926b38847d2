//! `/v1/sessions`: create, list, show and delete persistent sessions. Commands are in
//! `session_exec.rs`, files in `session_files.rs`; the wire types all three share are here.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use uuid::Uuid;

use super::auth::Authenticated;
use super::error::{ApiError, ErrorBody};
use super::params::IdParam;
use super::{AppState, Json};
use crate::auth::Role;
use crate::domain::record::ResourceUsage;
use crate::sessions::{NewSession, SessionView, State as SessionState};

/// Resource limits of a session's container, within the deployment's (`sandbox.limits`).
#[derive(Debug, Clone, Default, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SessionLimitsIn {
    #[serde(default)]
    pub memory_mb: Option<u64>,
    #[serde(default)]
    pub cpus: Option<f64>,
    #[serde(default)]
    pub workspace_mb: Option<u64>,
}

/// A session to create. Every field is optional.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"environment": {"PROJECT": "demo"}, "idle_timeout_secs": 600}))]
pub(super) struct SessionCreateIn {
    /// The runner profile (`GET /v1/profiles`); the default one when absent.
    #[serde(default)]
    pub profile: Option<String>,
    /// The run-time policy every command runs under (`scriptgate policy list`), chosen as for
    /// `/v1/execute`: this one if the token may select it (403 `policy_not_allowed` otherwise),
    /// else the token's default, else the deployment's when `policy.enforce_default` is on;
    /// without any, commands run unenforced. A sandbox that cannot enforce a policy (gVisor)
    /// refuses the session (503 `policy_unavailable`).
    #[serde(default)]
    pub policy: Option<String>,
    /// Exported to every command. Names that load code (`LD_*`, `BASH_ENV`, `BASH_FUNC_*`,
    /// `PROMPT_COMMAND`, `PS0`–`PS4`, …) are refused; values are secret-scanned.
    #[serde(default)]
    pub environment: BTreeMap<String, String>,
    /// Idle time after which the session stops (default `sessions.default_idle_timeout_secs`,
    /// 1800).
    #[serde(default)]
    pub idle_timeout_secs: Option<u64>,
    /// Lifetime of the session (default `sessions.default_max_duration_secs`, 14400).
    #[serde(default)]
    pub max_duration_secs: Option<u64>,
    /// Commands after which the session stops.
    #[serde(default)]
    pub max_commands: Option<u64>,
    #[serde(default)]
    pub limits: Option<SessionLimitsIn>,
    /// Network access for every command of the session through the egress proxy, as `network`
    /// of `POST /v1/execute`: within what the session's policy (else the deployment's default
    /// policy) allows, else 403 `network_not_allowed`; none when absent. Each command's result
    /// lists its lookups and connections (`network_operations`, `network_summary`), and
    /// `/v1/sessions/{id}/events` streams them as they happen.
    #[serde(default)]
    pub network: Option<crate::domain::network::NetworkGrant>,
    /// MiB sent plus received through the egress proxy over the session's life (default and
    /// maximum `egress.max_network_mb`; each command is also held to
    /// `egress.max_command_network_mb`). The connection that reaches it is cut, with a
    /// `net_connect` event whose `limit` is `session_bytes`; later ones are refused with a
    /// `net_limit` event. Only with network access (400 otherwise).
    #[serde(default)]
    #[schema(minimum = 1, example = 100)]
    pub max_network_mb: Option<u64>,
}

impl From<SessionCreateIn> for NewSession {
    fn from(i: SessionCreateIn) -> Self {
        let limits = i.limits.unwrap_or_default();
        NewSession {
            profile: i.profile,
            policy: i.policy,
            environment: i.environment,
            idle_timeout_secs: i.idle_timeout_secs,
            max_duration_secs: i.max_duration_secs,
            max_commands: i.max_commands,
            memory_mb: limits.memory_mb,
            cpus: limits.cpus,
            workspace_mb: limits.workspace_mb,
            network: i.network,
            max_network_mb: i.max_network_mb,
        }
    }
}

/// Where to reach a session.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub(super) struct SessionLinks {
    #[serde(rename = "self")]
    pub this: String,
    pub exec: String,
    pub exec_stream: String,
    pub files: String,
    pub history: String,
}

impl SessionLinks {
    fn of(id: Uuid) -> Self {
        let base = format!("/v1/sessions/{id}");
        SessionLinks {
            exec: format!("{base}/exec"),
            exec_stream: format!("{base}/exec/stream"),
            files: format!("{base}/files"),
            history: format!("{base}/history"),
            this: base,
        }
    }
}

/// 201: the session is ready.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub(super) struct SessionCreatedOut {
    pub session_id: Uuid,
    pub state: SessionState,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
    pub links: SessionLinks,
}

/// A session's limits as they apply.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub(super) struct SessionLimitsOut {
    pub memory_mb: u64,
    pub cpus: f64,
    pub workspace_mb: u64,
}

/// A session: its state, its shell state and what it used so far.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub(super) struct SessionOut {
    pub session_id: Uuid,
    pub agent: String,
    pub profile: String,
    /// The service node (engine instance) that holds the container.
    pub node: String,
    pub state: SessionState,
    /// Why it stopped (`deleted`, `idle_timeout`, `max_duration`, `max_commands`,
    /// `sandbox_lost`, `service_stopped`, with a message).
    pub reason: Option<String>,
    pub cwd: String,
    pub environment: BTreeMap<String, String>,
    pub aliases: BTreeMap<String, String>,
    pub command_count: u64,
    pub max_commands: u64,
    /// The command running now (while `busy`).
    pub current_command_id: Option<Uuid>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub last_activity_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
    pub idle_timeout_secs: u64,
    /// CPU time of all commands so far; the largest memory peak of one.
    pub resource_usage: ResourceUsage,
    pub limits: SessionLimitsOut,
    /// The run-time policy every command runs under; null when commands are not enforced.
    pub policy: Option<String>,
    /// Whether commands have network access through the egress proxy.
    pub network_access: bool,
    /// The `network` the session was created with (null without one: only what its policy
    /// gives, if anything).
    pub network: Option<crate::domain::network::NetworkGrant>,
    /// The session's network byte budget in MiB (null without network access; 0: no limit).
    pub max_network_mb: Option<u64>,
    pub links: SessionLinks,
}

impl From<SessionView> for SessionOut {
    fn from(v: SessionView) -> Self {
        SessionOut {
            links: SessionLinks::of(v.id),
            policy: v.policy,
            network_access: v.network.is_some(),
            max_network_mb: v.network.as_ref().map(|n| n.max_network_mb),
            network: v.network.and_then(|n| n.grant),
            session_id: v.id,
            agent: v.agent,
            profile: v.profile,
            node: v.node,
            state: v.state,
            reason: v.reason,
            cwd: v.cwd,
            environment: v.environment,
            aliases: v.aliases,
            command_count: v.command_count,
            max_commands: v.max_commands,
            current_command_id: v.current_command_id,
            created_at: v.created_at,
            last_activity_at: v.last_activity_at,
            expires_at: v.expires_at,
            idle_timeout_secs: v.idle_timeout_secs,
            resource_usage: v.usage,
            limits: SessionLimitsOut {
                memory_mb: v.limits.memory_mb,
                cpus: v.limits.cpus,
                workspace_mb: v.limits.workspace_mb,
            },
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub(super) struct SessionListOut {
    pub sessions: Vec<SessionOut>,
}

/// Start a persistent session: a long-lived sandbox that keeps its workspace, working
/// directory, environment and aliases across commands.
#[utoipa::path(
    post,
    path = "/v1/sessions",
    tag = "sessions",
    operation_id = "session_create",
    request_body = SessionCreateIn,
    responses(
        (status = 201, description = "The session is ready.", body = SessionCreatedOut),
        (status = 400, description = "A value beyond the deployment's maxima (`max_network_mb` above `egress.max_network_mb`, or without network access), a refused environment name, a secret in a value, or a malformed `network`.", body = ErrorBody,
            example = json!({"error": {"type": "schema_error", "message": "environment: environment variable `LD_PRELOAD` is refused"}})),
        (status = 403, description = "The token may not select the `policy` it names (`policy_not_allowed`), or `network` asks for more than the session's policy allows (`network_not_allowed`).", body = ErrorBody,
            example = json!({"error": {"type": "network_not_allowed", "message": "network: `example.org` on port 443 is outside what the policy `default` allows"}})),
        (status = 429, description = "The agent's or the service's session cap is reached.", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Seconds to wait before retrying")),
            example = json!({"error": {"type": "too_many_sessions", "message": "agent `a` holds its maximum of 4 sessions; delete one first"}})),
        (status = 503, description = "The container engine or the runner image is unavailable (`engine_unavailable`), or the session asked for network access and the egress proxy cannot give it (`network_unavailable`: none runs, it stopped, or the runtime cannot reach its socket). Nothing was started.", body = ErrorBody),
    ),
    security(("agent_token" = []))
)]
pub(super) async fn create(
    State(state): State<AppState>,
    caller: Authenticated,
    Json(body): Json<SessionCreateIn>,
) -> Result<Response, ApiError> {
    let caller = caller.require(Role::Agent)?;
    let session = state.sessions.create(caller, body.into()).await?;
    let view = session.view();
    let out = SessionCreatedOut {
        session_id: view.id,
        state: view.state,
        created_at: view.created_at,
        expires_at: view.expires_at,
        links: SessionLinks::of(view.id),
    };
    Ok((StatusCode::CREATED, axum::Json(out)).into_response())
}

/// List sessions: an agent sees its own, an operator all (stopped ones while they are retained).
#[utoipa::path(
    get,
    path = "/v1/sessions",
    tag = "sessions",
    operation_id = "session_list",
    responses((status = 200, description = "The sessions, oldest first.", body = SessionListOut)),
    security(("agent_token" = []), ("operator_token" = []))
)]
pub(super) async fn list(
    State(state): State<AppState>,
    caller: Authenticated,
) -> Result<axum::Json<SessionListOut>, ApiError> {
    let sessions = state
        .sessions
        .list(&caller.0)
        .into_iter()
        .map(SessionOut::from)
        .collect();
    Ok(axum::Json(SessionListOut { sessions }))
}

/// A session: state, working directory, environment, command count, times, usage so far.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}",
    tag = "sessions",
    operation_id = "session_get",
    params(("id" = Uuid, Path, description = "The session id")),
    responses(
        (status = 400, description = "An id is not a UUID, or a parameter is out of range.", body = ErrorBody),
        (status = 200, description = "The session (a stopped one while it is retained, with its `reason`).", body = SessionOut),
        (status = 404, description = "No such session.", body = ErrorBody,
            example = json!({"error": {"type": "session_not_found", "message": "no session with this id"}})),
    ),
    security(("agent_token" = []), ("operator_token" = []))
)]
pub(super) async fn get(
    State(state): State<AppState>,
    caller: Authenticated,
    IdParam(id): IdParam,
) -> Result<axum::Json<SessionOut>, ApiError> {
    let session = state.sessions.get(&caller.0, id)?;
    Ok(axum::Json(session.view().into()))
}

/// Stop a session: kills a running command and removes the container. Its record stays,
/// `stopped`, for `sessions.retention_secs`.
#[utoipa::path(
    delete,
    path = "/v1/sessions/{id}",
    tag = "sessions",
    operation_id = "session_destroy",
    params(("id" = Uuid, Path, description = "The session id")),
    responses(
        (status = 400, description = "An id is not a UUID, or a parameter is out of range.", body = ErrorBody),
        (status = 204, description = "The session is stopped and its container removed."),
        (status = 404, description = "No such session.", body = ErrorBody),
    ),
    security(("agent_token" = []), ("operator_token" = []))
)]
pub(super) async fn delete(
    State(state): State<AppState>,
    caller: Authenticated,
    IdParam(id): IdParam,
) -> Result<StatusCode, ApiError> {
    state.sessions.delete(&caller.0, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Changes between commands. Every field is optional.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"idle_timeout_secs": 3600, "environment": {"MODE": "release", "OLD": null}}))]
pub(super) struct SessionPatchIn {
    #[serde(default)]
    pub idle_timeout_secs: Option<u64>,
    /// Names to export (a string) or unset (null); the same rules as at create.
    #[serde(default)]
    pub environment: BTreeMap<String, Option<String>>,
}

/// Change a session's idle timeout or environment (not while a command runs).
#[utoipa::path(
    patch,
    path = "/v1/sessions/{id}",
    tag = "sessions",
    operation_id = "session_update",
    params(("id" = Uuid, Path, description = "The session id")),
    request_body = SessionPatchIn,
    responses(
        (status = 200, description = "The session after the change.", body = SessionOut),
        (status = 400, description = "A value beyond the maxima, a refused name or a secret.", body = ErrorBody),
        (status = 404, description = "No such session.", body = ErrorBody),
        (status = 409, description = "`session_busy` or `session_stopped`.", body = ErrorBody),
    ),
    security(("agent_token" = []))
)]
pub(super) async fn patch(
    State(state): State<AppState>,
    caller: Authenticated,
    IdParam(id): IdParam,
    Json(body): Json<SessionPatchIn>,
) -> Result<axum::Json<SessionOut>, ApiError> {
    let caller = caller.require(Role::Agent)?;
    let session = state
        .sessions
        .patch(caller, id, body.idle_timeout_secs, body.environment)
        .await?;
    Ok(axum::Json(session.view().into()))
}
