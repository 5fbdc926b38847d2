//! The monitor: one thread per listener that receives every notification of the process tree,
//! decides it in the current phase, answers it or holds it for approval, and sends the events.
//!
//! Held operations wait in a table, not on threads: the thread goes on deciding the other
//! processes' calls while any number wait (bounded by [`MAX_PENDING`]); a decision from the host
//! or the deadline ends each one. The only other threads are the short-lived helpers that open a
//! FIFO that waits for its peer (at most [`MAX_HELPERS`] at once).
//!
//! Just past 500 lines with its tests: the receive loop, the held table and the deadline sweep
//! share one state and are read together.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use scriptgate_policy::CompiledPolicy;
use scriptgate_policy::events::OperationType;
use scriptgate_supervisor::enforcement::{
    ApprovalDecision, ApprovalRequest, ApprovalVerdict, EnforceSummary,
};

use super::bpf::Call;
use super::context::{Counters, Cx, Hold, Outcome, Perform};
use super::events::{self, EventLog, Judgement, Sink};
use super::notify::{Listener, Notification, Reply};
use super::{exec, files, net, paths, stat};

/// Operations held for approval at once; more fail at once (`EACCES`).
pub(crate) const MAX_PENDING: usize = 512;
/// Helper threads opening FIFOs at once; more fail with `EAGAIN`.
pub(crate) const MAX_HELPERS: usize = 16;

/// Approval ids, unique in the supervisor (several monitors may run).
static NEXT_APPROVAL: AtomicU64 = AtomicU64::new(1);

/// What the decisions are made with once the job's policy applies.
#[derive(Debug)]
pub(crate) struct Rules {
    pub(crate) policy: CompiledPolicy,
    pub(crate) event_cap: u32,
    pub(crate) approval_timeout: Duration,
    /// Command lines approved before the run (see `approved`).
    pub(crate) approved: super::approved::Approved,
}

/// Which answers the monitor gives.
#[derive(Debug)]
pub(crate) enum Phase {
    /// The interpreter's own start-up, before any script exists: everything runs.
    Bootstrap,
    /// A run without a policy (the interpreter was started ready for one): everything runs.
    Passthrough,
    /// The job's policy decides.
    Enforce(Arc<Rules>),
}

/// Shared between the monitor thread and the rest of the supervisor.
#[derive(Debug)]
pub(crate) struct Control {
    phase: Mutex<Arc<Phase>>,
    decisions: Mutex<Vec<ApprovalDecision>>,
    stop: std::sync::atomic::AtomicBool,
    wake: OwnedFd,
    floor: Mutex<String>,
}

