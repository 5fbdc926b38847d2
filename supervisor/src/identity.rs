//! Two identities in one container, for runtimes whose kernel is not the host's (gVisor).
//!
//! Under runc the supervisor and the script share a uid, and the supervisor is out of the
//! script's reach through two Linux behaviours: a non-dumpable process's /proc/<pid>/fd is closed
//! to others of the same uid, and PID 1 ignores signals it has no handler for. gVisor reproduces
//! neither, so there the host starts the container as root with four capabilities (SETUID,
//! SETGID, SETPCAP, KILL) and names the script's uid on the command line. The supervisor then
//!
//! - starts the interpreter as that uid with an empty bounding set and no capabilities at all
//!   (the child drops them between fork and exec: [`Split::become_script`]);
//! - becomes [`SUPERVISOR_UID`] itself, keeping only CAP_KILL (to end the script's process group)
//!   ([`Split::become_supervisor`]), before the script is delivered.
//!
//! A job starts many processes as the script's uid (each `run_command`, and a child per file
//! operation, since the workspace belongs to the script). For a job the supervisor therefore keeps
//! SETUID, SETGID and SETPCAP beside KILL ([`Split::become_job_supervisor`]): they are what
//! `become_script` needs in each child, and they stay out of the steps' reach because the steps
//! run as another uid, with no capability at all.
//!
//! With different uids the kernel's ordinary checks do the rest: the script can neither signal the
//! supervisor nor open anything under /proc/1 (ptrace access mode), whatever the runtime.

use std::io;

/// The supervisor's uid when it runs apart from the script: just below the sandbox range, never a
/// script's (`spec::UID_BASE` on the host side is 2,000,000,000).
pub(crate) const SUPERVISOR_UID: u32 = 1_999_999_999;

const CAP_KILL: u32 = 5;
const CAP_SETGID: u32 = 6;
const CAP_SETUID: u32 = 7;
const CAP_SETPCAP: u32 = 8;
/// `_LINUX_CAPABILITY_VERSION_3`: 64-bit sets as two 32-bit words.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
/// Beyond the highest capability any kernel defines today (40); PR_CAPBSET_DROP answers EINVAL
/// for numbers the running kernel does not know, which ends the loop.
const CAP_SCAN: libc::c_ulong = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Split {
    pub(crate) script_uid: u32,
}

impl Split {
    /// What the supervisor was asked for: `None` when it runs as the script's uid already (runc).
    /// Started as root, it insists on a uid for the script, so a script never runs as root.
    pub(crate) fn from_arg(arg: Option<&str>) -> Result<Option<Split>, String> {
        // SAFETY: geteuid has no failure mode and no arguments.
        let root = unsafe { libc::geteuid() } == 0;
        match (root, arg) {
            (false, None) => Ok(None),
            (false, Some(_)) => {
                Err("asked to run the script as another uid, but not started as root".into())
            }
            (true, None) => Err(
                "started as root without a uid for the script; refusing to run a script as root"
                    .into(),
            ),
            (true, Some(arg)) => {
                let script_uid: u32 = arg.parse().map_err(|_| format!("`{arg}` is not a uid"))?;
                if script_uid == 0 || script_uid == SUPERVISOR_UID {
                    return Err(format!("{script_uid} cannot be the script's uid"));
                }
                Ok(Some(Split { script_uid }))
            }
        }
    }

    /// In the child, between fork and exec: no capabilities in any set, the script's uid and gid,
    /// no supplementary groups. Only async-signal-safe system calls.
    ///
    /// # Safety
    /// Must run in a freshly forked child (it changes the calling process's credentials).
    pub(crate) unsafe fn become_script(self) -> io::Result<()> {
        // SAFETY: plain integer system calls on the calling process.
        unsafe {
            drop_bounding_set_except(&[])?;
            // Credentials change last: the bounding set needs CAP_SETPCAP, which setresuid clears.
            libc::prctl(libc::PR_SET_KEEPCAPS, 0, 0, 0, 0);
            set_ids(self.script_uid)?;
            // From root the kernel clears permitted and effective itself; from the job
            // supervisor's uid it does not (no id was 0), so every set is emptied here.
            clear_capabilities()
        }
    }

