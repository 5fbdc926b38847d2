//! The session's standby interpreter: one Python started and waiting for its command while the
//! session is idle, so that a Python script command does not pay for the interpreter's start-up
//! (and, under the session's run-time policy, has that start-up let through undecided, as a
//! one-shot run has).
//!
//! It is started after the session is ready and after every command's cleanup, in the shell
//! state of that moment (its working directory, its environment, the script's uid, under the
//! session's enforcement in [`Start::Standby`]), and waits on descriptor 3. A Python script
//! command gets it: the enforcement switches to the policy ([`Enforcement::begin`]) before the
//! supervisor writes the command's working directory, environment and script to it; the bootstrap
//! applies the exec floor, changes to that directory, replaces its environment with that one and
//! runs the script as a fresh interpreter's bootstrap would. Any other command, a job or a state
//! change that matters to an interpreter's start-up discards it first: no command's code ever
//! runs beside an idle standby (it could signal it, or write its memory through `/proc`), so
//! every standby is a process no command has touched.
//!
//! An interpreter's start-up runs undecided, so it is started only when that start-up can load
//! nothing a command left behind: no `PYTHON*` variable that names code (`PYTHONPATH`,
//! `PYTHONUSERBASE`, `PYTHONSTARTUP`, …), no user site directory (`$HOME/.local`, where `HOME` is
//! writable), and the working directory's entry of `sys.path` left out while the bootstrap loads
//! its modules. File operations wait until its start-up is done, so no upload can slip into it.
//! When it is not usable (not started, exited, killed, the environment changed), the command
//! starts a fresh interpreter as before, under the policy from its exec: never without it.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use scriptgate_supervisor::enforcement::Enforce;
use scriptgate_supervisor::sessions::ShellState;

use super::spawn::{self, Plan};
use crate::enforce::{self, Enforcement, Sink, Start};
use crate::identity::Split;
use crate::pipes::Feed;
use crate::{child, sys};

/// Where the bootstrap reads its command (as the one-shot bootstrap reads its script).
const CODE_FD: RawFd = 3;
/// Where the bootstrap says its start-up is done (one byte, then closed). High, so that moving
/// it into place never overwrites the script pipe's end before that is moved to 3.
const READY_FD: RawFd = 252;
/// How long a command waits for a standby still starting before it starts its own interpreter.
const READY_WAIT: Duration = Duration::from_secs(3);

/// `PYTHON*` variables that change how the interpreter runs but load no code.
const PYTHON_VARS_WITHOUT_CODE: &[&str] = &[
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONUNBUFFERED",
    "PYTHONIOENCODING",
    "PYTHONUTF8",
    "PYTHONHASHSEED",
    "PYTHONFAULTHANDLER",
    "PYTHONNOUSERSITE",
    "PYTHONSAFEPATH",
    "PYTHONOPTIMIZE",
    "PYTHONCOERCECLOCALE",
    "PYTHONDEVMODE",
    "PYTHONINTMAXSTRDIGITS",
    "PYTHONMALLOC",
    "PYTHONNODEBUGRANGES",
];

/// Variables read while an interpreter starts (besides every `PYTHON*`, `LC_*`, `MALLOC_*`): a
/// standby started with other values than a command's is not that command's interpreter.
const START_UP_VARS: &[&str] = &[
    "PATH",
    "HOME",
    "TZ",
    "LANG",
    "LANGUAGE",
    "LOCPATH",
    "NLSPATH",
    "GCONV_PATH",
    "GLIBC_TUNABLES",
];

