//! The few system calls the supervisor needs beyond std, each wrapped once.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

fn check(ret: libc::c_int, what: &str) -> Result<libc::c_int, String> {
    if ret < 0 {
        Err(format!("{what}: {}", io::Error::last_os_error()))
    } else {
        Ok(ret)
    }
}

/// Non-dumpable: /proc/1/{mem,fd,environ} become root-owned, so the script cannot read them.
/// What every child the supervisor starts does first, between fork and exec: a session (and
/// process group) of its own, so it and what it starts can be told apart and killed as one; the
/// OOM killer's first choice (never the supervisor); no blocked signals (the supervisor blocks
/// SIGCHLD for its signalfd).
///
/// # Safety
/// Only between fork and exec (`pre_exec`): it makes async-signal-safe calls on a static path.
pub(crate) unsafe fn child_prologue() {
    // SAFETY: setsid, open, write, close and sigprocmask are async-signal-safe; the buffers are
    // static or on this stack.
    unsafe {
        libc::setsid();
        let path = c"/proc/self/oom_score_adj";
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd >= 0 {
            libc::write(fd, b"1000".as_ptr().cast(), 4);
            libc::close(fd);
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
}

pub(crate) fn make_undumpable() -> Result<(), String> {
    // SAFETY: prctl with PR_SET_DUMPABLE takes plain integer arguments.
    check(
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) },
        "prctl(PR_SET_DUMPABLE)",
    )
    .map(|_| ())
}

