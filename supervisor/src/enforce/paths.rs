//! Calls that change a name or a file without returning a descriptor (`unlink`, `rmdir`, `mkdir`,
//! `rename`, `link`, `symlink`, `mknod`, `truncate`, `chmod`): performed by the supervisor on the
//! directory it opened and the single name it decided on (`unlinkat(dirfd, name)`…), so no
//! symlink or rewritten string can move the operation elsewhere after the decision.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use scriptgate_policy::Operation;
use scriptgate_policy::events::FileOperationType;

use super::context::{Cx, Outcome, Perform, read_only_mount, umask_of};
use super::events::Judgement;
use super::files::fix_mode;
use super::notify::{Errno, Reply, SysResult};
use super::resolve::{self, Lookup, Parent, stat_fd};

fn done(r: libc::c_int) -> Reply {
    if r < 0 {
        Errno::last().into()
    } else {
        Reply::Value(0)
    }
}

/// The parent and name of path argument `arg` (relative to `dirfd`), or the errno the kernel
/// gives for `.`, `..` and `/` in this call (`special`).
fn parent_of(cx: &mut Cx<'_>, dirfd: i32, arg: usize, special: i32) -> Result<Parent, Outcome> {
    let path = cx.path(arg).map_err(Outcome::from)?;
    match resolve::lookup_parent(&cx.task, dirfd, &path) {
        Ok(Some(p)) => Ok(p),
        Ok(None) => Err(Errno(special).into()),
        Err(e) => Err(e.into()),
    }
}

/// Decides `op` on the name `parent` holds and performs `perform` if it may proceed.
fn on_name(
    cx: &mut Cx<'_>,
    parent: &Parent,
    op: Operation,
    kind: FileOperationType,
    perform: Perform,
) -> Outcome {
    let path = cx.policy_path(&parent.path());
    let j = cx.judge_file(&[op], &path);
    cx.record_file(kind, &path, &j);
    if read_only_mount(&parent.dir.fd) {
        return cx.refused_by_kernel(kind, &path, &j, libc::EROFS);
    }
    cx.gate_file(kind, &path, j, perform)
}

/// `unlink(path)`, `rmdir(path)`, `unlinkat(dirfd, path, flags)`.
pub(crate) fn unlink(cx: &mut Cx<'_>, dirfd: i32, arg: usize, flags: i32) -> Outcome {
    let dir = flags & libc::AT_REMOVEDIR != 0;
    let parent = match parent_of(cx, dirfd, arg, if dir { libc::EBUSY } else { libc::EISDIR }) {
        Ok(p) => p,
        Err(o) => return o,
    };
    let name = match parent.name_cstr() {
        Ok(n) => n,
        Err(e) => return e.into(),
    };
    let dirfd = parent.dir.fd.try_clone();
    let perform = Box::new(move || match dirfd {
        // SAFETY: a valid directory descriptor and NUL-terminated single name.
        Ok(d) => done(unsafe {
            libc::unlinkat(d.as_raw_fd(), name.as_ptr(), flags & libc::AT_REMOVEDIR)
        }),
        Err(e) => Errno::from(e).into(),
    });
    on_name(
        cx,
        &parent,
        Operation::Delete,
        FileOperationType::FileDelete,
        perform,
    )
}

