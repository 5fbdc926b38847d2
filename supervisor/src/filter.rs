//! A second seccomp filter, installed by the supervisor on itself before the interpreter starts
//! (so the script inherits it), stacked on whatever profile the engine applies.
//!
//! The engine's default profile is the first layer, but it varies: Docker before 25 still allows
//! io_uring (whose operations bypass seccomp and which has been a steady source of kernel
//! exploits), and a deployment may run with another runtime or profile. These system calls are
//! never needed by a Python or Bash script, so they are refused here whatever the engine does:
//!
//! - `ENOSYS` for io_uring (programs treat it as a kernel without io_uring and fall back) and for
//!   `clone3` (whose flags live in memory a filter cannot read; glibc then falls back to `clone`,
//!   whose flags are checked below);
//! - `EPERM` for kernel keyrings, eBPF, perf events, userfaultfd, tracing and reading other
//!   processes, namespaces and mounts (including `clone` with `CLONE_NEWUSER`), and module, kexec,
//!   reboot and swap calls.
//!
//! seccompiler (from Firecracker) compiles the BPF program: a well-kept, dependency-light crate
//! rather than hand-assembled BPF.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

const ENOSYS: &[libc::c_long] = &[
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_clone3,
];

const EPERM: &[libc::c_long] = &[
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_kcmp,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_fsopen,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_acct,
];

// `c_long` is `i64` on 64-bit targets only; the conversion is kept for the others.
#[allow(clippy::useless_conversion)]
fn filter(
    calls: &[libc::c_long],
    extra: Vec<(libc::c_long, Vec<SeccompRule>)>,
    errno: libc::c_int,
    arch: TargetArch,
) -> Result<BpfProgram, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = calls
        .iter()
        .map(|&nr| (i64::from(nr), Vec::new()))
        .collect();
    rules.extend(extra.into_iter().map(|(nr, r)| (i64::from(nr), r)));
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        arch,
    )
    .map_err(|e| format!("seccomp filter: {e}"))?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| format!("seccomp filter: {e}"))
}

/// The two programs (ENOSYS, then EPERM), compiled for this architecture.
pub(crate) fn programs() -> Result<Vec<BpfProgram>, String> {
    let arch: TargetArch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| format!("seccomp: unsupported architecture: {e:?}"))?;
    let new_user = SeccompRule::new(vec![
        SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(libc::CLONE_NEWUSER as u64),
            libc::CLONE_NEWUSER as u64,
        )
        .map_err(|e| format!("seccomp condition: {e}"))?,
    ])
    .map_err(|e| format!("seccomp rule: {e}"))?;
    Ok(vec![
        filter(ENOSYS, Vec::new(), libc::ENOSYS, arch)?,
        filter(
            EPERM,
            vec![(libc::SYS_clone, vec![new_user])],
            libc::EPERM,
            arch,
        )?,
    ])
}

/// Installs the filters on this process (inherited by every child).
pub(crate) fn install() -> Result<(), String> {
    for program in programs()? {
        seccompiler::apply_filter(&program).map_err(|e| format!("seccomp: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_programs_compile() {
        let programs = programs().expect("compile");
        assert_eq!(programs.len(), 2);
        assert!(programs.iter().all(|p| !p.is_empty()));
    }
}
