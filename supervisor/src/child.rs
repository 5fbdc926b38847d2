//! Starting the interpreter: Python before the job (its start-up is the cost to hide), Bash with
//! the job (it starts in about a millisecond, and `bash -c SCRIPT script.sh` gives the familiar
//! `script.sh: line N:` messages).
//!
//! A job with a run-time policy gets its interpreter under the enforcement (`enforce`): Bash is
//! started with it; Python was started ready for one (`SCRIPTGATE_ENFORCE=ready`, its start-up let
//! through until the job arrives) or is started again under it.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use scriptgate_supervisor::Job;
use scriptgate_supervisor::enforcement::ENFORCE_READY_ENV;

use crate::enforce::{self, ChildSide, Enforcement, Start};
use crate::identity::Split;
use crate::sys;

/// The end of both Python bootstraps (a one-shot run's and a session's standby): runs `src` as
/// `__main__` named `<script>`, with tracebacks that show the script's lines and not the
/// bootstrap's; the bootstrap's `finish(code)` ends the interpreter.
macro_rules! python_run_script {
    () => {
        r#"    name = "<script>"
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    g = sys.modules["__main__"].__dict__
    g.pop("_scriptgate_main", None)
    g["__file__"] = name
    sys.argv[:] = [name]
    try:
        exec(compile(src, name, "exec"), g)
    except SystemExit:
        raise
    except BaseException as e:
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
            tb = tb.tb_next
        e.__traceback__ = tb
        if sys.excepthook is sys.__excepthook__:
            traceback.print_exception(type(e), e, tb)
        else:
            sys.excepthook(type(e), e, tb)
        finish(1)
    finish(0)
_scriptgate_main()
"#
    };
}
pub(crate) use python_run_script;

/// The Python program that waits on fd 3 for the script, then runs it as `__main__` with
/// tracebacks that show `<script>` and its lines (not this bootstrap).
pub(crate) const PYTHON_BOOTSTRAP: &str = concat!(
    r#"def _scriptgate_main():
    import os, sys, linecache, traceback
    # Ready for a run-time policy: the exec floor (a Landlock ruleset, or "none" where Landlock is
    # unavailable) to apply once the script is read.
    floor = os.environ.pop("SCRIPTGATE_LANDLOCK_FD", None)
    if floor not in (None, "none"):
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
    # Profiles with `preimport`: the warm interpreter loads these while it waits for the script.
    preimport = [m for m in os.environ.get("SCRIPTGATE_PREIMPORT", "").split(",") if m]
    for m in preimport:
        try:
            __import__(m)
        except Exception:
            pass
    if preimport or floor is not None:
        # The supervisor reports ready only after this marker: a warm container has its
        # modules loaded (and its start-up done, under a policy's filter) before it is handed a
        # script.
        os.write(1, b"\0scriptgate:preimported\n")

    def finish(code):
        # With pandas or matplotlib loaded, tearing the interpreter down costs most of a second
        # and nothing of a one-use container outlives it: wait for threads, run atexit (plots are
        # saved there), flush, and leave.
        if not preimport:
            sys.exit(code)
        import atexit, threading
        threading._shutdown()
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)
    with os.fdopen(3, "rb") as f:
        src = f.read().decode("utf-8")
    if floor not in (None, "none"):
        # landlock_restrict_self(fd, 0): before any line of the script runs, or not at all.
        if libc.syscall(446, int(floor), 0) != 0:
            os.write(2, b"scriptgate: the run-time policy's exec floor could not be applied\n")
            os._exit(126)
        os.close(int(floor))
"#,
    python_run_script!()
);

/// What the Python bootstrap writes once its `SCRIPTGATE_PREIMPORT` modules are loaded.
const PREIMPORTED: &[u8] = b"\0scriptgate:preimported\n";

/// A started interpreter and the parent ends of its pipes.
#[derive(Debug)]
pub(crate) struct Running {
    pub(crate) pid: libc::pid_t,
    pub(crate) stdin: Option<OwnedFd>,
    pub(crate) stdout: OwnedFd,
    pub(crate) stderr: OwnedFd,
    /// Python only: where the script is written (fd 3 in the child).
    pub(crate) code: Option<OwnedFd>,
}

