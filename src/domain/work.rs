//! What an execution runs, as the caller asked for it: the one value the edge builds, the record
//! keeps, validation reads and the sandbox's run is cleared from.
//!
//! Only scripts exist today; structured jobs and session commands become further kinds of work
//! beside [`ScriptRun`], each with its own checks and its own sandbox call.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::domain::script::Script;

/// The runner profile of requests (and of records written before profiles existed) that name none.
pub const DEFAULT_PROFILE: &str = "minimal";

/// A script with its input, its deadline and the runner profile it runs in. Checked at the edge
/// (limits of the deployment, a known profile); validation decides whether it may run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScriptRun {
    #[serde(flatten)]
    pub script: Script,
    pub stdin: String,
    pub timeout_secs: u64,
    /// The runner profile (records written before profiles existed ran in `minimal`).
    #[serde(default = "default_profile")]
    pub profile: String,
    /// The run-time policy the run is enforced under; `None`: not enforced (the sandbox alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
}

impl ScriptRun {
    pub fn new(script: Script, stdin: String, timeout: Duration, profile: String) -> ScriptRun {
        ScriptRun {
            script,
            stdin,
            timeout_secs: timeout.as_secs(),
            profile,
            policy: None,
        }
    }

    /// The same run, enforced under the policy `name` (or not, with `None`).
    pub fn with_policy(mut self, name: Option<String>) -> ScriptRun {
        self.policy = name;
        self
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs)
    }
}

fn default_profile() -> String {
    DEFAULT_PROFILE.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::script::Language;

    #[test]
    fn a_record_of_the_first_schema_reads_as_a_minimal_run() {
        let stored = r#"{"language": "bash", "script": "echo hi", "stdin": "", "timeout_secs": 5}"#;
        let run: ScriptRun = serde_json::from_str(stored).expect("reads");
        assert_eq!(run.script, Script::new(Language::Bash, "echo hi"));
        assert_eq!(run.profile, DEFAULT_PROFILE);
        assert_eq!(run.timeout(), Duration::from_secs(5));
        let written = serde_json::to_value(&run).expect("writes");
        assert_eq!(written["script"], "echo hi");
        assert_eq!(written["language"], "bash");
    }
}
