//! JSON bodies in and out. Rejections are typed errors that name the offending field
//! (`script_type: unknown variant "ruby", expected "python" or "bash"`), never axum's plain text.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::header::CONTENT_TYPE;
use serde::Deserialize as _;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// A JSON request body, deserialized strictly.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Json<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let RawJson(bytes) = RawJson::from_request(req, state).await?;
        parse(&bytes).map(Json)
    }
}

/// A JSON object body kept as its bytes, for documents with a parser of their own (a job reads
/// its `protocol_version` before anything else). Media type, size and shape are checked as for
/// [`Json`].
#[derive(Debug, Clone, Default)]
pub(crate) struct RawJson(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for RawJson {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, ApiError> {
        let content_type = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let media = content_type.split(';').next().unwrap_or("").trim();
        if !media.eq_ignore_ascii_case("application/json") {
            return Err(ApiError::UnsupportedMediaType(format!(
                "expected Content-Type: application/json, got {}",
                if content_type.is_empty() {
                    "none"
                } else {
                    content_type
                }
            )));
        }
        let bytes = read_body(req).await?;
        // serde would also read a struct from a JSON array (fields by position): not our API.
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(ApiError::Schema(
                "the request body must be a JSON object".into(),
            ));
        }
        Ok(RawJson(bytes))
    }
}

/// The body limit of a route, which the router puts in every request's extensions: its size,
/// the setting that configures it (named in the 413), and how much of an oversized body is
/// read and discarded before answering (see [`DRAIN`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct BodyLimit {
    pub bytes: usize,
    pub setting: &'static str,
    pub drain: usize,
}

impl BodyLimit {
    pub(super) fn new(bytes: usize, setting: &'static str) -> Self {
        BodyLimit {
            bytes,
            setting,
            drain: DRAIN,
        }
    }
}

/// How much of an oversized body is read and discarded before answering 413: a client that is
/// still sending when the answer comes sees a reset connection instead of the typed error, so a
/// moderately oversized body is drained first. Beyond this, the connection is simply closed.
const DRAIN: usize = 16 << 20;

/// The whole body, at most the configured limit.
async fn read_body(req: Request) -> Result<Bytes, ApiError> {
    use futures::StreamExt as _;
    let limit = req
        .extensions()
        .get::<BodyLimit>()
        .copied()
        .unwrap_or_else(|| BodyLimit::new(1 << 20, "execution.max_body_bytes"));
    let mut stream = req.into_body().into_data_stream();
    let mut body = Vec::new();
    let mut discarded = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|e| ApiError::Schema(format!("could not read the request body: {e}")))?;
        if discarded > 0 || body.len() + chunk.len() > limit.bytes {
            discarded += chunk.len();
            if discarded > limit.drain {
                break;
            }
        } else {
            body.extend_from_slice(&chunk);
        }
    }
    if discarded > 0 {
        return Err(ApiError::PayloadTooLarge(format!(
            "request body is larger than the configured limit ({} = {} bytes)",
            limit.setting, limit.bytes
        )));
    }
    Ok(Bytes::from(body))
}

/// Deserializes `bytes`, naming the path of the first error.
pub(crate) fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let message = inner.to_string();
        ApiError::Schema(if path == "." || path.is_empty() {
            message
        } else {
            format!("{path}: {message}")
        })
    })?;
    de.end()
        .map_err(|e| ApiError::Schema(format!("unexpected data after the JSON value: {e}")))?;
    Ok(value)
}

/// `deserialize_with` for an optional whole number of seconds: JSON Schema's `integer` includes
/// `30.0`, which some clients send for 30, so integral floats are accepted; fractions and negative
/// numbers are schema errors.
pub(super) fn whole_number<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<u64>, D::Error> {
    use serde::de::Error as _;
    let Some(n) = Option::<serde_json::Number>::deserialize(d)? else {
        return Ok(None);
    };
    if let Some(v) = n.as_u64() {
        return Ok(Some(v));
    }
    match n.as_f64() {
        Some(f) if f >= 0.0 && f.fract() == 0.0 && f <= u64::MAX as f64 => Ok(Some(f as u64)),
        _ => Err(D::Error::custom(format!(
            "expected a whole number of seconds, got {n}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        kind: crate::domain::script::Language,
        n: Option<u32>,
    }

    fn message(bytes: &[u8]) -> String {
        match parse::<Body>(bytes) {
            Err(ApiError::Schema(m)) => m,
            other => panic!("expected a schema error, got {other:?}"),
        }
    }

    #[test]
    fn errors_name_the_field() {
        assert!(message(br#"{"kind": "ruby"}"#).starts_with("kind: unknown variant `ruby`"));
        assert!(message(br#"{"kind": "bash", "n": -1}"#).starts_with("n: invalid value"));
        assert!(message(br#"{"kind": "bash", "x": 1}"#).contains("unknown field `x`"));
        assert!(message(br#"{}"#).contains("missing field `kind`"));
        assert!(message(br#"{"kind": "bash"} trailing"#).contains("unexpected data"));
        assert!(message(b"\xff\xfe").contains("expected value"));
    }

    #[derive(Debug, serde::Deserialize)]
    struct Seconds {
        #[serde(default, deserialize_with = "whole_number")]
        t: Option<u64>,
    }

    #[test]
    fn whole_numbers_may_be_written_as_floats() {
        let t = |json: &str| parse::<Seconds>(json.as_bytes()).map(|s| s.t);
        assert_eq!(t(r#"{"t": 30}"#).ok(), Some(Some(30)));
        assert_eq!(t(r#"{"t": 30.0}"#).ok(), Some(Some(30)));
        assert_eq!(t(r#"{"t": null}"#).ok(), Some(None));
        assert_eq!(t(r#"{}"#).ok(), Some(None));
        assert!(t(r#"{"t": 1.5}"#).is_err());
        assert!(t(r#"{"t": -1}"#).is_err());
        assert!(t(r#"{"t": "30"}"#).is_err());
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(matches!(
            parse::<serde_json::Value>(deep.as_bytes()),
            Err(ApiError::Schema(_))
        ));
    }
}
