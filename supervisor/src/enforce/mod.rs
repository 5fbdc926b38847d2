//! Run-time policy enforcement: every `execve`, file operation and `connect` of a launched program
//! and its descendants is decided by the job's policy in the supervisor, reported as an event, and
//! allowed, refused (`EACCES`), flagged (`log`) or held until the host decides (`approve`).
//!
//! # Use
//!
//! ```text
//! let (child, mut enforcement) = enforce::prepare(Start::…, sink)?;
//! command.pre_exec(move || unsafe { child.install() });   // last step between fork and exec
//! command.spawn()?;  drop(command);                       // the monitor thread is already waiting
//! enforcement.begin(job.enforce.as_ref(), interpreter)?;  // Standby only: the policy applies now
//! decisions → enforcement.decisions().deliver(…)          // the host's approval answers
//! enforcement.finish();                                   // after the process tree is gone
//! ```
//!
//! `install` sets `no_new_privs`, applies the exec floor (Landlock) or passes its ruleset on,
//! installs the notifying filter ([`bpf`]) with `WAIT_KILLABLE_RECV` (a signal does not restart a
//! held call) and sends the listener to the supervisor over a socket pair (`pidfd_getfd` is
//! refused under Docker's profile). One monitor thread per listener serves the whole process tree
//! (`monitor`).
//!
//! # Phases, and why the switch is safe
//!
//! Python starts before its job (its start-up is the cost to hide), so its filter is in place from
//! the spawn in [`Start::Standby`]: the interpreter's own start-up runs (`Bootstrap`: every call
//! continues, no events). [`Enforcement::begin`] fills the exec floor and switches the phase under
//! a lock *before* the supervisor writes the script to the interpreter; the monitor reads the phase
//! after receiving each notification, and no script code can make a call before it has read its
//! script, so every call of the script is decided by its policy. The bootstrap applies the floor
//! (`landlock_restrict_self` on the ruleset it inherited) after reading the script and before
//! running it. A job without a policy on such an interpreter gets `Passthrough` (continue, no
//! events); without a ready interpreter no filter exists at all (zero cost). Bash starts with its
//! job ([`Start::Now`]): policy and floor apply from its exec, whose own first exec of the
//! interpreter is the only call let through undecided.
//!
//! # What is decided how (and what remains racy)
//!
//! - **Opens** (`open`, `openat`, `creat`): performed by the supervisor (`files`): found with
//!   `O_PATH` as the caller would (its cwd, `dirfd`, `/proc/self`, `/dev/fd/N`), decided on the
//!   path of *its own* descriptor, opened for real and installed with `ADDFD|SEND`. Never
//!   continued, so neither a rewritten string nor a swapped symlink reaches another file.
//!   `O_CREAT` is decided on the parent directory and name and created with `O_EXCL` (the caller's
//!   umask, `O_CLOEXEC` as the new descriptor's flag); `O_TRUNC` happens only in the real open.
//!   `openat2` answers `ENOSYS` (callers fall back to `openat`).
//! - **Names** (`unlink`, `rmdir`, `mkdir`, `rename`, `link`, `symlink`, `mknod`) and **changes**
//!   (`truncate`, `chmod`): performed by the supervisor on the directory it opened and the one name
//!   it decided on (`paths`). Residual: if another thread renames a *directory* between the lookup
//!   and the operation, the operation lands in the same directory under its new path; the rename
//!   itself was decided (delete at the old path, create at the new one), so only directories the
//!   policy lets the script move are affected.
//! - **Stat family** (`stat`, `lstat`, `newfstatat`, `statx`, `access`, `faccessat(2)`,
//!   `readlink(at)`): answered from the supervisor's own descriptor after a `stat` decision
//!   (`stat`); descriptor-only calls (glibc's `fstat`) are answered without one.
//! - **Exec** (`execve`, `execveat`): decided on the resolved program and the arguments read, then
//!   *continued*: the kernel reads path and arguments again. Residual: a thread that rewrites them
//!   in between runs another program, bounded by the exec floor (`floor`): Landlock lets the
//!   process execute only files some command rule could let run (with the ELF loader and `#!`
//!   interpreters they need), so a rewritten path can reach only another program of that list,
//!   and rewritten arguments can defeat `args_pattern` rules. The filter refuses what has no path:
//!   `execveat(…, AT_EMPTY_PATH)` and `memfd_create` without `MFD_NOEXEC_SEAL`. Not stopped:
//!   running the ELF loader on a program (`ld-linux… /usr/bin/id`) maps that program without
//!   executing it (the loader is on the floor because every program needs it), and interpreters
//!   run whatever code they are given.
//! - **Connect**: decided on the address read, then continued. Residual: a rewritten address; the
//!   network namespace bounds it (only loopback exists; the default policy allows loopback). Unix
//!   sockets, `sendto`/`sendmsg` with an address, and `bind` are not decided.
//! - **Not decided at all**: `chown`, `utimensat`, extended attributes, `statfs`, `chdir`,
//!   `inotify_add_watch`: metadata of files the uid may already change, on the only writable
//!   mounts (`/tmp`, `/dev/shm`, `/workspace`); io_uring is refused by the supervisor's own filter.
//! - **Memory**: arguments are read through `/proc/<tid>/mem` after `ID_VALID`; a process that
//!   cannot be read is refused (`EACCES`), and the filter refuses `prctl(PR_SET_DUMPABLE)`, the way
//!   to become unreadable.
//! - **The supervisor's own `/proc`** (it opens files with the script's uid, but is itself the
//!   process `/proc/1` names) is never opened for the script: a path naming it is `EACCES`, one
//!   reaching it through a symlink to `/proc/self` is looked up in the caller's own entries.
//! - **Read-only mounts**: a write, creation or removal on a read-only mount fails with `EROFS`,
//!   the kernel's answer, whatever the policy says (the event still carries the policy's
//!   decision), so scripts and tests that expect `EROFS` see it.
//!
//! # Where it cannot run
//!
//! Under gVisor (`seccomp` user notification is `EINVAL`, Landlock `ENOSYS`) and whenever the
//! script runs under another uid than the supervisor, [`available`] is false: the supervisor does
//! not announce [`FEATURE_ENFORCE`](scriptgate_supervisor::enforcement::FEATURE_ENFORCE) and
//! refuses a job that asks for enforcement. A policy that restricts programs also needs Landlock
//! for its floor; without it the job is refused ([`EnforceError::NoFloor`]). There is no weaker
//! mode: a job that asks for a policy runs under it or not at all.

