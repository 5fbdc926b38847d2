//! Session mode (`sessions/1`): after `OpenSession`, PID 1 serves the host's messages until the
//! host removes the container, closes the stream, or the session's time is up.
//!
//! One loop, one thread: it polls the host's stream, the running command's pipes and SIGCHLD.
//! At most one command runs at a time; file operations run between two polls (in a child of
//! their own), so they work while a command runs; a job runs as in a job container, the
//! session's messages waiting meanwhile. After every command, every process but this one is
//! killed (`command::kill_everything`): nothing a command started outlives it, and this loop
//! is the only long-lived process of the session. It holds the shell state ([`shell`]), so a
//! host that attached again (a service restart) gets it back with `Resume`.
//!
//! While nothing runs, one Python interpreter waits for the next Python script command
//! ([`standby`]): started when the session is ready and once it idled [`STANDBY_IDLE`] after a
//! command's cleanup, discarded before any other command or job starts, so no command's code
//! ever runs beside it.
//!
//! A session with a run-time policy runs each command under it (`enforce`, one monitor thread
//! per command, finished before the command's end is reported); the host's approval decisions
//! arrive as messages of this loop. A job in such a session runs its `run_command` steps under
//! the session's policy; while it runs, the decisions are read by the job agent and the
//! session's other messages wait for this loop.

mod command;
mod files;
mod shell;
mod spawn;
mod standby;

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use scriptgate_supervisor::enforcement::{ApprovalDecision, Enforce};
use scriptgate_supervisor::sessions::{
    CommandEnd, Ended, Exec, ExecMode, Kill, LastCommand, OpenSession, Refused, Resume,
    ScriptLanguage, SessionState, SetEnv, ShellState, decode_file_request,
};
use scriptgate_supervisor::{FrameKind, HostKind, JobEndFrame, PROTOCOL_VERSION, RunJob};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::agent::{self, Runtime};
use crate::enforce::{self, Sink};
use crate::enforced::HostSink;
use crate::hostjob::{self, Frames};
use crate::identity::Split;
use crate::input::HostInput;
use crate::sys::{self, SignalFd};
use crate::{emit, emit_message};
use command::Running;
use standby::Standby;

/// Beyond its expiry, how long a session whose host is gone keeps its container.
const EXPIRY_GRACE: Duration = Duration::from_secs(60);
/// Output is read in chunks of at most this size.
const BUF: usize = 64 * 1024;
/// How long the session idles after a command before its next standby interpreter starts: a
/// command sent at once (a client's sequence) would meet a standby still starting, killed at
/// once for any other command, its start-up only taking CPU from the command; an agent's next
/// command, seconds later, finds it ready.
const STANDBY_IDLE: Duration = Duration::from_millis(20);

pub(crate) fn json(value: &impl serde::Serialize) -> Result<Vec<u8>, String> {
    serde_json::to_vec(value).map_err(|e| e.to_string())
}

struct Session {
    rt: Runtime,
    input: HostInput,
    nonce: String,
    state: ShellState,
    history: Vec<String>,
    running: Option<Running>,
    last: Option<LastCommand>,
    commands: u64,
    output_limit: u64,
    expires: Instant,
    /// The run-time policy of every command, and where its events go.
    enforce: Option<Enforce>,
    sink: std::sync::Arc<dyn Sink>,
    /// The interpreter the next Python script command gets, started while the session idles.
    standby: Option<Standby>,
    /// When the next standby starts, if the session still idles then.
    standby_due: Option<Instant>,
}