    /// The supervisor's own drop, after the interpreter started and before the script arrives:
    /// [`SUPERVISOR_UID`] with CAP_KILL only.
    pub(crate) fn become_supervisor(self) -> Result<(), String> {
        drop_to_supervisor(&[CAP_KILL])
    }

    /// The drop before a job's first step: [`SUPERVISOR_UID`] with KILL, and with SETUID, SETGID
    /// and SETPCAP to start each step as the script's uid.
    pub(crate) fn become_job_supervisor(self) -> Result<(), String> {
        drop_to_supervisor(&[CAP_KILL, CAP_SETGID, CAP_SETUID, CAP_SETPCAP])
    }
}

/// Becomes [`SUPERVISOR_UID`] with exactly `keep` in the permitted and effective sets (and in the
/// bounding set), nothing inheritable.
fn drop_to_supervisor(keep: &[u32]) -> Result<(), String> {
    {
        let err = |what: &str| format!("{what}: {}", io::Error::last_os_error());
        // SAFETY: plain integer system calls on the calling (single-threaded) process, and capset
        // with a valid header and two data words.
        unsafe {
            drop_bounding_set_except(keep)
                .map_err(|e| format!("dropping the bounding set: {e}"))?;
            if libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0 {
                return Err(err("prctl(PR_SET_KEEPCAPS)"));
            }
            set_ids(SUPERVISOR_UID).map_err(|e| format!("becoming the supervisor's uid: {e}"))?;
            let header = CapHeader {
                version: CAPABILITY_VERSION_3,
                pid: 0,
            };
            let kept = keep.iter().fold(0u32, |set, cap| set | 1 << cap);
            let data = [
                CapData {
                    effective: kept,
                    permitted: kept,
                    inheritable: 0,
                },
                CapData::default(),
            ];
            if libc::syscall(libc::SYS_capset, &header, data.as_ptr()) != 0 {
                return Err(err("capset"));
            }
            libc::prctl(libc::PR_SET_KEEPCAPS, 0, 0, 0, 0);
        }
        let (mut r, mut e, mut s) = (0, 0, 0);
        // SAFETY: three valid pointers to locals.
        unsafe { libc::getresuid(&mut r, &mut e, &mut s) };
        if [r, e, s] != [SUPERVISOR_UID; 3] {
            return Err(format!("uids are {r}/{e}/{s} after the drop"));
        }
        Ok(())
    }
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Empties the bounding set (but for `keep`), so nothing can ever regain a capability.
unsafe fn drop_bounding_set_except(keep: &[u32]) -> io::Result<()> {
    for cap in 0..CAP_SCAN {
        if keep.iter().any(|k| libc::c_ulong::from(*k) == cap) {
            continue;
        }
        // SAFETY: prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINVAL) {
                break;
            }
            return Err(e);
        }
    }
    Ok(())
}

/// Every capability set of the calling process emptied (async-signal-safe: one system call).
unsafe fn clear_capabilities() -> io::Result<()> {
    let header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData::default(), CapData::default()];
    // SAFETY: capset with a valid header and two data words.
    if unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// gid, supplementary groups and uid (real, effective and saved) all become `id`.
unsafe fn set_ids(id: u32) -> io::Result<()> {
    // SAFETY: integer arguments; setgroups with a zero count reads no memory.
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0
            || libc::setresgid(id, id, id) != 0
            || libc::setresuid(id, id, id) != 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_never_runs_as_root_or_as_the_supervisor() {
        // SAFETY: no arguments, no failure mode.
        if unsafe { libc::geteuid() } == 0 {
            assert!(Split::from_arg(None).is_err(), "root without a script uid");
            for bad in ["0", "1999999999", "x", "-1", ""] {
                assert!(Split::from_arg(Some(bad)).is_err(), "{bad:?}");
            }
            assert_eq!(
                Split::from_arg(Some("2000000001")),
                Ok(Some(Split {
                    script_uid: 2_000_000_001
                }))
            );
        } else {
            assert_eq!(Split::from_arg(None), Ok(None));
            assert!(Split::from_arg(Some("2000000001")).is_err());
        }
    }
}
