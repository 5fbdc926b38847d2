//! One notification being decided: its arguments, the caller's memory, the policy, the events,
//! and how a decision becomes an answer (now, or held for approval).

use std::os::fd::{AsRawFd, OwnedFd};

use scriptgate_policy::events::{FileOperationType, OperationType};
use scriptgate_policy::{CompiledPolicy, Decision, Operation};

use super::approved::Approved;
use super::events::{self, EventLog, Judgement, Sink};
use super::memory::Memory;
use super::notify::{Errno, Listener, Notification, Reply, SysResult};
use super::procfs::{self, Task};

/// What to do once an operation may proceed.
pub(crate) type Perform = Box<dyn FnOnce() -> Reply + Send>;

/// How a decided call ends: an answer now, or held for the host's decision.
pub(crate) enum Outcome {
    Reply(Reply),
    Hold(Box<Hold>),
}

impl From<Errno> for Outcome {
    fn from(e: Errno) -> Outcome {
        Outcome::Reply(Reply::Error(e.0))
    }
}

impl From<Reply> for Outcome {
    fn from(r: Reply) -> Outcome {
        Outcome::Reply(r)
    }
}

/// An operation waiting for approval, and what it does if approved.
pub(crate) struct Hold {
    pub(crate) operation: OperationType,
    pub(crate) target: String,
    pub(crate) command: Option<String>,
    pub(crate) argv: Option<Vec<String>>,
    pub(crate) pid: i32,
    pub(crate) cwd: String,
    pub(crate) judgement: Judgement,
    pub(crate) perform: Perform,
}

/// Counters and the recent command lines, kept over the run.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) decided: u64,
    pub(crate) stats_allowed: u64,
    pub(crate) recent: std::collections::VecDeque<String>,
}

impl Counters {
    /// Keeps a command line for approval requests (the last few only).
    pub(crate) fn remember(&mut self, line: String) {
        if self.recent.len() == super::exec::RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(line.chars().take(512).collect());
    }
}

pub(crate) struct Cx<'a> {
    pub(crate) notif: &'a Notification,
    pub(crate) task: Task,
    pub(crate) listener: &'a Listener,
    pub(crate) policy: &'a CompiledPolicy,
    pub(crate) approved: &'a Approved,
    pub(crate) log: &'a mut EventLog,
    pub(crate) sink: &'a dyn Sink,
    pub(crate) counters: &'a mut Counters,
    mem: Option<Memory>,
}