/// `mkdir(path, mode)`, `mkdirat(dirfd, path, mode)`.
pub(crate) fn mkdir(cx: &mut Cx<'_>, dirfd: i32, arg: usize, mode: u32) -> Outcome {
    let parent = match parent_of(cx, dirfd, arg, libc::EEXIST) {
        Ok(p) => p,
        Err(o) => return o,
    };
    let umask = umask_of(cx.task.tid);
    let (name, dirfd) = match (parent.name_cstr(), parent.dir.fd.try_clone()) {
        (Ok(n), Ok(d)) => (n, d),
        (Err(e), _) => return e.into(),
        (_, Err(e)) => return Errno::from(e).into(),
    };
    let perform = Box::new(move || {
        let wanted = mode & !umask & 0o7777;
        // SAFETY: a valid directory descriptor and NUL-terminated single name.
        let r = unsafe { libc::mkdirat(dirfd.as_raw_fd(), name.as_ptr(), wanted) };
        if r < 0 {
            return Errno::last().into();
        }
        if let Ok(made) = open_at(&dirfd, &name, libc::O_DIRECTORY | libc::O_NOFOLLOW) {
            fix_mode(&made, wanted);
        }
        Reply::Value(0)
    });
    on_name(
        cx,
        &parent,
        Operation::Create,
        FileOperationType::FileCreate,
        perform,
    )
}

fn open_at(dir: &OwnedFd, name: &CString, flags: i32) -> SysResult<OwnedFd> {
    // SAFETY: valid descriptor and NUL-terminated name.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: a new descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `mknod(path, mode, dev)`, `mknodat(dirfd, path, mode, dev)`.
pub(crate) fn mknod(cx: &mut Cx<'_>, dirfd: i32, arg: usize, mode: u32, dev: u64) -> Outcome {
    let parent = match parent_of(cx, dirfd, arg, libc::EEXIST) {
        Ok(p) => p,
        Err(o) => return o,
    };
    let umask = umask_of(cx.task.tid);
    let (name, dirfd) = match (parent.name_cstr(), parent.dir.fd.try_clone()) {
        (Ok(n), Ok(d)) => (n, d),
        (Err(e), _) => return e.into(),
        (_, Err(e)) => return Errno::from(e).into(),
    };
    let perform = Box::new(move || {
        let wanted = (mode & libc::S_IFMT) | (mode & !umask & 0o7777);
        // SAFETY: valid descriptor and NUL-terminated single name.
        done(unsafe { libc::mknodat(dirfd.as_raw_fd(), name.as_ptr(), wanted, dev) })
    });
    on_name(
        cx,
        &parent,
        Operation::Create,
        FileOperationType::FileCreate,
        perform,
    )
}

/// `symlink(target, path)`, `symlinkat(target, dirfd, path)`: the target is only text.
pub(crate) fn symlink(cx: &mut Cx<'_>, target_arg: usize, dirfd: i32, arg: usize) -> Outcome {
    let target = match cx.path(target_arg).map(CString::new) {
        Ok(Ok(t)) => t,
        Ok(Err(_)) => return Errno(libc::EINVAL).into(),
        Err(e) => return e.into(),
    };
    let parent = match parent_of(cx, dirfd, arg, libc::EEXIST) {
        Ok(p) => p,
        Err(o) => return o,
    };
    let (name, dirfd) = match (parent.name_cstr(), parent.dir.fd.try_clone()) {
        (Ok(n), Ok(d)) => (n, d),
        (Err(e), _) => return e.into(),
        (_, Err(e)) => return Errno::from(e).into(),
    };
    let perform = Box::new(move || {
        // SAFETY: NUL-terminated strings and a valid directory descriptor.
        done(unsafe { libc::symlinkat(target.as_ptr(), dirfd.as_raw_fd(), name.as_ptr()) })
    });
    on_name(
        cx,
        &parent,
        Operation::Create,
        FileOperationType::FileCreate,
        perform,
    )
}

/// `rename`, `renameat`, `renameat2`: a deletion of the old name and a creation of the new one
/// (both ways for `RENAME_EXCHANGE`), decided together.
pub(crate) fn rename(
    cx: &mut Cx<'_>,
    (old_dirfd, old_arg): (i32, usize),
    (new_dirfd, new_arg): (i32, usize),
    flags: u32,
) -> Outcome {
    let old = match parent_of(cx, old_dirfd, old_arg, libc::EBUSY) {
        Ok(p) => p,
        Err(o) => return o,
    };
    let new = match parent_of(cx, new_dirfd, new_arg, libc::EBUSY) {
        Ok(p) => p,
        Err(o) => return o,
    };
    let (old_path, new_path) = (cx.policy_path(&old.path()), cx.policy_path(&new.path()));
    let exchange = flags & libc::RENAME_EXCHANGE != 0;
    let both = [Operation::Delete, Operation::Create];
    let old_ops: &[Operation] = if exchange {
        &both
    } else {
        &[Operation::Delete]
    };
    let new_ops: &[Operation] = if exchange {
        &both
    } else {
        &[Operation::Create]
    };
    let jo = cx.judge_file(old_ops, &old_path);
    let jn = cx.judge_file(new_ops, &new_path);
    cx.record_file(FileOperationType::FileDelete, &old_path, &jo);
    cx.record_file(FileOperationType::FileCreate, &new_path, &jn);
    let j = strictest(jo, jn);
    if read_only_mount(&old.dir.fd) || read_only_mount(&new.dir.fd) {
        return cx.refused_by_kernel(FileOperationType::FileDelete, &old_path, &j, libc::EROFS);
    }
    let perform = Box::new(move || {
        let (Ok(on), Ok(nn)) = (old.name_cstr(), new.name_cstr()) else {
            return Reply::Error(libc::EINVAL);
        };
        // SAFETY: valid descriptors and NUL-terminated single names.
        done(unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                old.dir.fd.as_raw_fd(),
                on.as_ptr(),
                new.dir.fd.as_raw_fd(),
                nn.as_ptr(),
                flags,
            ) as libc::c_int
        })
    });
    cx.gate_file(FileOperationType::FileDelete, &old_path, j, perform)
}

