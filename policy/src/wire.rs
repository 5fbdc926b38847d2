//! The form of a policy the host sends to the supervisor: its source as JSON, with domain names
//! already canonical (lower-case punycode), so a supervisor built without the `idna` feature reads
//! it. The supervisor compiles it again: it trusts nothing it receives, and compiling a 50-rule
//! policy takes microseconds.

use serde::{Deserialize, Serialize};

use crate::compiled::CompiledPolicy;
use crate::error::PolicyError;
use crate::model::Policy;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WirePolicy(Policy);

/// Why a wire policy was refused.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// Not JSON of a policy, or a value check failed while reading (the message says which).
    #[error("policy JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("policy: {0}")]
    Policy(#[from] PolicyError),
}

impl WirePolicy {
    pub fn to_json(&self) -> Result<String, WireError> {
        Ok(serde_json::to_string(&self.0)?)
    }

    pub fn from_json(text: &str) -> Result<WirePolicy, WireError> {
        Ok(WirePolicy(serde_json::from_str(text)?))
    }

    pub fn compile(self) -> Result<CompiledPolicy, WireError> {
        Ok(CompiledPolicy::compile(self.0)?)
    }
}

impl CompiledPolicy {
    /// What to send to the supervisor.
    pub fn wire(&self) -> WirePolicy {
        WirePolicy(self.source.clone())
    }
}
