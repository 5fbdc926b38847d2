//! The calling process's memory, through `/proc/<tid>/mem` (`process_vm_readv` is refused by the
//! supervisor's own filter): path strings and arguments in, `stat` results out.
//!
//! Opened per notification and checked with `ID_VALID` after opening, so the descriptor belongs
//! to the process that made the call (a tid can be reused, and a cached descriptor would keep the
//! memory of a process image that `execve` replaced).

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::notify::{Errno, Listener, SysResult};

/// The longest path the kernel accepts (`PATH_MAX`, with its NUL).
pub(crate) const PATH_MAX: usize = 4096;
const PAGE: u64 = 4096;

#[derive(Debug)]
pub(crate) struct Memory(File);

impl Memory {
    /// The memory of `tid`, if it still made notification `id`. A process the supervisor cannot
    /// read (it made itself non-dumpable, which the filter refuses) is an `EACCES`.
    pub(crate) fn open(tid: i32, listener: &Listener, id: u64) -> SysResult<Memory> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{tid}/mem"))
            .map_err(|_| Errno(libc::EACCES))?;
        if !listener.id_valid(id) {
            return Err(Errno(libc::ESRCH));
        }
        Ok(Memory(file))
    }

    /// Exactly `len` bytes at `addr`; `EFAULT` where the process has no memory.
    pub(crate) fn read(&self, addr: u64, len: usize) -> SysResult<Vec<u8>> {
        let mut buf = vec![0u8; len];
        let mut at = 0;
        while at < len {
            match self.0.read_at(&mut buf[at..], addr + at as u64) {
                Ok(0) | Err(_) => return Err(Errno(libc::EFAULT)),
                Ok(n) => at += n,
            }
        }
        Ok(buf)
    }

    /// The NUL-terminated string at `addr` (without the NUL), at most `max` bytes before it:
    /// `ENAMETOOLONG` past that, `EFAULT` for an address without memory. Reads page by page, so
    /// a string that ends just before an unmapped page is still read.
    pub(crate) fn read_cstr(&self, addr: u64, max: usize) -> SysResult<Vec<u8>> {
        if addr == 0 {
            return Err(Errno(libc::EFAULT));
        }
        let mut out = Vec::new();
        let mut chunk = [0u8; 512];
        let mut at = addr;
        loop {
            let room = (PAGE - at % PAGE).min(chunk.len() as u64) as usize;
            let n = match self.0.read_at(&mut chunk[..room], at) {
                Ok(0) | Err(_) => return Err(Errno(libc::EFAULT)),
                Ok(n) => n,
            };
            if let Some(end) = chunk[..n].iter().position(|&b| b == 0) {
                out.extend_from_slice(&chunk[..end]);
                return Ok(out);
            }
            out.extend_from_slice(&chunk[..n]);
            if out.len() >= max {
                return Err(Errno(libc::ENAMETOOLONG));
            }
            at += n as u64;
        }
    }

    /// A path argument: `ENAMETOOLONG` at [`PATH_MAX`] as the kernel.
    pub(crate) fn read_path(&self, addr: u64) -> SysResult<Vec<u8>> {
        self.read_cstr(addr, PATH_MAX)
    }

    pub(crate) fn write(&self, addr: u64, bytes: &[u8]) -> SysResult<()> {
        match self.0.write_at(bytes, addr) {
            Ok(n) if n == bytes.len() => Ok(()),
            _ => Err(Errno(libc::EFAULT)),
        }
    }

    /// A NULL-terminated array of string pointers (`argv`): at most `max_count` strings and
    /// `max_bytes` in all, else `E2BIG` (the decision would not see the whole command line).
    pub(crate) fn read_argv(
        &self,
        addr: u64,
        max_count: usize,
        max_bytes: usize,
    ) -> SysResult<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        if addr == 0 {
            return Ok(out);
        }
        let mut total = 0;
        for i in 0.. {
            if i >= max_count {
                return Err(Errno(libc::E2BIG));
            }
            let raw = self.read(addr + 8 * i as u64, 8)?;
            let ptr = u64::from_le_bytes(raw.try_into().map_err(|_| Errno(libc::EFAULT))?);
            if ptr == 0 {
                break;
            }
            let arg = self
                .read_cstr(ptr, max_bytes.saturating_sub(total).max(1))
                .map_err(|e| {
                    if e.0 == libc::ENAMETOOLONG {
                        Errno(libc::E2BIG)
                    } else {
                        e
                    }
                })?;
            total += arg.len() + 1;
            out.push(arg);
        }
        Ok(out)
    }
}