fn strictest(a: Judgement, b: Judgement) -> Judgement {
    a.stricter(b)
}

/// `link`, `linkat`: a new name for an existing file is a creation there, and a write of the
/// file (the new name may fall under rules the old one did not).
pub(crate) fn link(
    cx: &mut Cx<'_>,
    (old_dirfd, old_arg): (i32, usize),
    (new_dirfd, new_arg): (i32, usize),
    flags: i32,
) -> Outcome {
    if flags & libc::AT_EMPTY_PATH != 0 {
        // Linking a descriptor needs CAP_DAC_READ_SEARCH, which scripts never have.
        return Errno(libc::ENOENT).into();
    }
    let old_path = match cx.path(old_arg) {
        Ok(p) => p,
        Err(e) => return e.into(),
    };
    let how = if flags & libc::AT_SYMLINK_FOLLOW != 0 {
        Lookup::FOLLOW
    } else {
        Lookup::NOFOLLOW
    };
    let old = match resolve::lookup(&cx.task, old_dirfd, &old_path, how) {
        Ok(f) => f,
        Err(e) => return e.into(),
    };
    let new = match parent_of(cx, new_dirfd, new_arg, libc::EEXIST) {
        Ok(p) => p,
        Err(o) => return o,
    };
    let (op, np) = (cx.policy_path(&old.path), cx.policy_path(&new.path()));
    let jo = cx.judge_file(&[Operation::Read, Operation::Write], &op);
    let jn = cx.judge_file(&[Operation::Create], &np);
    cx.record_file(FileOperationType::FileWrite, &op, &jo);
    cx.record_file(FileOperationType::FileCreate, &np, &jn);
    let j = strictest(jo, jn);
    if read_only_mount(&new.dir.fd) {
        return cx.refused_by_kernel(FileOperationType::FileCreate, &np, &j, libc::EROFS);
    }
    let perform = Box::new(move || {
        let (Ok(link), Ok(name)) = (
            CString::new(format!("/proc/self/fd/{}", old.fd.as_raw_fd())),
            new.name_cstr(),
        ) else {
            return Reply::Error(libc::EINVAL);
        };
        // SAFETY: NUL-terminated paths; the magic link names exactly the file decided on.
        done(unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                link.as_ptr(),
                new.dir.fd.as_raw_fd(),
                name.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        })
    });
    cx.gate_file(FileOperationType::FileCreate, &np, j, perform)
}

