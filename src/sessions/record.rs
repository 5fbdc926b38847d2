//! What a command of a session left: its record (how it ended, the working directory after it,
//! the totals of its output), its kept output (up to `output_keep_bytes` per stream) and pages
//! of it, and the history's budget for kept output.

use std::sync::{Arc, Mutex};

use time::OffsetDateTime;
use tokio::sync::watch;
use uuid::Uuid;

use crate::domain::record::{ErrorKind, ExecutionError, ResourceUsage};
use crate::domain::verdict::Verdict;
use crate::sandbox::sessions::{Chunk, Ended, OutputStream, Ran, SessionFault};
use scriptgate_policy::events::Events;

/// What a command left, as results, history and output pages show it.
#[derive(Debug, Clone, Default)]
pub(crate) struct CommandRecord {
    pub ended_at: Option<OffsetDateTime>,
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub error: Option<ExecutionError>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub stdout_total: u64,
    pub stderr_total: u64,
    /// The working directory after the command.
    pub cwd: String,
    pub duration_ms: u64,
    pub usage: ResourceUsage,
    pub warnings: Vec<String>,
    /// What the session's run-time policy saw and decided (`None` without one).
    pub events: Option<Events>,
    /// The command's lookups and connections through the egress proxy (`None`: the session has
    /// no network access, or the command never ran).
    pub network: Option<crate::sandbox::egress::NetworkReport>,
}

/// A command of a session, running or ended.
#[derive(Debug)]
pub(crate) struct RunningCommand {
    pub id: Uuid,
    /// `command`, `argv` or `script`.
    pub kind: &'static str,
    /// The text that was validated (a command line with its aliases expanded).
    pub text: String,
    pub verdict: Verdict,
    pub started_at: OffsetDateTime,
    pub(super) record: Mutex<CommandRecord>,
    pub(super) done: watch::Sender<bool>,
}

/// A page of a command's kept output.
#[derive(Debug, Clone)]
pub(crate) struct OutputPage {
    pub data: Vec<u8>,
    pub offset: u64,
    /// Bytes the command wrote to the stream.
    pub total_bytes: u64,
    /// Bytes the service kept of it (from offset 0).
    pub kept_bytes: u64,
    pub finished: bool,
}

impl RunningCommand {
    pub(crate) fn snapshot(&self) -> CommandRecord {
        self.record.lock().expect("command lock").clone()
    }

    pub(crate) fn finished(&self) -> bool {
        *self.done.borrow()
    }

    /// Waits until the command ended.
    pub(crate) async fn wait(&self) {
        let mut rx = self.done.subscribe();
        let _ = rx.wait_for(|done| *done).await;
    }

    pub(crate) fn page(&self, stream: OutputStream, offset: u64, limit: u64) -> OutputPage {
        let r = self.record.lock().expect("command lock");
        let (kept, total) = match stream {
            OutputStream::Stdout => (&r.stdout, r.stdout_total),
            OutputStream::Stderr => (&r.stderr, r.stderr_total),
        };
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(kept.len());
        let end = start
            .saturating_add(usize::try_from(limit).unwrap_or(usize::MAX))
            .min(kept.len());
        OutputPage {
            data: kept[start..end].to_vec(),
            offset: start as u64,
            total_bytes: total.max(kept.len() as u64),
            kept_bytes: kept.len() as u64,
            finished: self.finished(),
        }
    }

    pub(super) fn kept_bytes(&self) -> u64 {
        let r = self.record.lock().expect("command lock");
        (r.stdout.len() + r.stderr.len()) as u64
    }

    /// Forgets the kept output (the totals stay); the bytes it freed.
    pub(super) fn drop_output(&self) -> u64 {
        let mut r = self.record.lock().expect("command lock");
        let freed = (r.stdout.len() + r.stderr.len()) as u64;
        r.stdout = Vec::new();
        r.stderr = Vec::new();
        freed
    }

    pub(super) fn push(&self, chunk: &Chunk, keep: u64) {
        let mut r = self.record.lock().expect("command lock");
        let buf = match chunk.stream {
            OutputStream::Stdout => &mut r.stdout,
            OutputStream::Stderr => &mut r.stderr,
        };
        let room = usize::try_from(keep)
            .unwrap_or(usize::MAX)
            .saturating_sub(buf.len());
        buf.extend_from_slice(&chunk.bytes[..chunk.bytes.len().min(room)]);
    }

