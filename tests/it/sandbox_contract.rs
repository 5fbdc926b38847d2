//! The container contract, checked with `docker inspect` and from inside the container.

use std::time::Duration;

use scriptgate::domain::script::Language;
use scriptgate::sandbox::docker::spec;
use scriptgate::sandbox::{Runner, RunnerExt};

use crate::harness::{self, vouched as request};

#[tokio::test(flavor = "multi_thread")]
async fn the_engine_sees_the_hardened_configuration() {
    let sandbox = harness::sandbox(|_| {}).await;
    let id = uuid::Uuid::new_v4();
    // A lease holds a started, ready container until it runs or is dropped: inspecting it races
    // with nothing, however busy the engine is.
    let lease = sandbox
        .acquire(Language::Bash, Some(id))
        .await
        .expect("a ready container");
    assert_eq!(lease.execution_id(), id);
    let docker = harness::docker().await;
    let found = harness::labelled(&[format!("scriptgate.execution_id={id}")])
        .await
        .expect("list");
    assert_eq!(found.len(), 1, "one container carries the execution id");
    let inspect = docker
        .inspect_container(found[0].id.as_deref().unwrap_or(""), None)
        .await
        .expect("inspect the leased container");
    assert_eq!(
        inspect.state.as_ref().and_then(|s| s.running),
        Some(true),
        "ready means started"
    );
    let host = inspect.host_config.expect("host config");
    let config = inspect.config.expect("config");
    assert_eq!(host.network_mode.as_deref(), Some("none"));
    assert_eq!(config.network_disabled, Some(true));
    assert_eq!(host.readonly_rootfs, Some(true));
    let user = config.user.unwrap_or_default();
    let (uid, gid) = user.split_once(':').expect("uid:gid");
    let uid: u32 = uid.parse().expect("numeric uid");
    assert_eq!(uid.to_string(), gid, "gid = uid");
    assert!(
        (spec::UID_BASE..spec::UID_BASE + spec::UID_SPAN).contains(&uid),
        "{uid} is in the sandbox range"
    );
    assert_eq!(host.cap_drop, Some(vec!["ALL".to_string()]));
    assert!(
        host.security_opt
            .unwrap_or_default()
            .contains(&"no-new-privileges".to_string())
    );
    assert_eq!(host.privileged, Some(false));
    assert_eq!(host.pids_limit, Some(100));
    assert_eq!(host.memory, Some(512 << 20));
    assert_eq!(
        host.memory_swap,
        Some(512 << 20),
        "swap equal to memory: no swap"
    );
    assert_eq!(host.nano_cpus, Some(1_000_000_000));
    let tmpfs = host.tmpfs.unwrap_or_default();
    let tmp = tmpfs.get("/tmp").expect("/tmp tmpfs");
    for opt in ["size=64m", "nosuid", "nodev", "noexec"] {
        assert!(tmp.contains(opt), "{tmp} has {opt}");
    }
    // Jobs' files: the sandbox uid's own, nobody else's.
    let workspace = tmpfs.get("/workspace").expect("/workspace tmpfs");
    for opt in [
        "size=256m".to_string(),
        "nosuid".into(),
        "nodev".into(),
        "noexec".into(),
        format!("uid={uid}"),
        "mode=0700".into(),
    ] {
        assert!(workspace.contains(&opt), "{workspace} has {opt}");
    }
    let ulimits: Vec<(String, i64)> = host
        .ulimits
        .unwrap_or_default()
        .into_iter()
        .map(|u| (u.name.unwrap_or_default(), u.hard.unwrap_or(0)))
        .collect();
    assert!(ulimits.contains(&("nofile".into(), 1024)), "{ulimits:?}");
    // The larger of /tmp and /workspace.
    assert!(
        ulimits.contains(&("fsize".into(), 256 << 20)),
        "{ulimits:?}"
    );
    assert_eq!(host.log_config.and_then(|l| l.typ).as_deref(), Some("none"));
    assert!(host.binds.unwrap_or_default().is_empty(), "no host mounts");
    assert!(
        inspect
            .mounts
            .unwrap_or_default()
            .iter()
            .all(|m| m.destination.as_deref() != Some("/var/run/docker.sock"))
    );
    let labels = config.labels.unwrap_or_default();
    assert_eq!(
        labels.get("scriptgate.managed").map(String::as_str),
        Some("true")
    );
    assert_eq!(labels.get("scriptgate.execution_id"), Some(&id.to_string()));
    // A lease dropped unused (a request given up before its script was sent) removes its container.
    drop(lease);
    assert!(harness::settle(&sandbox.config().instance, 0, Duration::from_secs(10)).await == 0);
    sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn from_inside_the_container_every_promise_holds() {
    let sandbox = harness::sandbox(|_| {}).await;
    let script = r#"
import os, socket, json
out = {}
out["uid"] = os.getuid(); out["gid"] = os.getgid()
out["capeff"] = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0]
out["nonewprivs"] = [l.split()[1] for l in open("/proc/self/status") if l.startswith("NoNewPrivs")][0]
def attempt(f):
    try:
        f(); return "ok"
    except Exception as e:
        return type(e).__name__
def connect():
    s = socket.create_connection(("1.1.1.1", 53), timeout=2)
out["connect"] = attempt(connect)
out["dns"] = attempt(lambda: socket.getaddrinfo("example.com", 80))
out["write_root"] = attempt(lambda: open("/x", "w"))
out["write_etc"] = attempt(lambda: open("/etc/x", "w"))
out["write_tmp"] = attempt(lambda: open("/tmp/x", "w").write("1"))
out["supervisor_mem"] = attempt(lambda: open("/proc/1/mem", "rb").read(1))
out["supervisor_environ"] = attempt(lambda: open("/proc/1/environ", "rb").read())
out["supervisor_fd"] = attempt(lambda: os.listdir("/proc/1/fd"))
out["docker_sock"] = os.path.exists("/var/run/docker.sock")
out["pid1"] = open("/proc/1/comm").read().strip()
out["hostname"] = socket.gethostname()
out["env"] = sorted(os.environ)
out["tmp_mount"] = [l.split()[3] for l in open("/proc/mounts") if l.split()[1] == "/tmp"][0]
print(json.dumps(out))
"#;
    let outcome = sandbox
        .run(request(Language::Python, script, 20))
        .await
        .expect("run");
    assert_eq!(outcome.exit_code, Some(0), "{}", outcome.stderr.text());
    let v: serde_json::Value =
        serde_json::from_str(outcome.stdout.text().trim()).expect("json report");
    let uid = v["uid"].as_u64().expect("uid");
    assert!(uid >= u64::from(spec::UID_BASE), "{uid}: a sandbox uid");
    assert_eq!(v["gid"], v["uid"]);
    assert_eq!(v["capeff"], "0000000000000000", "no capabilities");
    assert_eq!(v["nonewprivs"], "1");
    assert_ne!(v["connect"], "ok", "network is unreachable");
    assert_ne!(v["dns"], "ok", "DNS fails");
    assert_ne!(v["write_root"], "ok", "/ is read-only");
    assert_ne!(v["write_etc"], "ok");
    assert_eq!(v["write_tmp"], "ok", "/tmp is writable");
    assert_ne!(
        v["supervisor_mem"], "ok",
        "the supervisor's memory is not readable"
    );
    assert_ne!(v["supervisor_environ"], "ok");
    assert_ne!(v["supervisor_fd"], "ok");
    assert_eq!(v["docker_sock"], false);
    assert_eq!(v["pid1"], "scriptgate-supe");
    assert_eq!(v["hostname"], "sandbox");
    let env: Vec<&str> = v["env"]
        .as_array()
        .expect("env")
        .iter()
        .filter_map(|e| e.as_str())
        .collect();
    assert!(
        !env.iter()
            .any(|k| k.contains("SCRIPTGATE") || k.contains("DOCKER")),
        "service env not forwarded: {env:?}"
    );
    let tmp = v["tmp_mount"].as_str().unwrap_or("");
    assert!(
        tmp.contains("noexec") && tmp.contains("nosuid") && tmp.contains("nodev"),
        "{tmp}"
    );
    sandbox.shutdown().await;
}

/// Each container has its own uid (per-user kernel limits are not shared between sandboxes), and
/// a script that asks for its user name still gets one.
#[tokio::test]
async fn every_container_has_its_own_uid() {
    let sandbox = harness::sandbox(|_| {}).await;
    let script = "import os, getpass\nprint(os.getuid(), getpass.getuser())\n";
    let mut uids = std::collections::HashSet::new();
    for _ in 0..3 {
        let outcome = sandbox
            .run(request(Language::Python, script, 20))
            .await
            .expect("run");
        assert_eq!(outcome.exit_code, Some(0), "{}", outcome.stderr.text());
        let out = outcome.stdout.text();
        let (uid, name) = out.trim().split_once(' ').expect("uid and name");
        assert_eq!(name, "sandbox");
        uids.insert(uid.to_string());
    }
    assert_eq!(uids.len(), 3, "{uids:?}");
    sandbox.shutdown().await;
}
