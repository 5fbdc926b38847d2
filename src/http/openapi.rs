//! The OpenAPI 3.1 contract, generated from the handlers' `#[utoipa::path]` attributes and the wire
//! types' `ToSchema` derives, so it cannot drift from the code. `openapi.yaml` at the repository
//! root is this document (a test fails when the file is stale); the service also serves it at
//! `/openapi.json` and `/openapi.yaml`.
//!
//! Responses every operation can give are added here rather than repeated on each handler: 401/403
//! on authenticated operations, 413/415 on operations with a JSON body, 500 everywhere.

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use serde_json::{Value, json};
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder, Schema};
use utoipa::{Modify, OpenApi};

use super::error::ErrorBody;
use super::{
    AppState, approvals, artifacts, events, execute, executions, health, jobs, profiles,
    session_events, session_exec, session_files, session_jobs, sessions, tools, validate,
};
use crate::config::ExecutionSettings;
use crate::sandbox::job::Maxima;
use crate::sandbox::profiles::Profiles;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "scriptgate",
        description = "Validates Python and Bash scripts (size, syntax, language, secrets, dangerous patterns) and runs them in one-use, hardened Docker containers: no network, read-only root, non-root, capabilities dropped, memory/CPU/pids limits, killed at the deadline, always removed.\n\nAgents authenticate with an agent token, operators (who approve or deny held executions) with an operator token: `Authorization: Bearer <token>`.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    paths(
        execute::execute,
        validate::validate,
        executions::submit,
        executions::get,
        events::stream,
        artifacts::download,
        jobs::submit,
        jobs::get,
        jobs::artifact,
        profiles::list,
        approvals::list,
        approvals::decide,
        tools::list,
        sessions::create,
        sessions::list,
        sessions::get,
        sessions::delete,
        sessions::patch,
        session_exec::exec,
        session_exec::exec_stream,
        session_exec::kill,
        session_exec::output,
        session_exec::history,
        session_jobs::run,
        session_events::stream,
        session_events::history,
        session_files::upload,
        session_files::download,
        session_files::remove,
        session_files::list,
        health::healthz,
        health::readyz,
        health::metrics,
    ),
    // Referenced from query parameters only, which utoipa does not collect by itself.
    components(schemas(tools::ToolFormat)),
    modifiers(&Security, &CommonResponses),
    tags(
        (name = "execute", description = "Validate and run scripts"),
        (name = "jobs", description = "Run structured jobs (Job protocol 1.0): typed steps in one container, files in, artifacts out"),
        (name = "approvals", description = "Operators approve or deny held executions"),
        (name = "sessions", description = "Persistent sessions: a sandbox that keeps its workspace, working directory and environment across commands"),
        (name = "tools", description = "Tool definitions for agent frameworks"),
        (name = "health", description = "Liveness and readiness"),
    )
)]
#[derive(Debug)]
pub struct ApiDoc;

/// The contract for these execution settings, runner profiles and jobs maxima: the timeout's
/// maximum, the profile names and the jobs' maxima are configurable, and a client generated from
/// the document must know the real ones.
pub fn document(
    settings: &ExecutionSettings,
    profiles: &Profiles,
    maxima: &Maxima,
) -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    if let Some(components) = doc.components.take() {
        let mut value = serde_json::to_value(&components).unwrap_or(Value::Null);
        let names: Vec<String> = profiles.names().into_iter().map(String::from).collect();
        jobs::schema::with_maxima(&mut value, maxima, &names);
        doc.components = Some(serde_json::from_value(value).unwrap_or(components));
    }
    let input = doc
        .components
        .as_mut()
        .and_then(|c| c.schemas.get_mut("ExecuteIn"));
    if let Some(RefOr::T(Schema::Object(input))) = input {
        if let Some(RefOr::T(Schema::Object(timeout))) = input.properties.get_mut("timeout") {
            timeout.maximum = Some((settings.max_timeout_secs as usize).into());
        }
        if let Some(RefOr::T(Schema::Object(profile))) = input.properties.get_mut("profile") {
            let mut names: Vec<Value> = profiles.names().into_iter().map(Value::from).collect();
            names.push(Value::Null); // absent or null: the default profile
            profile.enum_values = Some(names);
        }
    }
    doc
}

/// The contract of the default configuration as YAML: what `openapi.yaml` holds.
pub fn yaml() -> String {
    let profiles = crate::config::Config::default()
        .sandbox
        .resolved_profiles()
        .expect("the built-in profiles are valid");
    to_yaml(&document(
        &ExecutionSettings::default(),
        &profiles,
        &Maxima::default(),
    ))
}

fn to_yaml(doc: &utoipa::openapi::OpenApi) -> String {
    doc.to_yaml()
        .expect("the OpenAPI document serializes to YAML")
}

/// `GET /openapi.json`: the contract of this service's configuration.
pub(super) async fn serve_json(State(state): State<AppState>) -> axum::response::Response {
    axum::Json(served(&state)).into_response()
}

fn served(state: &AppState) -> utoipa::openapi::OpenApi {
    let ex = &state.executions;
    document(ex.settings(), &state.profiles, ex.job_maxima())
}

/// `GET /openapi.yaml`: the same, as YAML.
pub(super) async fn serve_yaml(State(state): State<AppState>) -> axum::response::Response {
    let state = &state;
    let body = to_yaml(&served(state));
    ([(CONTENT_TYPE, "application/yaml")], body).into_response()
}

struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        for (name, who) in [
            (
                "agent_token",
                "An agent token (`agent_tokens` in the configuration).",
            ),
            (
                "operator_token",
                "An operator token (`operator_tokens` in the configuration).",
            ),
        ] {
            components.add_security_scheme(
                name,
                SecurityScheme::Http(
                    HttpBuilder::new()
                        .scheme(HttpAuthScheme::Bearer)
                        .description(Some(who))
                        .build(),
                ),
            );
        }
    }
}

