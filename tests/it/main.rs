//! The integration test binary, in two tiers:
//! - `contract::`: the real service (router, executions, store, validation) over a hand-written
//!   fake runner ([`fake`]): HTTP shape, the approval state machine, the OpenAPI and MCP
//!   contracts. No Docker engine.
//! - everything else: the service or the sandbox against a real Docker engine (never a mock: the
//!   container is the boundary, so its promises are tested for real), in the test groups of
//!   `.config/nextest.toml`. These need a running engine and the runner images (`scripts/test`
//!   prepares both).

mod api;
mod approved_commands;
mod cli;
mod compose;
mod containment;
mod contract;
mod corpus;
mod egress_clients;
mod egress_proxy;
mod egress_service;
mod egress_work;
mod engine_faults;
mod fake;
mod harness;
mod jobs_isolation;
mod jobs_policy;
mod jobs_sandbox;
mod jobs_service;
mod jobs_standalone;
mod mcp;
mod policy_cli;
mod pool;
mod process;
mod profiles;
mod reliability;
mod runtime_policy;
mod sandbox_contract;
mod sandbox_limits;
mod service;
mod sessions;
mod sessions_bad;
mod sessions_cli;
mod sessions_jobs;
mod sessions_policy;
mod sessions_python;