/// The bootstrap of a standby: the one-shot bootstrap's way of running a script (`<script>` in
/// tracebacks, `sys.argv == ["<script>"]`, exit codes), after applying the command's working
/// directory and environment. Its message on fd 3: the number of variables, the working
/// directory, the names and values, then the script, each field but the script ended by NUL.
const BOOTSTRAP: &str = concat!(
    r#"def _scriptgate_main():
    import os, sys
    floor = os.environ.pop("SCRIPTGATE_LANDLOCK_FD", None)
    # Loaded while waiting, from the standard library only: the working directory's entry of
    # sys.path is left out meanwhile, so nothing a command left there runs before the command.
    first = sys.path.pop(0) if sys.path[:1] == [""] else None
    import linecache, traceback
    if floor not in (None, "none"):
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
    if first is not None:
        sys.path.insert(0, first)
    os.write(252, b"r")
    os.close(252)
    data = bytearray()
    while True:
        chunk = os.read(3, 1 << 20)
        if not chunk:
            break
        data += chunk
    os.close(3)
    if floor not in (None, "none"):
        # landlock_restrict_self(fd, 0): before anything of the command, or not at all.
        if libc.syscall(446, int(floor), 0) != 0:
            os.write(2, b"scriptgate: the run-time policy's exec floor could not be applied\n")
            os._exit(126)
        os.close(int(floor))
    head, _, rest = bytes(data).partition(b"\0")
    n = int(head)
    fields = rest.split(b"\0", 1 + 2 * n)
    cwd = os.fsdecode(fields[0])
    env = {os.fsdecode(fields[1 + 2 * i]): os.fsdecode(fields[2 + 2 * i]) for i in range(n)}
    src = fields[1 + 2 * n].decode("utf-8")
    del data, rest, fields
    # As a fresh interpreter's start: a working directory that is gone leaves it in the workspace.
    try:
        os.chdir(cwd)
    except OSError:
        try:
            os.chdir("/workspace")
        except OSError:
            pass
    os.environ.clear()
    os.environ.update(env)
    finish = sys.exit
"#,
    crate::child::python_run_script!()
);

/// A Python interpreter started and waiting for its command.
pub(crate) struct Standby {
    pid: libc::pid_t,
    /// `None` once handed to a command or reaped.
    parts: Option<Parts>,
    ready: Option<OwnedFd>,
    /// The start-up variables it was started with.
    key: Vec<(String, String)>,
    enforcement: Option<Enforcement>,
}

struct Parts {
    stdin: OwnedFd,
    stdout: OwnedFd,
    stderr: OwnedFd,
    code: OwnedFd,
}

/// What a command gets of a standby: the running interpreter, its pipes, the feed of its command
/// and the enforcement (switched to the policy).
pub(crate) struct Handed {
    pub(crate) pid: libc::pid_t,
    pub(crate) stdin: OwnedFd,
    pub(crate) stdout: OwnedFd,
    pub(crate) stderr: OwnedFd,
    pub(crate) code: Feed,
    pub(crate) enforcement: Option<Enforcement>,
}

impl Standby {
    /// Starts a standby in `state` (`None`: the state does not allow one, see the module doc).
    pub(crate) fn start(
        state: &ShellState,
        split: Option<Split>,
        enforce: Option<&Enforce>,
        sink: &std::sync::Arc<dyn Sink>,
    ) -> Result<Option<Standby>, String> {
        if !usable_in(state) {
            return Ok(None);
        }
        let (child_side, enforcement) = match enforce {
            Some(_) => {
                let (c, e) =
                    enforce::prepare(Start::Standby, sink.clone()).map_err(|e| e.to_string())?;
                (Some(c), Some(e))
            }
            None => (None, None),
        };
        let (code_read, code_write) = sys::pipe()?;
        let (ready_read, ready_write) = sys::pipe()?;
        sys::set_nonblocking(&code_write)?;
        sys::set_nonblocking(&ready_read)?;
        let mut env: Vec<(String, String)> = state
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if let Some((name, value)) = child_side.as_ref().and_then(|c| c.env()) {
            env.push((name.into(), value));
        }
        // Under enforcement the interpreter is named by its path, as a fresh one is.
        let program = match &child_side {
            Some(_) => child::program_path("python3")
                .to_string_lossy()
                .into_owned(),
            None => "python3".into(),
        };
        let plan = Plan {
            program: program.clone(),
            arg0: None,
            args: vec!["-u".into(), "-c".into(), BOOTSTRAP.into()],
            env,
            // The high descriptor first: see `READY_FD`.
            fds: vec![(READY_FD, ready_write), (CODE_FD, code_read)],
            feeds: Vec::new(),
            report: None,
        };
        let (pid, stdin, stdout, stderr) =
            spawn::spawn(program, &plan, &state.cwd, split, child_side)?;
        drop(plan);
        Ok(Some(Standby {
            pid,
            parts: Some(Parts {
                stdin,
                stdout,
                stderr,
                code: code_write,
            }),
            ready: Some(ready_read),
            key: start_up_key(state),
            enforcement,
        }))
    }