#[derive(Debug)]
pub(crate) enum Launch {
    /// Already running, waiting for its program on fd 3 (under an enforcement in standby when the
    /// container was started ready for a policy).
    Python(Option<Running>, Option<Enforcement>),
    Bash(Option<Split>),
}

/// Where enforcement events and approval requests go.
pub(crate) type SinkRef = std::sync::Arc<dyn enforce::Sink>;

impl Launch {
    /// `split`: run the interpreter as another uid than the supervisor's (see `identity`).
    pub(crate) fn new(
        language: &str,
        split: Option<Split>,
        sink: &SinkRef,
    ) -> Result<Self, String> {
        match language {
            "python" => {
                // Ready for a policy: the filter is in place from the spawn (same uid only).
                let ready = std::env::var(ENFORCE_READY_ENV).is_ok_and(|v| v == "ready")
                    && split.is_none()
                    && enforce::available();
                // If it cannot be prepared, the interpreter starts without it: a job with a policy
                // then starts another under the filter (or is refused), never runs without one.
                let standby = ready
                    .then(|| enforce::prepare(Start::Standby, sink.clone()))
                    .and_then(|r| {
                        r.map_err(|e| eprintln!("scriptgate-supervisor: no policy standby: {e}"))
                            .ok()
                    });
                let (child, enforcement) = standby.unzip();
                let running = spawn_python(split, child)?;
                Ok(Launch::Python(Some(running), enforcement))
            }
            "bash" => Ok(Launch::Bash(split)),
            other => Err(format!(
                "unknown language `{other}` (expected python or bash)"
            )),
        }
    }

    /// Python with `SCRIPTGATE_PREIMPORT`: waits until the bootstrap has imported the modules
    /// (it writes [`PREIMPORTED`] on stdout; anything the imports printed before it is dropped).
    pub(crate) fn wait_preimport(&self) -> Result<(), String> {
        let Launch::Python(Some(running), standby) = self else {
            return Ok(());
        };
        wait_preimport(running, standby.is_some())
    }

    /// The interpreter for `job`, started now for Bash, and the enforcement of the job's policy
    /// (`None` when the job has none and the interpreter was not started ready for one).
    pub(crate) fn start(
        &mut self,
        job: &Job,
        sink: &SinkRef,
    ) -> Result<(Running, Option<Enforcement>), String> {
        match self {
            Launch::Python(running, standby) => {
                let mut running = running
                    .take()
                    .ok_or_else(|| "interpreter already used".to_string())?;
                let mut enforcement = standby.take();
                if job.enforce.is_some() && enforcement.is_none() {
                    // Started without the filter: a fresh interpreter under it (its start-up
                    // shows in this run).
                    sys::kill_group(running.pid);
                    drop(running);
                    let (child, e) = enforce::prepare(Start::Standby, sink.clone())
                        .map_err(|e| e.to_string())?;
                    running = spawn_python(None, Some(child))?;
                    wait_preimport(&running, true)?;
                    enforcement = Some(e);
                }
                if let Some(e) = &mut enforcement {
                    e.begin(job.enforce.as_ref(), &program_path("python3"))
                        .map_err(|e| e.to_string())?;
                }
                Ok((running, enforcement))
            }
            Launch::Bash(split) => {
                let args = ["--noprofile", "--norc", "-c", &job.script, "script.sh"];
                let Some(wanted) = &job.enforce else {
                    return Ok((spawn("bash", &args, None, *split, None)?, None));
                };
                if split.is_some() {
                    return Err(enforce::EnforceError::Unavailable(
                        "the script runs under another uid than the supervisor",
                    )
                    .to_string());
                }
                let program = program_path("bash");
                let rules = enforce::rules(wanted).map_err(|e| e.to_string())?;
                let start = Start::Now {
                    rules: Box::new(rules),
                    program: program.clone(),
                };
                let (child, enforcement) =
                    enforce::prepare(start, sink.clone()).map_err(|e| e.to_string())?;
                let program = program.to_string_lossy().into_owned();
                let running = spawn(&program, &args, None, None, Some(child))?;
                Ok((running, Some(enforcement)))
            }
        }
    }
}

