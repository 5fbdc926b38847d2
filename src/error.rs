//! The service's one HTTP error type: every failure becomes `{"error": {"type", "message"}}` with a
//! stable type. Server-side failures are logged in full and answered with a generic message.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
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
    #[error("{0}")]
    Conflict(String),
    /// More work than the configured concurrency and queue.
    #[error("too many executions in progress; retry in {retry_after_secs}s")]
    Overloaded { retry_after_secs: u64 },
    /// The container engine (or the runner image) is not available.
    #[error("{0}")]
    EngineUnavailable(String),
    /// Anything else on our side: logged with its detail, answered generically.
    #[error("internal error")]
    Internal(String),
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Schema(_) => StatusCode::BAD_REQUEST,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::Overloaded { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::EngineUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            ApiError::Schema(_) => "schema_error",
            ApiError::PayloadTooLarge(_) => "payload_too_large",
            ApiError::UnsupportedMediaType(_) => "unsupported_media_type",
            ApiError::NotFound(_) => "not_found",
            ApiError::MethodNotAllowed(_) => "method_not_allowed",
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::Conflict(_) => "conflict",
            ApiError::Overloaded { .. } => "overloaded",
            ApiError::EngineUnavailable(_) => "engine_unavailable",
            ApiError::Internal(_) => "internal_error",
        }
    }

    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                kind: self.kind(),
                message: self.to_string(),
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(detail) = &self {
            tracing::error!(error = %detail, "internal error");
        }
        let mut response = (self.status(), axum::Json(self.body())).into_response();
        if matches!(self, ApiError::Unauthorized(_)) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        let retry = match &self {
            ApiError::Overloaded { retry_after_secs } => Some(*retry_after_secs),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_detail_is_never_sent() {
        let e = ApiError::Internal("database at /secret/path exploded".into());
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
