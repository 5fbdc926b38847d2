//! `run_command`: one program from the image's PATH directories, never through a shell, started in
//! a session of its own as the script's uid in its working directory (entered beneath its root,
//! no symlink on the way), with its output captured up to the job's cap. When it exits or its
//! time is up, every other process in the container is killed and reaped before the next step,
//! and whatever a leftover still holds of its pipes is not waited for.
//!
//! Under the job's run-time policy the step starts as a session's argv command does: `bash -c
//! 'exec -a "$0" "$@"'` is the launch's own exec (the one call let through undecided), so the
//! step's program is decided like every other, its `argv[0]` unchanged; the enforcement is
//! installed last between fork and exec, and finished (its last events sent) after every process
//! of the step is gone.

use std::ffi::CString;
use std::os::unix::process::CommandExt as _;
use std::process::Stdio;
use std::time::{Duration, Instant};

use scriptgate_supervisor::job::paths::{JobPath, Root};
use scriptgate_supervisor::job::{
    CommandCheck, CommandOutput, ErrorType, JobError, RunCommand, StepOutput,
};

use super::{Outcome, Runtime, fsafe, millis};
use crate::enforce::{self, ChildSide, Decisions, Enforcement, Start};
use crate::pipes::{Feed, Stream};
use crate::{sys, usage};

/// Output is read in chunks of at most this size.
const CHUNK: usize = 64 * 1024;
/// After the program exits, at most this much still-buffered output is read.
const DRAIN_LIMIT: usize = 4 << 20;

/// What the checks resolved for the step, and its deadlines.
pub(crate) struct Plan<'a> {
    pub(crate) command: &'a CommandCheck,
    pub(crate) working_dir: &'a JobPath,
    pub(crate) max_output: u64,
    /// The step's own deadline (its `timeout_seconds`, within the job's).
    pub(crate) deadline: Instant,
    pub(crate) job_deadline: Instant,
    pub(crate) runtime: Duration,
}

enum End {
    Exited(libc::c_int),
    TimedOut,
}

/// Runs the step; `Err` only when the host's stream failed.
pub(crate) fn run(rt: &mut Runtime, step: &RunCommand, plan: &Plan<'_>) -> Result<Outcome, String> {
    let program = match resolve(&rt.image_path, plan.command) {
        Ok(p) => p,
        Err(e) => return Ok((None, Some(e))),
    };
    let (launch, enforcement) = match launch(rt, program, step) {
        Ok(prepared) => prepared,
        Err(e) => return Ok((None, Some(e))),
    };
    let decisions = enforcement.as_ref().map(Enforcement::decisions);
    let started = Instant::now();
    let oom_before = usage::measure(0, 0).oom_kills;
    let (child, stdin, stdout, stderr) = match spawn(rt, launch, step, plan.working_dir) {
        Ok(spawned) => spawned,
        Err(e) => return Ok((None, Some(e))),
    };
    let mut streams = [Stream::new(stdout), Stream::new(stderr)];
    let mut captured: [Vec<u8>; 2] = [Vec::new(), Vec::new()];
    let mut feed = Feed::new(Some(stdin), step.stdin.as_deref().unwrap_or("").as_bytes());
    feed.push();
    let end = relay(
        rt,
        child,
        plan,
        (&mut streams, &mut captured, &mut feed),
        decisions.as_ref(),
    )?;
    // Whatever is still buffered, then nothing more: leftovers are killed, their pipes dropped.
    let mut buf = vec![0u8; CHUNK];
    let mut drained = 0;
    for (s, out) in streams.iter_mut().zip(captured.iter_mut()) {
        let left = DRAIN_LIMIT.saturating_sub(drained);
        drained += s.drain(plan.max_output, left, &mut buf, &mut |b| {
            out.extend_from_slice(b);
            Ok(())
        })?;
        s.close();
    }
    sys::kill_all_but_self(Some(child));
    // The last events (and the summary) go out before the step's end.
    if let Some(e) = enforcement {
        e.finish();
    }
    let oom = usage::measure(0, 0).oom_kills > oom_before;
    let (exit_code, signal) = match end {
        End::Exited(status) => {
            let (code, signal) = sys::decode_status(status);
            (signal.is_none().then_some(code), signal)
        }
        End::TimedOut => (None, None),
    };
    let output = CommandOutput {
        exit_code,
        signal,
        stdout: String::from_utf8_lossy(&captured[0]).into_owned(),
        stderr: String::from_utf8_lossy(&captured[1]).into_owned(),
        stdout_truncated: streams[0].truncated(),
        stderr_truncated: streams[1].truncated(),
        duration_ms: millis(started.elapsed()),
    };
    let error = failure(&end, exit_code, signal, oom, plan, step);
    Ok((Some(StepOutput::RunCommand(output)), error))
}

