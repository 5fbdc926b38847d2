//! `open`, `openat` and `creat`, performed by the supervisor for the process: the file is found
//! (`O_PATH`, no side effects), decided on the path of what was found, then opened for real and
//! installed in the process (`ADDFD|SEND`). An allowed open is never continued, so a path the
//! process rewrites after the check cannot reach another file.
//!
//! Creation is decided on the parent directory and the name before anything exists; `O_TRUNC` is
//! only applied by the real open, after the decision; the caller's umask is applied to new files;
//! `O_CLOEXEC` travels as the new descriptor's flag. A FIFO whose open would wait for its peer is
//! opened by a helper thread, so the monitor never waits.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use scriptgate_policy::Operation;
use scriptgate_policy::events::FileOperationType;

use super::context::{Cx, Outcome, own_umask, read_only_mount, umask_of};
use super::notify::{Errno, Reply, SysResult};
use super::resolve::{self, Found, Lookup, Parent, stat_fd};

/// Symlinks followed by hand when `O_CREAT` meets a dangling one (the kernel's limit).
const MAX_LINKS: usize = 40;

/// `open(path, flags, mode)`, `openat(dirfd, path, flags, mode)`, `creat(path, mode)`.
pub(crate) fn open(cx: &mut Cx<'_>, dirfd: i32, path_arg: usize, flags: i32, mode: u32) -> Outcome {
    let path = match cx.path(path_arg) {
        Ok(p) => p,
        Err(e) => return e.into(),
    };
    let cloexec = flags & libc::O_CLOEXEC != 0;
    if flags & libc::O_TMPFILE == libc::O_TMPFILE {
        return tmpfile(cx, dirfd, &path, flags, mode, cloexec);
    }
    if flags & libc::O_CREAT == 0 {
        return existing(cx, dirfd, &path, flags, cloexec);
    }
    let mut path = path;
    let mut dirfd = dirfd;
    for _ in 0..MAX_LINKS {
        if flags & libc::O_EXCL == 0 {
            match resolve::lookup(&cx.task, dirfd, &path, lookup_of(flags)) {
                Ok(found) => return decide_existing(cx, &path, found, flags, cloexec),
                Err(e) if e.0 == libc::ENOENT => {}
                Err(e) => return e.into(),
            }
        }
        let parent = match resolve::lookup_parent(&cx.task, dirfd, &path) {
            Ok(Some(p)) => p,
            Ok(None) => return Errno(libc::EISDIR).into(),
            Err(e) => return e.into(),
        };
        // A dangling symlink with O_CREAT (and no O_EXCL/O_NOFOLLOW) creates its target.
        if flags & (libc::O_EXCL | libc::O_NOFOLLOW) == 0
            && let Some(target) = dangling_target(&parent)
        {
            path = target;
            dirfd = libc::AT_FDCWD;
            continue;
        }
        return create(cx, parent, flags, mode, cloexec);
    }
    Errno(libc::ELOOP).into()
}

fn lookup_of(flags: i32) -> Lookup {
    Lookup {
        follow: flags & libc::O_NOFOLLOW == 0,
        directory: flags & libc::O_DIRECTORY != 0,
    }
}

fn existing(cx: &mut Cx<'_>, dirfd: i32, path: &[u8], flags: i32, cloexec: bool) -> Outcome {
    match resolve::lookup(&cx.task, dirfd, path, lookup_of(flags)) {
        Ok(found) => decide_existing(cx, path, found, flags, cloexec),
        Err(e) => e.into(),
    }
}