/// Serves the session `open` until its end; `Err` when the host cannot be reached any more.
pub(crate) fn serve(
    open: OpenSession,
    input: HostInput,
    split: Option<Split>,
    sigchld: SignalFd,
) -> Result<(), String> {
    if open.version != PROTOCOL_VERSION {
        return Err(format!(
            "protocol version {} is not supported (this supervisor speaks {PROTOCOL_VERSION})",
            open.version
        ));
    }
    if let Some(enforce) = &open.enforce {
        if split.is_some() || !enforce::available() {
            return Err(
                "this session asks for a run-time policy, and enforcement is not available in this sandbox (gVisor, or the script runs under another uid): the session is refused"
                    .into(),
            );
        }
        enforce::rules(enforce).map_err(|e| e.to_string())?;
    }
    if let Some(split) = split {
        split.become_job_supervisor()?;
    }
    let rt = Runtime::in_container(split, sigchld, None);
    let base: BTreeMap<String, String> = rt.env.iter().cloned().collect();
    let mut warnings = Vec::new();
    let env = shell::merge_env(&base, &open.env, &mut warnings);
    let mut session = Session {
        rt,
        input,
        nonce: open.nonce,
        state: ShellState {
            cwd: "/workspace".into(),
            env,
            aliases: BTreeMap::new(),
        },
        history: Vec::new(),
        running: None,
        last: None,
        commands: 0,
        output_limit: open.output_limit,
        expires: instant_of(open.expires_at_ms) + EXPIRY_GRACE,
        enforce: open.enforce,
        sink: std::sync::Arc::new(HostSink),
        standby: None,
        standby_due: None,
    };
    session.report(warnings)?;
    session.refresh_standby();
    session.serve()
}

/// A command: a Python script on the standby interpreter when it is usable, anything else (and a
/// Python script without a usable standby) started fresh, the standby discarded first.
fn start(
    standby: Option<Standby>,
    exec: &Exec,
    state: &ShellState,
    history: &[String],
    launch: command::Launch<'_>,
) -> Result<Running, String> {
    let source = match &exec.mode {
        ExecMode::Script {
            language: ScriptLanguage::Python,
            source,
        } => Some(source),
        _ => None,
    };
    match (source, standby) {
        (Some(source), Some(standby)) => {
            match command::hand_over(exec, source, state, standby, launch) {
                Ok(running) => return Ok(running),
                Err(why) => eprintln!("scriptgate-supervisor: a fresh interpreter: {why}"),
            }
        }
        // Killed (and reaped) before the command starts: nothing of it runs beside a standby.
        (_, standby) => drop(standby),
    }
    command::start(exec, state, history, launch)
}

/// The instant of a Unix time in milliseconds (now when it has passed).
fn instant_of(unix_ms: u64) -> Instant {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    Instant::now() + Duration::from_millis(unix_ms.saturating_sub(now))
}

impl Session {
    fn serve(&mut self) -> Result<(), String> {
        let mut buf = vec![0u8; BUF];
        loop {
            self.check_running(&mut buf)?;
            if Instant::now() >= self.expires || self.input.closed() {
                // The host is gone for good: nothing may outlive the session.
                self.standby = None;
                command::kill_everything();
                return Ok(());
            }
            let mut fds = vec![sys::pollfd(self.rt.sigchld.raw(), libc::POLLIN)];
            if let Some(fd) = self.input.fd() {
                fds.push(sys::pollfd(fd, libc::POLLIN));
            }
            let mut wake = self.expires;
            if let Some(r) = &self.running {
                r.pollfds(&mut fds);
                wake = wake.min(r.deadline);
            }
            if let Some(due) = self.standby_due {
                wake = wake.min(due);
            }
            sys::poll_until(&mut fds, Some(wake))?;
            self.rt.sigchld.drain();
            if let Some(r) = &mut self.running {
                r.pump(&mut buf)?;
            }
            for (kind, message) in self.input.session_messages() {
                self.handle(kind, &message, &mut buf)?;
            }
            if self.running.is_none() {
                // Nothing runs: reap what a file operation or job may have left (and a standby
                // that exited on its own: it is not started again before the next command ends).
                while let Some(r) = sys::reap_one() {
                    if let Some(s) = self.standby.as_mut().filter(|s| s.pid() == Some(r.pid)) {
                        s.exited();
                        self.standby = None;
                    }
                }
                if self.standby_due.is_some_and(|due| Instant::now() >= due) {
                    self.refresh_standby();
                }
            }
        }
    }

    /// Ends the running command when it exited or its deadline passed.
    fn check_running(&mut self, buf: &mut [u8]) -> Result<(), String> {
        let Some(running) = &self.running else {
            return Ok(());
        };
        let (ended, status) = match running.reap() {
            Some(status) => (Ended::Exited, Some(status)),
            None if Instant::now() >= running.deadline => (Ended::Timeout, None),
            None => return Ok(()),
        };
        self.end(ended, status, buf)
    }

