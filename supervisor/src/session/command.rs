//! One command of a session: started in a session of its own as the script's uid, in the shell
//! state's working directory and environment, its output relayed as `CommandOutput` frames that
//! name it (up to the session's cap per stream, the rest counted), ended by its exit, its
//! deadline or a kill. Whatever it started is killed before the next message is served.
//!
//! Under a session's run-time policy the command's program is started by its path with the
//! enforcement installed last between fork and exec (its own exec is the one call let through
//! undecided, as for a one-shot Bash run); an argv goes through `bash -c 'exec "$@"'`, so the
//! program it names is decided like any other.
//!
//! A Python script runs on the session's standby interpreter when it is usable ([`hand_over`],
//! see [`standby`](super::standby)): the same process tree, pipes, deadline, kill and cleanup as a
//! fresh one, only started before the command.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use scriptgate_supervisor::enforcement::{ApprovalDecision, Enforce};
use scriptgate_supervisor::sessions::{
    Ended, Exec, ExecMode, OutputStream, ScriptLanguage, ShellState, encode_output,
};
use scriptgate_supervisor::{FrameKind, Usage};
use uuid::Uuid;

use super::shell::{self, MAX_REPORT, PROLOGUE_FD, REPORT_FD};
use super::spawn::{Plan, spawn};
use super::standby::{Handed, Standby};
use crate::enforce::{self, ChildSide, Enforcement, Sink, Start};
use crate::identity::Split;
use crate::pipes::{Feed, Stream};
use crate::{child, emit, sys, usage};

/// Output is read (and relayed) in chunks of at most this size.
const CHUNK: usize = 64 * 1024;
/// After the command exits, at most this much still-buffered output is read.
const DRAIN_LIMIT: usize = 4 << 20;
/// Python scripts are read from this descriptor (the bootstrap of one-shot runs).
const CODE_FD: RawFd = 3;

/// A command while it runs.
pub(crate) struct Running {
    pub(crate) id: Uuid,
    pid: libc::pid_t,
    started: Instant,
    pub(crate) deadline: Instant,
    streams: [Stream; 2],
    totals: [u64; 2],
    feeds: Vec<Feed>,
    report: Option<(OwnedFd, Vec<u8>)>,
    cpu_before: u64,
    oom_before: u64,
    limit: u64,
    /// The session's policy, enforced on this command's process tree.
    enforcement: Option<Enforcement>,
}

/// How a session starts its commands.
#[derive(Clone, Copy)]
pub(crate) struct Launch<'a> {
    pub(crate) split: Option<Split>,
    /// Bytes of each stream relayed.
    pub(crate) limit: u64,
    pub(crate) enforce: Option<&'a Enforce>,
    pub(crate) sink: &'a std::sync::Arc<dyn Sink>,
}

/// How a command came to its end, and what it left.
pub(crate) struct Finished {
    pub(crate) ended: Ended,
    pub(crate) status: Option<libc::c_int>,
    pub(crate) totals: [u64; 2],
    pub(crate) usage: Usage,
    pub(crate) duration: Duration,
    /// The state report of a command line (empty otherwise, or when it did not report).
    pub(crate) report: Vec<u8>,
}

/// Starts `exec` in `state`; `Err` says why it could not start.
pub(crate) fn start(
    exec: &Exec,
    state: &ShellState,
    history: &[String],
    launch: Launch<'_>,
) -> Result<Running, String> {
    let mut plan = plan(exec, state, history)?;
    let (child, enforcement) = match launch.enforce {
        Some(enforce) => {
            let (child, enforcement) = enforced(&mut plan, enforce, launch.sink)?;
            (Some(child), Some(enforcement))
        }
        None => (None, None),
    };
    let cpu_before = sys::children_usage().0;
    let oom_before = usage::measure(0, 0).oom_kills;
    let (pid, stdin, stdout, stderr) =
        spawn(plan.program.clone(), &plan, &state.cwd, launch.split, child)?;
    let handed = Handed {
        pid,
        stdin,
        stdout,
        stderr,
        code: Feed::new(None, b""),
        enforcement,
    };
    Ok(running(
        exec,
        handed,
        plan.feeds,
        plan.report,
        launch.limit,
        (cpu_before, oom_before),
    ))
}

/// Starts the Python script `exec` on the session's standby interpreter (see [`standby`]);
/// `Err` when it is not usable (it is gone then: start a fresh interpreter).
///
/// [`standby`]: super::standby
pub(crate) fn hand_over(
    exec: &Exec,
    source: &str,
    state: &ShellState,
    standby: Standby,
    launch: Launch<'_>,
) -> Result<Running, String> {
    // Before the standby is reaped, as a fresh interpreter's start-up counts in its command.
    let cpu_before = sys::children_usage().0;
    let oom_before = usage::measure(0, 0).oom_kills;
    let handed = standby.hand_over(source, state, launch.enforce)?;
    Ok(running(
        exec,
        handed,
        Vec::new(),
        None,
        launch.limit,
        (cpu_before, oom_before),
    ))
}