/// A pipe whose ends are close-on-exec (the child gets them through dup2 only).
pub(crate) fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` is a valid two-element array for pipe2 to fill.
    check(
        unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) },
        "pipe2",
    )?;
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by us alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

pub(crate) fn set_nonblocking(fd: &OwnedFd) -> Result<(), String> {
    let raw = fd.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own, with integer flags.
    let flags = check(unsafe { libc::fcntl(raw, libc::F_GETFL) }, "fcntl(F_GETFL)")?;
    // SAFETY: as above.
    check(
        unsafe { libc::fcntl(raw, libc::F_SETFL, flags | libc::O_NONBLOCK) },
        "fcntl(F_SETFL)",
    )
    .map(|_| ())
}

/// SIGCHLD delivered as a readable descriptor, so one poll() waits for output and exits alike.
#[derive(Debug)]
pub(crate) struct SignalFd(OwnedFd);

impl SignalFd {
    pub(crate) fn for_sigchld() -> Result<Self, String> {
        // SAFETY: sigset_t is plain data; sigemptyset/sigaddset initialise it.
        let mut mask: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `mask` is a valid sigset_t.
        unsafe {
            libc::sigemptyset(&mut mask);
            libc::sigaddset(&mut mask, libc::SIGCHLD);
        }
        // Blocked, so the signal queues for the signalfd instead of being delivered.
        // SAFETY: valid mask pointer; the old mask is not needed.
        check(
            unsafe { libc::sigprocmask(libc::SIG_BLOCK, &mask, std::ptr::null_mut()) },
            "sigprocmask",
        )?;
        // SAFETY: valid mask pointer; -1 creates a new descriptor.
        let fd = check(
            unsafe { libc::signalfd(-1, &mask, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC) },
            "signalfd",
        )?;
        // SAFETY: signalfd returned a new descriptor that nothing else owns.
        Ok(SignalFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Consumes pending notifications (their content is not needed: waitpid says who exited).
    pub(crate) fn drain(&self) {
        let mut buf = [0u8; std::mem::size_of::<libc::signalfd_siginfo>() * 8];
        // SAFETY: reading into a local buffer of the stated length.
        while unsafe { libc::read(self.raw(), buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
    }
}

/// What happened to a reaped process.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reaped {
    pub(crate) pid: libc::pid_t,
    pub(crate) status: libc::c_int,
}

/// Reaps one exited child (any pid, PID 1 adopts orphans), without blocking.
pub(crate) fn reap_one() -> Option<Reaped> {
    let mut status = 0;
    // SAFETY: waitpid writes the status into a local int.
    let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
    (pid > 0).then_some(Reaped { pid, status })
}

/// (exit code as a shell reports it, terminating signal)
pub(crate) fn decode_status(status: libc::c_int) -> (i32, Option<i32>) {
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        (128 + sig, Some(sig))
    } else {
        (libc::WEXITSTATUS(status), None)
    }
}

pub(crate) fn kill_group(pgid: libc::pid_t) {
    // SAFETY: kill with a negative pid signals a process group; failure (already gone) is fine.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

/// CPU time and peak RSS of every child waited for.
pub(crate) fn children_usage() -> (u64, u64) {
    // SAFETY: rusage is plain data filled by getrusage.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a local rusage.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let ms = |tv: libc::timeval| (tv.tv_sec as u64) * 1000 + (tv.tv_usec as u64) / 1000;
    (
        ms(ru.ru_utime) + ms(ru.ru_stime),
        (ru.ru_maxrss as u64) * 1024,
    )
}

/// `poll` over a few descriptors; returns the revents in the same order.
pub(crate) fn poll(fds: &mut [libc::pollfd]) -> Result<(), String> {
    poll_until(fds, None)
}

/// [`poll`] that returns by `deadline` at the latest.
pub(crate) fn poll_until(
    fds: &mut [libc::pollfd],
    deadline: Option<std::time::Instant>,
) -> Result<(), String> {
    loop {
        let timeout = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(std::time::Instant::now());
                // Rounded up, so a wake-up never comes before the deadline.
                libc::c_int::try_from(left.as_micros().div_ceil(1000)).unwrap_or(libc::c_int::MAX)
            }
        };
        // SAFETY: `fds` is a valid slice of pollfd for its length.
        let ret = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
        if ret >= 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(format!("poll: {err}"));
        }
    }
}

/// A pollfd waiting for `events` on `fd`.
pub(crate) fn pollfd(fd: RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

/// Whether this process is PID 1 of its PID namespace (a container's init).
pub(crate) fn is_pid1() -> bool {
    // SAFETY: getpid has no failure mode.
    unsafe { libc::getpid() == 1 }
}

/// Kills every process the supervisor could leave behind and reaps them all: as PID 1, every other
/// process of the container (`kill(-1)` spares only the caller); otherwise the process group
/// `group` (outside a PID namespace nothing else can be told apart from the caller's relatives).
pub(crate) fn kill_all_but_self(group: Option<libc::pid_t>) {
    // SAFETY: kill with -1 or a negative group signals processes; failure (none left) is fine.
    unsafe {
        if is_pid1() {
            libc::kill(-1, libc::SIGKILL);
        } else if let Some(g) = group {
            libc::kill(-g, libc::SIGKILL);
        }
    }
    reap_remaining(std::time::Duration::from_secs(5));
}

/// Reaps exited children until none is left (or `limit` passes: a process stuck in the kernel).
pub(crate) fn reap_remaining(limit: std::time::Duration) {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status into a local int.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid > 0 {
            continue;
        }
        if pid < 0 || std::time::Instant::now() >= deadline {
            return; // ECHILD: nothing left
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Waits for `pid` to exit and reaps it (`None`: it is not a child, or was reaped already).
pub(crate) fn wait(pid: libc::pid_t) -> Option<libc::c_int> {
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status into a local int.
        let got = unsafe { libc::waitpid(pid, &mut status, 0) };
        if got == pid {
            return Some(status);
        }
        if got < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return None;
        }
    }
}

/// Whether `pid` is gone or on its way out: exited (a zombie), or a `SIGKILL` sent to it is
/// still pending. A kill is delivered asynchronously, so a process killed a moment ago may not
/// be a zombie yet when its parent looks; its pending set already holds the signal.
pub(crate) fn dying(pid: libc::pid_t) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/status")) {
        Ok(status) => status_says_dying(&status),
        Err(e) => e.kind() == io::ErrorKind::NotFound,
    }
}

/// [`dying`] over the text of `/proc/<pid>/status`; a kernel that leaves a field out says
/// nothing by it.
fn status_says_dying(status: &str) -> bool {
    let kill_bit = 1u64 << (libc::SIGKILL - 1);
    status.lines().any(|line| {
        let Some((name, value)) = line.split_once(':') else {
            return false;
        };
        let value = value.trim();
        match name {
            "State" => value.starts_with('Z') || value.starts_with('X'),
            "SigPnd" | "ShdPnd" => {
                u64::from_str_radix(value, 16).is_ok_and(|mask| mask & kill_bit != 0)
            }
            _ => false,
        }
    })
}

pub(crate) fn kill(pid: libc::pid_t) {
    // SAFETY: kill of one process; failure (already gone) is fine.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_killed_child_is_dying_before_it_is_reaped() {
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .expect("sleep");
        let pid = child.id() as libc::pid_t;
        assert!(!dying(pid));
        kill(pid);
        // Pending or a zombie: never a process that still looks alive.
        assert!(dying(pid));
        child.wait().expect("reaped");
        assert!(dying(pid));
    }

    #[test]
    fn the_status_text_says_dying_by_state_or_a_pending_kill() {
        let alive = "State:\tS (sleeping)\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\n";
        assert!(!status_says_dying(alive));
        assert!(status_says_dying(
            "State:\tS (sleeping)\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000100\n"
        ));
        assert!(status_says_dying("State:\tZ (zombie)\n"));
        // Another signal pending (SIGTERM) is not a kill.
        assert!(!status_says_dying(
            "State:\tR (running)\nShdPnd:\t0000000000004000\n"
        ));
        assert!(!status_says_dying("Name:\tpython3\n"));
    }
}
