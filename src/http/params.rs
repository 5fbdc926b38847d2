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
        uuid_param(parts, state, "id").await.map(IdParam)
    }
}

/// The `{job_id}` path parameter: a job's id.
#[derive(Debug, Clone, Copy)]
pub(super) struct JobIdParam(pub Uuid);

impl<S: Send + Sync> FromRequestParts<S> for JobIdParam {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        uuid_param(parts, state, "job_id").await.map(JobIdParam)
    }
}

/// The path parameter `name`, which must be a UUID.
async fn uuid_param<S: Send + Sync>(
    parts: &mut Parts,
    state: &S,
    name: &str,
) -> Result<Uuid, ApiError> {
    let params = RawPathParams::from_request_parts(parts, state)
        .await
        .map_err(|e| ApiError::Schema(format!("{name}: {}", e.body_text())))?;
    let raw = params
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, value)| value)
        .ok_or_else(|| ApiError::Internal(format!("route has no {{{name}}} parameter").into()))?;
    Uuid::parse_str(raw).map_err(|_| ApiError::Schema(format!("{name}: `{raw}` is not a UUID")))
}

/// A page's `limit` parameter: `max` without one, else between 1 and `max`.
pub(super) fn page_limit(limit: Option<u64>, max: u64) -> Result<u64, ApiError> {
    let limit = limit.unwrap_or(max);
    if !(1..=max).contains(&limit) {
        return Err(ApiError::Schema(format!(
            "limit: must be between 1 and {max}, got {limit}"
        )));
    }
    Ok(limit)
}