/// What opening an existing file with `flags` does to it.
fn operations(flags: i32, st: &libc::stat) -> (&'static [Operation], FileOperationType) {
    let kind = st.st_mode & libc::S_IFMT;
    if flags & libc::O_PATH != 0 {
        return (&[Operation::Stat], FileOperationType::FileStat);
    }
    if kind == libc::S_IFDIR {
        return (&[Operation::List], FileOperationType::FileList);
    }
    match flags & libc::O_ACCMODE {
        libc::O_RDONLY if flags & libc::O_TRUNC != 0 => (
            &[Operation::Read, Operation::Write],
            FileOperationType::FileWrite,
        ),
        libc::O_RDONLY => (&[Operation::Read], FileOperationType::FileRead),
        libc::O_WRONLY => (&[Operation::Write], FileOperationType::FileWrite),
        _ => (
            &[Operation::Read, Operation::Write],
            FileOperationType::FileWrite,
        ),
    }
}

/// The path a decision uses: where the file is, or (for pipes and sockets, which have no path)
/// the name the process used.
fn decision_path(cx: &Cx<'_>, named: &[u8], found: &Found) -> Vec<u8> {
    if found.path.first() == Some(&b'/') {
        return cx.policy_path(&found.path);
    }
    if named.first() == Some(&b'/') {
        return named.to_vec();
    }
    resolve::join(cx.task.cwd().as_bytes(), named)
}

fn decide_existing(
    cx: &mut Cx<'_>,
    named: &[u8],
    found: Found,
    flags: i32,
    cloexec: bool,
) -> Outcome {
    let st = match stat_fd(&found.fd) {
        Ok(st) => st,
        Err(e) => return e.into(),
    };
    let kind = st.st_mode & libc::S_IFMT;
    if kind == libc::S_IFLNK && flags & libc::O_PATH == 0 {
        // O_NOFOLLOW met a symlink.
        return Errno(libc::ELOOP).into();
    }
    let (ops, event) = operations(flags, &st);
    let path = decision_path(cx, named, &found);
    let j = cx.judge_file(ops, &path);
    cx.record_file(event, &path, &j);
    let writes = ops.contains(&Operation::Write);
    if writes && (kind == libc::S_IFREG || kind == libc::S_IFDIR) && read_only_mount(&found.fd) {
        // The kernel's answer, whatever the policy says: the mount is read-only (or, first, the
        // file's permissions refuse the write, as the kernel checks them before the mount).
        let errno = access_errno(&found.fd, libc::W_OK).unwrap_or(libc::EROFS);
        return cx.refused_by_kernel(event, &path, &j, errno);
    }
    let fifo_waits = kind == libc::S_IFIFO
        && flags & libc::O_NONBLOCK == 0
        && flags & libc::O_ACCMODE != libc::O_RDWR
        && flags & libc::O_PATH == 0;
    let perform: super::context::Perform = if flags & libc::O_PATH != 0 {
        Box::new(move || Reply::AddFd {
            fd: found.fd,
            cloexec,
        })
    } else if fifo_waits {
        Box::new(move || Reply::Blocking(Box::new(move || reopen(&found.fd, flags, cloexec))))
    } else {
        Box::new(move || reopen(&found.fd, flags, cloexec))
    };
    cx.gate_file(event, &path, j, perform)
}

/// What `access(mode)` says of the file `fd` holds, as the caller (`None`: allowed).
fn access_errno(fd: &OwnedFd, mode: i32) -> Option<i32> {
    // SAFETY: a valid descriptor and an empty path with AT_EMPTY_PATH.
    let r = unsafe {
        libc::syscall(
            libc::SYS_faccessat2,
            fd.as_raw_fd(),
            c"".as_ptr(),
            mode,
            libc::AT_EMPTY_PATH | libc::AT_EACCESS,
        )
    };
    (r < 0).then(|| Errno::last().0)
}

fn reopen(found: &OwnedFd, flags: i32, cloexec: bool) -> Reply {
    match resolve::reopen(found, flags) {
        Ok(fd) => Reply::AddFd { fd, cloexec },
        Err(e) => e.into(),
    }
}

