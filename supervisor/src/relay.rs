//! The run itself: feed the script and stdin, relay output with caps, wait for the script's exit.

use std::os::fd::{AsRawFd, OwnedFd};

use scriptgate_supervisor::{Exit, FrameKind, Job};

use crate::child::Running;
use crate::{emit, sys, usage};

/// Output is read (and relayed) in chunks of at most this size.
const CHUNK: usize = 32 * 1024;
/// After the script exits, at most this much output still buffered is collected: a background
/// process that keeps writing cannot hold the supervisor.
const DRAIN_LIMIT: usize = 4 << 20;

/// One output stream: its pipe, and what was relayed so far.
struct Stream {
    fd: Option<OwnedFd>,
    kind: FrameKind,
    relayed: u64,
    truncated: bool,
}

impl Stream {
    fn new(fd: OwnedFd, kind: FrameKind) -> Self {
        Stream {
            fd: Some(fd),
            kind,
            relayed: 0,
            truncated: false,
        }
    }

    /// Reads what is available; returns the bytes read (0 at end of file or when nothing is ready).
    fn pump(&mut self, limit: u64, buf: &mut [u8]) -> Result<usize, String> {
        let Some(fd) = &self.fd else { return Ok(0) };
        // SAFETY: reading into `buf` of its own length from a descriptor we own.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            return match err.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => Ok(0),
                _ => Err(format!("reading script output: {err}")),
            };
        }
        if n == 0 {
            self.fd = None;
            return Ok(0);
        }
        let n = n as usize;
        let room = limit.saturating_sub(self.relayed) as usize;
        let keep = n.min(room);
        if keep < n {
            self.truncated = true;
        }
        if keep > 0 {
            emit(self.kind, &buf[..keep])?;
            self.relayed += keep as u64;
        }
        Ok(n)
    }
}

/// Bytes still to write to a pipe (the script's stdin, or Python's program on fd 3).
struct Feed {
    fd: Option<OwnedFd>,
    data: Vec<u8>,
    at: usize,
}

impl Feed {
    fn new(fd: Option<OwnedFd>, data: &[u8]) -> Self {
        Feed {
            fd,
            data: data.to_vec(),
            at: 0,
        }
    }

    /// Writes what the pipe takes; closes it when done or when the reader is gone.
    fn push(&mut self) {
        let Some(fd) = &self.fd else { return };
        while self.at < self.data.len() {
            let rest = &self.data[self.at..];
            // SAFETY: writing from a live slice of its own length to a descriptor we own.
            let n = unsafe { libc::write(fd.as_raw_fd(), rest.as_ptr().cast(), rest.len()) };
            if n < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::WouldBlock {
                    return;
                }
                break; // EPIPE: the script closed it; the rest is dropped.
            }
            self.at += n as usize;
        }
        self.fd = None;
    }
}

pub fn relay(running: Running, job: &Job, sigchld: &sys::SignalFd) -> Result<Exit, String> {
    let Running {
        pid,
        stdin,
        stdout,
        stderr,
        code,
    } = running;
    let mut streams = [
        Stream::new(stdout, FrameKind::Stdout),
        Stream::new(stderr, FrameKind::Stderr),
    ];
    let mut feeds = [
        Feed::new(code, job.script.as_bytes()),
        Feed::new(stdin, job.stdin.as_bytes()),
    ];
    for feed in &mut feeds {
        feed.push();
    }
    let mut buf = vec![0u8; CHUNK];
    let status = loop {
        if let Some(status) = reap_until(pid) {
            break status;
        }
        let mut fds = vec![libc::pollfd {
            fd: sigchld.raw(),
            events: libc::POLLIN,
            revents: 0,
        }];
        for s in &streams {
            if let Some(fd) = &s.fd {
                fds.push(libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
        }
        for f in &feeds {
            if let Some(fd) = &f.fd {
                fds.push(libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                });
            }
        }
        sys::poll(&mut fds)?;
        sigchld.drain();
        for s in &mut streams {
            s.pump(job.output_limit, &mut buf)?;
        }
        for f in &mut feeds {
            f.push();
        }
    };
    // The script is gone; collect what it left in the pipes, then stop any stragglers.
    let mut drained = 0;
    for s in &mut streams {
        while drained < DRAIN_LIMIT {
            let n = s.pump(job.output_limit, &mut buf)?;
            if n == 0 {
                break;
            }
            drained += n;
        }
    }
    sys::kill_group(pid);
    while sys::reap_one().is_some() {}
    let (exit_code, signal) = sys::decode_status(status);
    let (cpu, rss) = sys::children_usage();
    Ok(Exit {
        nonce: job.nonce.clone(),
        exit_code,
        signal,
        stdout_truncated: streams[0].truncated,
        stderr_truncated: streams[1].truncated,
        usage: usage::measure(cpu, rss),
        artifacts_dropped: 0,
    })
}

/// Reaps every exited process (PID 1 adopts orphans); returns the script's status once it exited.
fn reap_until(pid: libc::pid_t) -> Option<libc::c_int> {
    let mut found = None;
    while let Some(r) = sys::reap_one() {
        if r.pid == pid {
            found = Some(r.status);
        }
    }
    found
}