    fn end(
        &mut self,
        ended: Ended,
        status: Option<libc::c_int>,
        buf: &mut [u8],
    ) -> Result<(), String> {
        let Some(running) = self.running.take() else {
            return Ok(());
        };
        let id = running.id;
        let finished = running.finish(ended, status, buf)?;
        let mut warnings = Vec::new();
        if let Some(state) = shell::read_report(&finished.report, &self.state, &mut warnings) {
            self.state = state;
        }
        let (exit_code, signal) = match finished.status {
            Some(s) => {
                let (code, signal) = sys::decode_status(s);
                (Some(code), signal)
            }
            None => (None, None),
        };
        self.last = Some(LastCommand {
            id,
            ended: finished.ended,
            exit_code,
        });
        let end = CommandEnd {
            nonce: self.nonce.clone(),
            id,
            ended: finished.ended,
            exit_code,
            signal,
            stdout_bytes: finished.totals[0],
            stderr_bytes: finished.totals[1],
            usage: finished.usage,
            duration_ms: agent::millis(finished.duration),
            state: self.state.clone(),
            warnings,
        };
        emit_message(FrameKind::CommandEnd, &json(&end)?)?;
        self.schedule_standby();
        Ok(())
    }

    /// Keeps a standby that fits the shell state, or starts one once the session idled for
    /// [`STANDBY_IDLE`].
    fn schedule_standby(&mut self) {
        if self.standby.as_ref().is_some_and(|s| s.fits(&self.state)) {
            return;
        }
        self.standby = None;
        self.standby_due = Some(Instant::now() + STANDBY_IDLE);
    }

    /// Keeps a standby interpreter that fits the shell state, or starts one (see [`standby`]).
    fn refresh_standby(&mut self) {
        self.standby_due = None;
        if self.standby.as_ref().is_some_and(|s| s.fits(&self.state)) {
            return;
        }
        self.standby = None;
        match Standby::start(
            &self.state,
            self.rt.split,
            self.enforce.as_ref(),
            &self.sink,
        ) {
            Ok(standby) => self.standby = standby,
            Err(e) => eprintln!("scriptgate-supervisor: no standby interpreter: {e}"),
        }
    }

    fn handle(&mut self, kind: u8, message: &[u8], buf: &mut [u8]) -> Result<(), String> {
        match HostKind::from_u8(kind) {
            Some(HostKind::Exec) => match serde_json::from_slice::<Exec>(message) {
                Ok(exec) => self.exec(exec),
                Err(e) => self.refuse(None, None, format!("malformed command: {e}")),
            },
            Some(HostKind::Kill) => match serde_json::from_slice::<Kill>(message) {
                Ok(kill) if self.running.as_ref().is_some_and(|r| r.id == kill.id) => {
                    self.end(Ended::Killed, None, buf)
                }
                Ok(kill) => self.refuse(Some(kill.id), None, "no such command is running".into()),
                Err(e) => self.refuse(None, None, format!("malformed kill: {e}")),
            },
            Some(HostKind::File) => match decode_file_request(message) {
                Ok((request, data)) => {
                    // Not while a standby starts: its start-up must not see what this changes.
                    if let Some(s) = &mut self.standby
                        && !s.wait_ready()
                    {
                        self.standby = None;
                    }
                    files::serve(&mut self.rt, request, data)
                }
                Err(e) => self.refuse(None, None, e),
            },
            Some(HostKind::Resume) => match serde_json::from_slice::<Resume>(message) {
                Ok(r) if r.nonce == self.nonce => self.report(Vec::new()),
                _ => self.refuse(None, None, "not this session".into()),
            },
            Some(HostKind::SetEnv) => match serde_json::from_slice::<SetEnv>(message) {
                Ok(set) => self.set_env(set),
                Err(e) => self.refuse(None, None, format!("malformed environment: {e}")),
            },
            Some(HostKind::ApprovalDecision) => {
                match serde_json::from_slice::<ApprovalDecision>(message) {
                    // A decision for a command that ended already has nobody to reach.
                    Ok(d) => {
                        if let Some(r) = &self.running {
                            r.deliver(d);
                        }
                        Ok(())
                    }
                    Err(e) => self.refuse(None, None, format!("malformed decision: {e}")),
                }
            }
            Some(HostKind::RunJob) => match serde_json::from_slice::<RunJob>(message) {
                Ok(run) => self.job(run),
                Err(e) => self.refuse(None, None, format!("malformed job: {e}")),
            },
            _ => self.refuse(None, None, format!("unexpected message of kind {kind}")),
        }
    }

