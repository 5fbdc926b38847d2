//! Finding the file a path names for the calling process, opened by the supervisor (`O_PATH`), so
//! a decision is made on what was opened (the `readlink` of the supervisor's own descriptor) and
//! never on a string that can change afterwards.
//!
//! The supervisor shares the script's uid, groups, root and mount namespace (the enforcement
//! refuses to start otherwise), so its lookups see and may do what the script's would. What
//! differs is the view from `/proc`: `/proc/self`, `/proc/thread-self`, `/dev/fd/N` and
//! `/dev/std{in,out,err}` are rewritten to the caller's own entries, relative paths start at the
//! caller's working directory or `dirfd` (through `/proc/<tid>/cwd` and `/proc/<tid>/fd/N`), and
//! the magic links of `/proc/<pid>/{fd/N,cwd,root,exe}` are followed explicitly. Every other
//! magic link is refused (`RESOLVE_NO_MAGICLINKS`: a script's symlink into `/proc/self/fd` would
//! otherwise reach the supervisor's own descriptors), and anything that lands in the supervisor's
//! own `/proc/<pid>` (through a symlink such as `/proc/mounts` → `self/mounts`) is looked up again
//! in the caller's, or refused.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::notify::{Errno, SysResult};
pub(crate) use super::procfs::Task;
use super::procfs::{refuse_supervisor, remap_supervisor, rewrite_self, split_magic};

/// A file the supervisor found for the process (an `O_PATH` descriptor) and its path.
#[derive(Debug)]
pub(crate) struct Found {
    pub(crate) fd: OwnedFd,
    /// Where it is (`readlink` of the supervisor's descriptor): absolute, symlinks resolved; a
    /// pseudo-name such as `pipe:[123]` for files without a path.
    pub(crate) path: Vec<u8>,
}

/// How to look a path up.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Lookup {
    /// Follow a symlink in the last component.
    pub(crate) follow: bool,
    /// The result must be a directory.
    pub(crate) directory: bool,
}

impl Lookup {
    pub(crate) const FOLLOW: Lookup = Lookup {
        follow: true,
        directory: false,
    };
    pub(crate) const NOFOLLOW: Lookup = Lookup {
        follow: false,
        directory: false,
    };
    pub(crate) const DIRECTORY: Lookup = Lookup {
        follow: true,
        directory: true,
    };
}

/// `path` (as the process passed it, relative to `dirfd`), found for `task`.
pub(crate) fn lookup(task: &Task, dirfd: i32, path: &[u8], how: Lookup) -> SysResult<Found> {
    if path.is_empty() {
        return Err(Errno(libc::ENOENT));
    }
    let found = lookup_once(task, dirfd, path, how)?;
    match remap_supervisor(task, &found.path) {
        None => Ok(found),
        Some(again) => {
            // Landed in the supervisor's /proc through a symlink to /proc/self: the caller's own.
            let found = lookup_once(task, libc::AT_FDCWD, &again, how)?;
            if remap_supervisor(task, &found.path).is_some() {
                return Err(Errno(libc::EACCES));
            }
            Ok(found)
        }
    }
}

/// The directory holding the last component of `path`, and that component: for calls that
/// create, remove or rename a name (which never follow a symlink in it).
#[derive(Debug)]
pub(crate) struct Parent {
    pub(crate) dir: Found,
    pub(crate) name: Vec<u8>,
}

impl Parent {
    /// The path the name has (its directory's path and the name).
    pub(crate) fn path(&self) -> Vec<u8> {
        join(&self.dir.path, &self.name)
    }

    pub(crate) fn name_cstr(&self) -> SysResult<CString> {
        CString::new(self.name.clone()).map_err(|_| Errno(libc::EINVAL))
    }
}

/// Splits `path` into its directory (found) and last name. `.` and `..` as the last name are
/// `Err(EEXIST)`-like cases the callers map: they get `Ok(None)`.
pub(crate) fn lookup_parent(task: &Task, dirfd: i32, path: &[u8]) -> SysResult<Option<Parent>> {
    if path.is_empty() {
        return Err(Errno(libc::ENOENT));
    }
    let trimmed = {
        let end = path.iter().rposition(|&b| b != b'/').map_or(0, |i| i + 1);
        &path[..end]
    };
    if trimmed.is_empty() {
        // "/" (or "///"): no name.
        return Ok(None);
    }
    let (dir, name) = match trimmed.iter().rposition(|&b| b == b'/') {
        Some(0) => (&b"/"[..], &trimmed[1..]),
        Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
        None => (&b"."[..], trimmed),
    };
    if name == b"." || name == b".." {
        return Ok(None);
    }
    let dir = lookup(task, dirfd, dir, Lookup::DIRECTORY)?;
    Ok(Some(Parent {
        dir,
        name: name.to_vec(),
    }))
}

