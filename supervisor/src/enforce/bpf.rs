//! The notifying filter: which system calls reach the supervisor, and the few refused outright in
//! the kernel, as a raw BPF program (seccompiler 0.5 has no `SECCOMP_RET_USER_NOTIF`).
//!
//! Refused without a notification:
//! - any call of another ABI (i386 through `int 0x80`, x32): the filter could not tell them apart;
//! - `prctl(PR_SET_DUMPABLE, …)`: a non-dumpable process would close its memory to the supervisor;
//! - `execveat(…, AT_EMPTY_PATH)`: executing a descriptor (a memfd) has no path to decide on;
//! - `memfd_create` without `MFD_NOEXEC_SEAL`: an executable memfd escapes the exec floor;
//! - `openat2` (`ENOSYS`: callers fall back to `openat`, which is decided) and `uselib`.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

/// The calls the supervisor decides (x86-64 numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    Open,
    OpenAt,
    Creat,
    Execve,
    ExecveAt,
    Connect,
    Unlink,
    UnlinkAt,
    Rmdir,
    Mkdir,
    MkdirAt,
    Rename,
    RenameAt,
    RenameAt2,
    Link,
    LinkAt,
    Symlink,
    SymlinkAt,
    Mknod,
    MknodAt,
    Truncate,
    Chmod,
    FchmodAt,
    FchmodAt2,
    Stat,
    Lstat,
    NewFstatAt,
    Statx,
    Access,
    FaccessAt,
    FaccessAt2,
    Readlink,
    ReadlinkAt,
}

const CALLS: &[(libc::c_long, Call)] = &[
    (libc::SYS_open, Call::Open),
    (libc::SYS_openat, Call::OpenAt),
    (libc::SYS_creat, Call::Creat),
    (libc::SYS_execve, Call::Execve),
    (libc::SYS_execveat, Call::ExecveAt),
    (libc::SYS_connect, Call::Connect),
    (libc::SYS_unlink, Call::Unlink),
    (libc::SYS_unlinkat, Call::UnlinkAt),
    (libc::SYS_rmdir, Call::Rmdir),
    (libc::SYS_mkdir, Call::Mkdir),
    (libc::SYS_mkdirat, Call::MkdirAt),
    (libc::SYS_rename, Call::Rename),
    (libc::SYS_renameat, Call::RenameAt),
    (libc::SYS_renameat2, Call::RenameAt2),
    (libc::SYS_link, Call::Link),
    (libc::SYS_linkat, Call::LinkAt),
    (libc::SYS_symlink, Call::Symlink),
    (libc::SYS_symlinkat, Call::SymlinkAt),
    (libc::SYS_mknod, Call::Mknod),
    (libc::SYS_mknodat, Call::MknodAt),
    (libc::SYS_truncate, Call::Truncate),
    (libc::SYS_chmod, Call::Chmod),
    (libc::SYS_fchmodat, Call::FchmodAt),
    (libc::SYS_fchmodat2, Call::FchmodAt2),
    (libc::SYS_stat, Call::Stat),
    (libc::SYS_lstat, Call::Lstat),
    (libc::SYS_newfstatat, Call::NewFstatAt),
    (libc::SYS_statx, Call::Statx),
    (libc::SYS_access, Call::Access),
    (libc::SYS_faccessat, Call::FaccessAt),
    (libc::SYS_faccessat2, Call::FaccessAt2),
    (libc::SYS_readlink, Call::Readlink),
    (libc::SYS_readlinkat, Call::ReadlinkAt),
];

impl Call {
    pub(crate) fn from_nr(nr: i64) -> Option<Call> {
        CALLS.iter().find(|(n, _)| *n == nr).map(|(_, c)| *c)
    }
}

/// `AUDIT_ARCH_X86_64`.
const ARCH: u32 = 0xC000_003E;
/// Numbers at or above this are the x32 ABI.
const X32_BIT: u32 = 0x4000_0000;
const PR_SET_DUMPABLE: u32 = 4;
const AT_EMPTY_PATH: u32 = 0x1000;
const MFD_NOEXEC_SEAL: u32 = 0x0008;

