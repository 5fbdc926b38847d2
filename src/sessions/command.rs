//! One command of a session: validated, run in the session's sandbox while its output is
//! relayed to whoever streams it, then recorded with how it ended (`record.rs` keeps what it left).
//!
//! The command runs in a task of its own, so a client that goes away does not end it unless
//! `sessions.kill_on_disconnect` says so.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use time::OffsetDateTime;
use tokio::sync::{mpsc, watch};
use uuid::Uuid;

use super::record::{CommandRecord, describe, remember};
use super::session::Live;
use super::{RunningCommand, Session, SessionError, Sessions, State, words};
use crate::auth::Caller;
use crate::domain::record::{ErrorKind, ExecutionError};
use crate::domain::script::{Language, Script};
use crate::sandbox::sessions::{Chunk, CommandSpec, ExecMode, Ran, ScriptLanguage, SessionFault};

/// Whole commands' output (both streams at `output_keep_bytes`) a session keeps over its history.
const OUTPUT_BUDGET_COMMANDS: u64 = 4;

/// Beyond a command's timeout, how long the service waits for the sandbox to end it.
const BACKSTOP: Duration = Duration::from_secs(30);

/// What a command runs, as the edge received it.
#[derive(Debug, Clone)]
pub(crate) enum Mode {
    /// A bash command line, in the session's shell state.
    Line(String),
    /// A program and its arguments, without a shell.
    Argv(Vec<String>),
    Script {
        language: Language,
        source: String,
    },
}

#[derive(Debug, Clone)]
pub(crate) struct ExecRequest {
    pub mode: Mode,
    pub timeout_secs: Option<u64>,
    pub stdin: Option<String>,
}
/// A started command: its record, and its output as it is produced.
#[derive(Debug)]
pub(crate) struct Started {
    pub command: Arc<RunningCommand>,
    pub chunks: mpsc::UnboundedReceiver<Chunk>,
    /// Kills the command when dropped before it ended (`kill_on_disconnect`).
    pub _guard: DisconnectGuard,
}

#[derive(Debug)]
pub(crate) struct DisconnectGuard {
    kill: Option<(Arc<Session>, Arc<RunningCommand>)>,
}

impl Drop for DisconnectGuard {
    fn drop(&mut self) {
        if let Some((session, command)) = self.kill.take()
            && !command.finished()
            && let Ok(sandbox) = session.sandbox()
        {
            tokio::spawn(async move {
                let _ = sandbox.kill(command.id).await;
            });
        }
    }
}

impl Sessions {
    /// Validates `request` and, when it passes, starts it in the session. A command that fails
    /// validation is answered at once (it is in the history, and the session stays ready).
    pub(crate) async fn exec(
        self: &Arc<Self>,
        caller: &Caller,
        id: Uuid,
        request: ExecRequest,
    ) -> Result<Started, SessionError> {
        let session = self.get(caller, id)?;
        let timeout = self.timeout(request.timeout_secs)?;
        let stdin = request.stdin.unwrap_or_default();
        if stdin.len() > self.execution.max_stdin_bytes {
            return Err(SessionError::Invalid(format!(
                "stdin: must be at most {} bytes, got {}",
                self.execution.max_stdin_bytes,
                stdin.len()
            )));
        }
        let aliases = {
            let live = session.live.lock().expect("session lock");
            ensure_serving(&live)?;
            live.shell.aliases.clone()
        };
        let (kind, mode, script) = prepare(request.mode, &aliases)?;
        let verdict = self.validator.validate(&script);
        let command = Arc::new(RunningCommand {
            id: Uuid::new_v4(),
            kind,
            text: script.text.clone(),
            verdict: verdict.clone(),
            started_at: OffsetDateTime::now_utc(),
            record: Mutex::new(CommandRecord::default()),
            done: watch::channel(false).0,
        });
        let (tx, chunks) = mpsc::unbounded_channel();
        let Ok(spec) = CommandSpec::cleared(command.id, mode, stdin, timeout, &verdict) else {
            self.record_rejected(&session, &command);
            return Ok(Started {
                command,
                chunks,
                _guard: DisconnectGuard { kill: None },
            });
        };
        let sandbox = self.claim(&session, &command)?;
        let this = self.clone();
        let (s, c) = (session.clone(), command.clone());
        self.tasks.spawn(async move {
            let (inner_tx, mut inner_rx) = mpsc::unbounded_channel::<Chunk>();
            let keep = this.settings.output_keep_bytes;
            let run = sandbox.exec(spec, inner_tx);
            let relay = async {
                while let Some(chunk) = inner_rx.recv().await {
                    c.push(&chunk, keep);
                    let _ = tx.send(chunk);
                }
            };
            let (end, ()) = tokio::join!(tokio::time::timeout(timeout + BACKSTOP, run), relay);
            this.finish(&s, &c, end).await;
        });
        let kill = self
            .settings
            .kill_on_disconnect
            .then(|| (session, command.clone()));
        Ok(Started {
            command,
            chunks,
            _guard: DisconnectGuard { kill },
        })
    }

