//! The `stat` family (`stat`, `lstat`, `newfstatat`, `statx`, `access`, `faccessat(2)`,
//! `readlink(at)`): the supervisor looks the file up, decides `stat` on where it is, and answers
//! from its own descriptor, writing the result into the caller's buffer. A descriptor-only call
//! (`fstat` as glibc makes it: an empty path with `AT_EMPTY_PATH`) is answered without a
//! decision: the descriptor was decided when it was opened.

use std::os::fd::AsRawFd;

use scriptgate_policy::Operation;
use scriptgate_policy::events::FileOperationType;

use super::context::{Cx, Outcome};
use super::notify::{Errno, Reply, SysResult};
use super::resolve::{self, Found, Lookup};

/// `struct statx` is 256 bytes.
const STATX_SIZE: usize = 256;

/// What the call names: a path to decide on, or a descriptor of the caller's.
fn find(cx: &mut Cx<'_>, dirfd: i32, arg: usize, flags: i32) -> SysResult<(Found, bool)> {
    let path = cx.path(arg)?;
    if path.is_empty() {
        if flags & libc::AT_EMPTY_PATH == 0 {
            return Err(Errno(libc::ENOENT));
        }
        let magic = if dirfd == libc::AT_FDCWD {
            format!("/proc/{}/cwd", cx.task.tid)
        } else {
            format!("/proc/{}/fd/{dirfd}", cx.task.tid)
        };
        let found = resolve::lookup(&cx.task, libc::AT_FDCWD, magic.as_bytes(), Lookup::FOLLOW)
            .map_err(|e| {
                if e.0 == libc::ENOENT {
                    Errno(libc::EBADF)
                } else {
                    e
                }
            })?;
        return Ok((found, false));
    }
    let how = if flags & libc::AT_SYMLINK_NOFOLLOW != 0 {
        Lookup::NOFOLLOW
    } else {
        Lookup::FOLLOW
    };
    Ok((resolve::lookup(&cx.task, dirfd, &path, how)?, true))
}

/// Decides `stat` on `found` (when it was named by a path), then answers with `answer`.
fn decide(
    cx: &mut Cx<'_>,
    found: Found,
    named: bool,
    answer: impl FnOnce(Found) -> Reply + Send + 'static,
) -> Outcome {
    if !named {
        return Outcome::Reply(answer(found));
    }
    let path = cx.policy_path(&found.path);
    let j = cx.judge_file(&[Operation::Stat], &path);
    cx.record_file(FileOperationType::FileStat, &path, &j);
    cx.gate_file(
        FileOperationType::FileStat,
        &path,
        j,
        Box::new(move || answer(found)),
    )
}

/// `stat`, `lstat`, `newfstatat`: `struct stat` into argument `buf_arg`.
pub(crate) fn stat(cx: &mut Cx<'_>, dirfd: i32, arg: usize, buf_arg: usize, flags: i32) -> Outcome {
    let (found, named) = match find(cx, dirfd, arg, flags) {
        Ok(f) => f,
        Err(e) => return e.into(),
    };
    let buf = cx.arg(buf_arg);
    let mem = match cx.take_mem() {
        Ok(m) => m,
        Err(e) => return e.into(),
    };
    decide(cx, found, named, move |found| {
        match resolve::stat_fd(&found.fd) {
            Ok(st) => write_out(&mem, buf, as_bytes(&st)),
            Err(e) => e.into(),
        }
    })
}

/// `statx(dirfd, path, flags, mask, buf)`.
pub(crate) fn statx(cx: &mut Cx<'_>) -> Outcome {
    let (dirfd, flags, mask, buf) = (cx.dirfd(0), cx.arg(2) as i32, cx.arg(3) as u32, cx.arg(4));
    let (found, named) = match find(cx, dirfd, 1, flags) {
        Ok(f) => f,
        Err(e) => return e.into(),
    };
    let mem = match cx.take_mem() {
        Ok(m) => m,
        Err(e) => return e.into(),
    };
    decide(cx, found, named, move |found| {
        let mut out = [0u8; STATX_SIZE];
        let sync = flags & libc::AT_STATX_SYNC_TYPE;
        // SAFETY: a valid descriptor, empty path with AT_EMPTY_PATH, a 256-byte buffer.
        let r = unsafe {
            libc::syscall(
                libc::SYS_statx,
                found.fd.as_raw_fd(),
                c"".as_ptr(),
                libc::AT_EMPTY_PATH | sync,
                mask,
                out.as_mut_ptr(),
            )
        };
        if r < 0 {
            return Errno::last().into();
        }
        write_out(&mem, buf, &out)
    })
}

/// `access(path, mode)`, `faccessat(dirfd, path, mode)`, `faccessat2(dirfd, path, mode, flags)`.
pub(crate) fn access(cx: &mut Cx<'_>, dirfd: i32, arg: usize, mode: i32, flags: i32) -> Outcome {
    let (found, named) = match find(cx, dirfd, arg, flags) {
        Ok(f) => f,
        Err(e) => return e.into(),
    };
    decide(cx, found, named, move |found| {
        let keep = flags & libc::AT_EACCESS;
        // SAFETY: a valid descriptor and an empty path with AT_EMPTY_PATH.
        let r = unsafe {
            libc::syscall(
                libc::SYS_faccessat2,
                found.fd.as_raw_fd(),
                c"".as_ptr(),
                mode,
                libc::AT_EMPTY_PATH | keep,
            )
        };
        if r < 0 {
            Errno::last().into()
        } else {
            Reply::Value(0)
        }
    })
}

/// `readlink(path, buf, size)`, `readlinkat(dirfd, path, buf, size)`.
pub(crate) fn readlink(cx: &mut Cx<'_>, dirfd: i32, arg: usize, buf: u64, size: u64) -> Outcome {
    let path = match cx.path(arg) {
        Ok(p) => p,
        Err(e) => return e.into(),
    };
    if size == 0 || size > i32::MAX as u64 {
        return Errno(libc::EINVAL).into();
    }
    let found = match resolve::lookup(&cx.task, dirfd, &path, Lookup::NOFOLLOW) {
        Ok(f) => f,
        Err(e) => return e.into(),
    };
    let mem = match cx.take_mem() {
        Ok(m) => m,
        Err(e) => return e.into(),
    };
    decide(cx, found, true, move |found| {
        let mut text = vec![0u8; (size as usize).min(8192)];
        // SAFETY: a valid descriptor, an empty path (the link itself), a buffer of its length.
        let n = unsafe {
            libc::readlinkat(
                found.fd.as_raw_fd(),
                c"".as_ptr(),
                text.as_mut_ptr().cast(),
                text.len(),
            )
        };
        if n < 0 {
            // Not a symlink: readlinkat on its descriptor says ENOENT, readlink says EINVAL.
            let e = Errno::last();
            return Reply::Error(if e.0 == libc::ENOENT {
                libc::EINVAL
            } else {
                e.0
            });
        }
        match write_out(&mem, buf, &text[..n as usize]) {
            Reply::Value(_) => Reply::Value(n as i64),
            other => other,
        }
    })
}

fn write_out(mem: &super::memory::Memory, addr: u64, bytes: &[u8]) -> Reply {
    match mem.write(addr, bytes) {
        Ok(()) => Reply::Value(0),
        Err(e) => e.into(),
    }
}

fn as_bytes(st: &libc::stat) -> &[u8] {
    // SAFETY: `struct stat` is plain data; its bytes are what the kernel's stat writes.
    unsafe {
        std::slice::from_raw_parts(
            (st as *const libc::stat).cast::<u8>(),
            std::mem::size_of::<libc::stat>(),
        )
    }
}