/// The program for `command` in the image's PATH directories (never a writable place).
fn resolve(image_path: &str, command: &CommandCheck) -> Result<String, JobError> {
    let writable = |d: &str| {
        !d.starts_with('/')
            || Root::ALL
                .iter()
                .any(|r| d == r.path() || d.starts_with(&format!("{}/", r.path())))
            || d.starts_with("/dev")
    };
    let (dirs, name): (Vec<&str>, &str) = match command {
        CommandCheck::Name(name) => (image_path.split(':').collect(), name),
        CommandCheck::Path { dir, name } => (vec![dir.as_str()], name),
    };
    for dir in dirs.into_iter().filter(|d| !writable(d)) {
        let candidate = format!("{dir}/{name}");
        let executable = std::fs::metadata(&candidate).is_ok_and(|m| {
            use std::os::unix::fs::PermissionsExt as _;
            m.is_file() && m.permissions().mode() & 0o111 != 0
        });
        if executable {
            return Ok(candidate);
        }
    }
    Err(JobError::failure(format!(
        "`{name}` is not a program in the image's PATH directories ({image_path})"
    )))
}

/// What the step's child executes, and the enforcement it installs last.
struct Launch {
    program: String,
    arg0: String,
    args: Vec<String>,
    enforcement: Option<ChildSide>,
}

/// The step's launch: its program directly, or under the job's policy through the `bash`
/// trampoline with the enforcement prepared (`Err`: the policy cannot be enforced here).
fn launch(
    rt: &Runtime,
    program: String,
    step: &RunCommand,
) -> Result<(Launch, Option<Enforcement>), JobError> {
    let name = step.command.rsplit('/').next().unwrap_or(&step.command);
    let Some((enforce, sink)) = &rt.enforce else {
        let direct = Launch {
            program,
            arg0: name.to_string(),
            args: step.args.clone(),
            enforcement: None,
        };
        return Ok((direct, None));
    };
    let refused = |e: enforce::EnforceError| {
        JobError::internal(format!("the job's run-time policy cannot be enforced: {e}"))
    };
    let bash = crate::child::program_path("bash");
    let rules = enforce::rules(enforce).map_err(refused)?;
    let start = Start::Now {
        rules: Box::new(rules),
        program: bash.clone(),
    };
    let (child, enforcement) = enforce::prepare(start, sink.clone()).map_err(refused)?;
    let mut args: Vec<String> = ["--noprofile", "--norc", "-c", r#"exec -a "$0" "$@""#, name]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(program);
    args.extend(step.args.iter().cloned());
    let launch = Launch {
        program: bash.to_string_lossy().into_owned(),
        arg0: "bash".into(),
        args,
        enforcement: Some(child),
    };
    Ok((launch, Some(enforcement)))
}

type Spawned = (
    libc::pid_t,
    std::os::fd::OwnedFd,
    std::os::fd::OwnedFd,
    std::os::fd::OwnedFd,
);

fn spawn(
    rt: &Runtime,
    launch: Launch,
    step: &RunCommand,
    dir: &JobPath,
) -> Result<Spawned, JobError> {
    let internal = |e: String| JobError::internal(e);
    let (stdin_read, stdin_write) = sys::pipe().map_err(internal)?;
    let (stdout_read, stdout_write) = sys::pipe().map_err(internal)?;
    let (stderr_read, stderr_write) = sys::pipe().map_err(internal)?;
    let root = fsafe::cstring(dir.root().path()).map_err(|e| internal(e.to_string()))?;
    let joined = fsafe::cstring(&dir.relative()).map_err(|e| internal(e.to_string()))?;
    let rel: Vec<CString> = dir
        .components()
        .iter()
        .map(|c| fsafe::cstring(c))
        .collect::<Result<_, _>>()
        .map_err(|e| internal(e.to_string()))?;
    let walk_only = fsafe::walk_only();
    let split = rt.split;
    let enforcement = launch.enforcement;
    let mut command = std::process::Command::new(&launch.program);
    command
        .arg0(&launch.arg0)
        .args(&launch.args)
        .env_clear()
        .envs(rt.env.iter().map(|(k, v)| (k, v)))
        .envs(&step.env)
        .stdin(Stdio::from(stdin_read))
        .stdout(Stdio::from(stdout_write))
        .stderr(Stdio::from(stderr_write));
    // SAFETY: the closure runs between fork and exec and only makes system calls on integers and
    // on strings prepared before the fork.
    unsafe {
        command.pre_exec(move || {
            // Its own session and process group, the OOM killer's first choice, no blocked signals.
            sys::child_prologue();
            if let Some(split) = split {
                split.become_script()?;
            }
            // As the script's uid: the workspace is its own.
            fsafe::chdir_beneath(&root, &joined, &rel, walk_only)?;
            // Last: every call after this one is decided by the supervisor.
            if let Some(enforcement) = &enforcement {
                enforcement.install()?;
            }
            Ok(())
        });
    }
    let child = command.spawn().map_err(|e| {
        let e = super::files::fs_error(dir, &e);
        JobError::new(e.kind, format!("working_dir: {}", e.message))
    })?;
    let pid = libc::pid_t::try_from(child.id()).map_err(|_| internal("pid out of range".into()))?;
    drop(child);
    for fd in [&stdin_write, &stdout_read, &stderr_read] {
        sys::set_nonblocking(fd).map_err(internal)?;
    }
    Ok((pid, stdin_write, stdout_read, stderr_read))
}

/// The step's pipes: its output streams, what was captured of them, its stdin.
type Pipes<'a> = (&'a mut [Stream; 2], &'a mut [Vec<u8>; 2], &'a mut Feed);

