//! Starting a session's process: a program with its arguments, environment and extra
//! descriptors, in a session of its own, as the script's uid, in the shell state's working
//! directory, with a run-time policy's enforcement installed last between fork and exec.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt as _;
use std::process::Stdio;

use crate::enforce::ChildSide;
use crate::identity::Split;
use crate::pipes::Feed;
use crate::sys;

/// What the child gets: its program, arguments and extra descriptors.
pub(crate) struct Plan {
    pub(crate) program: String,
    pub(crate) arg0: Option<String>,
    pub(crate) args: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
    /// (descriptor in the child, the pipe end it gets), moved into place in this order.
    pub(crate) fds: Vec<(RawFd, OwnedFd)>,
    pub(crate) feeds: Vec<Feed>,
    pub(crate) report: Option<OwnedFd>,
}

pub(crate) type Spawned = (libc::pid_t, OwnedFd, OwnedFd, OwnedFd);

pub(crate) fn spawn(
    program: String,
    plan: &Plan,
    cwd: &str,
    split: Option<Split>,
    enforcement: Option<ChildSide>,
) -> Result<Spawned, String> {
    let (stdin_read, stdin_write) = sys::pipe()?;
    let (stdout_read, stdout_write) = sys::pipe()?;
    let (stderr_read, stderr_write) = sys::pipe()?;
    let cwd = CString::new(cwd).map_err(|_| "the working directory has a NUL byte".to_string())?;
    let fallback = c"/workspace";
    let fds: Vec<(RawFd, RawFd)> = plan
        .fds
        .iter()
        .map(|(target, fd)| (*target, fd.as_raw_fd()))
        .collect();
    let mut command = std::process::Command::new(&program);
    if let Some(arg0) = &plan.arg0 {
        command.arg0(arg0);
    }
    command
        .args(&plan.args)
        .env_clear()
        .envs(plan.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::from(stdin_read))
        .stdout(Stdio::from(stdout_write))
        .stderr(Stdio::from(stderr_write));
    // SAFETY: the closure runs between fork and exec and only makes system calls on integers and
    // on strings prepared before the fork.
    unsafe {
        command.pre_exec(move || {
            // Its own session and process group, the OOM killer's first choice, no blocked signals.
            sys::child_prologue();
            for &(target, fd) in &fds {
                if fd == target {
                    libc::fcntl(fd, libc::F_SETFD, 0);
                } else if libc::dup2(fd, target) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if let Some(split) = split {
                split.become_script()?;
            }
            // As the script's uid; a working directory that is gone leaves it in the workspace.
            if libc::chdir(cwd.as_ptr()) != 0 {
                libc::chdir(fallback.as_ptr());
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
        .map_err(|e| format!("cannot start `{program}`: {e}"))?;
    let pid = libc::pid_t::try_from(child.id()).map_err(|_| "pid out of range".to_string())?;
    drop(child);
    for fd in [&stdin_write, &stdout_read, &stderr_read] {
        sys::set_nonblocking(fd)?;
    }
    Ok((pid, stdin_write, stdout_read, stderr_read))
}
