//! scriptgate validates Python and Bash scripts from LLM agents and runs them in one-use, hardened
//! Docker containers.
//!
//! Data flow:
//! ```text
//! HTTP (http/) ──► checked Script (script.rs) ──► validation layers (validate/)
//!      size → syntax → language → secrets → dangerous      (rules from patterns/, rules/)
//!   ──► sandbox runner (sandbox/): a fresh container per run, killed at the deadline, always removed
//!   ──► typed result back to the agent
//! ```

pub mod rules;
pub mod script;
pub mod validate;
