//! Opening job paths safely by construction: every path is resolved one component at a time
//! beneath a directory handle of its root, and any symlink anywhere on it is refused, so neither a
//! link planted by an earlier step nor one swapped in by a racing process can redirect an
//! operation.
//!
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` does it in one call. Where the kernel has no
//! `openat2` (gVisor answers ENOSYS) the same walk is done with `openat(…, O_NOFOLLOW)` per
//! component; job paths never contain `..` (`job::paths`), so the two resolve alike.
//!
//! One file (past 500 lines): both resolution paths and every operation built on them belong
//! together, so a reviewer sees each operation take the same safe route.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use scriptgate_supervisor::job::paths::{JobPath, Root};

/// `struct open_how` of openat2(2) (libc's is non-exhaustive).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// Beneath the starting directory, and no symlink (nor /proc magic link) on the way.
const RESOLVE: u64 =
    libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;

/// Set once `openat2` turned out to be missing: the walk is used from then on.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// Where the roots of job paths are on this machine (themselves in a container; temporary
/// directories in tests).
#[derive(Debug, Clone)]
pub(crate) struct Roots {
    workspace: PathBuf,
    tmp: PathBuf,
}

impl Roots {
    pub(crate) fn container() -> Self {
        Roots {
            workspace: Root::Workspace.path().into(),
            tmp: Root::Tmp.path().into(),
        }
    }

    #[cfg(test)]
    pub(crate) fn at(workspace: &std::path::Path, tmp: &std::path::Path) -> Self {
        Roots {
            workspace: workspace.into(),
            tmp: tmp.into(),
        }
    }

    /// A handle of `root` itself (which must not be a symlink).
    pub(crate) fn open(&self, root: Root) -> io::Result<Dir> {
        Dir::open_path(match root {
            Root::Workspace => &self.workspace,
            Root::Tmp => &self.tmp,
        })
    }
}

/// An open directory (read access, so its entries can be listed).
#[derive(Debug)]
pub(crate) struct Dir(OwnedFd);

/// What `fstatat` says about a name, without following a symlink.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Meta {
    pub(crate) mode: u32,
    pub(crate) size: u64,
}

impl Meta {
    fn of(st: &libc::stat) -> Meta {
        Meta {
            mode: st.st_mode,
            size: u64::try_from(st.st_size).unwrap_or(0),
        }
    }

    pub(crate) fn file_type(&self) -> u32 {
        self.mode & libc::S_IFMT
    }

    pub(crate) fn is_file(&self) -> bool {
        self.file_type() == libc::S_IFREG
    }

    pub(crate) fn is_dir(&self) -> bool {
        self.file_type() == libc::S_IFDIR
    }

    pub(crate) fn permissions(&self) -> u32 {
        self.mode & 0o777
    }
}

impl Dir {
    /// The directory at `path` (its last component must not be a symlink).
    pub(crate) fn open_path(path: &std::path::Path) -> io::Result<Dir> {
        let c = cstring(&path.to_string_lossy())?;
        // SAFETY: a valid NUL-terminated path and integer flags.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        Ok(Dir(owned(fd)?))
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }

    /// The directory `rel` beneath this one.
    pub(crate) fn open_dir(&self, rel: &[String]) -> io::Result<Dir> {
        if rel.is_empty() {
            return Ok(Dir(self.0.try_clone()?));
        }
        open_beneath(self.fd(), rel, libc::O_RDONLY | libc::O_DIRECTORY, 0).map(Dir)
    }

    /// The directory `rel` beneath this one, creating missing components (mode 0755).
    pub(crate) fn create_dirs(&self, rel: &[String]) -> io::Result<(Dir, Vec<Vec<String>>)> {
        let mut created = Vec::new();
        let mut dir = Dir(self.0.try_clone()?);
        for (i, name) in rel.iter().enumerate() {
            match dir.mkdir_at(name, 0o755) {
                Ok(()) => created.push(rel[..=i].to_vec()),
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                Err(e) => return Err(e),
            }
            dir = dir.open_dir(std::slice::from_ref(name))?;
        }
        Ok((dir, created))
    }

    /// A file beneath this directory, opened with `flags` (`O_NOFOLLOW` and `O_CLOEXEC` added).
    pub(crate) fn open_file(
        &self,
        rel: &[String],
        flags: libc::c_int,
        mode: u32,
    ) -> io::Result<OwnedFd> {
        open_beneath(self.fd(), rel, flags, mode)
    }

    /// One name in this directory, never following a symlink.
    pub(crate) fn open_at(&self, name: &str, flags: libc::c_int, mode: u32) -> io::Result<OwnedFd> {
        let c = cstring(name)?;
        // SAFETY: a directory fd we own, a valid name, integer flags.
        let fd = unsafe {
            libc::openat(
                self.0.as_raw_fd(),
                c.as_ptr(),
                flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        };
        owned(fd)
    }

    /// `Some` metadata of `name` (a symlink is reported as one), `None` when it does not exist.
    pub(crate) fn stat_at(&self, name: &str) -> io::Result<Option<Meta>> {
        let c = cstring(name)?;
        // SAFETY: stat is plain data filled by fstatat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a directory fd we own, a valid name, a pointer to a local stat.
        let ret = unsafe {
            libc::fstatat(
                self.0.as_raw_fd(),
                c.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if ret == 0 {
            return Ok(Some(Meta::of(&st)));
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOENT) {
            Ok(None)
        } else {
            Err(e)
        }
    }

    pub(crate) fn mkdir_at(&self, name: &str, mode: u32) -> io::Result<()> {
        let c = cstring(name)?;
        // SAFETY: a directory fd we own and a valid name.
        cvt(unsafe { libc::mkdirat(self.0.as_raw_fd(), c.as_ptr(), mode as libc::mode_t) })
    }

    pub(crate) fn unlink_at(&self, name: &str, dir: bool) -> io::Result<()> {
        let c = cstring(name)?;
        let flags = if dir { libc::AT_REMOVEDIR } else { 0 };
        // SAFETY: a directory fd we own and a valid name.
        cvt(unsafe { libc::unlinkat(self.0.as_raw_fd(), c.as_ptr(), flags) })
    }

    /// Renames `from` to `to` in this directory; with `no_replace`, fails (EEXIST) when `to`
    /// exists.
    pub(crate) fn rename_at(&self, from: &str, to: &str, no_replace: bool) -> io::Result<()> {
        let (a, b) = (cstring(from)?, cstring(to)?);
        let dir = self.0.as_raw_fd();
        if no_replace {
            // SAFETY: directory fds we own and valid names.
            let ret = unsafe {
                libc::renameat2(dir, a.as_ptr(), dir, b.as_ptr(), libc::RENAME_NOREPLACE)
            };
            if ret == 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if !matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) {
                return Err(e);
            }
            // Without RENAME_NOREPLACE: a hard link refuses an existing target just the same.
            // SAFETY: as above.
            cvt(unsafe { libc::linkat(dir, a.as_ptr(), dir, b.as_ptr(), 0) })?;
            return self.unlink_at(from, false);
        }
        // SAFETY: as above.
        cvt(unsafe { libc::renameat(dir, a.as_ptr(), dir, b.as_ptr()) })
    }

    /// Another name for `from` in this directory (a hard link).
    pub(crate) fn link_at(&self, from: &str, to: &str) -> io::Result<()> {
        let (a, b) = (cstring(from)?, cstring(to)?);
        let dir = self.0.as_raw_fd();
        // SAFETY: directory fds we own and valid names.
        cvt(unsafe { libc::linkat(dir, a.as_ptr(), dir, b.as_ptr(), 0) })
    }

    /// The names in this directory (without `.` and `..`), in no particular order.
    pub(crate) fn names(&self) -> io::Result<Vec<String>> {
        // fdopendir takes the descriptor: give it a duplicate.
        let dup = self.0.try_clone()?;
        // SAFETY: a directory fd we own; on success the stream owns it.
        let stream = unsafe { libc::fdopendir(dup.as_raw_fd()) };
        if stream.is_null() {
            return Err(io::Error::last_os_error());
        }
        std::mem::forget(dup);
        let mut names = Vec::new();
        loop {
            // SAFETY: a stream opened above and not closed yet.
            let entry = unsafe { libc::readdir64(stream) };
            if entry.is_null() {
                break;
            }
            // SAFETY: readdir64 returned a valid entry whose d_name is NUL-terminated.
            let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) };
            let bytes = name.to_bytes();
            if bytes != b"." && bytes != b".." {
                names.push(String::from_utf8_lossy(bytes).into_owned());
            }
        }
        // SAFETY: the stream from fdopendir, closed once (it closes the duplicate fd).
        unsafe { libc::closedir(stream) };
        Ok(names)
    }
}

/// The final and intermediate components of `rel` beneath `dir`, no symlink anywhere.
fn open_beneath(
    dir: BorrowedFd<'_>,
    rel: &[String],
    flags: libc::c_int,
    mode: u32,
) -> io::Result<OwnedFd> {
    if !NO_OPENAT2.load(Ordering::Relaxed) {
        match openat2(dir.as_raw_fd(), &rel.join("/"), flags, mode) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => {
                NO_OPENAT2.store(true, Ordering::Relaxed);
            }
            other => return other,
        }
    }
    walk(dir, rel, flags, mode)
}

fn openat2(dir: RawFd, rel: &str, flags: libc::c_int, mode: u32) -> io::Result<OwnedFd> {
    let c = cstring(rel)?;
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: if flags & libc::O_CREAT != 0 {
            u64::from(mode)
        } else {
            0
        },
        resolve: RESOLVE,
    };
    // SAFETY: a directory fd, a valid path, and an open_how of its own size.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir,
            c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    owned(fd as libc::c_int)
}

/// Component by component: every directory on the way is pinned as an `O_PATH | O_NOFOLLOW`
/// handle whose type is checked on the handle itself (a symlink gives ELOOP), and the next
/// component is opened relative to that handle, so nothing can be swapped in between. (gVisor
/// ignores `O_NOFOLLOW` beside `O_DIRECTORY`, which is why directories are not opened that way.)
fn walk(dir: BorrowedFd<'_>, rel: &[String], flags: libc::c_int, mode: u32) -> io::Result<OwnedFd> {
    let Some((last, parents)) = rel.split_last() else {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    };
    let mut current: Option<OwnedFd> = None;
    for name in parents {
        let base = current.as_ref().map_or(dir.as_raw_fd(), |f| f.as_raw_fd());
        current = Some(pin_dir(base, &cstring(name)?)?);
    }
    let base = current.as_ref().map_or(dir.as_raw_fd(), |f| f.as_raw_fd());
    let name = cstring(last)?;
    if flags & libc::O_DIRECTORY != 0 {
        let pinned = pin_dir(base, &name)?;
        // SAFETY: a directory handle we hold, a static name, integer flags.
        let fd =
            unsafe { libc::openat(pinned.as_raw_fd(), c".".as_ptr(), flags | libc::O_CLOEXEC) };
        return owned(fd);
    }
    // SAFETY: a directory handle we hold, a valid name, integer flags (a final symlink: ELOOP).
    let fd = unsafe {
        libc::openat(
            base,
            name.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    owned(fd)
}

/// `name` in `dir` as an `O_PATH` handle, if it is a directory (ELOOP for a symlink).
fn pin_dir(dir: RawFd, name: &std::ffi::CStr) -> io::Result<OwnedFd> {
    // SAFETY: a directory handle and a valid name.
    owned(unsafe { pin_dir_raw(dir, name) })
}

/// [`pin_dir`] without allocation, also for a child between fork and exec: the new descriptor,
/// or -1 with errno set.
///
/// # Safety
/// `dir` is an open directory (or `O_PATH` handle) and `name` a NUL-terminated name.
unsafe fn pin_dir_raw(dir: libc::c_int, name: &std::ffi::CStr) -> libc::c_int {
    // SAFETY: see the function's contract; stat is plain data filled by fstat.
    unsafe {
        let fd = libc::openat(
            dir,
            name.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return -1;
        }
        let mut st: libc::stat = std::mem::zeroed();
        let errno = if libc::fstat(fd, &mut st) < 0 {
            *libc::__errno_location()
        } else {
            match st.st_mode & libc::S_IFMT {
                libc::S_IFDIR => return fd,
                libc::S_IFLNK => libc::ELOOP,
                _ => libc::ENOTDIR,
            }
        };
        libc::close(fd);
        *libc::__errno_location() = errno;
        -1
    }
}

pub(crate) fn cstring(s: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn owned(fd: libc::c_int) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned to us alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn cvt(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `fstat` of an open descriptor.
pub(crate) fn fstat(fd: BorrowedFd<'_>) -> io::Result<Meta> {
    // SAFETY: stat is plain data filled by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a descriptor we hold and a pointer to a local stat.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(Meta::of(&st))
}

/// The current directory becomes `rel` beneath the directory `root`, with the same rules as
/// every other open (no symlink anywhere). Runs in a child between fork and exec: system calls
/// only, on strings prepared before the fork.
///
/// # Safety
/// Only changes the calling process's working directory; callers pass NUL-terminated strings.
pub(crate) unsafe fn chdir_beneath(
    root: &std::ffi::CStr,
    joined: &std::ffi::CStr,
    rel: &[CString],
    walk_only: bool,
) -> io::Result<()> {
    let dir_flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    // SAFETY: valid NUL-terminated strings and integer flags; descriptors stay in this process.
    unsafe {
        let mut fd = libc::open(root.as_ptr(), dir_flags | libc::O_NOFOLLOW);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        if !rel.is_empty() {
            let mut next = -1;
            if !walk_only {
                let how = OpenHow {
                    flags: dir_flags as u64,
                    mode: 0,
                    resolve: RESOLVE,
                };
                next = libc::syscall(
                    libc::SYS_openat2,
                    fd,
                    joined.as_ptr(),
                    &how as *const OpenHow,
                    std::mem::size_of::<OpenHow>(),
                ) as libc::c_int;
                let errno = io::Error::last_os_error().raw_os_error();
                if next < 0 && !matches!(errno, Some(libc::ENOSYS | libc::EPERM)) {
                    return Err(io::Error::last_os_error());
                }
            }
            if next < 0 {
                for name in rel {
                    next = pin_dir_raw(fd, name);
                    if next < 0 {
                        return Err(io::Error::last_os_error());
                    }
                    libc::close(fd);
                    fd = next;
                }
            }
            fd = next;
        }
        if libc::fchdir(fd) < 0 {
            return Err(io::Error::last_os_error());
        }
        libc::close(fd);
    }
    Ok(())
}

/// Whether `openat2` turned out to be missing (so a child walks instead of trying it).
pub(crate) fn walk_only() -> bool {
    NO_OPENAT2.load(Ordering::Relaxed)
}

/// The root handle and components of a job path.
pub(crate) fn locate<'a>(roots: &Roots, path: &'a JobPath) -> io::Result<(Dir, &'a [String])> {
    Ok((roots.open(path.root())?, path.components()))
}

#[cfg(test)]
pub(crate) fn force_walk(on: bool) {
    NO_OPENAT2.store(on, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    fn parts(p: &str) -> Vec<String> {
        p.split('/').map(String::from).collect()
    }

    #[test]
    fn symlinks_are_refused_at_any_depth_with_and_without_openat2() {
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(root.path().join("a/b")).expect("dirs");
        std::fs::write(root.path().join("a/b/f"), "x").expect("file");
        symlink(root.path().join("a"), root.path().join("link")).expect("dir link");
        symlink("b", root.path().join("a/inner")).expect("inner link");
        symlink("f", root.path().join("a/b/flink")).expect("file link");
        let dir = Roots::at(root.path(), root.path())
            .open(Root::Workspace)
            .expect("root");
        for walk_only in [false, true] {
            force_walk(walk_only);
            assert!(dir.open_file(&parts("a/b/f"), libc::O_RDONLY, 0).is_ok());
            for bad in ["link/b/f", "a/inner/f", "a/b/flink"] {
                let e = dir
                    .open_file(&parts(bad), libc::O_RDONLY, 0)
                    .expect_err(bad);
                assert_eq!(
                    e.raw_os_error(),
                    Some(libc::ELOOP),
                    "{bad} (walk: {walk_only})"
                );
            }
            let e = dir
                .open_dir(&parts("link"))
                .expect_err("a link to a directory");
            assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
        }
        force_walk(false);
    }

    #[test]
    fn created_directories_are_reported_and_links_stop_creation() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = Roots::at(root.path(), root.path())
            .open(Root::Tmp)
            .expect("root");
        let (_, created) = dir.create_dirs(&parts("x/y/z")).expect("created");
        assert_eq!(created.len(), 3);
        symlink("/etc", root.path().join("x/evil")).expect("link");
        let e = dir
            .create_dirs(&parts("x/evil/sub"))
            .expect_err("through a link");
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
        assert!(!std::path::Path::new("/etc/sub").exists());
    }
}
