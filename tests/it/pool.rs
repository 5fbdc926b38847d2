//! Warm containers: one use each, hardened like cold ones, not fooled by forged frames, and nothing
//! left behind by a shutdown or a crash.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::{self, Service};
use crate::process::{Process, Spawn};

/// Reports the container id (from the cgroup path), whether a marker from an earlier run exists, and
/// writes the marker.
const PROBE: &str = r#"
import os, re
cg = open("/proc/self/cgroup").read()
ids = re.findall(r"[0-9a-f]{64}", cg)
print(ids[0] if ids else "unknown")
print("marker" if os.path.exists("/tmp/marker") else "clean")
open("/tmp/marker", "w").write("x")
"#;

async fn warm_service() -> Service {
    let service = Service::start(|c| {
        c.sandbox.pool.size = 2;
        // The hardening probe writes under /etc on purpose (the root must refuse it): the
        // container answers, not validation.
        c.validation.disabled_rules = vec!["python-system-file-write".into()];
    })
    .await;
    // Both languages of the default profile, two each (the data profile fills its own slots).
    service.wait_profile_pool("minimal", 4).await;
    service
}

#[tokio::test(flavor = "multi_thread")]
async fn every_run_gets_a_fresh_container() {
    let service = warm_service().await;
    let mut seen = std::collections::HashSet::new();
    let mut executions = std::collections::HashSet::new();
    for _ in 0..6 {
        let r = service.execute("python", PROBE, 30).await;
        assert_eq!(r["success"], true, "{r}");
        let out = r["stdout"].as_str().unwrap_or("");
        let mut lines = out.lines();
        let container = lines.next().unwrap_or("").to_string();
        assert_eq!(
            lines.next(),
            Some("clean"),
            "a file from an earlier run leaked: {out}"
        );
        assert_ne!(container, "unknown", "{out}");
        assert!(seen.insert(container), "a container was reused");
        assert!(executions.insert(r["execution_id"].as_str().unwrap_or("").to_string()));
    }
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn warm_containers_are_as_hardened_as_cold_ones() {
    let service = warm_service().await;
    let script = r#"
import os, socket
cap = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0]
def fails(f):
    try:
        f(); return False
    except Exception:
        return True
print(os.getuid(), cap,
      fails(lambda: socket.create_connection(("1.1.1.1", 53), timeout=2)),
      fails(lambda: open("/etc/x", "w")),
      fails(lambda: os.listdir("/proc/1/fd")))
"#;
    let r = service.execute("python", script, 30).await;
    assert_eq!(r["warm"], true, "{r}");
    let out = r["stdout"].as_str().unwrap_or("");
    let (uid, rest) = out.split_once(' ').unwrap_or(("", ""));
    assert!(
        uid.parse::<u32>()
            .is_ok_and(|u| u >= scriptgate::sandbox::docker::spec::UID_BASE),
        "{r}"
    );
    assert_eq!(rest, "0000000000000000 True True True\n", "{r}");
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forged_completion_frame_changes_nothing() {
    let service = warm_service().await;
    // Prints an exact Exit frame (kind 4, length, JSON) claiming success, then more output, then fails.
    let script = r#"
import json, struct, sys
payload = json.dumps({"nonce": "0" * 32, "exit_code": 0, "signal": None, "stdout_truncated": False,
                      "stderr_truncated": False, "usage": {"cpu_time_ms": 0, "max_memory_bytes": 0, "oom_kills": 0}}).encode()
frame = bytes([4]) + struct.pack(">I", len(payload)) + payload
sys.stdout.buffer.write(frame); sys.stdout.flush()
sys.stderr.buffer.write(frame); sys.stderr.flush()
print("after the forged frame")
sys.exit(3)
"#;
    let r = service.execute("python", script, 30).await;
    assert_eq!(r["exit_code"], 3, "{r}");
    assert_eq!(r["error"]["type"], "execution_failure");
    let stdout = r["stdout"].as_str().unwrap_or("");
    assert!(
        stdout.contains("\"exit_code\": 0") && stdout.ends_with("after the forged frame\n"),
        "output kept whole: {stdout:?}"
    );
    service.stop().await;
}

/// The service as its own process with a pool of two, stopped when dropped.
fn spawn_service(instance: &str, data_dir: &std::path::Path) -> Process {
    Spawn::new(instance, data_dir)
        .env("SCRIPTGATE_SANDBOX__POOL__SIZE", "2")
        .start()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_service_leaves_nothing_its_restart_does_not_remove() {
    let instance = harness::instance();
    let data_dir = tempfile::tempdir().expect("data dir");
    let mut first = spawn_service(&instance, data_dir.path());
    first.wait_for("/readyz", Duration::from_secs(30)).await;
    // In-flight executions and a full pool when the process dies.
    let client = reqwest::Client::new();
    for _ in 0..3 {
        let c = client.clone();
        let url = first.url("/v1/execute");
        tokio::spawn(async move {
            let _ = c
                .post(url)
                .json(&json!({"script_content": "sleep 60", "script_type": "bash", "timeout": 120}))
                .send()
                .await;
        });
    }
    // Wait until the three executions are recorded as running (WAL lets us read alongside).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let running = rusqlite::Connection::open(data_dir.path().join("scriptgate.db"))
            .and_then(|db| {
                db.query_row(
                    "SELECT count(*) FROM executions WHERE status = 'running'",
                    [],
                    |r| r.get::<_, i64>(0),
                )
            })
            .unwrap_or(0);
        if running == 3 {
            break;
        }
        assert!(Instant::now() < deadline, "executions did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    first.kill();
    let orphans = harness::containers(&instance).await;
    assert!(orphans.len() >= 5, "a killed process cannot clean up");
    let mut second = spawn_service(&instance, data_dir.path());
    second.wait_for("/readyz", Duration::from_secs(30)).await;
    // The executions that were running when the process died read as failed (interrupted).
    let db = rusqlite::Connection::open(data_dir.path().join("scriptgate.db")).expect("db");
    let statuses: Vec<(String, String)> = db
        .prepare("SELECT status, record FROM executions")
        .expect("query")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("read");
    assert_eq!(statuses.len(), 3, "{statuses:?}");
    for (status, record) in &statuses {
        assert_eq!(status, "failed");
        assert!(
            record.contains("interrupted") || record.contains("stopped while the script ran"),
            "{record}"
        );
    }
    let now = harness::containers(&instance).await;
    let survivors: Vec<&String> = orphans.iter().filter(|id| now.contains(id)).collect();
    assert!(
        survivors.is_empty(),
        "orphans not reaped at start-up: {survivors:?}"
    );
    // SIGTERM: graceful stop removes the rest.
    second.terminate();
    assert_eq!(
        harness::settle(&instance, 0, Duration::from_secs(5)).await,
        0
    );
}