/// One BPF instruction (`struct sock_filter`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Insn {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

#[repr(C)]
struct Fprog {
    len: u16,
    filter: *const Insn,
}

const LD_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JEQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JGE: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const JSET: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const RET: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

/// Offsets in `struct seccomp_data`.
const NR: u32 = 0;
const ARCH_AT: u32 = 4;
/// The low 32 bits of argument `i` (little-endian).
const fn arg(i: u32) -> u32 {
    16 + 8 * i
}

/// Where a jump goes: the next instruction or a named return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum To {
    Next,
    /// Skip this many instructions (land this many past the next one).
    Skip(u8),
    Allow,
    Notify,
    Enosys,
    Eperm,
}

const RETURNS: [(To, u32); 4] = [
    (To::Allow, libc::SECCOMP_RET_ALLOW),
    (To::Notify, libc::SECCOMP_RET_USER_NOTIF),
    (To::Enosys, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
    (To::Eperm, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
];

struct Asm(Vec<(u16, To, To, u32)>);

impl Asm {
    fn op(&mut self, code: u16, k: u32, jt: To, jf: To) {
        self.0.push((code, jt, jf, k));
    }

    fn load(&mut self, offset: u32) {
        self.op(LD_ABS, offset, To::Next, To::Next);
    }

    /// `if nr == call { body } else continue`, the body ending in returns.
    fn on_call(&mut self, nr: libc::c_long, body: impl FnOnce(&mut Asm)) {
        let mut inner = Asm(Vec::new());
        body(&mut inner);
        let skip = u8::try_from(inner.0.len()).expect("short bodies");
        self.op(JEQ, nr as u32, To::Next, To::Skip(skip));
        self.0.extend(inner.0);
    }

    fn assemble(self) -> Vec<Insn> {
        let body = self.0.len();
        let target = |at: usize, to: To| -> u8 {
            let offset = match to {
                To::Next => return 0,
                To::Skip(n) => return n,
                other => {
                    let ret = RETURNS.iter().position(|(t, _)| *t == other).unwrap_or(0);
                    body + ret - at - 1
                }
            };
            u8::try_from(offset).expect("the program fits 8-bit jumps")
        };
        let mut out: Vec<Insn> = self
            .0
            .iter()
            .enumerate()
            .map(|(at, &(code, jt, jf, k))| Insn {
                code,
                jt: target(at, jt),
                jf: target(at, jf),
                k,
            })
            .collect();
        out.extend(RETURNS.iter().map(|&(_, k)| Insn {
            code: RET,
            jt: 0,
            jf: 0,
            k,
        }));
        out
    }
}

/// The program: every call of [`Call`] notifies; the refusals of the module docs; the rest runs.
pub(crate) fn program() -> Vec<Insn> {
    let mut a = Asm(Vec::new());
    a.load(ARCH_AT);
    a.op(JEQ, ARCH, To::Next, To::Enosys);
    a.load(NR);
    a.op(JGE, X32_BIT, To::Enosys, To::Next);
    a.on_call(libc::SYS_prctl, |b| {
        b.load(arg(0));
        b.op(JEQ, PR_SET_DUMPABLE, To::Eperm, To::Allow);
    });
    a.on_call(libc::SYS_execveat, |b| {
        b.load(arg(4));
        b.op(JSET, AT_EMPTY_PATH, To::Eperm, To::Notify);
    });
    a.on_call(libc::SYS_memfd_create, |b| {
        b.load(arg(1));
        b.op(JSET, MFD_NOEXEC_SEAL, To::Allow, To::Eperm);
    });
    for nr in [libc::SYS_openat2, libc::SYS_uselib] {
        a.op(JEQ, nr as u32, To::Enosys, To::Next);
    }
    for (nr, _) in CALLS {
        a.op(JEQ, *nr as u32, To::Notify, To::Next);
    }
    // Falling off the end reaches the first return: allow.
    a.assemble()
}

/// Installs `program` on the calling thread with a listener; returns the listener. Makes no
/// allocation: it runs between fork and exec.
///
/// # Safety
/// Changes the calling process for good; only for a child about to exec.
pub(crate) unsafe fn install(program: &[Insn]) -> io::Result<OwnedFd> {
    let prog = Fprog {
        len: program.len() as u16,
        filter: program.as_ptr(),
    };
    let flags =
        libc::SECCOMP_FILTER_FLAG_NEW_LISTENER | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV;
    // SAFETY: a valid program for its length; the flags ask for a new listener descriptor.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &prog as *const Fprog,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Whether this kernel and runtime deliver user notifications (gVisor answers `EINVAL`, and
/// engines whose seccomp profile refuses `seccomp` answer `EPERM`).
pub(crate) fn user_notification_available() -> bool {
    let action = libc::SECCOMP_RET_USER_NOTIF;
    // SAFETY: GET_ACTION_AVAIL reads one u32.
    unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_GET_ACTION_AVAIL,
            0,
            &action as *const u32,
        ) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the program the way the kernel does, for one set of call data.
    fn run(program: &[Insn], nr: i64, arch: u32, args: [u64; 6]) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&(nr as i32).to_le_bytes());
        data[4..8].copy_from_slice(&arch.to_le_bytes());
        for (i, a) in args.iter().enumerate() {
            data[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let insn = program[pc];
            let jump = |taken: bool| pc + 1 + usize::from(if taken { insn.jt } else { insn.jf });
            match insn.code {
                LD_ABS => {
                    let at = insn.k as usize;
                    acc = u32::from_le_bytes(data[at..at + 4].try_into().expect("4 bytes"));
                    pc += 1;
                }
                JEQ => pc = jump(acc == insn.k),
                JGE => pc = jump(acc >= insn.k),
                JSET => pc = jump(acc & insn.k != 0),
                RET => return insn.k,
                other => panic!("unexpected opcode {other}"),
            }
        }
    }

    #[test]
    fn the_program_notifies_refuses_and_allows_as_documented() {
        let p = program();
        let x = |nr: libc::c_long, args: [u64; 6]| run(&p, nr, ARCH, args);
        let notify = libc::SECCOMP_RET_USER_NOTIF;
        let allow = libc::SECCOMP_RET_ALLOW;
        let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
        for (nr, _) in CALLS {
            assert_eq!(x(*nr, [0; 6]), notify, "{nr}");
        }
        assert_eq!(x(libc::SYS_read, [0; 6]), allow);
        assert_eq!(x(libc::SYS_prctl, [4, 0, 0, 0, 0, 0]), eperm);
        assert_eq!(
            x(libc::SYS_prctl, [15, 0, 0, 0, 0, 0]),
            allow,
            "PR_SET_NAME"
        );
        assert_eq!(x(libc::SYS_execveat, [3, 0, 0, 0, 0x1000, 0]), eperm);
        assert_eq!(x(libc::SYS_execveat, [3, 0, 0, 0, 0, 0]), notify);
        assert_eq!(x(libc::SYS_memfd_create, [0, 0, 0, 0, 0, 0]), eperm);
        assert_eq!(x(libc::SYS_memfd_create, [0, 8, 0, 0, 0, 0]), allow);
        assert_eq!(x(libc::SYS_openat2, [0; 6]), enosys);
        assert_eq!(run(&p, libc::SYS_read, 0x4000_0003, [0; 6]), enosys);
        assert_eq!(run(&p, 0x4000_0101, ARCH, [0; 6]), enosys, "x32 openat");
        assert!(Call::from_nr(libc::SYS_read).is_none());
        assert_eq!(Call::from_nr(libc::SYS_openat), Some(Call::OpenAt));
    }
}