impl Control {
    pub(crate) fn new(phase: Phase) -> std::io::Result<Arc<Control>> {
        // SAFETY: eventfd with flags; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Arc::new(Control {
            phase: Mutex::new(Arc::new(phase)),
            decisions: Mutex::new(Vec::new()),
            stop: std::sync::atomic::AtomicBool::new(false),
            // SAFETY: a new descriptor.
            wake: unsafe { OwnedFd::from_raw_fd(fd) },
            floor: Mutex::new("none".into()),
        }))
    }

    /// Switches the phase. Every notification received after this returns is decided in the new
    /// phase (the monitor reads the phase after receiving each one).
    pub(crate) fn set_phase(&self, phase: Phase) {
        *self.phase.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(phase);
    }

    pub(crate) fn set_floor(&self, floor: String) {
        *self.floor.lock().unwrap_or_else(|e| e.into_inner()) = floor;
    }

    fn phase(&self) -> Arc<Phase> {
        self.phase.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Hands the host's decision to the monitor (ignored if no operation waits under its id).
    pub(crate) fn deliver(&self, decision: ApprovalDecision) {
        self.decisions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(decision);
        self.poke();
    }

    /// Asks the monitor to stop (after the process tree is gone).
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.poke();
    }

    fn poke(&self) {
        let one: u64 = 1;
        // SAFETY: an 8-byte write to our eventfd.
        unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    fn drain_wake(&self) {
        let mut v: u64 = 0;
        // SAFETY: an 8-byte read from our non-blocking eventfd.
        unsafe { libc::read(self.wake.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }
}

struct Pending {
    notification: u64,
    perform: Perform,
    deadline: Instant,
    kind: OperationType,
    target: String,
    pid: i32,
    judgement: Judgement,
}

pub(crate) struct Monitor {
    listener: Arc<Listener>,
    control: Arc<Control>,
    sink: Arc<dyn Sink>,
    log: Option<EventLog>,
    counters: Counters,
    pending: HashMap<u64, Pending>,
    launch: bool,
    helpers: Arc<AtomicUsize>,
    peak_pending: usize,
    peak_threads: u32,
}

impl Monitor {
    pub(crate) fn new(
        listener: Listener,
        control: Arc<Control>,
        sink: Arc<dyn Sink>,
        launch: bool,
    ) -> Monitor {
        Monitor {
            listener: Arc::new(listener),
            control,
            sink,
            log: None,
            counters: Counters::default(),
            pending: HashMap::new(),
            launch,
            helpers: Arc::new(AtomicUsize::new(0)),
            peak_pending: 0,
            peak_threads: threads(),
        }
    }

    /// Serves notifications until the process tree is gone or [`Control::stop`].
    pub(crate) fn run(mut self) {
        loop {
            let mut fds = [
                libc::pollfd {
                    fd: self.listener.raw(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.control.wake.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let timeout = self.timeout_ms();
            // SAFETY: a valid array of two pollfds.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) };
            if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                break;
            }
            if fds[0].revents & libc::POLLIN != 0 {
                self.on_notification();
            } else if fds[0].revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
                // Every process under the filter is gone.
                break;
            }
            if fds[1].revents & libc::POLLIN != 0 {
                self.control.drain_wake();
                self.on_decisions();
                if self.control.stop.load(Ordering::SeqCst) {
                    break;
                }
            }
            self.on_time();
        }
        self.shut_down();
    }

    fn timeout_ms(&self) -> i32 {
        let soonest = self
            .pending
            .values()
            .map(|p| p.deadline)
            .chain(self.log.as_ref().and_then(EventLog::due))
            .min();
        match soonest {
            None => -1,
            Some(t) => {
                let ms = t.saturating_duration_since(Instant::now()).as_millis();
                i32::try_from(ms + 1).unwrap_or(i32::MAX)
            }
        }
    }

    fn on_notification(&mut self) {
        let Ok(n) = self.listener.recv() else {
            return;
        };
        let phase = self.control.phase();
        let rules = match &*phase {
            Phase::Bootstrap | Phase::Passthrough => {
                self.listener.respond(n.id, Reply::Continue);
                return;
            }
            Phase::Enforce(rules) => rules,
        };
        let Some(call) = Call::from_nr(n.nr) else {
            self.listener.respond(n.id, Reply::Continue);
            return;
        };
        let log = self
            .log
            .get_or_insert_with(|| EventLog::new(rules.event_cap));
        let outcome = {
            let mut cx = Cx::new(
                &n,
                &self.listener,
                &rules.policy,
                &rules.approved,
                log,
                &*self.sink,
                &mut self.counters,
            );
            dispatch(&mut cx, call, &n, &mut self.launch)
        };
        self.finish(n.id, outcome, rules.approval_timeout);
    }

    fn finish(&mut self, id: u64, outcome: Outcome, timeout: Duration) {
        match outcome {
            Outcome::Reply(reply) => self.answer(id, reply),
            Outcome::Hold(hold) => self.hold(id, *hold, timeout),
        }
    }

    fn answer(&self, id: u64, reply: Reply) {
        match reply {
            Reply::Blocking(work) => self.blocking(id, work),
            other => self.listener.respond(id, other),
        }
    }

    /// Work that may wait (a FIFO open) on a helper thread, so the monitor never waits.
    fn blocking(&self, id: u64, work: Box<dyn FnOnce() -> Reply + Send>) {
        if self.helpers.fetch_add(1, Ordering::SeqCst) >= MAX_HELPERS {
            self.helpers.fetch_sub(1, Ordering::SeqCst);
            self.listener.respond(id, Reply::Error(libc::EAGAIN));
            return;
        }
        let (listener, helpers) = (self.listener.clone(), self.helpers.clone());
        let spawned = std::thread::Builder::new()
            .name("enforce-fifo".into())
            .spawn(move || {
                let reply = work();
                listener.respond(id, reply);
                helpers.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            self.helpers.fetch_sub(1, Ordering::SeqCst);
            self.listener.respond(id, Reply::Error(libc::EAGAIN));
        }
    }

    fn hold(&mut self, id: u64, hold: Hold, timeout: Duration) {
        if self.pending.len() >= MAX_PENDING {
            let message = Some(format!(
                "more than {MAX_PENDING} operations wait for approval"
            ));
            self.block(
                hold.operation,
                hold.pid,
                hold.target,
                &hold.judgement,
                message,
            );
            self.listener.respond(id, Reply::Error(libc::EACCES));
            return;
        }
        let approval = NEXT_APPROVAL.fetch_add(1, Ordering::SeqCst);
        let request = ApprovalRequest {
            id: approval,
            operation: hold.operation,
            target: hold.target.clone(),
            command: hold.command,
            argv: hold.argv,
            cwd: hold.cwd,
            pid: hold.pid as u32,
            rule: hold.judgement.rule.clone(),
            message: hold.judgement.message.clone(),
            recent_commands: self.counters.recent.iter().cloned().collect(),
            timeout_ms: timeout.as_millis() as u64,
        };
        // The operation's own event goes first, so the host knows what the request is about.
        if let Some(log) = &mut self.log {
            log.flush(&*self.sink);
        }
        self.sink.approval(&request);
        self.pending.insert(
            approval,
            Pending {
                notification: id,
                perform: hold.perform,
                deadline: Instant::now() + timeout,
                kind: hold.operation,
                target: hold.target,
                pid: hold.pid,
                judgement: hold.judgement,
            },
        );
        self.peak_pending = self.peak_pending.max(self.pending.len());
        self.peak_threads = self.peak_threads.max(threads());
    }

    fn on_decisions(&mut self) {
        let decisions = std::mem::take(
            &mut *self
                .control
                .decisions
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for d in decisions {
            let Some(p) = self.pending.remove(&d.id) else {
                continue;
            };
            match d.verdict {
                ApprovalVerdict::Approved => {
                    if p.kind == OperationType::Exec {
                        self.counters.remember(p.target.clone());
                    }
                    let reply = (p.perform)();
                    self.answer(p.notification, reply);
                }
                ApprovalVerdict::Denied => {
                    let message = d.message.or_else(|| Some("denied by an operator".into()));
                    self.fail(p, message);
                }
                ApprovalVerdict::Expired => {
                    let message = d.message.or_else(|| Some("the approval expired".into()));
                    self.fail(p, message);
                }
            }
        }
    }

    /// Expired approvals fail; operations whose caller died are dropped; old events go out.
    fn on_time(&mut self) {
        let now = Instant::now();
        let expired: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            if let Some(p) = self.pending.remove(&id) {
                self.fail(p, Some("the approval expired".into()));
            }
        }
        if let Some(log) = &mut self.log
            && log.due().is_some_and(|t| t <= now)
        {
            log.flush(&*self.sink);
        }
    }

    fn fail(&mut self, p: Pending, message: Option<String>) {
        self.block(p.kind, p.pid, p.target, &p.judgement, message);
        self.listener
            .respond(p.notification, Reply::Error(libc::EACCES));
    }

    fn block(
        &mut self,
        kind: OperationType,
        pid: i32,
        target: String,
        j: &Judgement,
        message: Option<String>,
    ) {
        let event = events::blocked(kind, pid, target, j, libc::EACCES, message);
        if let Some(log) = &mut self.log {
            log.push(event, &*self.sink);
        }
    }

    /// Fails what still waits, sends the last events with the summary.
    fn shut_down(mut self) {
        let pending: Vec<Pending> = self.pending.drain().map(|(_, p)| p).collect();
        for p in pending {
            self.fail(p, Some("the run ended while the operation waited".into()));
        }
        let Some(mut log) = self.log.take() else {
            return;
        };
        let mut batch = log.take();
        batch.summary = Some(EnforceSummary {
            decided: self.counters.decided,
            stats_allowed: self.counters.stats_allowed,
            exec_floor: self
                .control
                .floor
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            peak_pending: self.peak_pending as u32,
            peak_supervisor_threads: self.peak_threads.max(threads()),
            supervisor_peak_rss_bytes: peak_rss(),
        });
        self.sink.events(&batch);
    }
}

fn status_value(key: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    let v = text.lines().find_map(|l| l.strip_prefix(key))?;
    v.split_whitespace().next()?.parse().ok()
}

fn threads() -> u32 {
    status_value("Threads:").unwrap_or(0) as u32
}

fn peak_rss() -> u64 {
    status_value("VmHWM:").unwrap_or(0) * 1024
}

fn dispatch(cx: &mut Cx<'_>, call: Call, n: &Notification, launch: &mut bool) -> Outcome {
    let a = n.args;
    let at = libc::AT_FDCWD;
    let (i, u) = (|k: usize| a[k] as i32, |k: usize| a[k] as u32);
    match call {
        Call::Open => files::open(cx, at, 0, i(1), u(2)),
        Call::OpenAt => files::open(cx, i(0), 1, i(2), u(3)),
        Call::Creat => files::open(
            cx,
            at,
            0,
            libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
            u(1),
        ),
        Call::Execve => exec::execve(cx, at, (0, 1), 0, launch),
        Call::ExecveAt => exec::execve(cx, i(0), (1, 2), i(4), launch),
        Call::Connect => net::connect(cx),
        Call::Unlink => paths::unlink(cx, at, 0, 0),
        Call::UnlinkAt => paths::unlink(cx, i(0), 1, i(2)),
        Call::Rmdir => paths::unlink(cx, at, 0, libc::AT_REMOVEDIR),
        Call::Mkdir => paths::mkdir(cx, at, 0, u(1)),
        Call::MkdirAt => paths::mkdir(cx, i(0), 1, u(2)),
        Call::Rename => paths::rename(cx, (at, 0), (at, 1), 0),
        Call::RenameAt => paths::rename(cx, (i(0), 1), (i(2), 3), 0),
        Call::RenameAt2 => paths::rename(cx, (i(0), 1), (i(2), 3), u(4)),
        Call::Link => paths::link(cx, (at, 0), (at, 1), 0),
        Call::LinkAt => paths::link(cx, (i(0), 1), (i(2), 3), i(4)),
        Call::Symlink => paths::symlink(cx, 0, at, 1),
        Call::SymlinkAt => paths::symlink(cx, 0, i(1), 2),
        Call::Mknod => paths::mknod(cx, at, 0, u(1), a[2]),
        Call::MknodAt => paths::mknod(cx, i(0), 1, u(2), a[3]),
        Call::Truncate => paths::truncate(cx, 0, a[1] as i64),
        Call::Chmod => paths::chmod(cx, at, 0, u(1), 0),
        Call::FchmodAt => paths::chmod(cx, i(0), 1, u(2), 0),
        Call::FchmodAt2 => paths::chmod(cx, i(0), 1, u(2), i(3)),
        Call::Stat => stat::stat(cx, at, 0, 1, 0),
        Call::Lstat => stat::stat(cx, at, 0, 1, libc::AT_SYMLINK_NOFOLLOW),
        Call::NewFstatAt => stat::stat(cx, i(0), 1, 2, i(3)),
        Call::Statx => stat::statx(cx),
        Call::Access => stat::access(cx, at, 0, i(1), 0),
        Call::FaccessAt => stat::access(cx, i(0), 1, i(2), 0),
        Call::FaccessAt2 => stat::access(cx, i(0), 1, i(2), i(3)),
        Call::Readlink => stat::readlink(cx, at, 0, a[1], a[2]),
        Call::ReadlinkAt => stat::readlink(cx, i(0), 1, a[2], a[3]),
    }
}