mod approved;
mod bpf;
mod context;
mod events;
mod exec;
mod files;
mod floor;
mod memory;
mod monitor;
mod net;
mod notify;
mod paths;
mod procfs;
mod resolve;
mod stat;

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use scriptgate_policy::WirePolicy;
use scriptgate_supervisor::enforcement::{ApprovalDecision, Enforce};

use approved::Approved;
pub(crate) use events::Sink;
use floor::Floor;
use monitor::{Control, Phase, Rules};

/// The variable that tells the Python bootstrap which descriptor holds its exec floor.
pub(crate) const LANDLOCK_FD_ENV: &str = "SCRIPTGATE_LANDLOCK_FD";

/// Descriptors handed to the child are moved at or above this, clear of the ones a launch
/// arranges (0-2, the script pipe at 3).
const FD_FLOOR: RawFd = 10;

#[derive(Debug, thiserror::Error)]
pub(crate) enum EnforceError {
    #[error("run-time policy enforcement is not available here: {0}")]
    Unavailable(&'static str),
    #[error(
        "the policy restricts which programs may run, and Landlock (which bounds execution) is not available: the run is refused"
    )]
    NoFloor,
    #[error("the job's policy does not compile: {0}")]
    Policy(#[from] scriptgate_policy::WireError),
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        #[source]
        source: io::Error,
    },
}

fn io_err(what: &'static str) -> impl FnOnce(io::Error) -> EnforceError {
    move |source| EnforceError::Io { what, source }
}

/// Whether this supervisor can enforce a policy in this runtime.
pub(crate) fn available() -> bool {
    cfg!(target_arch = "x86_64") && bpf::user_notification_available()
}

