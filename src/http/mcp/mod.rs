//! The MCP server: `execute_script`, `validate_script`, `run_job` and the session tools
//! (`session_create`, `session_exec`, `session_destroy`, `session_upload_file`,
//! `session_download_file`; `sessions.rs`) as MCP tools with structured results, over streamable HTTP at `/mcp` (behind the same bearer tokens as the REST API) and
//! over stdio (`scriptgate mcp`). Tools, their input schemas and descriptions come from the tool
//! catalog; output schemas come from the OpenAPI components, so every integration describes one
//! contract.
//!
//! Results: a script or a job that ran is a normal result (its exit code, timeout or OOM, or the
//! job's status, is in the structured content, `isError` set when it did not succeed); a script
//! rejected by validation is a structured tool error carrying the verdict (a refused job, its
//! complete result); a bad argument, an overload or an engine outage is a tool error with a
//! message the model can act on. Protocol errors are kept for unknown tools. Files a run returns
//! follow the result as content blocks (`artifacts.rs`): images, small files embedded, larger
//! ones as resource links read with `resources/read`.

use std::sync::Arc;

use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListResourceTemplatesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServiceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use utoipa::OpenApi as _;

use super::catalog::{self, Catalog};
use super::error::ApiError;
use super::jobs::{self, JobOut};
use super::openapi::ApiDoc;
use super::{ExecuteIn, ExecuteOut, ValidateIn};
use crate::auth::Caller;
use crate::domain::script::Script;
use crate::executions::{Executions, Submitted};
use crate::sandbox::job::JobStatus;
use crate::sessions::Sessions;

mod artifacts;
pub(crate) mod route;
mod sessions;

/// Why the stdio server stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    /// Boxed: the handshake error is large, and rare.
    #[error("MCP handshake: {0}")]
    Handshake(Box<rmcp::service::ServerInitializeError>),
    #[error("MCP server task: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// One MCP server (one per session or request; cheap to build).
#[derive(Debug, Clone)]
pub(crate) struct McpServer {
    executions: Arc<Executions>,
    tools: Arc<Vec<Tool>>,
    profiles: Arc<crate::sandbox::profiles::Profiles>,
    /// The session tools, with this connection's implicit session.
    sessions: sessions::SessionTools,
    /// The caller when the transport has no per-request identity (stdio).
    fixed_caller: Option<Caller>,
}

impl McpServer {
    fn new(
        executions: Arc<Executions>,
        service_sessions: Arc<Sessions>,
        stateless: Option<Arc<sessions::Implicit>>,
        catalog: &Catalog,
        tools: Arc<Vec<Tool>>,
        fixed: Option<Caller>,
    ) -> Self {
        McpServer {
            executions,
            sessions: sessions::SessionTools {
                connection: sessions::Implicit::new(service_sessions.clone()),
                sessions: service_sessions,
                stateless,
            },
            profiles: catalog.profiles.clone(),
            tools,
            fixed_caller: fixed,
        }
    }

    fn caller(&self, cx: &RequestContext<RoleServer>) -> Option<Caller> {
        if let Some(c) = &self.fixed_caller {
            return Some(c.clone());
        }
        cx.extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.extensions.get::<Caller>())
            .cloned()
    }

    async fn execute(&self, caller: &Caller, args: JsonObject) -> CallToolResult {
        let input: ExecuteIn = match arguments(args) {
            Ok(i) => i,
            Err(e) => return e,
        };
        let request = match input.into_run(&self.executions, &self.profiles, caller) {
            Ok(r) => r,
            Err(e) => return api_error(&e),
        };
        match self.executions.submit(caller, request, true).await {
            Ok(Submitted::Finished(rec) | Submitted::Accepted(rec)) => {
                let out = ExecuteOut::from(&rec);
                let failed = out.validation_failed || out.error.is_some();
                let value = serde_json::to_value(&out).unwrap_or(Value::Null);
                let mut result = if failed {
                    CallToolResult::structured_error(value)
                } else {
                    CallToolResult::structured(value)
                };
                // Plots as image content, so MCP clients show them; other files embedded or linked.
                result
                    .content
                    .extend(artifacts::blocks(&self.executions, &rec).await);
                result
            }
            Err(e) => api_error(&ApiError::from(e)),
        }
    }

    /// `run_job`: the arguments are the job itself.
    async fn run_job(&self, caller: &Caller, args: JsonObject) -> CallToolResult {
        let bytes = serde_json::to_vec(&Value::Object(args)).unwrap_or_default();
        let work = match jobs::intake(&bytes, &self.profiles)
            .and_then(|w| jobs::with_policy(w, &self.executions, caller))
        {
            Ok(w) => w,
            Err(e) => return api_error(&e),
        };
        let rec = match self.executions.submit(caller, work, true).await {
            Ok(Submitted::Finished(rec) | Submitted::Accepted(rec)) => rec,
            Err(e) => return api_error(&ApiError::from(e)),
        };
        let Some(out) = JobOut::of(&rec) else {
            // Held for an operator: not a result yet.
            let mut result = CallToolResult::error(vec![ContentBlock::text(format!(
                "the job is {}: an operator must approve it; its result will be at /v1/jobs/{}",
                rec.status.as_str(),
                rec.job_id().unwrap_or(rec.id)
            ))]);
            result.structured_content =
                Some(json!({"job_id": rec.job_id(), "execution_id": rec.id, "status": rec.status}));
            return result;
        };
        let value = serde_json::to_value(&out).unwrap_or(Value::Null);
        let mut result = if out.result.status == JobStatus::Success {
            CallToolResult::structured(value)
        } else {
            CallToolResult::structured_error(value)
        };
        result
            .content
            .extend(artifacts::blocks(&self.executions, &rec).await);
        result
    }

    async fn validate(&self, args: JsonObject) -> CallToolResult {
        let input: ValidateIn = match arguments(args) {
            Ok(i) => i,
            Err(e) => return e,
        };
        if let Err(e) = super::check_script_text(&input.script_content) {
            return api_error(&e);
        }
        let script = Script::new(input.script_type, input.script_content);
        let verdict = self.executions.validate(script).await;
        CallToolResult::structured(serde_json::to_value(&verdict).unwrap_or(Value::Null))
    }
}

