//! File steps and artifact collection run in a child process forked for the operation, as the
//! script's uid when the supervisor runs as another (gVisor: the workspace belongs to the script,
//! and the supervisor keeps no right to enter it). The child reports over a pipe, in frames; it
//! can be killed at the job's deadline, and a failure in it cannot take PID 1 down.

use std::os::fd::{AsRawFd, OwnedFd};
use std::panic::AssertUnwindSafe;
use std::time::Instant;

use serde::Serialize;
use serde::de::DeserializeOwned;

use scriptgate_supervisor::job::HARD_MAX_MESSAGE;
use scriptgate_supervisor::{
    ArtifactBegin, ArtifactEnd, FrameKind, MessageAssembler, RawFrameDecoder, encode_message,
};

use super::Runtime;
use super::collect::ArtifactOut;
use crate::sys;

/// The frame kind of the operation's result on the child's pipe (internal to the two processes).
const RESULT: FrameKind = FrameKind::JobEnd;

/// Why an operation produced no result.
#[derive(Debug)]
pub(crate) enum OpError {
    /// The deadline passed; the child was killed.
    Timeout,
    /// The child died or reported nonsense.
    Lost(String),
    /// Where the artifacts go failed (the host is gone).
    Out(String),
}

/// Where a child's artifact frames go: through the pipe to the supervisor (which hands them to
/// its sink), or, when that sink is the host's stream anyway, straight to it (stdout): the bytes
/// then skip a copy through the supervisor, which only waits meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    Pipe,
    HostStream,
}

/// The child's end: frames written to the pipe, or artifact frames to the host (blocking).
pub(crate) struct OpChannel {
    fd: OwnedFd,
    route: Route,
}

impl OpChannel {
    fn send(&mut self, kind: FrameKind, payload: &[u8]) -> Result<(), String> {
        write_all(self.fd.as_raw_fd(), kind, payload)
    }

    fn artifact(&mut self, kind: FrameKind, payload: &[u8]) -> Result<(), String> {
        match self.route {
            Route::Pipe => self.send(kind, payload),
            Route::HostStream => write_all(libc::STDOUT_FILENO, kind, payload),
        }
    }
}

fn to_json(value: &impl Serialize) -> Result<Vec<u8>, String> {
    serde_json::to_vec(value).map_err(|e| e.to_string())
}

/// One message as frames on `fd`, written whole (blocking).
fn write_all(fd: libc::c_int, kind: FrameKind, payload: &[u8]) -> Result<(), String> {
    let mut wire = Vec::with_capacity(payload.len() + 16);
    encode_message(kind, payload, &mut wire);
    let mut at = 0;
    while at < wire.len() {
        // SAFETY: writing from a live slice of its own length to an open descriptor.
        let n = unsafe { libc::write(fd, wire[at..].as_ptr().cast(), wire.len() - at) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!("writing a frame: {e}"));
        }
        at += n as usize;
    }
    Ok(())
}

impl ArtifactOut for OpChannel {
    fn begin(&mut self, begin: &ArtifactBegin) -> Result<(), String> {
        self.artifact(FrameKind::ArtifactBegin, &to_json(begin)?)
    }

    fn data(&mut self, chunk: &[u8]) -> Result<(), String> {
        self.artifact(FrameKind::ArtifactData, chunk)
    }

    fn end(&mut self, end: &ArtifactEnd) -> Result<(), String> {
        self.artifact(FrameKind::ArtifactEnd, &to_json(end)?)
    }
}

/// Runs `work` in a forked child and returns what it returned; artifact frames it sends go to
/// `out` as they arrive.
pub(crate) fn run<T: Serialize + DeserializeOwned>(
    rt: &mut Runtime,
    deadline: Instant,
    out: &mut dyn ArtifactOut,
    route: Route,
    work: impl FnOnce(&mut OpChannel) -> T,
) -> Result<T, OpError> {
    let (read, write) = sys::pipe().map_err(OpError::Lost)?;
    // SAFETY: the supervisor is single-threaded, so the child may run ordinary code after fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(OpError::Lost(format!(
            "fork: {}",
            std::io::Error::last_os_error()
        )));
    }
    if pid == 0 {
        drop(read);
        child(rt, OpChannel { fd: write, route }, work);
    }
    drop(write);
    sys::set_nonblocking(&read).map_err(OpError::Lost)?;
    let outcome = parent(rt, &read, deadline, out);
    if outcome.is_err() {
        sys::kill(pid);
    }
    // The child is the only process at this point (killed if it had to be): wait for it alone.
    let status = sys::wait(pid);
    match outcome {
        Err(OpError::Lost(why)) => Err(OpError::Lost(match status {
            Some(s) if libc::WIFSIGNALED(s) => {
                format!("{why} (killed by signal {})", libc::WTERMSIG(s))
            }
            Some(s) => format!("{why} (exit status {})", libc::WEXITSTATUS(s)),
            None => why,
        })),
        other => other,
    }
}