impl<'a> Cx<'a> {
    pub(crate) fn new(
        notif: &'a Notification,
        listener: &'a Listener,
        policy: &'a CompiledPolicy,
        approved: &'a Approved,
        log: &'a mut EventLog,
        sink: &'a dyn Sink,
        counters: &'a mut Counters,
    ) -> Cx<'a> {
        Cx {
            notif,
            task: Task::new(notif.tid),
            listener,
            policy,
            approved,
            log,
            sink,
            counters,
            mem: None,
        }
    }

    /// Argument `i` as the kernel passed it.
    pub(crate) fn arg(&self, i: usize) -> u64 {
        self.notif.args[i]
    }

    /// Argument `i` as a `dirfd` (an int).
    pub(crate) fn dirfd(&self, i: usize) -> i32 {
        self.notif.args[i] as i32
    }

    /// The caller's memory (opened once per notification, checked to still be the caller's).
    pub(crate) fn mem(&mut self) -> SysResult<&Memory> {
        if self.mem.is_none() {
            self.mem = Some(Memory::open(self.notif.tid, self.listener, self.notif.id)?);
        }
        self.mem.as_ref().ok_or(Errno(libc::EIO))
    }

    /// The caller's memory, kept by an answer that writes into it later.
    pub(crate) fn take_mem(&mut self) -> SysResult<Memory> {
        self.mem()?;
        self.mem.take().ok_or(Errno(libc::EIO))
    }

    /// The path string argument `i`.
    pub(crate) fn path(&mut self, i: usize) -> SysResult<Vec<u8>> {
        let addr = self.arg(i);
        self.mem()?.read_path(addr)
    }

    /// A path as policies see it (the caller's `/proc` entries named `self`).
    pub(crate) fn policy_path(&self, path: &[u8]) -> Vec<u8> {
        procfs::for_policy(&self.task, path)
    }

    /// The stricter decision of `ops` on `path`.
    pub(crate) fn judge_file(&self, ops: &[Operation], path: &[u8]) -> Judgement {
        let mut out: Option<Judgement> = None;
        for &op in ops {
            let j = Judgement::of(&self.policy.decide_file(op, path));
            out = Some(match out {
                Some(prev) => prev.stricter(j),
                None => j,
            });
        }
        out.unwrap_or(Judgement {
            decision: Decision::Deny,
            rule: None,
            message: None,
        })
    }

    /// Records a file operation (allowed stats are only counted: an interpreter makes hundreds).
    pub(crate) fn record_file(&mut self, kind: FileOperationType, path: &[u8], j: &Judgement) {
        self.counters.decided += 1;
        if kind == FileOperationType::FileStat && j.decision == Decision::Allow {
            self.counters.stats_allowed += 1;
            return;
        }
        if self.log.wants_file() {
            self.log.push(events::file(kind, path, j), self.sink);
        } else {
            self.log.omit_file();
        }
    }

    /// Decides a file operation already recorded: proceed (`perform`), fail, or hold.
    pub(crate) fn gate_file(
        &mut self,
        kind: FileOperationType,
        path: &[u8],
        j: Judgement,
        perform: Perform,
    ) -> Outcome {
        let target = || String::from_utf8_lossy(path).into_owned();
        self.gate(kind.into(), target, None, j, perform)
    }

    /// The common end of every decision.
    pub(crate) fn gate(
        &mut self,
        kind: OperationType,
        target: impl FnOnce() -> String,
        command: Option<(String, Vec<String>)>,
        j: Judgement,
        perform: Perform,
    ) -> Outcome {
        match j.decision {
            Decision::Allow | Decision::Log => Outcome::Reply(perform()),
            Decision::Deny => {
                let event = events::blocked(kind, self.task.tid, target(), &j, libc::EACCES, None);
                self.log.push(event, self.sink);
                Outcome::Reply(Reply::Error(libc::EACCES))
            }
            Decision::Approve => {
                let (command, argv) = command.map_or((None, None), |(c, a)| (Some(c), Some(a)));
                Outcome::Hold(Box::new(Hold {
                    operation: kind,
                    target: target(),
                    command,
                    argv,
                    pid: self.task.tgid(),
                    cwd: self.task.cwd(),
                    judgement: j,
                    perform,
                }))
            }
        }
    }

    /// Records a refusal that is the kernel's, not the policy's (`EROFS` on a read-only mount),
    /// when the policy would not have allowed the operation either.
    pub(crate) fn refused_by_kernel(
        &mut self,
        kind: FileOperationType,
        path: &[u8],
        j: &Judgement,
        errno: i32,
    ) -> Outcome {
        if !matches!(j.decision, Decision::Allow | Decision::Log) {
            let target = String::from_utf8_lossy(path).into_owned();
            let event = events::blocked(kind.into(), self.task.tid, target, j, errno, None);
            self.log.push(event, self.sink);
        }
        Outcome::Reply(Reply::Error(errno))
    }
}

/// Whether the file system holding `fd` is mounted read-only.
pub(crate) fn read_only_mount(fd: &OwnedFd) -> bool {
    // SAFETY: statvfs is plain data filled by the kernel.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor (O_PATH is accepted) and out pointer.
    let r = unsafe { libc::fstatvfs(fd.as_raw_fd(), &mut st) };
    r == 0 && st.f_flag & libc::ST_RDONLY != 0
}

/// The umask of thread `tid` (from `/proc`; `0o022` if it cannot be read).
pub(crate) fn umask_of(tid: i32) -> u32 {
    read_umask(&format!("/proc/{tid}/status")).unwrap_or(0o022)
}

/// The supervisor's own umask, read once.
pub(crate) fn own_umask() -> u32 {
    static MASK: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *MASK.get_or_init(|| read_umask("/proc/self/status").unwrap_or(0o022))
}

fn read_umask(status: &str) -> Option<u32> {
    let text = std::fs::read_to_string(status).ok()?;
    let v = text.lines().find_map(|l| l.strip_prefix("Umask:"))?;
    u32::from_str_radix(v.trim(), 8).ok()
}