/// The running command of `exec` on a started process; the feeds get their first bytes.
fn running(
    exec: &Exec,
    handed: Handed,
    extra: Vec<Feed>,
    report: Option<OwnedFd>,
    limit: u64,
    (cpu_before, oom_before): (u64, u64),
) -> Running {
    let mut feeds = vec![
        Feed::new(Some(handed.stdin), exec.stdin.as_bytes()),
        handed.code,
    ];
    feeds.extend(extra);
    for feed in &mut feeds {
        feed.push();
    }
    Running {
        id: exec.id,
        pid: handed.pid,
        started: Instant::now(),
        deadline: Instant::now() + Duration::from_millis(exec.timeout_ms),
        streams: [Stream::new(handed.stdout), Stream::new(handed.stderr)],
        totals: [0, 0],
        feeds,
        report: report.map(|fd| (fd, Vec::new())),
        cpu_before,
        oom_before,
        limit,
        enforcement: handed.enforcement,
    }
}

/// Prepares the policy's enforcement of `plan`: its program named by its path (the launch's own
/// exec), an argv through bash so that the program it names is decided.
fn enforced(
    plan: &mut Plan,
    enforce: &Enforce,
    sink: &std::sync::Arc<dyn Sink>,
) -> Result<(ChildSide, Enforcement), String> {
    if plan.arg0.is_some() {
        let mut args: Vec<String> = [
            "--noprofile",
            "--norc",
            "-c",
            r#"exec "$@""#,
            "bash",
            plan.program.as_str(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.append(&mut plan.args);
        plan.program = "bash".into();
        plan.arg0 = None;
        plan.args = args;
    }
    let program = crate::child::program_path(&plan.program);
    let rules = enforce::rules(enforce).map_err(|e| e.to_string())?;
    let start = Start::Now {
        rules: Box::new(rules),
        program: program.clone(),
    };
    let prepared = enforce::prepare(start, sink.clone()).map_err(|e| e.to_string())?;
    plan.program = program.to_string_lossy().into_owned();
    Ok(prepared)
}

fn plan(exec: &Exec, state: &ShellState, history: &[String]) -> Result<Plan, String> {
    let env: Vec<(String, String)> = state
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let bash = |args: Vec<String>| Plan {
        program: "bash".into(),
        arg0: None,
        args,
        env: env.clone(),
        fds: Vec::new(),
        feeds: Vec::new(),
        report: None,
    };
    Ok(match &exec.mode {
        ExecMode::Line { line } => {
            let (prologue_read, prologue_write) = sys::pipe()?;
            let (report_read, report_write) = sys::pipe()?;
            sys::set_nonblocking(&prologue_write)?;
            sys::set_nonblocking(&report_read)?;
            let text = shell::prologue(state, history);
            let mut plan = bash(vec![
                "--noprofile".into(),
                "--norc".into(),
                "-c".into(),
                line.clone(),
                "bash".into(),
            ]);
            plan.env
                .push(("BASH_ENV".into(), format!("/dev/fd/{PROLOGUE_FD}")));
            plan.fds = vec![(PROLOGUE_FD, prologue_read), (REPORT_FD, report_write)];
            plan.feeds = vec![Feed::new(Some(prologue_write), text.as_bytes())];
            plan.report = Some(report_read);
            plan
        }
        ExecMode::Script {
            language: ScriptLanguage::Bash,
            source,
        } => bash(vec![
            "--noprofile".into(),
            "--norc".into(),
            "-c".into(),
            source.clone(),
            "script.sh".into(),
        ]),
        ExecMode::Script {
            language: ScriptLanguage::Python,
            source,
        } => {
            let (code_read, code_write) = sys::pipe()?;
            sys::set_nonblocking(&code_write)?;
            Plan {
                program: "python3".into(),
                arg0: None,
                args: vec!["-u".into(), "-c".into(), child::PYTHON_BOOTSTRAP.into()],
                env,
                fds: vec![(CODE_FD, code_read)],
                feeds: vec![Feed::new(Some(code_write), source.as_bytes())],
                report: None,
            }
        }
        ExecMode::Argv { argv } => {
            let Some(program) = argv.first() else {
                return Err("an empty argv".into());
            };
            Plan {
                program: program.clone(),
                arg0: Some(program.clone()),
                args: argv[1..].to_vec(),
                env,
                fds: Vec::new(),
                feeds: Vec::new(),
                report: None,
            }
        }
    })
}

impl Running {
    /// Hands the host's decision on a held operation to the command's enforcement.
    pub(crate) fn deliver(&self, decision: ApprovalDecision) {
        if let Some(e) = &self.enforcement {
            e.decisions().deliver(decision);
        }
    }

    /// Descriptors to poll for this command.
    pub(crate) fn pollfds(&self, out: &mut Vec<libc::pollfd>) {
        out.extend(
            self.streams
                .iter()
                .filter_map(Stream::raw)
                .map(|fd| sys::pollfd(fd, libc::POLLIN)),
        );
        out.extend(
            self.feeds
                .iter()
                .filter_map(Feed::raw)
                .map(|fd| sys::pollfd(fd, libc::POLLOUT)),
        );
        if let Some((fd, _)) = &self.report {
            out.push(sys::pollfd(fd.as_raw_fd(), libc::POLLIN));
        }
    }

    /// Relays what is readable, feeds what is writable; `Err` when the host is gone.
    pub(crate) fn pump(&mut self, buf: &mut [u8]) -> Result<(), String> {
        for _ in 0..16 {
            if self.pump_once(buf, usize::MAX)? == 0 {
                break;
            }
        }
        for feed in &mut self.feeds {
            feed.push();
        }
        self.read_report();
        Ok(())
    }

    /// One read per stream; the bytes read.
    fn pump_once(&mut self, buf: &mut [u8], cap: usize) -> Result<usize, String> {
        let id = self.id;
        let mut read = 0;
        for (i, kind) in [OutputStream::Stdout, OutputStream::Stderr]
            .into_iter()
            .enumerate()
        {
            let n = self.streams[i].pump(self.limit, &mut buf[..CHUNK.min(cap)], &mut |b| {
                emit(FrameKind::CommandOutput, &encode_output(kind, id, b))
            })?;
            self.totals[i] += n as u64;
            read += n;
        }
        Ok(read)
    }

    fn read_report(&mut self) {
        let Some((fd, report)) = &mut self.report else {
            return;
        };
        let mut buf = [0u8; 16 * 1024];
        loop {
            // SAFETY: reading into a local buffer of its own length from a pipe we own.
            let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return;
            }
            if report.len() + n as usize > MAX_REPORT {
                // Too large to be a state: dropped (the command line reported nonsense).
                report.clear();
                self.report = None;
                return;
            }
            report.extend_from_slice(&buf[..n as usize]);
        }
    }

    /// The command's exit status once it exited (every exited process is reaped meanwhile).
    pub(crate) fn reap(&self) -> Option<libc::c_int> {
        let mut found = None;
        while let Some(r) = sys::reap_one() {
            if r.pid == self.pid {
                found = Some(r.status);
            }
        }
        found
    }

    /// Ends the command: what is still buffered is relayed (a bounded amount), then every
    /// other process in the container is killed and reaped.
    pub(crate) fn finish(
        mut self,
        ended: Ended,
        status: Option<libc::c_int>,
        buf: &mut [u8],
    ) -> Result<Finished, String> {
        let mut drained = 0;
        while drained < DRAIN_LIMIT {
            let n = self.pump_once(buf, DRAIN_LIMIT - drained)?;
            if n == 0 {
                break;
            }
            drained += n;
        }
        self.read_report();
        for s in &mut self.streams {
            s.close();
        }
        self.feeds.clear();
        kill_everything();
        // The last events (and the summary) go out before the command's end.
        if let Some(e) = self.enforcement.take() {
            e.finish();
        }
        let (cpu, rss) = sys::children_usage();
        let mut usage = usage::measure(cpu.saturating_sub(self.cpu_before), rss);
        usage.oom_kills = usage.oom_kills.saturating_sub(self.oom_before);
        Ok(Finished {
            ended,
            status,
            totals: self.totals,
            usage,
            duration: self.started.elapsed(),
            report: self.report.map(|(_, r)| r).unwrap_or_default(),
        })
    }
}

/// Kills every process but the supervisor and reaps them, again and again while a fork bomb
/// still has children appearing (bounded), so nothing a command started outlives it.
pub(crate) fn kill_everything() {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        // SAFETY: kill with -1 signals every process the supervisor may signal (never itself);
        // outside a PID namespace (unit tests) only the supervisor's own children are targeted.
        unsafe {
            if sys::is_pid1() {
                libc::kill(-1, libc::SIGKILL);
            }
        }
        loop {
            let mut status = 0;
            // SAFETY: waitpid writes the status into a local int.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid > 0 {
                continue;
            }
            if pid < 0 || !sys::is_pid1() {
                return; // ECHILD: nothing is left
            }
            break;
        }
        if Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