    /// Output bytes a session keeps over its history: that of [`OUTPUT_BUDGET_COMMANDS`]
    /// commands that each kept their maximum.
    fn output_budget(&self) -> u64 {
        self.settings
            .output_keep_bytes
            .saturating_mul(2 * OUTPUT_BUDGET_COMMANDS)
    }

    fn timeout(&self, secs: Option<u64>) -> Result<Duration, SessionError> {
        let secs = secs.unwrap_or(self.execution.default_timeout_secs);
        if !(1..=self.execution.max_timeout_secs).contains(&secs) {
            return Err(SessionError::Invalid(format!(
                "timeout: must be between 1 and {} seconds, got {secs}",
                self.execution.max_timeout_secs
            )));
        }
        Ok(Duration::from_secs(secs))
    }

    /// Makes the session busy with `command`: exactly one of racing commands gets it.
    fn claim(
        &self,
        session: &Session,
        command: &Arc<RunningCommand>,
    ) -> Result<Arc<dyn crate::sandbox::sessions::SessionBox>, SessionError> {
        let mut live = session.live.lock().expect("session lock");
        ensure_serving(&live)?;
        let sandbox = live
            .sandbox
            .clone()
            .ok_or_else(|| SessionError::Stopped("stopped".into()))?;
        live.state = State::Busy;
        live.current = Some(command.clone());
        live.command_count += 1;
        Session::touch(&mut live);
        Ok(sandbox)
    }

    fn record_rejected(&self, session: &Session, command: &Arc<RunningCommand>) {
        let cwd = {
            let mut live = session.live.lock().expect("session lock");
            remember(
                &mut live.history,
                command.clone(),
                self.settings.history_commands,
                self.output_budget(),
            );
            live.shell.cwd.clone()
        };
        let layer = command
            .verdict
            .layer
            .map(|l| l.as_str())
            .unwrap_or("validation");
        command.end(|r| {
            r.ended_at = Some(OffsetDateTime::now_utc());
            r.cwd = cwd;
            r.error = Some(ExecutionError::new(
                ErrorKind::ValidationFailed,
                format!("the command failed validation ({layer} layer); nothing ran"),
            ));
        });
    }

    /// Records how the command ended and returns the session to ready (or stops it).
    async fn finish(
        &self,
        session: &Arc<Session>,
        command: &Arc<RunningCommand>,
        end: Result<Result<Ran, SessionFault>, tokio::time::error::Elapsed>,
    ) {
        if let Ok(Ok(Ran {
            events: Some(events),
            ..
        })) = &end
        {
            // Audited before the result is visible: whoever reads it finds the records.
            self.audit_decisions(session, command.id, &command.text, events)
                .await;
        }
        if let Ok(Ok(Ran {
            network: Some(report),
            ..
        })) = &end
        {
            self.audit_network(session, command.id, &command.text, report)
                .await;
        }
        let lost = match &end {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some("the sandbox did not end the command in time".to_string()),
        };
        let stop = {
            let mut live = session.live.lock().expect("session lock");
            if let Ok(Ok(Ran { end: e, .. })) = &end {
                live.shell = e.state.clone();
                live.usage.cpu_time_ms += e.usage.cpu_time_ms;
                live.usage.max_memory_bytes =
                    live.usage.max_memory_bytes.max(e.usage.max_memory_bytes);
            }
            let cwd = live.shell.cwd.clone();
            live.current = None;
            if live.state == State::Busy {
                live.state = State::Ready;
            }
            Session::touch(&mut live);
            remember(
                &mut live.history,
                command.clone(),
                self.settings.history_commands,
                self.output_budget(),
            );
            command.end(|r| describe(r, &end, cwd));
            // What the command still holds for an operator can no longer proceed (the
            // forwarder files nothing for a session that is not busy with a command).
            self.held.withdraw(session.id);
            match lost {
                Some(why) => Some(format!("sandbox_lost: {why}")),
                None if live.command_count >= session.max_commands => Some(format!(
                    "max_commands: the session ran its maximum of {} commands",
                    session.max_commands
                )),
                None => None,
            }
        };
        if let Some(reason) = stop {
            self.stop(session, reason).await;
        }
    }