/// In the forked child: become the script's uid if needed, work, report, exit.
fn child<T: Serialize>(
    rt: &Runtime,
    mut channel: OpChannel,
    work: impl FnOnce(&mut OpChannel) -> T,
) -> ! {
    // SAFETY: prctl with integer arguments; the child dies with the supervisor.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    // A write past the file size limit (fsize) then fails with EFBIG, which the operation
    // reports as a limit and cleans up after (a staged file is removed), instead of SIGXFSZ
    // killing the child mid-write. This child never execs, so nothing inherits the disposition.
    // SAFETY: signal with a constant disposition, in the single-threaded child.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    if let Some(split) = rt.split {
        // SAFETY: this is the freshly forked child, and it changes only its own credentials.
        if unsafe { split.become_script() }.is_err() {
            // SAFETY: _exit ends the child without running the parent's destructors.
            unsafe { libc::_exit(3) };
        }
    }
    let done = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let value = work(&mut channel);
        channel.send(RESULT, &to_json(&value)?)
    }));
    let code = match done {
        Ok(Ok(())) => 0,
        Ok(Err(_)) => 4,
        Err(_) => 5,
    };
    // SAFETY: as above; nothing of the parent's state is flushed or dropped twice.
    unsafe { libc::_exit(code) }
}

fn parent<T: DeserializeOwned>(
    rt: &mut Runtime,
    read: &OwnedFd,
    deadline: Instant,
    out: &mut dyn ArtifactOut,
) -> Result<T, OpError> {
    let mut decoder = RawFrameDecoder::default();
    let mut assembler = MessageAssembler::new(HARD_MAX_MESSAGE);
    let mut buf = vec![0u8; 1 << 20];
    let mut open = true;
    loop {
        if Instant::now() >= deadline {
            return Err(OpError::Timeout);
        }
        let mut fds = vec![sys::pollfd(rt.sigchld.raw(), libc::POLLIN)];
        if open {
            fds.push(sys::pollfd(read.as_raw_fd(), libc::POLLIN));
        }
        if let Some(fd) = rt.input_fd() {
            fds.push(sys::pollfd(fd, libc::POLLIN));
        }
        sys::poll_until(&mut fds, Some(deadline)).map_err(OpError::Lost)?;
        rt.sigchld.drain();
        rt.read_input(None).map_err(OpError::Lost)?;
        while open {
            // SAFETY: reading into a buffer of its own length from a descriptor we own.
            let n = unsafe { libc::read(read.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n == 0 {
                open = false;
            } else if n < 0 {
                break; // EAGAIN: nothing more now
            } else {
                decoder.push(&buf[..n as usize]);
            }
        }
        while let Some((kind, payload)) = decoder
            .next_frame()
            .map_err(|e| OpError::Lost(e.to_string()))?
        {
            let Some((kind, message)) = assembler
                .push(kind, payload)
                .map_err(|e| OpError::Lost(e.to_string()))?
            else {
                continue;
            };
            if let Some(value) = dispatch(kind, &message, out)? {
                return Ok(value);
            }
        }
        if !open {
            return Err(OpError::Lost("the operation ended without a result".into()));
        }
    }
}

/// One message from the child: artifact frames go on, the result ends the operation.
fn dispatch<T: DeserializeOwned>(
    kind: u8,
    message: &[u8],
    out: &mut dyn ArtifactOut,
) -> Result<Option<T>, OpError> {
    let lost = |e: String| OpError::Lost(e);
    match FrameKind::from_u8(kind) {
        Some(FrameKind::ArtifactBegin) => {
            let begin = serde_json::from_slice(message).map_err(|e| lost(e.to_string()))?;
            out.begin(&begin).map_err(OpError::Out)?;
        }
        Some(FrameKind::ArtifactData) => out.data(message).map_err(OpError::Out)?,
        Some(FrameKind::ArtifactEnd) => {
            let end = serde_json::from_slice(message).map_err(|e| lost(e.to_string()))?;
            out.end(&end).map_err(OpError::Out)?;
        }
        Some(RESULT) => {
            return serde_json::from_slice(message)
                .map(Some)
                .map_err(|e| lost(e.to_string()));
        }
        _ => {
            return Err(lost(format!(
                "unexpected frame kind {kind} from an operation"
            )));
        }
    }
    Ok(None)
}
