//! The sandbox side of persistent sessions: one long-lived container per session, reached
//! through a [`SessionBox`] that runs one command at a time and file operations at any time.
//!
//! A command reaches a session container only as a [`CommandSpec`], whose one constructor takes
//! a passing verdict for the text that runs (a command line with the session's aliases already
//! expanded, an argv as the bash line it is equivalent to, or a script), as [`RunSpec`] does for
//! one-shot runs.
//!
//! A session opened with an [`Enforcement`] runs every command under that run-time policy; each
//! command's end then carries its events ([`Ran::events`]), its events go to
//! [`Enforcement::live`] as they arrive and its held operations to [`Enforcement::approvals`].
//!
//! [`RunSpec`]: super::RunSpec

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::sync::mpsc;
use uuid::Uuid;

use super::{Enforcement, Limits, NotCleared};
use crate::domain::script::Language;
use crate::domain::verdict::{Severity, Verdict};
use scriptgate_policy::events::Events;
pub use scriptgate_supervisor::job::{ErrorType as FileErrorType, JobError as FileError};
pub use scriptgate_supervisor::sessions::{
    CommandEnd, Ended, ExecMode, FileDone, FileOp, OutputStream, ScriptLanguage, ShellState,
};

/// What a session container is opened with.
#[derive(Debug, Clone)]
pub struct SessionSpec {
    pub session_id: Uuid,
    /// The runner profile (one [`super::profiles::Profiles::select`] returned).
    pub profile: String,
    /// Set over the image's environment (names already checked).
    pub env: BTreeMap<String, String>,
    /// Unix milliseconds after which the supervisor ends the session by itself (should the
    /// service be gone by then).
    pub expires_at_ms: u64,
    /// Bytes of each output stream relayed per command.
    pub output_limit: u64,
    /// The container's limits (within the deployment's).
    pub limits: Limits,
    /// The agent that owns it (the container's owner label).
    pub owner: String,
    /// The run-time policy every command runs under (refused by a sandbox that cannot enforce
    /// one: the session does not open).
    pub enforcement: Option<Enforcement>,
    /// Network access through the egress proxy for every command (refused by a sandbox that
    /// cannot give it: the session does not open). Its `session_bytes` limit counts over the
    /// session's life, its `command_bytes` limit per command.
    pub network: Option<super::NetworkAccess>,
}

/// How a command of a session ended, and what its policy saw (`None` without one).
#[derive(Debug, Clone)]
pub struct Ran {
    pub end: CommandEnd,
    pub events: Option<Events>,
    /// The command's lookups and connections through the egress proxy (`None`: the session has
    /// no network access).
    pub network: Option<super::egress::NetworkReport>,
}

/// A command cleared to run in a session.
#[derive(Debug, Clone)]
pub struct CommandSpec {
    id: Uuid,
    mode: ExecMode,
    stdin: String,
    timeout: Duration,
}

impl CommandSpec {
    /// The command `mode`, when `verdict` passed the text that `language` validated: bash for a
    /// command line or an argv, the script's language for a script.
    pub fn cleared(
        id: Uuid,
        mode: ExecMode,
        stdin: String,
        timeout: Duration,
        verdict: &Verdict,
    ) -> Result<CommandSpec, NotCleared> {
        let language = match &mode {
            ExecMode::Line { .. } | ExecMode::Argv { .. } => Language::Bash,
            ExecMode::Script {
                language: ScriptLanguage::Python,
                ..
            } => Language::Python,
            ExecMode::Script {
                language: ScriptLanguage::Bash,
                ..
            } => Language::Bash,
        };
        let passed = verdict.valid
            && verdict.layer.is_none()
            && verdict.language == language
            && verdict
                .findings
                .iter()
                .all(|f| f.severity != Severity::Block);
        if !passed {
            return Err(NotCleared);
        }
        Ok(CommandSpec {
            id,
            mode,
            stdin,
            timeout,
        })
    }

    pub fn id(&self) -> Uuid {
        self.id
    }

    pub fn mode(&self) -> &ExecMode {
        &self.mode
    }