struct CommonResponses;

/// Whether some security requirement of `op` names a scheme (`security(())` names none).
fn needs_token(op: &Operation) -> bool {
    serde_json::to_value(&op.security).is_ok_and(|v| {
        v.as_array().is_some_and(|reqs| {
            reqs.iter()
                .any(|r| r.as_object().is_some_and(|o| !o.is_empty()))
        })
    })
}

fn error_response(description: &str, kind: &str, message: &str) -> RefOr<Response> {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .example(Some(json!({"error": {"type": kind, "message": message}})))
                .build(),
        )
        .build()
        .into()
}

impl Modify for CommonResponses {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for item in openapi.paths.paths.values_mut() {
            let operations: [&mut Option<Operation>; 2] = [&mut item.get, &mut item.post];
            for op in operations.into_iter().flatten() {
                let secured = needs_token(op);
                let responses = &mut op.responses.responses;
                if secured {
                    responses.entry("401".into()).or_insert_with(|| {
                        error_response(
                            "Missing or unknown bearer token (`WWW-Authenticate: Bearer`).",
                            "unauthorized",
                            "missing bearer token",
                        )
                    });
                    responses.entry("403".into()).or_insert_with(|| {
                        error_response(
                            "The token does not have the role this operation needs.",
                            "forbidden",
                            "this endpoint needs an agent token",
                        )
                    });
                }
                if op.request_body.is_some() {
                    responses.entry("413".into()).or_insert_with(|| {
                        error_response(
                            "The body is larger than `execution.max_body_bytes`.",
                            "payload_too_large",
                            "request body is larger than the configured limit",
                        )
                    });
                    responses.entry("415".into()).or_insert_with(|| {
                        error_response(
                            "The body is not `application/json`.",
                            "unsupported_media_type",
                            "expected Content-Type: application/json, got text/plain",
                        )
                    });
                }
                responses.entry("500".into()).or_insert_with(|| {
                    error_response(
                        "A failure on the service's side (logged in full, answered generically).",
                        "internal_error",
                        "internal error",
                    )
                });
            }
        }
    }
}

/// What an operation that admits work to the sandbox answers besides its own responses: too much
/// work in flight (429, [`Overloaded`]) or no engine or runner image (503,
/// [`EngineUnavailable`]), both with `Retry-After`. Handlers name it in `responses(…)`; it only
/// describes the contract, no value of it is built.
pub(super) struct AdmissionResponses;

impl utoipa::IntoResponses for AdmissionResponses {
    fn responses() -> std::collections::BTreeMap<String, RefOr<Response>> {
        let mut responses = Overloaded::responses();
        responses.append(&mut EngineUnavailable::responses());
        responses
    }
}

/// The 429 of an operation that admits work to the sandbox: part of [`AdmissionResponses`].
#[derive(utoipa::IntoResponses)]
#[response(status = 429, description = "More executions than `execution.max_concurrent` + `max_queue`: retry after `Retry-After` seconds.",
    headers(("Retry-After" = u64, description = "Seconds to wait before retrying")),
    example = json!({"error": {"type": "overloaded", "message": "too many executions in progress; retry in 1s"}}))]
#[expect(
    dead_code,
    reason = "describes responses for the OpenAPI document only"
)]
struct Overloaded(ErrorBody);

/// The 503 of every operation that starts a sandbox (in [`AdmissionResponses`]; sessions name it
/// beside their own 429, a cap on sessions rather than on work in flight).
#[derive(utoipa::IntoResponses)]
#[response(status = 503, description = "The container engine or the runner image is unavailable: retry after `Retry-After` seconds.",
    headers(("Retry-After" = u64, description = "Seconds to wait before retrying")),
    example = json!({"error": {"type": "engine_unavailable", "message": "the container engine is not reachable"}}))]
#[expect(
    dead_code,
    reason = "describes responses for the OpenAPI document only"
)]
pub(super) struct EngineUnavailable(ErrorBody);

const EXAMPLE_ID: &str = "0b6f1f7e-2d4c-4a8e-9c3e-5f1d2a7b9c01";

/// A finished execution, as the examples show it.
pub fn example_result() -> Value {
    json!({
        "execution_id": EXAMPLE_ID,
        "status": "completed",
        "success": true,
        "exit_code": 0,
        "stdout": "hello\n",
        "stderr": "",
        "stdout_truncated": false,
        "stderr_truncated": false,
        "timeout": false,
        "duration_ms": 31,
        "validation_failed": false,
        "validation": {"language": "python", "valid": true, "layer": null, "findings": []},
        "error": null,
        "resource_usage": {"cpu_time_ms": 18, "max_memory_bytes": 9_437_184},
        "timings_ms": {"validate": 0, "queue": 0, "create": 0, "start": 1, "run": 27, "cleanup": 0},
        "warm": true,
        "approval": null,
        "agent": "agent-1"
    })
}

/// An execution held for approval.
pub fn example_submission() -> Value {
    json!({
        "execution_id": EXAMPLE_ID,
        "status": "pending_approval",
        "links": {
            "self": format!("/v1/executions/{EXAMPLE_ID}"),
            "approval": format!("/v1/approvals/{EXAMPLE_ID}")
        }
    })
}

/// A script rejected by validation.
pub fn example_rejected() -> Value {
    json!({
        "language": "python",
        "valid": false,
        "layer": "dangerous",
        "findings": [{
            "layer": "dangerous",
            "rule": "python-os-command",
            "severity": "block",
            "message": "os.system/popen/exec*/spawn* run shell commands or replace the process",
            "line": 2,
            "column": 1
        }]
    })
}