    pub(crate) fn pid(&self) -> Option<libc::pid_t> {
        self.parts.as_ref().map(|_| self.pid)
    }

    /// It exited on its own (and was reaped): it is not usable, and there is nothing to kill.
    pub(crate) fn exited(&mut self) {
        self.parts = None;
    }

    /// Whether it can be the interpreter of a command in `state`.
    pub(crate) fn fits(&self, state: &ShellState) -> bool {
        self.parts.is_some() && self.key == start_up_key(state) && usable_in(state)
    }

    /// Waits until its start-up is done (`false`: it exited or did not get there in time).
    pub(crate) fn wait_ready(&mut self) -> bool {
        let Some(fd) = &self.ready else {
            return self.parts.is_some();
        };
        let deadline = Instant::now() + READY_WAIT;
        loop {
            let mut byte = 0u8;
            // SAFETY: a one-byte read into a local from a pipe we own.
            let n = unsafe { libc::read(fd.as_raw_fd(), (&mut byte as *mut u8).cast(), 1) };
            if n == 1 {
                self.ready = None;
                return true;
            }
            let again = n < 0
                && matches!(
                    std::io::Error::last_os_error().kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                );
            if !again || Instant::now() >= deadline {
                return false; // EOF: it exited before its start-up was done
            }
            let mut fds = [sys::pollfd(fd.as_raw_fd(), libc::POLLIN)];
            if sys::poll_until(&mut fds, Some(deadline)).is_err() {
                return false;
            }
        }
    }

    /// Hands it to the command that runs `source` in `state`: once started up, its enforcement
    /// switched to `enforce`, and the command's message ready to be written. `Err`: not usable
    /// (it is killed; the command starts a fresh interpreter).
    pub(crate) fn hand_over(
        mut self,
        source: &str,
        state: &ShellState,
        enforce: Option<&Enforce>,
    ) -> Result<Handed, String> {
        if !self.fits(state) {
            return Err("the standby interpreter does not fit the command's state".into());
        }
        // Never a command without its policy: a standby without an enforcement serves only a
        // session without one.
        if enforce.is_some() != self.enforcement.is_some() {
            return Err("the standby interpreter is not under the session's policy".into());
        }
        let message = message(state, source)?;
        if !self.wait_ready() {
            return Err("the standby interpreter did not start".into());
        }
        // Killed while it waited (the out-of-memory killer): a command on it would end at once
        // with its status, its script never run.
        let mut status = 0;
        // SAFETY: waitpid on our own child, writing into a local int.
        if unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) } != 0 {
            self.exited();
            return Err("the standby interpreter exited".into());
        }
        // Killed a moment ago and not dead yet (a kill is delivered asynchronously): the same.
        // Dropped, it is reaped.
        if sys::dying(self.pid) {
            return Err("the standby interpreter is being killed".into());
        }
        let mut enforcement = self.enforcement.take();
        if let Some(e) = &mut enforcement {
            // Before the command reaches the interpreter: its every call is decided.
            if let Err(err) = e.begin(enforce, &child::program_path("python3")) {
                self.enforcement = enforcement;
                return Err(err.to_string());
            }
        }
        let parts = self
            .parts
            .take()
            .ok_or_else(|| "the standby interpreter is gone".to_string())?;
        Ok(Handed {
            pid: self.pid,
            stdin: parts.stdin,
            stdout: parts.stdout,
            stderr: parts.stderr,
            code: Feed::new(Some(parts.code), &message),
            enforcement,
        })
    }
}

impl Drop for Standby {
    /// An unused standby is killed and reaped, and its enforcement (still in standby: no events)
    /// finished, so it leaves neither a process nor a monitor thread.
    fn drop(&mut self) {
        if self.parts.take().is_some() {
            sys::kill_group(self.pid);
            sys::wait(self.pid);
        }
        if let Some(e) = self.enforcement.take() {
            e.finish();
        }
    }
}