/// A request of the HTTP transport without an MCP session (stateless): no connection holds an
/// implicit session for it.
fn stateless(cx: &RequestContext<RoleServer>) -> bool {
    cx.extensions
        .get::<http::request::Parts>()
        .is_some_and(|p| !p.headers.contains_key("mcp-session-id"))
}

/// Tool arguments, read as strictly as the REST API reads its bodies.
fn arguments<T: serde::de::DeserializeOwned>(args: JsonObject) -> Result<T, CallToolResult> {
    let bytes = serde_json::to_vec(&Value::Object(args)).unwrap_or_default();
    super::parse_json(&bytes).map_err(|e| api_error(&e))
}

fn api_error(e: &ApiError) -> CallToolResult {
    let body = serde_json::to_value(e.body()).unwrap_or(Value::Null);
    let mut result =
        CallToolResult::error(vec![ContentBlock::text(format!("{}: {}", e.kind(), e))]);
    result.structured_content = Some(body);
    result
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("scriptgate", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Run Python and Bash scripts in a one-use, network-less sandbox \
                 (execute_script), only check them (validate_script), or run a structured job \
                 of typed steps with files in and artifacts out (run_job). For work in steps, \
                 keep a sandbox across calls (session_create, session_exec, \
                 session_upload_file, session_download_file, session_destroy): its files, \
                 working directory and environment persist; without a session_id the calls \
                 share this connection's own session. Everything is validated first: no hard-coded secrets, no dangerous constructs; rejected work \
                 does not run and the result says why. Files a run returns come back as \
                 images, embedded resources or resource links (read them with resources/read).",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(caller) = self.caller(&context) else {
            return Err(ErrorData::internal_error("no authenticated caller", None));
        };
        let args = request.arguments.unwrap_or_default();
        let session = sessions::SessionCall {
            tools: &self.sessions,
            stateless: stateless(&context),
        };
        let result = match request.name.as_ref() {
            catalog::EXECUTE => self.execute(&caller, args).await,
            catalog::VALIDATE => self.validate(args).await,
            catalog::RUN_JOB => self.run_job(&caller, args).await,
            catalog::SESSION_CREATE => session.create(&caller, args).await,
            catalog::SESSION_EXEC => session.exec(&caller, args).await,
            catalog::SESSION_DESTROY => session.destroy(&caller, args).await,
            catalog::SESSION_UPLOAD => session.upload(&caller, args).await,
            catalog::SESSION_DOWNLOAD => session.download(&caller, args).await,
            other => {
                return Err(ErrorData::invalid_params(
                    format!("tool not found: {other}"),
                    None,
                ));
            }
        };
        Ok(result.into())
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(
            artifacts::templates(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let Some(caller) = self.caller(&context) else {
            return Err(ErrorData::internal_error("no authenticated caller", None));
        };
        let contents = artifacts::read(&self.executions, &caller, &request.uri).await?;
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}

/// The MCP tool list: the catalog's tools with output schemas and annotations.
pub(crate) fn mcp_tools(catalog: &Catalog) -> Vec<Tool> {
    catalog
        .tools
        .iter()
        .map(|t| {
            let input = t.input_schema.as_object().cloned().unwrap_or_default();
            let mut tool = Tool::new(t.name, t.description.clone(), input);
            tool.title = Some(t.title.to_string());
            let output = match t.name {
                catalog::EXECUTE => Some("ExecuteOut"),
                catalog::RUN_JOB => Some("JobOut"),
                catalog::SESSION_EXEC => Some("CommandOut"),
                catalog::VALIDATE => Some("Verdict"),
                // Small objects described in the tools' descriptions.
                _ => None,
            };
            tool.output_schema = output.map(|o| Arc::new(output_schema(o)));
            tool.annotations = Some(
                ToolAnnotations::with_title(t.title)
                    .read_only(t.meta.read_only)
                    .destructive(t.name == catalog::SESSION_DESTROY)
                    .idempotent(t.meta.read_only),
            );
            let meta = serde_json::to_value(&t.meta).unwrap_or(Value::Null);
            if let Value::Object(m) = json!({"scriptgate": meta}) {
                tool.meta = Some(m.into());
            }
            tool
        })
        .collect()
}

/// A self-contained JSON Schema (2020-12) for the OpenAPI component `name`: the component itself,
/// with every component it may reference under `$defs`.
pub(crate) fn output_schema(name: &str) -> JsonObject {
    let components = serde_json::to_value(ApiDoc::openapi().components).unwrap_or(Value::Null);
    let defs = components.get("schemas").cloned().unwrap_or(json!({}));
    let text = serde_json::to_string(&defs)
        .unwrap_or_default()
        .replace("#/components/schemas/", "#/$defs/");
    let defs: Value = serde_json::from_str(&text).unwrap_or(json!({}));
    let mut root = defs.get(name).cloned().unwrap_or(json!({"type": "object"}));
    if let Value::Object(root) = &mut root {
        root.insert(
            "$schema".into(),
            json!("https://json-schema.org/draft/2020-12/schema"),
        );
        root.insert("$defs".into(), defs);
    }
    match root {
        Value::Object(o) => o,
        _ => JsonObject::new(),
    }
}

/// Settings of the HTTP transport.
#[derive(Debug, Clone)]
pub(crate) struct HttpSettings {
    /// `Host` header values accepted (DNS-rebinding guard); empty accepts any.
    pub allowed_hosts: Vec<String>,
    pub shutdown: CancellationToken,
}

/// The streamable-HTTP MCP endpoint, mounted at `/mcp` by the HTTP layer behind its bearer
/// authentication (which puts the [`Caller`] in the request's extensions).
pub(crate) fn http_service(
    executions: Arc<Executions>,
    sessions: Arc<Sessions>,
    catalog: &Catalog,
    settings: HttpSettings,
) -> StreamableHttpService<McpServer, LocalSessionManager> {
    let tools = Arc::new(mcp_tools(catalog));
    let catalog = catalog.clone();
    let stateless = sessions::Implicit::new(sessions.clone());
    let mut config =
        StreamableHttpServerConfig::default().with_cancellation_token(settings.shutdown);
    config = if settings.allowed_hosts.is_empty() {
        config.disable_allowed_hosts()
    } else {
        config.with_allowed_hosts(settings.allowed_hosts)
    };
    StreamableHttpService::new(
        move || {
            Ok(McpServer::new(
                executions.clone(),
                sessions.clone(),
                Some(stateless.clone()),
                &catalog,
                tools.clone(),
                None,
            ))
        },
        Arc::new(LocalSessionManager::default()),
        config,
    )
}

/// Serves MCP on stdin/stdout until the client disconnects; every call runs as `caller`.
pub(crate) async fn serve_stdio(
    executions: Arc<Executions>,
    sessions: Arc<Sessions>,
    catalog: &Catalog,
    caller: Caller,
) -> Result<(), StdioError> {
    let server = McpServer::new(
        executions,
        sessions,
        None,
        catalog,
        Arc::new(mcp_tools(catalog)),
        Some(caller),
    );
    let running = match server.serve(rmcp::transport::stdio()).await {
        Ok(running) => running,
        // The client went away before the handshake: nothing to serve, not a failure.
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => return Ok(()),
        Err(e) => return Err(StdioError::Handshake(Box::new(e))),
    };
    running.waiting().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_schemas_are_self_contained_objects() {
        let schema = output_schema("ExecuteOut");
        assert_eq!(schema["type"], "object");
        let text = serde_json::to_string(&schema).expect("json");
        assert!(!text.contains("#/components/"), "{text}");
        assert!(schema["$defs"]["Verdict"].is_object());
        assert!(
            schema["properties"]["status"]["$ref"]
                .as_str()
                .is_some_and(|r| r == "#/$defs/Status")
        );
    }
}