fn relay(
    rt: &mut Runtime,
    child: libc::pid_t,
    plan: &Plan<'_>,
    (streams, captured, feed): Pipes<'_>,
    decisions: Option<&Decisions>,
) -> Result<End, String> {
    let mut buf = vec![0u8; CHUNK];
    loop {
        if let Some(status) = reap_until(child) {
            return Ok(End::Exited(status));
        }
        if Instant::now() >= plan.deadline {
            sys::kill_all_but_self(Some(child));
            return Ok(End::TimedOut);
        }
        let mut fds = vec![sys::pollfd(rt.sigchld.raw(), libc::POLLIN)];
        fds.extend(
            streams
                .iter()
                .filter_map(Stream::raw)
                .map(|fd| sys::pollfd(fd, libc::POLLIN)),
        );
        fds.extend(feed.raw().map(|fd| sys::pollfd(fd, libc::POLLOUT)));
        fds.extend(rt.input_fd().map(|fd| sys::pollfd(fd, libc::POLLIN)));
        sys::poll_until(&mut fds, Some(plan.deadline))?;
        rt.sigchld.drain();
        rt.read_input(decisions)?;
        for (s, out) in streams.iter_mut().zip(captured.iter_mut()) {
            s.pump(plan.max_output, &mut buf, &mut |b| {
                out.extend_from_slice(b);
                Ok(())
            })?;
        }
        feed.push();
    }
}

/// Reaps every exited process; the status of `pid` once it exited.
fn reap_until(pid: libc::pid_t) -> Option<libc::c_int> {
    let mut found = None;
    while let Some(r) = sys::reap_one() {
        if r.pid == pid {
            found = Some(r.status);
        }
    }
    found
}

fn failure(
    end: &End,
    exit_code: Option<i32>,
    signal: Option<i32>,
    oom: bool,
    plan: &Plan<'_>,
    step: &RunCommand,
) -> Option<JobError> {
    let name = &step.command;
    if matches!(end, End::TimedOut) {
        let message = if plan.deadline >= plan.job_deadline {
            format!(
                "the job did not finish within max_runtime_seconds ({}s)",
                plan.runtime.as_secs()
            )
        } else {
            format!(
                "`{name}` did not finish within timeout_seconds ({}s)",
                step.timeout_seconds.unwrap_or(0)
            )
        };
        return Some(JobError::new(ErrorType::Timeout, message));
    }
    match (exit_code, signal) {
        (Some(0), _) => None,
        (_, Some(libc::SIGKILL)) if oom => Some(JobError::limit(format!(
            "`{name}` was killed by the out-of-memory killer (the container's memory limit)"
        ))),
        (_, Some(libc::SIGXFSZ)) => Some(JobError::limit(format!(
            "`{name}` exceeded the file size limit"
        ))),
        (_, Some(sig)) => Some(JobError::failure(format!(
            "`{name}` was killed by signal {sig}"
        ))),
        (Some(code), None) => Some(JobError::failure(format!(
            "`{name}` exited with status {code}"
        ))),
        (None, None) => Some(JobError::internal(format!(
            "`{name}` ended without a status"
        ))),
    }
}