/// The file a `truncate`/`chmod`-like call names: path argument `arg` relative to `dirfd`, or
/// `dirfd` itself for an empty path with `AT_EMPTY_PATH`.
fn target(cx: &mut Cx<'_>, dirfd: i32, arg: usize, flags: i32) -> SysResult<resolve::Found> {
    let path = cx.path(arg)?;
    if path.is_empty() && flags & libc::AT_EMPTY_PATH != 0 {
        let fd = if dirfd == libc::AT_FDCWD {
            format!("/proc/{}/cwd", cx.task.tid)
        } else {
            format!("/proc/{}/fd/{dirfd}", cx.task.tid)
        };
        return resolve::lookup(&cx.task, libc::AT_FDCWD, fd.as_bytes(), Lookup::FOLLOW);
    }
    let how = if flags & libc::AT_SYMLINK_NOFOLLOW != 0 {
        Lookup::NOFOLLOW
    } else {
        Lookup::FOLLOW
    };
    resolve::lookup(&cx.task, dirfd, &path, how)
}

/// `truncate(path, length)`.
pub(crate) fn truncate(cx: &mut Cx<'_>, arg: usize, length: i64) -> Outcome {
    let found = match target(cx, libc::AT_FDCWD, arg, 0) {
        Ok(f) => f,
        Err(e) => return e.into(),
    };
    let kind = match stat_fd(&found.fd) {
        Ok(st) => st.st_mode & libc::S_IFMT,
        Err(e) => return e.into(),
    };
    if kind == libc::S_IFDIR {
        return Errno(libc::EISDIR).into();
    }
    if kind != libc::S_IFREG {
        return Errno(libc::EINVAL).into();
    }
    let path = cx.policy_path(&found.path);
    let j = cx.judge_file(&[Operation::Write], &path);
    cx.record_file(FileOperationType::FileWrite, &path, &j);
    if read_only_mount(&found.fd) {
        return cx.refused_by_kernel(FileOperationType::FileWrite, &path, &j, libc::EROFS);
    }
    let perform = Box::new(move || match resolve::reopen(&found.fd, libc::O_WRONLY) {
        // SAFETY: ftruncate on a descriptor opened for writing.
        Ok(fd) => done(unsafe { libc::ftruncate(fd.as_raw_fd(), length) }),
        Err(e) => e.into(),
    });
    cx.gate_file(FileOperationType::FileWrite, &path, j, perform)
}

/// `chmod(path, mode)`, `fchmodat(dirfd, path, mode)`, `fchmodat2(dirfd, path, mode, flags)`.
pub(crate) fn chmod(cx: &mut Cx<'_>, dirfd: i32, arg: usize, mode: u32, flags: i32) -> Outcome {
    let found = match target(cx, dirfd, arg, flags) {
        Ok(f) => f,
        Err(e) => return e.into(),
    };
    if stat_fd(&found.fd).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFLNK) {
        return Errno(libc::EOPNOTSUPP).into();
    }
    let path = cx.policy_path(&found.path);
    let j = cx.judge_file(&[Operation::Write], &path);
    cx.record_file(FileOperationType::FileWrite, &path, &j);
    if read_only_mount(&found.fd) {
        return cx.refused_by_kernel(FileOperationType::FileWrite, &path, &j, libc::EROFS);
    }
    let perform = Box::new(move || {
        let Ok(link) = CString::new(format!("/proc/self/fd/{}", found.fd.as_raw_fd())) else {
            return Reply::Error(libc::EINVAL);
        };
        // SAFETY: a NUL-terminated path; the magic link names exactly the file decided on.
        done(unsafe { libc::chmod(link.as_ptr(), mode & 0o7777) })
    });
    cx.gate_file(FileOperationType::FileWrite, &path, j, perform)
}
