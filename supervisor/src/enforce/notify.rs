//! The seccomp listener: receiving notifications and answering them (continue, a value, an error,
//! or a descriptor the supervisor opened, installed in the process with `ADDFD|SEND`), and passing
//! the listener from the child to the supervisor over a socket.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// An errno value (positive), as a system call on the process's behalf failed or should fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Errno(pub(crate) i32);

impl Errno {
    pub(crate) fn last() -> Errno {
        Errno(
            io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        )
    }
}

impl From<io::Error> for Errno {
    fn from(e: io::Error) -> Errno {
        Errno(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

pub(crate) type SysResult<T> = Result<T, Errno>;

/// A trapped system call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Notification {
    pub(crate) id: u64,
    /// The calling thread's id (in the supervisor's pid namespace, which is the script's).
    pub(crate) tid: i32,
    pub(crate) nr: i64,
    pub(crate) args: [u64; 6],
}

/// How a trapped call ends.
pub(crate) enum Reply {
    /// The kernel runs the call as the process made it (only where a re-read argument cannot
    /// change the outcome, or where the floor bounds it: see the module docs of `enforce`).
    Continue,
    /// The call returns this value (the supervisor performed it).
    Value(i64),
    /// The call fails with this errno.
    Error(i32),
    /// The call returns a new descriptor in the process for this (supervisor-opened) file.
    AddFd { fd: OwnedFd, cloexec: bool },
    /// The work may block (a FIFO waiting for its peer): a helper thread performs it.
    Blocking(Box<dyn FnOnce() -> Reply + Send>),
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Continue => f.write_str("Continue"),
            Reply::Value(v) => write!(f, "Value({v})"),
            Reply::Error(e) => write!(f, "Error({e})"),
            Reply::AddFd { fd, cloexec } => write!(f, "AddFd({}, {cloexec})", fd.as_raw_fd()),
            Reply::Blocking(_) => f.write_str("Blocking"),
        }
    }
}

impl From<Errno> for Reply {
    fn from(e: Errno) -> Reply {
        Reply::Error(e.0)
    }
}

/// The listener descriptor of a notifying filter.
#[derive(Debug)]
pub(crate) struct Listener(OwnedFd);

impl Listener {
    pub(crate) fn new(fd: OwnedFd) -> Listener {
        Listener(fd)
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// The next notification; `Err(ENOENT)` when its caller died before it could be read.
    pub(crate) fn recv(&self) -> SysResult<Notification> {
        // SAFETY: seccomp_notif is plain data; the kernel requires it zeroed.
        let mut n: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        loop {
            // SAFETY: RECV fills the struct of the size the ioctl number encodes.
            let r = unsafe { libc::ioctl(self.raw(), libc::SECCOMP_IOCTL_NOTIF_RECV, &mut n) };
            if r == 0 {
                break;
            }
            let e = Errno::last();
            if e.0 != libc::EINTR {
                return Err(e);
            }
        }
        Ok(Notification {
            id: n.id,
            tid: n.pid as i32,
            nr: i64::from(n.data.nr),
            args: n.data.args,
        })
    }

    /// Whether notification `id` is still waiting (its caller alive and not interrupted), so the
    /// tid still names the caller.
    pub(crate) fn id_valid(&self, id: u64) -> bool {
        let mut id = id;
        // SAFETY: ID_VALID reads one u64.
        unsafe { libc::ioctl(self.raw(), libc::SECCOMP_IOCTL_NOTIF_ID_VALID, &mut id) == 0 }
    }

    /// Answers notification `id`. `Blocking` must have been resolved by the caller. A caller that
    /// is gone (`ENOENT`) is not an error: there is nobody left to answer.
    pub(crate) fn respond(&self, id: u64, reply: Reply) {
        let (val, error, flags) = match reply {
            Reply::Continue => (0, 0, libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32),
            Reply::Value(v) => (v, 0, 0),
            Reply::Error(e) => (0, -e, 0),
            Reply::AddFd { fd, cloexec } => {
                let addfd = libc::seccomp_notif_addfd {
                    id,
                    flags: libc::SECCOMP_ADDFD_FLAG_SEND as u32,
                    srcfd: fd.as_raw_fd() as u32,
                    newfd: 0,
                    newfd_flags: if cloexec { libc::O_CLOEXEC as u32 } else { 0 },
                };
                // SAFETY: ADDFD reads the struct; with SEND the kernel also completes the call
                // with the new descriptor number, so no separate response follows.
                let r = unsafe { libc::ioctl(self.raw(), libc::SECCOMP_IOCTL_NOTIF_ADDFD, &addfd) };
                let e = Errno::last();
                if r < 0 && e.0 != libc::ENOENT {
                    // EMFILE in the process, for instance: the call fails as it would have.
                    self.respond(id, Reply::Error(e.0));
                }
                return;
            }
            Reply::Blocking(_) => (0, -libc::EIO, 0),
        };
        let resp = libc::seccomp_notif_resp {
            id,
            val,
            error,
            flags,
        };
        // SAFETY: SEND reads the struct of the size the ioctl number encodes.
        unsafe { libc::ioctl(self.raw(), libc::SECCOMP_IOCTL_NOTIF_SEND, &resp) };
    }
}

/// A connected pair of datagram sockets (close-on-exec) to pass the listener on.
pub(crate) fn socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` is a valid two-element array.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors are new and ours alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Space for one descriptor in a control message (CMSG_SPACE(sizeof(int)) on 64-bit Linux).
const CMSG_ONE_FD: usize = 24;

/// Sends `fd` over `sock`. Async-signal-safe (no allocation): runs between fork and exec.
///
/// # Safety
/// `sock` and `fd` must be open descriptors.
pub(crate) unsafe fn send_fd(sock: RawFd, fd: RawFd) -> bool {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut control = [0u64; CMSG_ONE_FD / 8];
    // SAFETY: msghdr is plain data; every pointer set below outlives the call.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = CMSG_ONE_FD as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) == 1
    }
}

/// Receives one descriptor; `None` when the other end closed without sending one (the child did
/// not get as far as installing its filter).
pub(crate) fn recv_fd(sock: &OwnedFd) -> io::Result<Option<OwnedFd>> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut control = [0u64; CMSG_ONE_FD / 8];
    loop {
        // SAFETY: as in `send_fd`; the kernel writes at most `msg_controllen` bytes.
        let (n, fd) = unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = CMSG_ONE_FD as _;
            let n = libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC);
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            let fd = (n > 0
                && !cmsg.is_null()
                && (*cmsg).cmsg_level == libc::SOL_SOCKET
                && (*cmsg).cmsg_type == libc::SCM_RIGHTS)
                .then(|| std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>()));
            (n, fd)
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        // SAFETY: SCM_RIGHTS installed a new descriptor that nothing else owns.
        return Ok(fd.map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_descriptor_crosses_the_socket_pair() {
        let (a, b) = socketpair().expect("socketpair");
        let file = std::fs::File::open("/proc/self/status").expect("open");
        // SAFETY: both descriptors are open.
        assert!(unsafe { send_fd(a.as_raw_fd(), file.as_raw_fd()) });
        let got = recv_fd(&b).expect("recv").expect("a descriptor");
        assert_ne!(got.as_raw_fd(), file.as_raw_fd());
        drop(a);
        assert!(recv_fd(&b).expect("recv").is_none(), "end of stream");
    }
}
