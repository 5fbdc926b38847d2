//! What an execution runs, as the caller asked for it: the one value the edge builds, the record
//! keeps, validation reads and the sandbox's run is cleared from.
//!
//! Two kinds of work exist: a script ([`ScriptRun`], optionally with a workspace of files in and
//! artifacts out) and a structured job of the job protocol ([`JobWork`]). Each has its own checks
//! and its own sandbox call; both go through the same lifecycle. Session commands will be a third.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::domain::script::Script;

/// The runner profile of requests (and of records written before profiles existed) that name none.
pub const DEFAULT_PROFILE: &str = "minimal";

/// What an execution runs. Records keep its fields at their top level: a script's (`language`,
/// `script`, …) as they always were, a job's under `job` and `job_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Work {
    /// Tried first: only a job's record has a `job` field.
    Job(JobWork),
    Script(ScriptRun),
}

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
    /// Files written into `/workspace` before the script runs (checked paths, unique).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<WorkspaceFile>,
    /// Globs of files returned after it ran (canonical, under `/workspace` or `/tmp`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<String>,
    /// The run-time policy the run is enforced under; `None`: not enforced (the sandbox alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// The network access the request asked for (checked against the policy at the edge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::domain::network::NetworkGrant>,
}

/// A file a script run writes into its workspace before the script starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceFile {
    /// Absolute and canonical, under `/workspace`.
    pub path: String,
    pub content: String,
    /// `content` is base64 (else UTF-8 text).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub base64: bool,
}

impl ScriptRun {
    pub fn new(script: Script, stdin: String, timeout: Duration, profile: String) -> ScriptRun {
        ScriptRun {
            script,
            stdin,
            timeout_secs: timeout.as_secs(),
            profile,
            files: Vec::new(),
            artifacts: Vec::new(),
            policy: None,
            network: None,
        }
    }

    /// The same run with a workspace: files in, artifact globs out.
    pub fn with_workspace(mut self, files: Vec<WorkspaceFile>, artifacts: Vec<String>) -> Self {
        self.files = files;
        self.artifacts = artifacts;
        self
    }

    /// The same run, with the network access its request asked for.
    pub fn with_network(mut self, network: Option<crate::domain::network::NetworkGrant>) -> Self {
        self.network = network;
        self
    }

    /// The same run, enforced under the policy `name` (or not, with `None`).
    pub fn with_policy(mut self, name: Option<String>) -> ScriptRun {
        self.policy = name;
        self
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs)
    }

    /// Files go in or artifacts come out: the run needs a workspace.
    pub fn has_workspace(&self) -> bool {
        !self.files.is_empty() || !self.artifacts.is_empty()
    }
}

/// A job of the job protocol, as submitted: its JSON (with its `job_id` set) is kept as it came,
/// and parsed and checked again whenever it is about to run, under the rules of that moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobWork {
    /// Unique among all executions (a reused one is refused).
    pub job_id: Uuid,
    /// The job document.
    pub job: serde_json::Value,
    /// The runner profile it runs in (the job's own `profile`, or the default).
    pub profile: String,
    /// The job's deadline, `constraints.max_runtime_seconds`.
    pub timeout_secs: u64,
    /// The run-time policy chosen for it (`None`: the sandbox alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// The job's `network` field, read from the document at the edge and checked against the
    /// policy there (its `run_command` steps may use it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::domain::network::NetworkGrant>,
}

impl Work {
    /// The runner profile it runs in.
    pub fn profile(&self) -> &str {
        match self {
            Work::Script(s) => &s.profile,
            Work::Job(j) => &j.profile,
        }
    }

    /// Its deadline in seconds.
    pub fn timeout_secs(&self) -> u64 {
        match self {
            Work::Script(s) => s.timeout_secs,
            Work::Job(j) => j.timeout_secs,
        }
    }

    /// The script's language, or `job`: what logs and audit entries call the kind of work.
    pub fn kind(&self) -> &'static str {
        match self {
            Work::Script(s) => s.script.language.as_str(),
            Work::Job(_) => "job",
        }
    }

    /// The script, when it is one.
    pub fn script(&self) -> Option<&ScriptRun> {
        match self {
            Work::Script(s) => Some(s),
            Work::Job(_) => None,
        }
    }

    /// The run-time policy it is enforced under (`None`: the sandbox alone).
    pub fn policy(&self) -> Option<&str> {
        match self {
            Work::Script(s) => s.policy.as_deref(),
            Work::Job(j) => j.policy.as_deref(),
        }
    }

    /// The network access its request asked for (`None`: only what its policy gives, if any).
    pub fn network(&self) -> Option<&crate::domain::network::NetworkGrant> {
        match self {
            Work::Script(s) => s.network.as_ref(),
            Work::Job(j) => j.network.as_ref(),
        }
    }

    /// The job, when it is one.
    pub fn job(&self) -> Option<&JobWork> {
        match self {
            Work::Job(j) => Some(j),
            Work::Script(_) => None,
        }
    }

    /// The text the record's hash covers: the script, or the job document.
    pub fn text(&self) -> String {
        match self {
            Work::Script(s) => s.script.text.clone(),
            Work::Job(j) => j.job.to_string(),
        }
    }

    /// Drops everything that could carry a secret (a rejected run is kept as its hash).
    pub fn withhold(&mut self) {
        match self {
            Work::Script(s) => {
                s.script.text = "[withheld: the script contains a secret]".into();
                s.stdin = String::new();
                for f in &mut s.files {
                    f.content = String::new();
                    f.base64 = false;
                }
            }
            Work::Job(j) => {
                j.job = serde_json::json!({"withheld": "the job contains a secret"});
            }
        }
    }
}

impl From<ScriptRun> for Work {
    fn from(run: ScriptRun) -> Self {
        Work::Script(run)
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
        assert!(!run.has_workspace());
        let written = serde_json::to_value(&run).expect("writes");
        assert_eq!(written["script"], "echo hi");
        assert_eq!(written["language"], "bash");
        assert!(written.get("files").is_none(), "{written}");
        let work: Work = serde_json::from_str(stored).expect("reads as work");
        assert_eq!(work, Work::Script(run));
    }

    #[test]
    fn scripts_and_jobs_read_back_as_what_they_were() {
        let script = Work::Script(
            ScriptRun::new(
                Script::new(Language::Python, "print(1)"),
                String::new(),
                Duration::from_secs(3),
                "data".into(),
            )
            .with_workspace(
                vec![WorkspaceFile {
                    path: "/workspace/a.txt".into(),
                    content: "aGk=".into(),
                    base64: true,
                }],
                vec!["/workspace/*.png".into()],
            ),
        );
        let job = Work::Job(JobWork {
            job_id: Uuid::nil(),
            job: serde_json::json!({"protocol_version": "1.0", "steps": []}),
            profile: DEFAULT_PROFILE.into(),
            timeout_secs: 300,
            policy: Some("strict".into()),
            network: Some(crate::domain::network::NetworkGrant {
                allowed_domains: vec!["pypi.org".into()],
                ..Default::default()
            }),
        });
        for work in [script, job] {
            let json = serde_json::to_string(&work).expect("writes");
            let back: Work = serde_json::from_str(&json).expect("reads");
            assert_eq!(back, work, "{json}");
        }
    }
}
