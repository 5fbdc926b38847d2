//! Hostile cases, one at a time (nextest group `hostile`): threads racing the supervisor, a
//! hundred processes waiting for approval, a million opens.

use std::time::Duration;

use scriptgate::domain::script::Language;
use scriptgate::sandbox::{Enforcement, Runner};

use super::*;

const SECRET_POLICY: &str = r#"
version: 1
name: secret
file_rules:
  - {name: no-passwd, paths: [/etc/passwd], operations: ["*"], decision: deny}
  - {name: everything-else, paths: ["/**"], operations: ["*"], decision: allow}
command_rules:
  - {name: any-program, commands: ["*"], decision: allow}
"#;

/// Two threads: one flips a path buffer between an allowed and a denied file, the other opens
/// whatever it holds. The supervisor reads the string once and opens what it decided on, so the
/// denied file is never read, however the race falls.
#[tokio::test(flavor = "multi_thread")]
async fn a_path_swapped_by_another_thread_never_reaches_the_denied_file() {
    let script = r#"
import ctypes, json, os, threading
libc = ctypes.CDLL(None, use_errno=True)
allowed = b"/etc/hostname\0"
denied = b"/etc/passwd\0\0\0"
buf = ctypes.create_string_buffer(allowed, 16)
stop = False
def flip():
    while not stop:
        ctypes.memmove(buf, denied, 14)
        ctypes.memmove(buf, allowed, 14)
t = threading.Thread(target=flip)
t.start()
opened = refused = leaked = 0
for _ in range(5000):
    fd = libc.open(buf, os.O_RDONLY)
    if fd < 0:
        refused += ctypes.get_errno() == 13
        continue
    data = os.read(fd, 4096)
    os.close(fd)
    opened += 1
    leaked += b"root:" in data
stop = True
t.join()
print(json.dumps({"opened": opened, "refused": refused, "leaked": leaked}))
"#;
    let sandbox = sandbox(true, 100).await;
    let outcome = run(
        &sandbox,
        Language::Python,
        script,
        wire(SECRET_POLICY),
        None,
        Duration::from_secs(120),
    )
    .await;
    sandbox.shutdown().await;
    let r = stdout_json(&outcome.outcome);
    eprintln!("race: {r}");
    assert_eq!(r["leaked"], 0, "{r}");
    assert!(
        r["opened"].as_u64() > Some(0) && r["refused"].as_u64() > Some(0),
        "both sides raced: {r}"
    );
}

/// A symlink in /tmp flipped between an allowed file and a denied one while another thread opens
/// it: the decision is made on what the supervisor opened, so the denied file is never read.
#[tokio::test(flavor = "multi_thread")]
async fn a_symlink_flipped_in_tmp_never_reaches_the_denied_file() {
    let script = r#"
import ctypes, json, os, threading
libc = ctypes.CDLL(None, use_errno=True)
with open("/tmp/ok", "w") as f:
    f.write("fine")
os.symlink("/tmp/ok", "/tmp/l")
os.symlink("/etc/passwd", "/tmp/other")
stop = False
def flip():
    while not stop:
        # renameat2(RENAME_EXCHANGE): /tmp/l and /tmp/other swap places.
        libc.renameat2(-100, b"/tmp/l", -100, b"/tmp/other", 2)
t = threading.Thread(target=flip)
t.start()
opened = refused = leaked = 0
for _ in range(3000):
    try:
        with open("/tmp/l", "rb") as f:
            data = f.read()
        opened += 1
        leaked += b"root:" in data
    except OSError as e:
        refused += e.errno == 13
stop = True
t.join()
print(json.dumps({"opened": opened, "refused": refused, "leaked": leaked}))
"#;
    let sandbox = sandbox(true, 100).await;
    let outcome = run(
        &sandbox,
        Language::Python,
        script,
        wire(SECRET_POLICY),
        None,
        Duration::from_secs(120),
    )
    .await;
    sandbox.shutdown().await;
    let r = stdout_json(&outcome.outcome);
    eprintln!("race: {r}");
    assert_eq!(r["leaked"], 0, "{r}");
    assert!(
        r["opened"].as_u64() > Some(0) && r["refused"].as_u64() > Some(0),
        "both sides raced: {r}"
    );
}

