//! `/mcp`: the MCP server's streamable-HTTP transport ([`super`]), mounted behind the same
//! bearer tokens as the REST API. Only agents call tools; the caller travels to the tool calls in
//! the request's extensions.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::auth::{Authenticator, Role};
use crate::http::AppState;
use crate::http::error::ApiError;

/// The `/mcp` route, or nothing when MCP is off.
pub(crate) fn routes(state: &AppState) -> Router<AppState> {
    let Some(settings) = &state.mcp else {
        return Router::new();
    };
    let service = super::http_service(
        state.executions.clone(),
        state.sessions.clone(),
        &state.tools,
        settings.clone(),
    );
    Router::new()
        .route_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(
            state.auth.clone(),
            authenticate,
        ))
}

async fn authenticate(
    State(auth): State<Arc<Authenticator>>,
    mut request: Request,
    next: Next,
) -> Response {
    let header = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let caller = match auth.authenticate(header) {
        Ok(c) => c,
        Err(e) => return ApiError::Unauthorized(e.to_string()).into_response(),
    };
    if !caller.is(Role::Agent) {
        return ApiError::Forbidden("the MCP endpoint needs an agent token".into()).into_response();
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}