/// `dir/name`.
pub(crate) fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(dir.len() + name.len() + 1);
    out.extend_from_slice(dir);
    if !dir.ends_with(b"/") {
        out.push(b'/');
    }
    out.extend_from_slice(name);
    out
}

fn lookup_once(task: &Task, dirfd: i32, path: &[u8], how: Lookup) -> SysResult<Found> {
    let tidy = tidy(path);
    let fd = if tidy.first() == Some(&b'/') {
        let absolute = rewrite_self(task, &tidy);
        refuse_supervisor(task, &absolute)?;
        match split_magic(&absolute) {
            Some((magic, rest)) => {
                let base = open_magic(&magic, rest.is_empty() && !how.follow)?;
                if rest.is_empty() {
                    base
                } else {
                    openat2(base.as_raw_fd(), &rest, how)?
                }
            }
            None => openat2(libc::AT_FDCWD, &absolute, how)?,
        }
    } else {
        let base = if dirfd == libc::AT_FDCWD {
            open_magic(format!("/proc/{}/cwd", task.tid).as_bytes(), false)?
        } else if dirfd < 0 {
            return Err(Errno(libc::EBADF));
        } else {
            open_magic(format!("/proc/{}/fd/{dirfd}", task.tid).as_bytes(), false).map_err(|e| {
                if e.0 == libc::ENOENT {
                    Errno(libc::EBADF)
                } else {
                    e
                }
            })?
        };
        if tidy.is_empty() {
            base
        } else {
            openat2(base.as_raw_fd(), &tidy, how)?
        }
    };
    if how.directory && !is_dir(&fd) {
        return Err(Errno(libc::ENOTDIR));
    }
    let path = fd_path(&fd)?;
    Ok(Found { fd, path })
}

/// Repeated slashes and `.` components folded away (`..` is left to the lookup: folding it over
/// a symlink would change the answer). A trailing slash is kept: it requires a directory.
fn tidy(path: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(path.len());
    if path.first() == Some(&b'/') {
        out.push(b'/');
    }
    let trailing = path.ends_with(b"/") || path.ends_with(b"/.") || path == b".";
    for c in path
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
    {
        if !out.is_empty() && !out.ends_with(b"/") {
            out.push(b'/');
        }
        out.extend_from_slice(c);
    }
    if trailing && !out.is_empty() && !out.ends_with(b"/") {
        out.push(b'/');
    }
    out
}

fn cstring(path: &[u8]) -> SysResult<CString> {
    CString::new(path).map_err(|_| Errno(libc::EINVAL))
}

