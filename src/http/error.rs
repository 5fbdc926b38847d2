//! The service's one HTTP error type: every failure becomes `{"error": {"type", "message"}}` with a
//! stable type. Server-side failures are logged in full and answered with a generic message. The
//! conversions from the layers' errors are all here.

use std::error::Error as StdError;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::artifacts::ArtifactError;
use crate::auth::AuthError;
use crate::executions::{ExecError, FileDenied, NetworkChoiceError, PolicyChoiceError, Refused};
use crate::sandbox::SandboxError;
use crate::sessions::{FileFailure, SessionError};

#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    /// The request does not match the API's schema (names the field).
    #[error("{0}")]
    Schema(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    MethodNotAllowed(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    /// The caller's token may not select the run-time policy it named.
    #[error("{0}")]
    PolicyNotAllowed(String),
    /// The request's `network` is wider than the run's policy allows.
    #[error("{0}")]
    NetworkNotAllowed(String),
    /// A policy's rule refused the operation (`rule` names it; `None`: no rule allowed it).
    #[error("{message}")]
    PolicyViolation {
        rule: Option<String>,
        message: String,
    },
    #[error("{0}")]
    Conflict(String),
    /// More work than the configured concurrency and queue.
    #[error("too many executions in progress; retry in {retry_after_secs}s")]
    Overloaded { retry_after_secs: u64 },
    /// The container engine (or the runner image) is not available.
    #[error("{0}")]
    EngineUnavailable(String),
    /// A session's own answers (`session_not_found`, `session_busy`, `session_stopped`,
    /// `workspace_full`, …), each with its status.
    #[error("{message}")]
    Session {
        status: StatusCode,
        kind: &'static str,
        message: String,
    },
    /// Anything else on our side: logged with its detail, answered generically.
    #[error("internal error")]
    Internal(#[source] Box<dyn StdError + Send + Sync>),
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct ErrorDetail {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub message: String,
    /// `policy_violation`: the policy's rule that refused (null when no rule allowed it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<Option<String>>,
}

impl ApiError {
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            ApiError::Schema(_) => StatusCode::BAD_REQUEST,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_)
            | ApiError::PolicyNotAllowed(_)
            | ApiError::NetworkNotAllowed(_)
            | ApiError::PolicyViolation { .. } => StatusCode::FORBIDDEN,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::Overloaded { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::EngineUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Session { status, .. } => *status,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub(crate) fn kind(&self) -> &'static str {
        match self {
            ApiError::Schema(_) => "schema_error",
            ApiError::PayloadTooLarge(_) => "payload_too_large",
            ApiError::UnsupportedMediaType(_) => "unsupported_media_type",
            ApiError::NotFound(_) => "not_found",
            ApiError::MethodNotAllowed(_) => "method_not_allowed",
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::PolicyNotAllowed(_) => "policy_not_allowed",
            ApiError::NetworkNotAllowed(_) => "network_not_allowed",
            ApiError::PolicyViolation { .. } => "policy_violation",
            ApiError::Conflict(_) => "conflict",
            ApiError::Overloaded { .. } => "overloaded",
            ApiError::EngineUnavailable(_) => "engine_unavailable",
            ApiError::Session { kind, .. } => kind,
            ApiError::Internal(_) => "internal_error",
        }
    }

    pub(crate) fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                kind: self.kind(),
                message: self.to_string(),
                rule: match self {
                    ApiError::PolicyViolation { rule, .. } => Some(rule.clone()),
                    _ => None,
                },
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(detail) = &self {
            tracing::error!(error = %chain(detail.as_ref()), "internal error");
        }
        let mut response = (self.status(), axum::Json(self.body())).into_response();
        if matches!(self, ApiError::Unauthorized(_)) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        let retry = match &self {
            ApiError::Overloaded { retry_after_secs } => Some(*retry_after_secs),
            ApiError::Session { status, .. } if *status == StatusCode::TOO_MANY_REQUESTS => Some(5),
            ApiError::EngineUnavailable(_) => Some(5),
            _ => None,
        };
        if let Some(secs) = retry {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// An error and its causes on one line (a cause its parent already quotes is not repeated).
fn chain(e: &(dyn StdError + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.ends_with(&more) {
            text = format!("{text}: {more}");
        }
        source = cause.source();
    }
    text
}

impl From<ExecError> for ApiError {
    fn from(e: ExecError) -> Self {
        match e {
            ExecError::Refused(Refused::Overloaded { retry_after_secs }) => {
                ApiError::Overloaded { retry_after_secs }
            }
            ExecError::Refused(r @ Refused::ShuttingDown) => {
                ApiError::EngineUnavailable(r.to_string())
            }
            ExecError::Unavailable(e) => ApiError::EngineUnavailable(e.to_string()),
            ExecError::NotFound => ApiError::NotFound("no such execution".into()),
            ExecError::Conflict(_) | ExecError::DuplicateJob(_) => {
                ApiError::Conflict(e.to_string())
            }
            ExecError::Store(s) => ApiError::Internal(s.into()),
        }
    }
}

impl From<SessionError> for ApiError {
    fn from(e: SessionError) -> Self {
        let typed = |status, kind| ApiError::Session {
            status,
            kind,
            message: e.to_string(),
        };
        match &e {
            SessionError::NotFound => typed(StatusCode::NOT_FOUND, "session_not_found"),
            SessionError::Busy(_) => typed(StatusCode::CONFLICT, "session_busy"),
            SessionError::Stopped(_) => typed(StatusCode::CONFLICT, "session_stopped"),
            SessionError::CommandNotFound => typed(StatusCode::NOT_FOUND, "command_not_found"),
            SessionError::Invalid(m) => ApiError::Schema(m.clone()),
            SessionError::Denied { rule, message } => ApiError::PolicyViolation {
                rule: rule.clone(),
                message: message.clone(),
            },
            SessionError::ApprovalRequired { .. } => {
                typed(StatusCode::FORBIDDEN, "approval_required")
            }
            SessionError::Policy(PolicyChoiceError::NotAllowed(_)) => {
                ApiError::PolicyNotAllowed(e.to_string())
            }
            SessionError::Policy(PolicyChoiceError::Unknown { .. }) => {
                ApiError::Schema(e.to_string())
            }
            // Asked for a policy this sandbox cannot enforce: refused, never run without it.
            SessionError::Sandbox(SandboxError::PolicyUnavailable(_)) => {
                typed(StatusCode::SERVICE_UNAVAILABLE, "policy_unavailable")
            }
            SessionError::TooMany(_) => typed(StatusCode::TOO_MANY_REQUESTS, "too_many_sessions"),
            SessionError::Rejected(_) => {
                typed(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed")
            }
            SessionError::File(FileFailure::Path, _) => {
                typed(StatusCode::BAD_REQUEST, "invalid_path")
            }
            SessionError::File(FileFailure::NotFound, _) => {
                typed(StatusCode::NOT_FOUND, "file_not_found")
            }
            SessionError::File(FileFailure::Full, _) => {
                typed(StatusCode::INSUFFICIENT_STORAGE, "workspace_full")
            }
            SessionError::File(FileFailure::Failed, _) => typed(StatusCode::CONFLICT, "file_error"),
            // A session that could not start (no engine, no image, an image whose supervisor
            // predates sessions, a container that did not become ready): retry later.
            SessionError::Sandbox(
                SandboxError::EngineUnavailable(_)
                | SandboxError::ImageMissing(_)
                | SandboxError::StartFailed(_),
            ) => ApiError::EngineUnavailable(e.to_string()),
            SessionError::Network(n) => match n {
                NetworkChoiceError::Invalid(_) => ApiError::Schema(e.to_string()),
                NetworkChoiceError::NotAllowed(_) => ApiError::NetworkNotAllowed(e.to_string()),
            },
            // The egress proxy cannot give the session its network (none runs, it is dead, or
            // the runtime cannot reach its socket): nothing was started.
            SessionError::Sandbox(SandboxError::NetworkUnavailable(_)) => {
                typed(StatusCode::SERVICE_UNAVAILABLE, "network_unavailable")
            }
            SessionError::Sandbox(_) => ApiError::Internal(Box::new(e)),
        }
    }
}

impl From<PolicyChoiceError> for ApiError {
    fn from(e: PolicyChoiceError) -> Self {
        match e {
            PolicyChoiceError::NotAllowed(_) => ApiError::PolicyNotAllowed(e.to_string()),
            PolicyChoiceError::Unknown { .. } => ApiError::Schema(e.to_string()),
        }
    }
}

impl From<FileDenied> for ApiError {
    fn from(e: FileDenied) -> Self {
        ApiError::PolicyViolation {
            rule: e.rule.clone(),
            message: e.to_string(),
        }
    }
}

impl From<NetworkChoiceError> for ApiError {
    fn from(e: NetworkChoiceError) -> Self {
        match e {
            NetworkChoiceError::Invalid(_) => ApiError::Schema(e.to_string()),
            NetworkChoiceError::NotAllowed(_) => ApiError::NetworkNotAllowed(e.to_string()),
        }
    }
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        ApiError::Unauthorized(e.to_string())
    }
}

impl From<ArtifactError> for ApiError {
    fn from(e: ArtifactError) -> Self {
        match e {
            ArtifactError::NotFound => ApiError::NotFound(e.to_string()),
            other => ApiError::Internal(other.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_detail_is_never_sent() {
        let e = ApiError::Internal("database at /secret/path exploded".into());
        assert_eq!(
            chain(&e),
            "internal error: database at /secret/path exploded"
        );
        let body = serde_json::to_string(&e.body()).expect("json");
        assert!(!body.contains("/secret/path"));
        assert!(body.contains("internal_error"));
    }

    #[test]
    fn overload_carries_retry_after() {
        let r = ApiError::Overloaded {
            retry_after_secs: 2,
        }
        .into_response();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            r.headers()
                .get(header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok()),
            Some("2")
        );
    }
}