    pub fn stdin(&self) -> &str {
        &self.stdin
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// Output of a running command, as it is produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub stream: OutputStream,
    pub bytes: Bytes,
}

/// What a file operation answered: its result, and the file's bytes for a read.
#[derive(Debug, Clone)]
pub struct FileAnswer {
    pub result: Result<FileDone, FileError>,
    pub bytes: Option<Vec<u8>>,
}

/// How a job of the job protocol ended in a session: its complete result, and the artifacts
/// that arrived intact (their sha256 checked).
#[derive(Debug)]
pub struct SessionJobEnd {
    pub result: super::job::JobResult,
    pub files: Vec<super::ArtifactFile>,
    /// Every step's events under the session's policy (`None`: the session has none).
    pub events: Option<Events>,
}

/// A session container that can no longer serve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionFault {
    /// The container or its stream is gone; the session cannot go on.
    #[error("the session's sandbox is gone: {0}")]
    Lost(String),
    /// The supervisor refused the message (another command runs, no such command).
    #[error("the session's sandbox refused: {0}")]
    Refused(String),
}

/// A running session container. Dropping the last handle (or [`SessionBox::close`]) removes it.
pub trait SessionBox: std::fmt::Debug + Send + Sync {
    /// The container's id (for logs and the session's record).
    fn container_id(&self) -> &str;
    /// Runs `command`, sending its output to `out` as it arrives; its end once it ended (the
    /// supervisor enforces its timeout).
    fn exec(
        &self,
        command: CommandSpec,
        out: mpsc::UnboundedSender<Chunk>,
    ) -> BoxFuture<'_, Result<Ran, SessionFault>>;
    /// Ends the running command `id` (its `exec` answers with `Ended::Killed`).
    fn kill(&self, id: Uuid) -> BoxFuture<'_, Result<(), SessionFault>>;
    /// A file operation on the session's writable places (the job protocol's path rules).
    fn file(&self, op: FileOp, data: Vec<u8>) -> BoxFuture<'_, Result<FileAnswer, SessionFault>>;
    /// Sets and unsets exported variables between commands (refused while a command runs);
    /// the shell state after it.
    fn set_env(
        &self,
        set: BTreeMap<String, String>,
        unset: Vec<String>,
    ) -> BoxFuture<'_, Result<ShellState, SessionFault>>;
    /// Runs a job of the job protocol in the session's workspace and working state, as a job
    /// container runs it (the agent enforces its deadline; no command runs meanwhile).
    fn run_job(&self, run: super::JobRun) -> BoxFuture<'_, Result<SessionJobEnd, SessionFault>>;
    /// Removes the container now and waits for that.
    fn close(&self) -> BoxFuture<'_, ()>;
    /// Every lookup and connection of the session's commands through the egress proxy as it
    /// happens (`None`: the session has no network access).
    fn network_events(
        &self,
    ) -> Option<tokio::sync::broadcast::Receiver<super::egress::NetworkEvent>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::verdict::{Finding, Layer};

    fn verdict(language: Language, block: bool) -> Verdict {
        Verdict {
            language,
            valid: !block,
            layer: block.then_some(Layer::Dangerous),
            findings: Vec::<Finding>::new(),
        }
    }

    #[test]
    fn a_command_needs_a_passing_verdict_in_its_own_language() {
        let line = ExecMode::Line { line: "ls".into() };
        let t = Duration::from_secs(1);
        let id = Uuid::nil();
        let ok = verdict(Language::Bash, false);
        assert!(CommandSpec::cleared(id, line.clone(), String::new(), t, &ok).is_ok());
        let bad = verdict(Language::Bash, true);
        assert!(CommandSpec::cleared(id, line.clone(), String::new(), t, &bad).is_err());
        let py = verdict(Language::Python, false);
        assert!(CommandSpec::cleared(id, line, String::new(), t, &py).is_err());
        let script = ExecMode::Script {
            language: ScriptLanguage::Python,
            source: "print(1)".into(),
        };
        assert!(CommandSpec::cleared(id, script.clone(), String::new(), t, &py).is_ok());
        assert!(CommandSpec::cleared(id, script, String::new(), t, &ok).is_err());
    }
}
