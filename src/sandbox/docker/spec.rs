//! The container every run gets: no network, read-only root, non-root user, no capabilities, no new
//! privileges, memory/CPU/pids/file limits, small tmpfs mounts at /tmp and /workspace (a job's
//! files, owned by the sandbox uid), no engine-side logs, no other mounts.

use std::collections::HashMap;

use bollard::models::{ContainerCreateBody, HostConfig, HostConfigLogConfig, ResourcesUlimits};
use uuid::Uuid;

use scriptgate_supervisor::enforcement::ENFORCE_READY_ENV;

use super::DockerConfig;
use crate::domain::script::Language;
use crate::sandbox::profiles::Profile;

pub const LABEL_MANAGED: &str = "scriptgate.managed";
pub const LABEL_INSTANCE: &str = "scriptgate.instance";
pub const LABEL_EXECUTION: &str = "scriptgate.execution_id";
pub const LABEL_LANGUAGE: &str = "scriptgate.language";
pub const LABEL_PROFILE: &str = "scriptgate.profile";
/// Comma-separated modules the Python bootstrap imports before the script arrives.
pub const PREIMPORT_ENV: &str = "SCRIPTGATE_PREIMPORT";
/// Where the plot hook saves figures (the supervisor returns what is there).
pub const PLOT_DIR_ENV: &str = "SCRIPTGATE_PLOT_DIR";
pub const PLOT_DIR: &str = "/tmp/.scriptgate-plots";
/// Where jobs keep their files (a tmpfs of `limits.workspace_mb`).
pub const WORKSPACE: &str = "/workspace";
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

/// Whether the supervisor and the script get different uids (the runner image's supervisor,
/// `supervisor/src/identity.rs`). Under runc they share one: Linux keeps a non-dumpable PID 1
/// out of a same-uid script's reach, and the container contract (non-root user, `CapDrop: ALL`,
/// no `CapAdd`) stays exact. Other runtimes (gVisor, whose kernel is its own, and VM runtimes)
/// need not reproduce those behaviours, so there the container starts as root with SETUID,
/// SETGID, SETPCAP and KILL, and the supervisor starts the script as the sandbox uid with no
/// capabilities in any set, then drops to a uid of its own that keeps only KILL.
pub fn separate_identities(config: &DockerConfig) -> bool {
    config.runtime.as_deref().is_some_and(|r| r != "runc")
}

/// The capabilities a separate-identity container starts with (none reach the script).
pub const SUPERVISOR_CAPS: [&str; 4] = ["SETUID", "SETGID", "SETPCAP", "KILL"];

/// The container's whole environment (the service's own is never forwarded).
fn environment(profile: &Profile, enforcement_ready: bool, egress: bool) -> Vec<String> {
    let mut env: Vec<String> = [
        "HOME=/tmp",
        "LANG=C.UTF-8",
        "PYTHONDONTWRITEBYTECODE=1",
        "PYTHONUNBUFFERED=1",
        "TMPDIR=/tmp",
        // The uid has no passwd entry: getpass.getuser() and friends read these instead.
        "USER=sandbox",
        "LOGNAME=sandbox",
    ]
    .map(String::from)
    .to_vec();
    // The image's program directories: jobs' commands are looked up there and nowhere else.
    env.push(format!("PATH={}", crate::sandbox::job::env::IMAGE_PATH));
    if !profile.preimport.is_empty() {
        env.push(format!("{PREIMPORT_ENV}={}", profile.preimport.join(",")));
    }
    if profile.plots {
        env.push("MPLBACKEND=Agg".into());
        env.push(format!("{PLOT_DIR_ENV}={PLOT_DIR}"));
    }
    if enforcement_ready {
        env.push(format!("{ENFORCE_READY_ENV}=ready"));
    }
    // Set in every container that has an egress directory, because a warm interpreter's
    // environment is fixed before anyone knows whether its run asks for network access: a run
    // that does not finds no socket behind the forwarder (a 502 to every proxy client).
    if egress {
        env.extend(
            crate::sandbox::egress::proxy_env()
                .into_iter()
                .map(|(k, v)| format!("{k}={v}")),
        );
    }
    env
}

