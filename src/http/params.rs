//! Query strings and path parameters, with typed errors (axum's own rejections are plain text,
//! which no client generated from the OpenAPI contract can read).

use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use super::error::ApiError;

/// A query string, deserialized strictly; errors name the parameter.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::try_from_uri(&parts.uri)
            .map(|q| Query(q.0))
            .map_err(|e| {
                use std::error::Error as _;
                let detail = e.source().map_or_else(|| e.body_text(), |s| s.to_string());
                ApiError::Schema(format!("query string: {detail}"))
            })
    }
}

/// The `{id}` path parameter: an execution id.
#[derive(Debug, Clone, Copy)]
pub(super) struct IdParam(pub Uuid);

impl<S: Send + Sync> FromRequestParts<S> for IdParam {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let params = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::Schema(format!("id: {}", e.body_text())))?;
        let raw = params
            .iter()
            .find(|(name, _)| *name == "id")
            .map(|(_, value)| value)
            .ok_or_else(|| ApiError::Internal("route has no {id} parameter".into()))?;
        Uuid::parse_str(raw)
            .map(IdParam)
            .map_err(|_| ApiError::Schema(format!("id: `{raw}` is not a UUID")))
    }
}