/// The target of the dangling symlink `parent` names (as a path to create), if it is one.
fn dangling_target(parent: &Parent) -> Option<Vec<u8>> {
    let name = parent.name_cstr().ok()?;
    let mut buf = vec![0u8; 4096];
    // SAFETY: a valid directory descriptor, NUL-terminated name, buffer of the given length.
    let n = unsafe {
        libc::readlinkat(
            parent.dir.fd.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n <= 0 {
        return None;
    }
    buf.truncate(n as usize);
    Some(if buf.first() == Some(&b'/') {
        buf
    } else {
        resolve::join(&parent.dir.path, &buf)
    })
}

fn create(cx: &mut Cx<'_>, parent: Parent, flags: i32, mode: u32, cloexec: bool) -> Outcome {
    let path = cx.policy_path(&parent.path());
    let j = cx.judge_file(&[Operation::Create], &path);
    cx.record_file(FileOperationType::FileCreate, &path, &j);
    if read_only_mount(&parent.dir.fd) {
        return cx.refused_by_kernel(FileOperationType::FileCreate, &path, &j, libc::EROFS);
    }
    let umask = umask_of(cx.task.tid);
    let perform = Box::new(move || match create_at(&parent, flags, mode, umask) {
        Ok(fd) => Reply::AddFd { fd, cloexec },
        Err(e) => e.into(),
    });
    cx.gate_file(FileOperationType::FileCreate, &path, j, perform)
}

/// Creates the file (`O_EXCL`: only a file this call creates, never one that appeared since the
/// decision) with the caller's umask.
fn create_at(parent: &Parent, flags: i32, mode: u32, umask: u32) -> SysResult<OwnedFd> {
    let name = parent.name_cstr()?;
    let wanted = mode & !umask & 0o7777;
    let open_flags = (flags | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC) & !libc::O_PATH;
    // SAFETY: a valid directory descriptor and NUL-terminated name.
    let fd = unsafe { libc::openat(parent.dir.fd.as_raw_fd(), name.as_ptr(), open_flags, wanted) };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: a new descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    fix_mode(&fd, wanted);
    Ok(fd)
}

/// The supervisor's umask applied on top of the caller's: give back what only it took away.
pub(crate) fn fix_mode(fd: &OwnedFd, wanted: u32) {
    if wanted & own_umask() != 0 {
        // SAFETY: fchmod on a descriptor this call created.
        unsafe { libc::fchmod(fd.as_raw_fd(), wanted) };
    }
}

/// `O_TMPFILE`: an unnamed file in a directory, decided as a creation in that directory.
fn tmpfile(
    cx: &mut Cx<'_>,
    dirfd: i32,
    path: &[u8],
    flags: i32,
    mode: u32,
    cloexec: bool,
) -> Outcome {
    let dir = match resolve::lookup(&cx.task, dirfd, path, Lookup::DIRECTORY) {
        Ok(d) => d,
        Err(e) => return e.into(),
    };
    let where_ = cx.policy_path(&dir.path);
    let j = cx.judge_file(&[Operation::Create], &where_);
    cx.record_file(FileOperationType::FileCreate, &where_, &j);
    if read_only_mount(&dir.fd) {
        return cx.refused_by_kernel(FileOperationType::FileCreate, &where_, &j, libc::EROFS);
    }
    let umask = umask_of(cx.task.tid);
    let perform = Box::new(move || {
        let wanted = mode & !umask & 0o7777;
        let link = match CString::new(format!("/proc/self/fd/{}", dir.fd.as_raw_fd())) {
            Ok(l) => l,
            Err(_) => return Reply::Error(libc::EINVAL),
        };
        // SAFETY: a NUL-terminated path; O_TMPFILE through the magic link to the directory.
        let fd = unsafe { libc::open(link.as_ptr(), flags | libc::O_CLOEXEC, wanted) };
        if fd < 0 {
            return Errno::last().into();
        }
        // SAFETY: a new descriptor.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        fix_mode(&fd, wanted);
        Reply::AddFd { fd, cloexec }
    });
    cx.gate_file(FileOperationType::FileCreate, &where_, j, perform)
}