/// The job's policy, compiled again (the supervisor trusts nothing it receives).
pub(crate) fn rules(enforce: &Enforce) -> Result<Rules, EnforceError> {
    let wire: WirePolicy = serde_json::from_value(enforce.policy.clone())
        .map_err(|e| EnforceError::Policy(e.into()))?;
    Ok(Rules {
        policy: wire.compile()?,
        event_cap: enforce.event_cap,
        approval_timeout: Duration::from_millis(enforce.approval_timeout_ms),
        approved: Approved::new(&enforce.approved_commands),
    })
}

/// How a launched program starts.
#[derive(Debug)]
pub(crate) enum Start {
    /// Before its job (the Python bootstrap): everything runs until [`Enforcement::begin`].
    Standby,
    /// With its policy (Bash, a job's command): `program` is what the launch executes (its own
    /// exec is the one call let through undecided).
    Now {
        rules: Box<Rules>,
        program: std::path::PathBuf,
    },
}

/// What the child installs between fork and exec.
#[derive(Debug)]
pub(crate) struct ChildSide {
    sock: OwnedFd,
    program: Vec<bpf::Insn>,
    landlock: ChildLandlock,
}

#[derive(Debug)]
enum ChildLandlock {
    None,
    /// Restrict the child now (the floor is known).
    Restrict(OwnedFd),
    /// Hand the ruleset on (the program applies it once its job is known).
    Pass(OwnedFd),
    /// Standby without Landlock: nothing to hand on.
    Standby,
}

impl ChildSide {
    /// The environment variable the launched program needs: in standby, the descriptor of the
    /// floor the Python bootstrap applies (`none` without Landlock).
    pub(crate) fn env(&self) -> Option<(&'static str, String)> {
        match &self.landlock {
            ChildLandlock::Pass(fd) => Some((LANDLOCK_FD_ENV, fd.as_raw_fd().to_string())),
            ChildLandlock::Standby => Some((LANDLOCK_FD_ENV, "none".into())),
            _ => None,
        }
    }