/// The Python bootstrap, waiting for its script on fd 3.
fn spawn_python(split: Option<Split>, child: Option<ChildSide>) -> Result<Running, String> {
    let (code_read, code_write) = sys::pipe()?;
    let args = ["-I", "-u", "-c", PYTHON_BOOTSTRAP];
    // Under enforcement the interpreter is named by its path: its own exec is the launch.
    let program = match &child {
        Some(_) => program_path("python3").to_string_lossy().into_owned(),
        None => "python3".to_string(),
    };
    let mut running = spawn(&program, &args, Some(&code_read), split, child)?;
    drop(code_read);
    sys::set_nonblocking(&code_write)?;
    running.code = Some(code_write);
    Ok(running)
}

/// `program` found on `PATH` (as exec would), or the name itself.
pub(crate) fn program_path(program: &str) -> std::path::PathBuf {
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
    path.split(':')
        .map(|dir| std::path::Path::new(dir).join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| program.into())
}

/// Python with `SCRIPTGATE_PREIMPORT` (or under a policy's filter, `standby`): waits until the
/// bootstrap has imported the modules and waits for its script.
fn wait_preimport(running: &Running, standby: bool) -> Result<(), String> {
    if !standby && std::env::var_os("SCRIPTGATE_PREIMPORT").is_none_or(|v| v.is_empty()) {
        return Ok(());
    }
    let mut seen: Vec<u8> = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: reading into a stack buffer of the given length from a pipe we own.
        let n = unsafe {
            libc::read(
                running.stdout.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            if e.kind() == std::io::ErrorKind::WouldBlock {
                std::thread::sleep(std::time::Duration::from_millis(5));
                continue;
            }
            return Err(format!("waiting for the preimport: {e}"));
        }
        if n == 0 {
            return Err("the interpreter exited while importing its modules".into());
        }
        seen.extend_from_slice(&buf[..n as usize]);
        if seen.windows(PREIMPORTED.len()).any(|w| w == PREIMPORTED) {
            return Ok(());
        }
        // Keep only what could still be the start of the marker.
        let keep = seen.len().saturating_sub(PREIMPORTED.len());
        seen.drain(..keep);
    }
}

fn spawn(
    program: &str,
    args: &[&str],
    code: Option<&OwnedFd>,
    split: Option<Split>,
    enforcement: Option<ChildSide>,
) -> Result<Running, String> {
    let (stdin_read, stdin_write) = sys::pipe()?;
    let (stdout_read, stdout_write) = sys::pipe()?;
    let (stderr_read, stderr_write) = sys::pipe()?;
    let code_fd: Option<RawFd> = code.map(AsRawFd::as_raw_fd);
    let mut command = Command::new(program);
    command
        .args(args)
        .env_remove(ENFORCE_READY_ENV)
        .stdin(Stdio::from(stdin_read))
        .stdout(Stdio::from(stdout_write))
        .stderr(Stdio::from(stderr_write));
    if let Some((name, value)) = enforcement.as_ref().and_then(ChildSide::env) {
        command.env(name, value);
    }
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe calls
    // (setsid, open/write/close, sigprocmask, dup2, fcntl, prctl, setgroups, setresgid,
    // setresuid, seccomp, landlock_restrict_self, sendmsg) on integers, static strings and
    // buffers prepared before the fork.
    unsafe {
        command.pre_exec(move || {
            // Its own session and process group, the OOM killer's first choice, no blocked signals.
            sys::child_prologue();
            if let Some(fd) = code_fd {
                if fd == 3 {
                    libc::fcntl(3, libc::F_SETFD, 0);
                } else if libc::dup2(fd, 3) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // Late: the steps above may need the privileges this gives up.
            if let Some(split) = split {
                split.become_script()?;
            }
            // Last: every call after this one is decided by the supervisor.
            if let Some(enforcement) = &enforcement {
                enforcement.install()?;
            }
            Ok(())
        });
    }
    let child = command
        .spawn()
        .map_err(|e| format!("starting {program}: {e}"))?;
    // The supervisor reaps with waitpid(-1); std's handle is not needed beyond the pid.
    let pid = libc::pid_t::try_from(child.id()).map_err(|_| "pid out of range".to_string())?;
    drop(child);
    for fd in [&stdin_write, &stdout_read, &stderr_read] {
        sys::set_nonblocking(fd)?;
    }
    Ok(Running {
        pid,
        stdin: Some(stdin_write),
        stdout: stdout_read,
        stderr: stderr_read,
        code: None,
    })
}
