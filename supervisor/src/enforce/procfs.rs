//! The view from `/proc`: the supervisor is itself the process `/proc/1` names and shares the
//! script's uid, so the paths of a call are rewritten to the caller's own entries (`/proc/self`,
//! `/proc/thread-self`, `/dev/fd/N`, `/dev/std*`), the supervisor's own entries are never opened
//! for the script, and the caller's entries are named `self` for policies.

use std::cell::Cell;

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

/// `/proc/self`, `/proc/thread-self`, `/dev/fd`, `/dev/std*` as the caller's own entries.
pub(super) fn rewrite_self(task: &Task, path: &[u8]) -> Vec<u8> {
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
pub(super) fn refuse_supervisor(task: &Task, path: &[u8]) -> SysResult<()> {
    match proc_pid(path) {
        Some((pid, _)) if is_supervisor(task, pid) => Err(Errno(libc::EACCES)),
        _ => Ok(()),
    }
}

/// Where a path that ended in the supervisor's `/proc` should have gone for the caller.
pub(super) fn remap_supervisor(task: &Task, found: &[u8]) -> Option<Vec<u8>> {
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
pub(super) fn split_magic(path: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
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
}
