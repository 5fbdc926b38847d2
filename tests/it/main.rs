//! The integration test binary: HTTP against the real router, and the sandbox against a real Docker
//! engine (never a mock: the container is the boundary, so its promises are tested for real).
//!
//! Docker tests need a running engine and the runner images (`scripts/test` prepares both).

mod approvals;
mod cli;
mod compose;
mod containment;
mod corpus;
mod engine_faults;
mod harness;
mod http_shape;
mod jobs_isolation;
mod jobs_sandbox;
mod jobs_standalone;
mod mcp;
mod openapi;
mod pool;
mod process;
mod profiles;
mod reliability;
mod sandbox_contract;
mod sandbox_limits;
mod service;
