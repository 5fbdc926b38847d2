//! The authenticated caller of a request, and the role checks handlers ask for.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

use super::AppState;
use super::error::ApiError;
use crate::auth::{Caller, Role};

/// The caller, from `Authorization: Bearer <token>` (anonymous when authentication is off).
#[derive(Debug, Clone)]
pub(super) struct Authenticated(pub Caller);

impl FromRequestParts<AppState> for Authenticated {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let header = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        state
            .auth
            .authenticate(header)
            .map(Authenticated)
            .map_err(|e| ApiError::Unauthorized(e.to_string()))
    }
}

impl Authenticated {
    /// 403 unless the caller has `role`.
    pub(super) fn require(&self, role: Role) -> Result<&Caller, ApiError> {
        if self.0.is(role) {
            Ok(&self.0)
        } else {
            let what = match role {
                Role::Agent => "an agent token",
                Role::Operator => "an operator token",
            };
            Err(ApiError::Forbidden(format!("this endpoint needs {what}")))
        }
    }
}
