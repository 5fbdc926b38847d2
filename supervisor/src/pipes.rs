//! Non-blocking pipe ends of a child: output read with a cap (the rest read and dropped, so the
//! child never blocks on a full pipe), and input written as the child takes it.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// One output stream: its pipe, and how much of it was delivered.
pub(crate) struct Stream {
    fd: Option<OwnedFd>,
    delivered: u64,
    truncated: bool,
}

impl Stream {
    pub(crate) fn new(fd: OwnedFd) -> Self {
        Stream {
            fd: Some(fd),
            delivered: 0,
            truncated: false,
        }
    }

    pub(crate) fn raw(&self) -> Option<RawFd> {
        self.fd.as_ref().map(AsRawFd::as_raw_fd)
    }

    pub(crate) fn truncated(&self) -> bool {
        self.truncated
    }

    /// Reads what is available and delivers up to `limit` bytes in total; returns the bytes read
    /// (0 at end of file or when nothing is ready).
    pub(crate) fn pump(
        &mut self,
        limit: u64,
        buf: &mut [u8],
        deliver: &mut dyn FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<usize, String> {
        let Some(fd) = &self.fd else { return Ok(0) };
        // SAFETY: reading into `buf` of its own length from a descriptor we own.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            return match err.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => Ok(0),
                _ => Err(format!("reading output: {err}")),
            };
        }
        if n == 0 {
            self.fd = None;
            return Ok(0);
        }
        let n = n as usize;
        let room = limit.saturating_sub(self.delivered) as usize;
        let keep = n.min(room);
        if keep < n {
            self.truncated = true;
        }
        if keep > 0 {
            deliver(&buf[..keep])?;
            self.delivered += keep as u64;
        }
        Ok(n)
    }

    /// Reads what is already buffered, up to `limit` bytes: a leftover process that keeps writing
    /// (or holds the pipe open) cannot hold the caller.
    pub(crate) fn drain(
        &mut self,
        cap: u64,
        limit: usize,
        buf: &mut [u8],
        deliver: &mut dyn FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<usize, String> {
        let mut drained = 0;
        while drained < limit {
            let n = self.pump(cap, buf, deliver)?;
            if n == 0 {
                break;
            }
            drained += n;
        }
        Ok(drained)
    }

    /// Closes the read end (a leftover writer then gets EPIPE instead of an audience).
    pub(crate) fn close(&mut self) {
        self.fd = None;
    }
}

/// Bytes still to write to a pipe (a child's stdin, or Python's program on fd 3).
pub(crate) struct Feed {
    fd: Option<OwnedFd>,
    data: Vec<u8>,
    at: usize,
}

impl Feed {
    pub(crate) fn new(fd: Option<OwnedFd>, data: &[u8]) -> Self {
        Feed {
            fd,
            data: data.to_vec(),
            at: 0,
        }
    }

    pub(crate) fn raw(&self) -> Option<RawFd> {
        self.fd.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Writes what the pipe takes; closes it when done or when the reader is gone.
    pub(crate) fn push(&mut self) {
        let Some(fd) = &self.fd else { return };
        while self.at < self.data.len() {
            let rest = &self.data[self.at..];
            // SAFETY: writing from a live slice of its own length to a descriptor we own.
            let n = unsafe { libc::write(fd.as_raw_fd(), rest.as_ptr().cast(), rest.len()) };
            if n < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::WouldBlock {
                    return;
                }
                break; // EPIPE: the child closed it; the rest is dropped.
            }
            self.at += n as usize;
        }
        self.fd = None;
    }
}