    pub(super) fn end(&self, record: impl FnOnce(&mut CommandRecord)) {
        record(&mut self.record.lock().expect("command lock"));
        self.done.send_replace(true);
    }
}
/// Adds `command` to the history, keeping at most `keep` commands and at most `budget` bytes of
/// kept output: older commands' output goes first (their records and totals stay, so their
/// pages say they kept less).
pub(super) fn remember(
    history: &mut std::collections::VecDeque<Arc<RunningCommand>>,
    command: Arc<RunningCommand>,
    keep: usize,
    budget: u64,
) {
    if !history.iter().any(|c| c.id == command.id) {
        history.push_back(command);
    }
    while history.len() > keep.max(1) {
        history.pop_front();
    }
    let mut kept: u64 = history.iter().map(|c| c.kept_bytes()).sum();
    let older = history.len().saturating_sub(1);
    for c in history.iter().take(older) {
        if kept <= budget {
            break;
        }
        kept -= c.drop_output();
    }
}
/// The record of a command that ran (or whose sandbox was lost).
pub(super) fn describe(
    r: &mut CommandRecord,
    end: &Result<Result<Ran, SessionFault>, tokio::time::error::Elapsed>,
    cwd: String,
) {
    r.ended_at = Some(OffsetDateTime::now_utc());
    r.cwd = cwd;
    let e = match end {
        Ok(Ok(ran)) => {
            r.events = ran.events.clone();
            r.network = ran.network.clone();
            &ran.end
        }
        Ok(Err(fault)) => {
            r.error = Some(ExecutionError::new(
                ErrorKind::InternalError,
                fault.to_string(),
            ));
            return;
        }
        Err(_) => {
            r.timed_out = true;
            r.error = Some(ExecutionError::new(
                ErrorKind::Timeout,
                "the sandbox did not end the command in time; the session was stopped",
            ));
            return;
        }
    };
    r.exit_code = e.exit_code;
    r.stdout_total = e.stdout_bytes;
    r.stderr_total = e.stderr_bytes;
    r.duration_ms = e.duration_ms;
    r.usage = ResourceUsage {
        cpu_time_ms: e.usage.cpu_time_ms,
        max_memory_bytes: e.usage.max_memory_bytes,
    };
    r.warnings = e.warnings.clone();
    r.timed_out = e.ended == Ended::Timeout;
    r.error = match (e.ended, e.exit_code) {
        (Ended::Exited, Some(0)) => None,
        _ if e.usage.oom_kills > 0 => Some(ExecutionError::new(
            ErrorKind::ResourceLimitExceeded,
            "the command ran out of memory and was killed",
        )),
        (Ended::Exited, Some(code)) => Some(ExecutionError::new(
            ErrorKind::ExecutionFailure,
            format!("the command exited with code {code}"),
        )),
        (Ended::Exited, None) => Some(ExecutionError::new(
            ErrorKind::ExecutionFailure,
            "the command ended without an exit code",
        )),
        (Ended::Timeout, _) => Some(ExecutionError::new(
            ErrorKind::Timeout,
            "the command was killed at its timeout",
        )),
        (Ended::Killed, _) => Some(ExecutionError::new(
            ErrorKind::Killed,
            "the command was killed on request",
        )),
        (Ended::FailedToStart, _) => Some(ExecutionError::new(
            ErrorKind::ExecutionFailure,
            format!("the command could not start: {}", e.warnings.join("; ")),
        )),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::script::Language;

    fn command(bytes: usize) -> Arc<RunningCommand> {
        let c = Arc::new(RunningCommand {
            id: Uuid::new_v4(),
            kind: "command",
            text: "x".into(),
            verdict: Verdict {
                language: Language::Bash,
                valid: true,
                layer: None,
                findings: Vec::new(),
            },
            started_at: OffsetDateTime::now_utc(),
            record: Mutex::new(CommandRecord::default()),
            done: watch::channel(false).0,
        });
        let chunk = Chunk {
            stream: OutputStream::Stdout,
            bytes: vec![b'a'; bytes].into(),
        };
        c.push(&chunk, u64::MAX);
        c.end(|r| r.stdout_total = bytes as u64);
        c
    }

    #[test]
    fn older_output_goes_first_when_the_history_is_over_its_budget() {
        let mut history = std::collections::VecDeque::new();
        for _ in 0..3 {
            remember(&mut history, command(40), 10, 100);
        }
        let kept: Vec<u64> = history.iter().map(|c| c.kept_bytes()).collect();
        assert_eq!(kept, vec![0, 40, 40]);
        let page = history[0].page(OutputStream::Stdout, 0, 10);
        assert_eq!((page.kept_bytes, page.total_bytes), (0, 40));
        for _ in 0..20 {
            remember(&mut history, command(1), 10, 100);
        }
        assert_eq!(history.len(), 10);
    }
}