/// Whether an interpreter started in `state` loads nothing a command could have left: no
/// `PYTHON*` variable naming code, no user site directory.
fn usable_in(state: &ShellState) -> bool {
    let env = &state.env;
    let code_vars = env
        .keys()
        .any(|k| k.starts_with("PYTHON") && !PYTHON_VARS_WITHOUT_CODE.contains(&k.as_str()));
    if code_vars {
        return false;
    }
    if env.get("PYTHONNOUSERSITE").is_some_and(|v| !v.is_empty()) {
        return true;
    }
    // `site` adds `$HOME/.local/lib/pythonX.Y/site-packages` (and runs its `.pth` files) when
    // it exists; HOME is writable in the image.
    match env.get("HOME") {
        Some(home) if home.starts_with('/') => {
            let local = std::path::Path::new(home).join(".local");
            matches!(std::fs::symlink_metadata(local), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
        }
        _ => false,
    }
}

/// The variables of `state` an interpreter's start-up reads.
fn start_up_key(state: &ShellState) -> Vec<(String, String)> {
    state
        .env
        .iter()
        .filter(|(k, _)| {
            START_UP_VARS.contains(&k.as_str())
                || ["PYTHON", "LC_", "MALLOC_", "LD_"]
                    .iter()
                    .any(|p| k.starts_with(p))
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The bootstrap's message: see [`BOOTSTRAP`].
fn message(state: &ShellState, source: &str) -> Result<Vec<u8>, String> {
    let nul = |s: &str| s.contains('\0');
    if nul(&state.cwd) || state.env.iter().any(|(k, v)| nul(k) || nul(v)) {
        return Err("a NUL byte in the shell state".into());
    }
    let mut m = format!("{}\0{}\0", state.env.len(), state.cwd).into_bytes();
    for (k, v) in &state.env {
        m.extend_from_slice(k.as_bytes());
        m.push(0);
        m.extend_from_slice(v.as_bytes());
        m.push(0);
    }
    m.extend_from_slice(source.as_bytes());
    Ok(m)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn state(env: &[(&str, &str)]) -> ShellState {
        ShellState {
            cwd: "/workspace".into(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            aliases: BTreeMap::new(),
        }
    }

    #[test]
    fn variables_that_name_code_rule_a_standby_out() {
        let home = tempfile::tempdir().expect("tempdir");
        let home = home.path().to_str().expect("utf-8");
        assert!(usable_in(&state(&[
            ("HOME", home),
            ("PYTHONDONTWRITEBYTECODE", "1")
        ])));
        assert!(!usable_in(&state(&[
            ("HOME", home),
            ("PYTHONPATH", "/tmp")
        ])));
        assert!(!usable_in(&state(&[
            ("HOME", home),
            ("PYTHONUSERBASE", "/tmp")
        ])));
        assert!(!usable_in(&state(&[("HOME", "relative")])));
        assert!(!usable_in(&state(&[])));
        assert!(usable_in(&state(&[("PYTHONNOUSERSITE", "1")])));
    }

    #[test]
    fn a_user_site_directory_rules_a_standby_out() {
        let home = tempfile::tempdir().expect("tempdir");
        let s = state(&[("HOME", home.path().to_str().expect("utf-8"))]);
        assert!(usable_in(&s));
        std::fs::create_dir(home.path().join(".local")).expect("mkdir");
        assert!(!usable_in(&s));
    }

    #[test]
    fn the_start_up_key_ignores_what_a_start_up_does_not_read() {
        let a = state(&[("PATH", "/bin"), ("X", "1"), ("LC_ALL", "C")]);
        let b = state(&[("PATH", "/bin"), ("X", "2"), ("LC_ALL", "C")]);
        let c = state(&[("PATH", "/bin"), ("X", "1"), ("LC_ALL", "C.UTF-8")]);
        assert_eq!(start_up_key(&a), start_up_key(&b));
        assert_ne!(start_up_key(&a), start_up_key(&c));
    }

    #[test]
    fn the_message_carries_the_state_then_the_script() {
        let s = state(&[("A", "1"), ("B", "x y")]);
        let m = message(&s, "print(1)\n").expect("message");
        assert_eq!(m, b"2\0/workspace\0A\x001\0B\0x y\0print(1)\n".to_vec());
        assert!(message(&state(&[("A", "a\0b")]), "").is_err());
    }
}