    /// Installs the enforcement in the calling (child) process. Only async-signal-safe calls, no
    /// allocation; the last step before exec: every later call is decided.
    ///
    /// # Safety
    /// Only between fork and exec.
    pub(crate) unsafe fn install(&self) -> io::Result<()> {
        // SAFETY: integer prctl; the async-signal-safe helpers below document their own needs.
        unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            match &self.landlock {
                ChildLandlock::None | ChildLandlock::Standby => {}
                ChildLandlock::Restrict(fd) => {
                    if !floor::restrict_self(fd.as_raw_fd()) {
                        return Err(io::Error::last_os_error());
                    }
                }
                ChildLandlock::Pass(fd) => {
                    if libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, 0) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
            }
            let listener = bpf::install(&self.program)?;
            if !notify::send_fd(self.sock.as_raw_fd(), listener.as_raw_fd()) {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// The supervisor's side of one launched program: its monitor thread and its controls.
#[derive(Debug)]
pub(crate) struct Enforcement {
    control: Arc<Control>,
    thread: Option<JoinHandle<()>>,
    /// Standby: the floor's ruleset, filled by `begin`.
    ruleset: Option<OwnedFd>,
}

/// Where the host's approval decisions go.
#[derive(Debug, Clone)]
pub(crate) struct Decisions(Arc<Control>);

impl Decisions {
    pub(crate) fn deliver(&self, decision: ApprovalDecision) {
        self.0.deliver(decision);
    }
}

/// Moves `fd` to a number at or above [`FD_FLOOR`] (close-on-exec).
fn lift(fd: OwnedFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC on a valid descriptor returns a new one.
    let new = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, FD_FLOOR) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// Prepares the enforcement of one launch; the monitor thread starts now and waits for the
/// child's listener.
pub(crate) fn prepare(
    start: Start,
    sink: Arc<dyn Sink>,
) -> Result<(ChildSide, Enforcement), EnforceError> {
    if !available() {
        return Err(EnforceError::Unavailable(
            "seccomp user notification does not work in this runtime (gVisor has none)",
        ));
    }
    let (parent_end, child_end) = notify::socketpair().map_err(io_err("socketpair"))?;
    let child_end = lift(child_end).map_err(io_err("socketpair"))?;
    let (phase, launch, landlock, ruleset, floor) = match start {
        Start::Standby => match floor::landlock_abi() {
            Some(_) => {
                let ruleset = floor::exec_ruleset().map_err(io_err("landlock ruleset"))?;
                let pass = lift(ruleset.try_clone().map_err(io_err("landlock ruleset"))?)
                    .map_err(io_err("landlock ruleset"))?;
                let floor = "pending".to_string();
                (
                    Phase::Bootstrap,
                    false,
                    ChildLandlock::Pass(pass),
                    Some(ruleset),
                    floor,
                )
            }
            None => (
                Phase::Bootstrap,
                false,
                ChildLandlock::Standby,
                None,
                "pending".into(),
            ),
        },
        Start::Now { rules, program } => {
            let plan = floor::plan(&rules.policy, &program);
            let landlock = match &plan {
                Floor::Open => ChildLandlock::None,
                Floor::Files(_) => {
                    floor::landlock_abi().ok_or(EnforceError::NoFloor)?;
                    let ruleset = floor::exec_ruleset().map_err(io_err("landlock ruleset"))?;
                    floor::fill(&ruleset, &plan).map_err(io_err("landlock rules"))?;
                    ChildLandlock::Restrict(lift(ruleset).map_err(io_err("landlock ruleset"))?)
                }
            };
            let phase = Phase::Enforce(Arc::new(*rules));
            (phase, true, landlock, None, plan.describe())
        }
    };
    let control = Control::new(phase).map_err(io_err("eventfd"))?;
    control.set_floor(floor);
    let thread = spawn_monitor(parent_end, control.clone(), sink, launch)
        .map_err(io_err("starting the monitor thread"))?;
    let child = ChildSide {
        sock: child_end,
        program: bpf::program(),
        landlock,
    };
    Ok((
        child,
        Enforcement {
            control,
            thread: Some(thread),
            ruleset,
        },
    ))
}

fn spawn_monitor(
    sock: OwnedFd,
    control: Arc<Control>,
    sink: Arc<dyn Sink>,
    launch: bool,
) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("enforce".into())
        .spawn(move || {
            // Until the child sends its listener (or closes its end without one: no launch).
            let Ok(Some(fd)) = notify::recv_fd(&sock) else {
                return;
            };
            drop(sock);
            monitor::Monitor::new(notify::Listener::new(fd), control, sink, launch).run();
        })
}

impl Enforcement {
    /// Standby: the job arrived. Fills the exec floor and switches to its policy (or, without
    /// one, lets everything run). Call before the script reaches the interpreter.
    pub(crate) fn begin(
        &mut self,
        enforce: Option<&Enforce>,
        interpreter: &Path,
    ) -> Result<(), EnforceError> {
        let ruleset = self.ruleset.take();
        let Some(enforce) = enforce else {
            if let Some(r) = &ruleset {
                floor::fill(r, &Floor::Open).map_err(io_err("landlock rules"))?;
            }
            self.control.set_floor("none".into());
            self.control.set_phase(Phase::Passthrough);
            return Ok(());
        };
        let rules = rules(enforce)?;
        let plan = floor::plan(&rules.policy, interpreter);
        match (&ruleset, &plan) {
            (Some(r), plan) => floor::fill(r, plan).map_err(io_err("landlock rules"))?,
            (None, Floor::Open) => {}
            (None, Floor::Files(_)) => return Err(EnforceError::NoFloor),
        }
        self.control.set_floor(plan.describe());
        self.control.set_phase(Phase::Enforce(Arc::new(rules)));
        Ok(())
    }

    pub(crate) fn decisions(&self) -> Decisions {
        Decisions(self.control.clone())
    }

    /// After the process tree is gone: fails what still waits, sends the last events and the
    /// summary, and returns once they are written.
    pub(crate) fn finish(mut self) {
        self.control.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Enforcement {
    fn drop(&mut self) {
        self.control.stop();
    }
}

#[cfg(test)]
mod tests;
