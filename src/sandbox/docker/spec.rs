//! The container every run gets: no network, read-only root, non-root user, no capabilities, no new
//! privileges, memory/CPU/pids/file limits, a small tmpfs at /tmp, no engine-side logs, no mounts.

use std::collections::HashMap;

use bollard::models::{ContainerCreateBody, HostConfig, HostConfigLogConfig, ResourcesUlimits};
use uuid::Uuid;

use super::DockerConfig;
use crate::script::Language;

pub const LABEL_MANAGED: &str = "scriptgate.managed";
pub const LABEL_INSTANCE: &str = "scriptgate.instance";
pub const LABEL_EXECUTION: &str = "scriptgate.execution_id";
pub const LABEL_LANGUAGE: &str = "scriptgate.language";
/// `<boot id>/<pid>` of the process that created the container, so a process can tell whether
/// another one's containers are orphans (see `DockerSandbox::reap_dead_owners`).
pub const LABEL_OWNER: &str = "scriptgate.owner";

/// This machine's boot id (a PID is only meaningful within one boot).
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// The value of [`LABEL_OWNER`] for this process.
pub fn owner() -> &'static str {
    static OWNER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    OWNER.get_or_init(|| format!("{}/{}", boot_id(), std::process::id()))
}

/// Sandbox uids (and gids) are drawn from `[UID_BASE, UID_BASE + UID_SPAN)`: far above any real
/// account or subordinate-id range, and one per container, because the kernel keeps some limits
/// per user (inotify instances, pipe buffer memory, message queues): with one shared uid, a
/// script could exhaust them for every other sandbox (and for the host's `nobody`).
pub const UID_BASE: u32 = 2_000_000_000;
pub const UID_SPAN: u32 = 1 << 24;

/// The uid of the container for `execution_id` (its random bits pick it; a collision only means
/// two sandboxes share per-user kernel limits, as every sandbox used to).
pub fn sandbox_uid(execution_id: Uuid) -> u32 {
    let bytes = execution_id.as_bytes();
    UID_BASE + u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]) % UID_SPAN
}

const MIB: i64 = 1024 * 1024;

pub fn container(
    config: &DockerConfig,
    language: Language,
    execution_id: Uuid,
) -> ContainerCreateBody {
    let limits = &config.limits;
    let memory = i64::try_from(limits.memory_mb).unwrap_or(i64::MAX / MIB) * MIB;
    let tmpfs = i64::try_from(limits.tmpfs_mb).unwrap_or(i64::MAX / MIB) * MIB;
    let labels = HashMap::from([
        (LABEL_MANAGED.to_string(), "true".to_string()),
        (LABEL_INSTANCE.to_string(), config.instance.clone()),
        (LABEL_EXECUTION.to_string(), execution_id.to_string()),
        (LABEL_LANGUAGE.to_string(), language.as_str().to_string()),
        (LABEL_OWNER.to_string(), owner().to_string()),
    ]);
    let ulimit = |name: &str, value: i64| ResourcesUlimits {
        name: Some(name.to_string()),
        soft: Some(value),
        hard: Some(value),
    };
    ContainerCreateBody {
        image: Some(config.image(language).to_string()),
        // The image's entrypoint is the supervisor; its argument is the language.
        cmd: Some(vec![language.as_str().to_string()]),
        // The service's own environment is never forwarded.
        env: Some(vec![
            "HOME=/tmp".into(),
            "PATH=/usr/local/bin:/usr/bin:/bin".into(),
            "LANG=C.UTF-8".into(),
            "PYTHONDONTWRITEBYTECODE=1".into(),
            "PYTHONUNBUFFERED=1".into(),
            "TMPDIR=/tmp".into(),
            // The uid has no passwd entry: getpass.getuser() and friends read these instead.
            "USER=sandbox".into(),
            "LOGNAME=sandbox".into(),
        ]),
        user: Some(format!("{uid}:{uid}", uid = sandbox_uid(execution_id))),
        working_dir: Some("/tmp".into()),
        hostname: Some("sandbox".into()),
        labels: Some(labels),
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        open_stdin: Some(true),
        stdin_once: Some(true),
        tty: Some(false),
        network_disabled: Some(true),
        host_config: Some(HostConfig {
            network_mode: Some("none".into()),
            readonly_rootfs: Some(true),
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec!["no-new-privileges".into()]),
            privileged: Some(false),
            pids_limit: Some(limits.pids),
            memory: Some(memory),
            // Equal to memory: no swap.
            memory_swap: Some(memory),
            nano_cpus: Some((limits.cpus * 1e9) as i64),
            tmpfs: Some(HashMap::from([(
                "/tmp".to_string(),
                format!("rw,nosuid,nodev,noexec,size={}m,mode=1777", limits.tmpfs_mb),
            )])),
            ulimits: Some(vec![
                ulimit("nofile", limits.nofile),
                ulimit("fsize", tmpfs),
                ulimit("core", 0),
            ]),
            // The supervisor is PID 1 and reaps every process; Docker's init is not needed.
            init: Some(false),
            ipc_mode: Some("private".into()),
            shm_size: Some(i64::try_from(limits.shm_mb).unwrap_or(64) * MIB),
            // Output is read over the attach stream; the engine keeps no log of it.
            log_config: Some(HostConfigLogConfig {
                typ: Some("none".into()),
                config: None,
            }),
            // Sandboxes go first if the host runs out of memory.
            oom_score_adj: Some(500),
            runtime: config.runtime.clone(),
            auto_remove: Some(false),
            ..HostConfig::default()
        }),
        ..ContainerCreateBody::default()
    }
}
