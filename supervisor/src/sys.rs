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
pub fn make_undumpable() -> Result<(), String> {
    // SAFETY: prctl with PR_SET_DUMPABLE takes plain integer arguments.
    check(
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) },
        "prctl(PR_SET_DUMPABLE)",
    )
    .map(|_| ())
}

/// A pipe whose ends are close-on-exec (the child gets them through dup2 only).
pub fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` is a valid two-element array for pipe2 to fill.
    check(
        unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) },
        "pipe2",
    )?;
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by us alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

pub fn set_nonblocking(fd: &OwnedFd) -> Result<(), String> {
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
pub struct SignalFd(OwnedFd);

impl SignalFd {
    pub fn for_sigchld() -> Result<Self, String> {
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

    pub fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Consumes pending notifications (their content is not needed: waitpid says who exited).
    pub fn drain(&self) {
        let mut buf = [0u8; std::mem::size_of::<libc::signalfd_siginfo>() * 8];
        // SAFETY: reading into a local buffer of the stated length.
        while unsafe { libc::read(self.raw(), buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
    }
}

/// What happened to a reaped process.
#[derive(Debug, Clone, Copy)]
pub struct Reaped {
    pub pid: libc::pid_t,
    pub status: libc::c_int,
}

/// Reaps one exited child (any pid, PID 1 adopts orphans), without blocking.
pub fn reap_one() -> Option<Reaped> {
    let mut status = 0;
    // SAFETY: waitpid writes the status into a local int.
    let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
    (pid > 0).then_some(Reaped { pid, status })
}

/// (exit code as a shell reports it, terminating signal)
pub fn decode_status(status: libc::c_int) -> (i32, Option<i32>) {
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        (128 + sig, Some(sig))
    } else {
        (libc::WEXITSTATUS(status), None)
    }
}

pub fn kill_group(pgid: libc::pid_t) {
    // SAFETY: kill with a negative pid signals a process group; failure (already gone) is fine.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

/// CPU time and peak RSS of every child waited for.
pub fn children_usage() -> (u64, u64) {
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
pub fn poll(fds: &mut [libc::pollfd]) -> Result<(), String> {
    loop {
        // SAFETY: `fds` is a valid slice of pollfd for its length.
        let ret = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if ret >= 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(format!("poll: {err}"));
        }
    }
}