    fn exec(&mut self, exec: Exec) -> Result<(), String> {
        if self.running.is_some() {
            return self.refuse(Some(exec.id), None, "another command is running".into());
        }
        self.commands += 1;
        if let ExecMode::Line { line } = &exec.mode {
            self.history.push(line.clone());
            shell::trim_history(&mut self.history);
        }
        let launch = command::Launch {
            split: self.rt.split,
            limit: self.output_limit,
            enforce: self.enforce.as_ref(),
            sink: &self.sink,
        };
        let standby = self.standby.take();
        self.standby_due = None;
        match start(standby, &exec, &self.state, &self.history, launch) {
            Ok(running) => {
                self.running = Some(running);
                Ok(())
            }
            Err(why) => {
                command::kill_everything();
                self.last = Some(LastCommand {
                    id: exec.id,
                    ended: Ended::FailedToStart,
                    exit_code: None,
                });
                let end = CommandEnd {
                    nonce: self.nonce.clone(),
                    id: exec.id,
                    ended: Ended::FailedToStart,
                    exit_code: None,
                    signal: None,
                    stdout_bytes: 0,
                    stderr_bytes: 0,
                    usage: Default::default(),
                    duration_ms: 0,
                    state: self.state.clone(),
                    warnings: vec![why],
                };
                emit_message(FrameKind::CommandEnd, &json(&end)?)?;
                self.schedule_standby();
                Ok(())
            }
        }
    }

    fn set_env(&mut self, set: SetEnv) -> Result<(), String> {
        if self.running.is_some() {
            return self.refuse(None, None, "a command is running".into());
        }
        let mut warnings = Vec::new();
        let mut env = shell::merge_env(&self.state.env, &set.set, &mut warnings);
        for name in &set.unset {
            env.remove(name);
        }
        self.state.env = env;
        self.schedule_standby();
        self.report(warnings)
    }

    /// A job of the job protocol in the session's workspace, as a job container runs it.
    fn job(&mut self, run: RunJob) -> Result<(), String> {
        if self.running.is_some() {
            return self.refuse(None, None, "a command is running".into());
        }
        // No command code beside a standby: the job's steps run in place of it.
        self.standby = None;
        self.standby_due = None;
        let started_at = OffsetDateTime::now_utc();
        // Under the session's policy the agent reads the host's decisions while a step runs.
        if let Some(enforce) = &self.enforce {
            self.rt.enforce = Some((enforce.clone(), self.sink.clone()));
            self.rt.input = Some(std::mem::take(&mut self.input));
            self.rt.defer_messages = true;
        }
        let end = match hostjob::checked(&run, &self.rt.image_path, started_at) {
            Ok(job) => agent::run(&job, &mut self.rt, &mut Frames, started_at),
            Err(refused) => refused.report(&mut Frames),
        };
        if let Some(input) = self.rt.input.take() {
            self.input = input;
        }
        self.rt.enforce = None;
        self.rt.defer_messages = false;
        let end = end?;
        command::kill_everything();
        let frame = JobEndFrame {
            nonce: run.nonce,
            end,
        };
        emit_message(FrameKind::JobEnd, &json(&frame)?)?;
        self.schedule_standby();
        Ok(())
    }

    fn report(&self, warnings: Vec<String>) -> Result<(), String> {
        let state = SessionState {
            nonce: self.nonce.clone(),
            state: self.state.clone(),
            running: self.running.as_ref().map(|r| r.id),
            last: self.last.clone(),
            commands: self.commands,
            warnings,
        };
        emit_message(FrameKind::SessionState, &json(&state)?)
    }

    fn refuse(&self, id: Option<Uuid>, op_id: Option<u64>, message: String) -> Result<(), String> {
        let refused = Refused { id, op_id, message };
        emit(FrameKind::Refused, &json(&refused)?)
    }
}