/// Opens a `/proc` magic link, following it (or the link itself with `nofollow`).
fn open_magic(path: &[u8], nofollow: bool) -> SysResult<OwnedFd> {
    let c = cstring(path)?;
    let flags = libc::O_PATH | libc::O_CLOEXEC | if nofollow { libc::O_NOFOLLOW } else { 0 };
    // SAFETY: a NUL-terminated path; the result is checked.
    let fd = unsafe { libc::open(c.as_ptr(), flags) };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: a new descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat2(dirfd, path, O_PATH…, RESOLVE_NO_MAGICLINKS)`.
fn openat2(dirfd: RawFd, path: &[u8], how: Lookup) -> SysResult<OwnedFd> {
    let c = cstring(path)?;
    // SAFETY: open_how is plain data (non-exhaustive in libc, so built from zeroes).
    let mut open_how: libc::open_how = unsafe { std::mem::zeroed() };
    let mut flags = libc::O_PATH | libc::O_CLOEXEC;
    if !how.follow {
        flags |= libc::O_NOFOLLOW;
    }
    if how.directory {
        flags |= libc::O_DIRECTORY;
    }
    open_how.flags = flags as u64;
    open_how.resolve = libc::RESOLVE_NO_MAGICLINKS;
    loop {
        // SAFETY: valid path and struct for their sizes.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dirfd,
                c.as_ptr(),
                &open_how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd >= 0 {
            // SAFETY: a new descriptor.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
        }
        let e = Errno::last();
        // EAGAIN: a concurrent rename raced the lookup (openat2 refuses rather than guess).
        if e.0 != libc::EAGAIN && e.0 != libc::EINTR {
            return Err(e);
        }
    }
}

fn is_dir(fd: &OwnedFd) -> bool {
    stat_fd(fd).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
}

/// `fstat` of a descriptor (an `O_PATH` one included).
pub(crate) fn stat_fd(fd: &OwnedFd) -> SysResult<libc::stat> {
    // SAFETY: stat is plain data filled by the kernel.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid descriptor, empty path with AT_EMPTY_PATH, valid out pointer.
    let r = unsafe { libc::fstatat(fd.as_raw_fd(), c"".as_ptr(), &mut st, libc::AT_EMPTY_PATH) };
    if r < 0 {
        return Err(Errno::last());
    }
    Ok(st)
}

/// Where the supervisor's descriptor `fd` points.
pub(crate) fn fd_path(fd: &OwnedFd) -> SysResult<Vec<u8>> {
    let link = format!("/proc/self/fd/{}\0", fd.as_raw_fd());
    let mut buf = vec![0u8; 4200];
    // SAFETY: a NUL-terminated path and a buffer of the given length.
    let n = unsafe { libc::readlink(link.as_ptr().cast(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(Errno::last());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// Opens the file `found` refers to again, for real, with `flags` (no `O_CREAT`, `O_EXCL` or
/// `O_NOFOLLOW`: the file exists and was decided on).
pub(crate) fn reopen(found: &OwnedFd, flags: i32) -> SysResult<OwnedFd> {
    let strip = libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_PATH;
    let link = format!("/proc/self/fd/{}\0", found.as_raw_fd());
    loop {
        // SAFETY: a NUL-terminated path; the mode is unused without O_CREAT.
        let fd = unsafe { libc::open(link.as_ptr().cast(), (flags & !strip) | libc::O_CLOEXEC) };
        if fd >= 0 {
            // SAFETY: a new descriptor.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        let e = Errno::last();
        if e.0 != libc::EINTR {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_tidied_without_touching_dot_dot() {
        let t = |p: &str| String::from_utf8(tidy(p.as_bytes())).expect("utf8");
        assert_eq!(t("//etc///./passwd"), "/etc/passwd");
        assert_eq!(t("a/./b/"), "a/b/");
        assert_eq!(t("a/.."), "a/..");
        assert_eq!(t("."), "");
        assert_eq!(t("./x"), "x");
        assert_eq!(t("dir/."), "dir/");
    }

    #[test]
    fn lookups_find_files_and_parents_as_the_caller() {
        // SAFETY: gettid has no failure mode.
        let task = Task::new(unsafe { libc::gettid() });
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").expect("write");
        std::os::unix::fs::symlink(&file, dir.path().join("l")).expect("symlink");
        let abs = |p: &std::path::Path| p.to_str().expect("utf8").as_bytes().to_vec();
        let found = lookup(
            &task,
            libc::AT_FDCWD,
            &abs(&dir.path().join("l")),
            Lookup::FOLLOW,
        )
        .expect("found");
        assert_eq!(found.path, abs(&file), "decided on the target");
        let link = lookup(
            &task,
            libc::AT_FDCWD,
            &abs(&dir.path().join("l")),
            Lookup::NOFOLLOW,
        )
        .expect("found");
        assert_eq!(link.path, abs(&dir.path().join("l")));
        let parent = lookup_parent(&task, libc::AT_FDCWD, &abs(&dir.path().join("new/")))
            .expect("parent")
            .expect("a name");
        assert_eq!(parent.name, b"new");
        assert_eq!(parent.path(), abs(&dir.path().join("new")));
        assert!(
            lookup_parent(&task, libc::AT_FDCWD, b"/")
                .expect("root")
                .is_none()
        );
        assert_eq!(
            lookup(&task, libc::AT_FDCWD, b"/nonexistent/x", Lookup::FOLLOW).map(|_| ()),
            Err(Errno(libc::ENOENT))
        );
        assert_eq!(
            lookup(&task, libc::AT_FDCWD, &abs(&file), Lookup::DIRECTORY).map(|_| ()),
            Err(Errno(libc::ENOTDIR))
        );
        // A symlink into /proc/self/fd is a magic link: refused, never the supervisor's fds.
        std::os::unix::fs::symlink("/proc/self/fd/0", dir.path().join("m")).expect("symlink");
        assert_eq!(
            lookup(
                &task,
                libc::AT_FDCWD,
                &abs(&dir.path().join("m")),
                Lookup::FOLLOW
            )
            .map(|_| ()),
            Err(Errno(libc::ELOOP))
        );
    }
}