/// The container of one run. `egress` is the bind of the sandbox's egress directory (`None`:
/// the service has no egress proxy): mounted read-only at
/// [`CONTAINER_SOCKET_DIR`](crate::sandbox::egress::CONTAINER_SOCKET_DIR), while the network mode
/// stays `none`.
pub fn container(
    config: &DockerConfig,
    profile: &Profile,
    language: Language,
    execution_id: Uuid,
    egress: Option<String>,
) -> ContainerCreateBody {
    let limits = &config.limits;
    let memory = i64::try_from(limits.memory_mb).unwrap_or(i64::MAX / MIB) * MIB;
    // The largest file fits the larger of the two writable mounts.
    let fsize =
        i64::try_from(limits.tmpfs_mb.max(limits.workspace_mb)).unwrap_or(i64::MAX / MIB) * MIB;
    let labels = HashMap::from([
        (LABEL_MANAGED.to_string(), "true".to_string()),
        (LABEL_INSTANCE.to_string(), config.instance.clone()),
        (LABEL_EXECUTION.to_string(), execution_id.to_string()),
        (LABEL_LANGUAGE.to_string(), language.as_str().to_string()),
        (LABEL_PROFILE.to_string(), profile.name.clone()),
        (LABEL_OWNER.to_string(), owner().to_string()),
    ]);
    let uid = sandbox_uid(execution_id);
    let split = separate_identities(config);
    // The image's entrypoint is the supervisor; its arguments are the language and, when it is to
    // run the script as another uid than its own, that uid.
    let mut cmd = vec![language.as_str().to_string()];
    if split {
        cmd.push(uid.to_string());
    }
    let ulimit = |name: &str, value: i64| ResourcesUlimits {
        name: Some(name.to_string()),
        soft: Some(value),
        hard: Some(value),
    };
    ContainerCreateBody {
        image: Some(profile.image(language).to_string()),
        cmd: Some(cmd),
        // The service's own environment is never forwarded.
        env: Some(environment(
            profile,
            config.enforcement_ready,
            egress.is_some(),
        )),
        user: Some(if split {
            "0:0".into()
        } else {
            format!("{uid}:{uid}")
        }),
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
            binds: egress.map(|bind| vec![bind]),
            readonly_rootfs: Some(true),
            cap_drop: Some(vec!["ALL".into()]),
            cap_add: split.then(|| SUPERVISOR_CAPS.map(String::from).to_vec()),
            security_opt: Some(vec!["no-new-privileges".into()]),
            privileged: Some(false),
            pids_limit: Some(limits.pids),
            memory: Some(memory),
            // Equal to memory: no swap.
            memory_swap: Some(memory),
            nano_cpus: Some((limits.cpus * 1e9) as i64),
            tmpfs: Some(HashMap::from([
                (
                    "/tmp".to_string(),
                    format!("rw,nosuid,nodev,noexec,size={}m,mode=1777", limits.tmpfs_mb),
                ),
                // The script's own (also when the supervisor runs as another uid: the agent
                // works in it as the script).
                (
                    WORKSPACE.to_string(),
                    format!(
                        "rw,nosuid,nodev,noexec,size={}m,uid={uid},gid={uid},mode=0700",
                        limits.workspace_mb
                    ),
                ),
            ])),
            ulimits: Some(vec![
                ulimit("nofile", limits.nofile),
                ulimit("fsize", fsize),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn body(runtime: Option<&str>) -> (ContainerCreateBody, u32) {
        let config = DockerConfig {
            runtime: runtime.map(String::from),
            ..DockerConfig::default()
        };
        let id = Uuid::new_v4();
        let profiles = config.resolved_profiles().expect("built-in profiles");
        let minimal = profiles.default_profile();
        (
            container(&config, minimal, Language::Python, id, None),
            sandbox_uid(id),
        )
    }

    #[test]
    fn every_profile_gets_the_same_hardening_and_its_own_image_and_environment() {
        let config = DockerConfig::default();
        let profiles = config.resolved_profiles().expect("built-in profiles");
        let minimal = profiles.default_profile();
        let data = profiles.get("data").expect("data profile");
        let id = Uuid::new_v4();
        let a = container(&config, minimal, Language::Python, id, None);
        let b = container(&config, data, Language::Python, id, None);
        assert_eq!(a.host_config, b.host_config);
        assert_eq!(a.user, b.user);
        assert_eq!(b.image.as_deref(), Some(super::super::images::DATA_IMAGE));
        let env = b.env.expect("environment");
        assert!(env.contains(&"MPLBACKEND=Agg".to_string()), "{env:?}");
        assert!(
            env.iter()
                .any(|e| e.starts_with("SCRIPTGATE_PREIMPORT=numpy,pandas")),
            "{env:?}"
        );
        let env = a.env.expect("environment");
        assert!(!env.iter().any(|e| e.starts_with("SCRIPTGATE_")), "{env:?}");
    }

    #[test]
    fn under_runc_the_container_runs_as_the_sandbox_uid_with_no_capabilities() {
        for runtime in [None, Some("runc")] {
            let (body, uid) = body(runtime);
            let host = body.host_config.expect("a host config");
            assert_eq!(body.user, Some(format!("{uid}:{uid}")));
            assert_eq!(body.cmd, Some(vec!["python".to_string()]));
            assert_eq!(host.cap_drop, Some(vec!["ALL".to_string()]));
            assert_eq!(host.cap_add, None);
        }
    }

    #[test]
    fn other_runtimes_start_the_supervisor_as_root_and_name_the_script_uid() {
        let (body, uid) = body(Some("runsc"));
        let host = body.host_config.expect("a host config");
        assert_eq!(body.user.as_deref(), Some("0:0"));
        assert_eq!(body.cmd, Some(vec!["python".to_string(), uid.to_string()]));
        assert_eq!(host.cap_drop, Some(vec!["ALL".to_string()]));
        assert_eq!(
            host.cap_add,
            Some(vec![
                "SETUID".into(),
                "SETGID".into(),
                "SETPCAP".into(),
                "KILL".into()
            ])
        );
        assert_eq!(
            host.security_opt,
            Some(vec!["no-new-privileges".to_string()])
        );
        assert!((UID_BASE..UID_BASE + UID_SPAN).contains(&uid));
    }

    #[test]
    fn an_egress_directory_is_mounted_read_only_and_the_network_stays_none() {
        let config = DockerConfig::default();
        let profiles = config.resolved_profiles().expect("built-in profiles");
        let id = Uuid::new_v4();
        let bind = "/srv/egress/0123456789abcdef:/run/egress:ro".to_string();
        let body = container(
            &config,
            profiles.default_profile(),
            Language::Python,
            id,
            Some(bind.clone()),
        );
        let host = body.host_config.expect("a host config");
        assert_eq!(host.binds, Some(vec![bind]));
        assert_eq!(host.network_mode.as_deref(), Some("none"));
        assert_eq!(body.network_disabled, Some(true));
        let env = body.env.expect("environment");
        for key in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "NO_PROXY",
            "http_proxy",
        ] {
            assert!(
                env.iter().any(|e| e.starts_with(&format!("{key}="))),
                "{key}: {env:?}"
            );
        }
        let plain = container(
            &config,
            profiles.default_profile(),
            Language::Python,
            id,
            None,
        );
        assert_eq!(plain.host_config.expect("host config").binds, None);
        assert!(!plain.env.expect("env").iter().any(|e| e.contains("PROXY")));
    }
}