    /// Ends the running command `command_id` (it ends with error type `killed`).
    pub(crate) async fn kill(
        &self,
        caller: &Caller,
        id: Uuid,
        command_id: Uuid,
    ) -> Result<Arc<RunningCommand>, SessionError> {
        let session = self.get(caller, id)?;
        let command = self.command(caller, id, command_id)?;
        if !command.finished() {
            let sandbox = session.sandbox()?;
            sandbox
                .kill(command_id)
                .await
                .map_err(|e| SessionError::Stopped(e.to_string()))?;
            command.wait().await;
        }
        Ok(command)
    }

    /// A command of the session: the running one or one in the history.
    pub(crate) fn command(
        &self,
        caller: &Caller,
        id: Uuid,
        command_id: Uuid,
    ) -> Result<Arc<RunningCommand>, SessionError> {
        let session = self.get(caller, id)?;
        let live = session.live.lock().expect("session lock");
        live.current
            .iter()
            .chain(live.history.iter())
            .find(|c| c.id == command_id)
            .cloned()
            .ok_or(SessionError::CommandNotFound)
    }

    /// The session's commands, oldest first (the running one last).
    pub(crate) fn history(
        &self,
        caller: &Caller,
        id: Uuid,
    ) -> Result<Vec<Arc<RunningCommand>>, SessionError> {
        let session = self.get(caller, id)?;
        let live = session.live.lock().expect("session lock");
        Ok(live
            .history
            .iter()
            .chain(live.current.iter())
            .cloned()
            .collect())
    }
}

/// The session accepts commands and file operations now.
pub(super) fn ensure_serving(live: &Live) -> Result<(), SessionError> {
    match live.state {
        State::Ready => Ok(()),
        State::Busy => Err(SessionError::Busy(
            live.current.as_ref().map(|c| c.id).unwrap_or_default(),
        )),
        State::Creating | State::Stopping | State::Stopped => Err(SessionError::Stopped(
            live.reason.clone().unwrap_or_else(|| "not ready".into()),
        )),
    }
}
/// The kind, what the supervisor runs, and the script that is validated for it.
fn prepare(
    mode: Mode,
    aliases: &std::collections::BTreeMap<String, String>,
) -> Result<(&'static str, ExecMode, Script), SessionError> {
    let nonempty = |field: &str, text: &str| {
        if text.trim().is_empty() || text.contains('\0') {
            Err(SessionError::Invalid(format!(
                "{field}: must not be empty or contain NUL characters"
            )))
        } else {
            Ok(())
        }
    };
    Ok(match mode {
        Mode::Line(line) => {
            nonempty("command", &line)?;
            let line = words::expand_aliases(&line, aliases);
            let script = Script::new(Language::Bash, line.clone());
            ("command", ExecMode::Line { line }, script)
        }
        Mode::Argv(argv) => {
            if argv.is_empty() || argv.iter().any(|a| a.contains('\0')) || argv[0].is_empty() {
                return Err(SessionError::Invalid(
                    "argv: must name a program, without NUL characters".into(),
                ));
            }
            let script = Script::new(Language::Bash, words::quote_argv(&argv));
            ("argv", ExecMode::Argv { argv }, script)
        }
        Mode::Script { language, source } => {
            nonempty("script_content", &source)?;
            let script = Script::new(language, source.clone());
            let language = match language {
                Language::Python => ScriptLanguage::Python,
                Language::Bash => ScriptLanguage::Bash,
            };
            ("script", ExecMode::Script { language, source }, script)
        }
    })
}