/// A hundred processes each wait for an approval at once: they wait in the monitor's table (one
/// thread serves them all), the approver sees all hundred before answering any, and each proceeds
/// once approved.
#[tokio::test(flavor = "multi_thread")]
async fn a_hundred_processes_wait_for_approval_without_a_thread_each() {
    let policy = wire(
        r#"
version: 1
name: held
file_rules:
  - {name: held, paths: ["/tmp/held/*"], operations: [read], decision: approve}
  - {name: everything-else, paths: ["/**"], operations: ["*"], decision: allow}
command_rules:
  - {name: any-program, commands: ["*"], decision: allow}
"#,
    );
    let script = r#"
import json, os
os.makedirs("/tmp/held", exist_ok=True)
for i in range(100):
    with open(f"/tmp/held/{i}", "w") as f:
        f.write(str(i))
children = []
for i in range(100):
    pid = os.fork()
    if pid == 0:
        try:
            with open(f"/tmp/held/{i}") as f:
                os._exit(0 if f.read() == str(i) else 2)
        except OSError:
            os._exit(1)
    children.append(pid)
ok = sum(os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) == 0 for p in children)
print(json.dumps({"ok": ok}))
"#;
    let sandbox = sandbox(true, 400).await;
    let (tx, asked) = approver(Answer::ApproveAfter(100));
    let lease = sandbox
        .acquire(Language::Python, None)
        .await
        .expect("lease");
    let outcome = lease
        .run_enforced(
            harness::vouched(Language::Python, script, 120).spec,
            Enforcement {
                policy,
                event_cap: 5000,
                approval_timeout: Duration::from_secs(60),
                approvals: Some(tx),
                live: None,
                approved_commands: Vec::new(),
            },
        )
        .await;
    let requests = asked.await.expect("approver");
    sandbox.shutdown().await;
    assert_eq!(stdout_json(&outcome.outcome)["ok"], 100, "{outcome:?}");
    assert_eq!(requests.len(), 100);
    let summary = outcome.summary.expect("summary");
    eprintln!("summary: {summary:?}");
    assert_eq!(summary.peak_pending, 100, "{summary:?}");
    assert!(
        summary.peak_supervisor_threads <= 4,
        "no thread per waiting operation: {summary:?}"
    );
}

/// A million opens: the events are capped, the rest counted; the supervisor's memory stays flat.
#[tokio::test(flavor = "multi_thread")]
async fn an_event_flood_is_counted_not_kept() {
    let script = r#"
import os
for i in range(1_000_000):
    os.close(os.open("/etc/hostname", os.O_RDONLY))
print("done")
"#;
    let sandbox = sandbox(true, 100).await;
    let lease = sandbox
        .acquire(Language::Python, None)
        .await
        .expect("lease");
    let outcome = lease
        .run_enforced(
            harness::vouched(Language::Python, script, 280).spec,
            Enforcement {
                policy: wire(SECRET_POLICY),
                event_cap: 100,
                approval_timeout: Duration::from_secs(1),
                approvals: None,
                live: None,
                approved_commands: Vec::new(),
            },
        )
        .await;
    sandbox.shutdown().await;
    assert_eq!(outcome.outcome.stdout.text(), "done\n", "{outcome:?}");
    let ev = events(&outcome);
    let kept = ev.file_operations.items().len() as u64;
    assert_eq!(kept, 100);
    assert!(
        kept + ev.file_operations.omitted() >= 1_000_000,
        "{}",
        ev.file_operations.omitted()
    );
    let summary = outcome.summary.expect("summary");
    eprintln!("summary: {summary:?}, file events kept {kept}");
    assert!(summary.decided >= 1_000_000, "{summary:?}");
    assert!(
        summary.supervisor_peak_rss_bytes < 32 << 20,
        "the supervisor's memory stays flat: {summary:?}"
    );
}
