//! Contract tests: the real service over the fake runner of [`crate::fake`], so they run without a
//! Docker engine. They fix what clients see (status codes, bodies, the OpenAPI document, the MCP
//! tools) and the approval state machine; the sandbox's promises are the engine-bound tests'.

mod approvals;
mod http_shape;
mod jobs;
mod mcp;
mod network;
mod openapi;
mod policy;
mod policy_prerun;
mod session_cli;
mod session_policy;
mod sessions;
