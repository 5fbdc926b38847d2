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

use std::cell::Cell;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::notify::{Errno, SysResult};

/// The calling thread of a notification.
#[derive(Debug)]
pub(crate) struct Task {
    pub(crate) tid: i32,
    tgid: Cell<Option<i32>>,
}

impl Task {
    pub(crate) fn new(tid: i32) -> Task {
        Task {
            tid,
            tgid: Cell::new(None),
        }
    }

    /// The process the thread belongs to (read from `/proc` once, when needed).
    pub(crate) fn tgid(&self) -> i32 {
        if let Some(t) = self.tgid.get() {
            return t;
        }
        let t = tgid_of(self.tid).unwrap_or(self.tid);
        self.tgid.set(Some(t));
        t
    }

    /// The working directory, as text (for events).
    pub(crate) fn cwd(&self) -> String {
        std::fs::read_link(format!("/proc/{}/cwd", self.tid))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

fn tgid_of(pid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

fn self_pid() -> i32 {
    static PID: std::sync::OnceLock<i32> = std::sync::OnceLock::new();
    // SAFETY: getpid has no failure mode.
    *PID.get_or_init(|| unsafe { libc::getpid() })
}

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

/// `/proc/self`, `/proc/thread-self`, `/dev/fd`, `/dev/std*` as the caller's own entries.
fn rewrite_self(task: &Task, path: &[u8]) -> Vec<u8> {
    // Which entry, then its replacement: only a match reads the caller's tgid from /proc.
    const NAMES: [(&[u8], &str); 6] = [
        (b"/proc/self", ""),
        (b"/proc/thread-self", "task"),
        (b"/dev/fd", "/fd"),
        (b"/dev/stdin", "/fd/0"),
        (b"/dev/stdout", "/fd/1"),
        (b"/dev/stderr", "/fd/2"),
    ];
    for (prefix, tail) in NAMES {
        let Some(rest) = path.strip_prefix(prefix) else {
            continue;
        };
        if !rest.is_empty() && rest[0] != b'/' {
            continue;
        }
        let mut out = match tail {
            "task" => format!("/proc/{}/task/{}", task.tgid(), task.tid),
            _ => format!("/proc/{}{tail}", task.tgid()),
        }
        .into_bytes();
        out.extend_from_slice(rest);
        return out;
    }
    path.to_vec()
}

/// The pid of `/proc/<pid>` at the start of `path`, if it starts so.
fn proc_pid(path: &[u8]) -> Option<(i32, &[u8])> {
    let rest = path.strip_prefix(b"/proc/")?;
    let end = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
    let pid = std::str::from_utf8(&rest[..end]).ok()?.parse().ok()?;
    Some((pid, &rest[end..]))
}

/// Whether `pid` is the supervisor or one of its threads.
fn is_supervisor(task: &Task, pid: i32) -> bool {
    pid == self_pid() || (pid != task.tid && pid != task.tgid() && tgid_of(pid) == Some(self_pid()))
}

/// A path naming the supervisor's own `/proc` entries is refused: the supervisor may read them,
/// the script may not.
fn refuse_supervisor(task: &Task, path: &[u8]) -> SysResult<()> {
    match proc_pid(path) {
        Some((pid, _)) if is_supervisor(task, pid) => Err(Errno(libc::EACCES)),
        _ => Ok(()),
    }
}

/// Where a path that ended in the supervisor's `/proc` should have gone for the caller.
fn remap_supervisor(task: &Task, found: &[u8]) -> Option<Vec<u8>> {
    let (pid, rest) = proc_pid(found)?;
    if !is_supervisor(task, pid) {
        return None;
    }
    let mut out = if pid == self_pid() {
        match rest.strip_prefix(b"/task/") {
            Some(after) => {
                let end = after.iter().position(|&b| b == b'/').unwrap_or(after.len());
                format!("/proc/{}/task/{}", task.tgid(), task.tid)
                    .into_bytes()
                    .into_iter()
                    .chain(after[end..].iter().copied())
                    .collect::<Vec<u8>>()
            }
            None => {
                let mut v = format!("/proc/{}", task.tgid()).into_bytes();
                v.extend_from_slice(rest);
                v
            }
        }
    } else {
        let mut v = format!("/proc/{}", task.tid).into_bytes();
        v.extend_from_slice(rest);
        v
    };
    if out.is_empty() {
        out.push(b'/');
    }
    Some(out)
}

/// `/proc/<pid>/{fd/N,cwd,root,exe}` or `/proc/<pid>/task/<tid>/…` at the start of `path`: the
/// magic link and the rest.
fn split_magic(path: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let comps: Vec<&[u8]> = path[1..].split(|&b| b == b'/').collect();
    if comps.first() != Some(&&b"proc"[..]) || comps.len() < 3 || proc_pid(path).is_none() {
        return None;
    }
    let mut at = 2;
    if comps[at] == b"task" && comps.len() > 4 {
        at = 4;
    }
    let len = match comps[at] {
        b"fd" if comps.len() > at + 1 && !comps[at + 1].is_empty() => at + 2,
        b"cwd" | b"root" | b"exe" => at + 1,
        _ => return None,
    };
    let magic = comps[..len].join(&b'/');
    let rest = comps[len..].join(&b'/');
    let mut m = b"/".to_vec();
    m.extend_from_slice(&magic);
    Some((m, rest))
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

/// The path a policy sees: the caller's own `/proc/<pid>` is `/proc/self` (and its own thread's
/// `/proc/thread-self`), so policies can name them.
pub(crate) fn for_policy(task: &Task, path: &[u8]) -> Vec<u8> {
    let Some((pid, rest)) = proc_pid(path) else {
        return path.to_vec();
    };
    if pid != task.tid && pid != task.tgid() {
        return path.to_vec();
    }
    let thread = format!("/task/{}", task.tid);
    let (prefix, rest) = match rest.strip_prefix(thread.as_bytes()) {
        Some(r) if r.is_empty() || r[0] == b'/' => (&b"/proc/thread-self"[..], r),
        _ if pid == task.tgid() => (&b"/proc/self"[..], rest),
        _ => return path.to_vec(),
    };
    let mut out = prefix.to_vec();
    out.extend_from_slice(rest);
    out
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
    fn magic_links_are_split_from_the_rest() {
        let s = |p: &str| {
            split_magic(p.as_bytes()).map(|(a, b)| {
                (
                    String::from_utf8(a).expect("utf8"),
                    String::from_utf8(b).expect("utf8"),
                )
            })
        };
        assert_eq!(
            s("/proc/12/fd/3"),
            Some(("/proc/12/fd/3".into(), "".into()))
        );
        assert_eq!(
            s("/proc/12/fd/3/a/b"),
            Some(("/proc/12/fd/3".into(), "a/b".into()))
        );
        assert_eq!(
            s("/proc/12/cwd/x"),
            Some(("/proc/12/cwd".into(), "x".into()))
        );
        assert_eq!(
            s("/proc/12/task/13/fd/0"),
            Some(("/proc/12/task/13/fd/0".into(), "".into()))
        );
        assert_eq!(s("/proc/12/status"), None);
        assert_eq!(s("/proc/12/fd"), None, "the directory itself is no link");
        assert_eq!(s("/proc/self/fd/1"), None, "rewritten before");
        assert_eq!(s("/etc/passwd"), None);
    }

    #[test]
    fn the_callers_own_proc_entries_are_rewritten_and_named_self() {
        // This test process stands in for the caller: its own tid and tgid.
        // SAFETY: gettid/getpid have no failure mode.
        let (tid, pid) = unsafe { (libc::gettid(), libc::getpid()) };
        let task = Task::new(tid);
        let r = |p: &str| String::from_utf8(rewrite_self(&task, p.as_bytes())).expect("utf8");
        assert_eq!(r("/proc/self/status"), format!("/proc/{pid}/status"));
        assert_eq!(r("/proc/selfish"), "/proc/selfish");
        assert_eq!(r("/dev/stdin"), format!("/proc/{pid}/fd/0"));
        assert_eq!(r("/dev/fd/5"), format!("/proc/{pid}/fd/5"));
        assert_eq!(
            r("/proc/thread-self/fd"),
            format!("/proc/{pid}/task/{tid}/fd")
        );
        let p = |s: String| String::from_utf8(for_policy(&task, s.as_bytes())).expect("utf8");
        assert_eq!(p(format!("/proc/{pid}/fd/3")), "/proc/self/fd/3");
        assert_eq!(
            p(format!("/proc/{pid}/task/{tid}/fd/3")),
            "/proc/thread-self/fd/3"
        );
        assert_eq!(p("/proc/1/status".into()), "/proc/1/status");
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
