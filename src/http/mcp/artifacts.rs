//! Files runs return, as MCP content: images as image content, small files embedded (text when
//! they are text, else base64), larger ones as resource links the client reads back with
//! `resources/read` (`scriptgate://executions/{id}/artifacts/{path}` and
//! `scriptgate://jobs/{job_id}/artifacts/{path}`), each checked against its sha256.

use std::io::Read as _;
use std::time::Duration;

use base64::Engine as _;
use rmcp::ErrorData;
use rmcp::model::{ContentBlock, Resource, ResourceContents, ResourceTemplate};
use uuid::Uuid;

use crate::auth::Caller;
use crate::domain::record::{Artifact, ExecutionRecord};
use crate::executions::Executions;

/// Images up to this size come back as image content.
const MAX_IMAGE: u64 = 1 << 20;
/// Other files up to this size come back embedded; larger ones as links.
const MAX_EMBEDDED: u64 = 64 << 10;
/// `resources/read` returns files up to this size (larger ones: the HTTP download).
const MAX_READ: u64 = 8 << 20;

const SCHEME: &str = "scriptgate://";

/// Where a record's artifact is read back from.
fn uri(rec: &ExecutionRecord, artifact: &Artifact) -> String {
    let path = artifact.path.trim_start_matches('/');
    match rec.job_id() {
        Some(job) => format!("{SCHEME}jobs/{job}/artifacts/{path}"),
        None => format!("{SCHEME}executions/{}/artifacts/{path}", rec.id),
    }
}

/// The templates `resources/templates/list` shows.
pub(super) fn templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new(
            format!("{SCHEME}jobs/{{job_id}}/artifacts/{{path}}"),
            "job artifact",
        )
        .with_description("A file a job returned (its path without the leading slash)."),
        ResourceTemplate::new(
            format!("{SCHEME}executions/{{execution_id}}/artifacts/{{path}}"),
            "execution artifact",
        )
        .with_description("A file a script run returned (its path without the leading slash)."),
    ]
}

/// The content blocks of a record's artifacts.
pub(super) async fn blocks(executions: &Executions, rec: &ExecutionRecord) -> Vec<ContentBlock> {
    let artifacts = rec.result.as_ref().map(|r| r.artifacts.as_slice());
    let mut out = Vec::new();
    for a in artifacts.unwrap_or_default() {
        let uri = uri(rec, a);
        let image = a.mime_type.starts_with("image/") && a.size_bytes <= MAX_IMAGE;
        if !image && a.size_bytes > MAX_EMBEDDED {
            out.push(link(&uri, a));
            continue;
        }
        let Ok(data) = executions.artifact(&a.sha256).await else {
            // Expired or unreadable: the link says where it was; reading it says why.
            out.push(link(&uri, a));
            continue;
        };
        out.push(if image {
            ContentBlock::image(
                base64::engine::general_purpose::STANDARD.encode(data),
                &a.mime_type,
            )
        } else {
            ContentBlock::resource(contents(&uri, &a.mime_type, data))
        });
    }
    out
}

fn link(uri: &str, a: &Artifact) -> ContentBlock {
    let name = a.path.rsplit('/').next().unwrap_or(&a.path);
    ContentBlock::resource_link(
        Resource::new(uri, name)
            .with_mime_type(&a.mime_type)
            .with_size(a.size_bytes)
            .with_description(format!("{} (sha256 {})", a.path, a.sha256)),
    )
}

/// Text when the bytes are UTF-8 and the type is textual, else base64.
fn contents(uri: &str, mime: &str, data: Vec<u8>) -> ResourceContents {
    let textual = mime.starts_with("text/")
        || matches!(
            mime,
            "application/json" | "application/xml" | "application/yaml" | "application/toml"
        );
    match String::from_utf8(data) {
        Ok(text) if textual => ResourceContents::text(text, uri).with_mime_type(mime),
        Ok(text) => blob(uri, mime, text.as_bytes()),
        Err(e) => blob(uri, mime, e.as_bytes()),
    }
}

fn blob(uri: &str, mime: &str, data: &[u8]) -> ResourceContents {
    ResourceContents::blob(base64::engine::general_purpose::STANDARD.encode(data), uri)
        .with_mime_type(mime)
}

/// `resources/read` of an artifact URI, for `caller` (agents read their own runs' files).
pub(super) async fn read(
    executions: &Executions,
    caller: &Caller,
    uri: &str,
) -> Result<ResourceContents, ErrorData> {
    let not_found = || ErrorData::resource_not_found(format!("no such artifact: {uri}"), None);
    let rest = uri.strip_prefix(SCHEME).ok_or_else(not_found)?;
    let (kind, rest) = rest.split_once('/').ok_or_else(not_found)?;
    let (id, path) = rest.split_once("/artifacts/").ok_or_else(not_found)?;
    let id = Uuid::parse_str(id).map_err(|_| not_found())?;
    let rec = match kind {
        "jobs" => executions.get_job(caller, id, Duration::ZERO).await,
        "executions" => executions.get(caller, id, Duration::ZERO).await,
        _ => return Err(not_found()),
    }
    .map_err(|_| not_found())?;
    let wanted = format!("/{path}");
    let artifact = rec
        .result
        .as_ref()
        .and_then(|r| r.artifacts.iter().find(|a| a.path == wanted))
        .ok_or_else(not_found)?;
    if artifact.size_bytes > MAX_READ {
        return Err(ErrorData::invalid_params(
            format!(
                "{} has {} bytes, more than MCP returns ({MAX_READ}): download it over HTTP at /v1/{kind}/{id}/artifacts/{path}",
                artifact.path, artifact.size_bytes
            ),
            None,
        ));
    }
    let (mut file, _) = executions
        .artifact_file(&artifact.sha256)
        .await
        .map_err(|e| ErrorData::resource_not_found(format!("{uri}: {e}"), None))?;
    let mut data = Vec::new();
    file.read_to_end(&mut data)
        .map_err(|e| ErrorData::internal_error(format!("reading {uri}: {e}"), None))?;
    Ok(contents(uri, &artifact.mime_type, data))
}
