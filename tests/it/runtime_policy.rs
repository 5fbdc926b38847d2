//! Run-time policy enforcement against a real engine: a script performs each operation type
//! (exec, read, write, create, delete, connect) under each decision (allow, deny, log, approve →
//! approved, denied, expired) and reports the errno it saw; the outcome must carry the matching
//! events. Then the hostile cases: a path swapped between an allowed and a denied file by another
//! thread, a symlink flipped in /tmp, a hundred processes waiting for approval at once, a million
//! opens.
//!
//! The image is `TEST_RUNNER_IMAGE` when set (a tag of the image built from this
//! checkout's supervisor, so concurrent rebuilds of `latest` elsewhere cannot interfere), else
//! the default runner image.

use std::time::Duration;

use scriptgate::domain::script::Language;
use scriptgate::sandbox::docker::DockerSandbox;
use scriptgate::sandbox::docker::images::DEFAULT_IMAGE;
use scriptgate::sandbox::{
    ApprovalAsk, ApprovalRequest, ApprovalVerdict, Enforcement, RunOutcome, RunSpec, Runner,
};
use scriptgate_policy::events::{Events, FileOperationType, NetworkEvent, OperationType};
use scriptgate_policy::{CompiledPolicy, Decision, Policy, WirePolicy};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::harness;

fn image() -> String {
    harness::runner_image().unwrap_or_else(|| DEFAULT_IMAGE.to_string())
}

/// A sandbox on the test image, Python started ready for a policy unless `ready` is false.
async fn sandbox(ready: bool, pids: i64) -> DockerSandbox {
    harness::sandbox(|c| {
        c.python_image = image();
        c.bash_image = image();
        c.enforcement_ready = ready;
        c.limits.pids = pids;
    })
    .await
}

fn wire(yaml: &str) -> WirePolicy {
    let policy: Policy = serde_norway::from_str(yaml).expect("test policy parses");
    CompiledPolicy::compile(policy)
        .expect("test policy compiles")
        .wire()
}

/// How the test approver answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Approve,
    Deny,
    /// Never: the supervisor's deadline ends each wait.
    Never,
    /// Holds every request until `n` wait at once, then approves them all.
    ApproveAfter(usize),
    /// Approves each request after this long.
    ApproveLater(Duration),
}

/// An approver task; it returns the requests it saw once the run has ended.
fn approver(
    answer: Answer,
) -> (
    mpsc::Sender<ApprovalAsk>,
    tokio::task::JoinHandle<Vec<ApprovalRequest>>,
) {
    let (tx, mut rx) = mpsc::channel::<ApprovalAsk>(256);
    let task = tokio::spawn(async move {
        let mut seen = Vec::new();
        let mut held = Vec::new();
        while let Some(ask) = rx.recv().await {
            seen.push(ask.request.clone());
            match answer {
                Answer::Approve => {
                    let _ = ask.answer.send(ApprovalVerdict::Approved);
                }
                Answer::Deny => {
                    let _ = ask.answer.send(ApprovalVerdict::Denied);
                }
                Answer::Never => held.push(ask.answer),
                Answer::ApproveLater(after) => {
                    tokio::spawn(async move {
                        tokio::time::sleep(after).await;
                        let _ = ask.answer.send(ApprovalVerdict::Approved);
                    });
                }
                Answer::ApproveAfter(n) => {
                    held.push(ask.answer);
                    if held.len() >= n {
                        for a in held.drain(..) {
                            let _ = a.send(ApprovalVerdict::Approved);
                        }
                    }
                }
            }
        }
        seen
    });
    (tx, task)
}

async fn run(
    sandbox: &DockerSandbox,
    language: Language,
    script: &str,
    policy: WirePolicy,
    approvals: Option<mpsc::Sender<ApprovalAsk>>,
    timeout: Duration,
) -> RunOutcome {
    let lease = sandbox.acquire(language, None).await.expect("a container");
    let enforcement = Enforcement {
        policy,
        event_cap: 5000,
        approval_timeout: Duration::from_millis(1500),
        approvals,
    };
    let spec = RunSpec {
        script: script.into(),
        stdin: String::new(),
        timeout,
    };
    lease.run_enforced(spec, enforcement).await
}

fn events(outcome: &RunOutcome) -> &Events {
    outcome
        .events
        .as_ref()
        .expect("a run under a policy has events")
}

fn stdout_json(outcome: &RunOutcome) -> Value {
    let text = outcome.stdout.text();
    let line = text.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| {
        panic!(
            "{e}: stdout {text:?}, stderr {:?}, crashed {:?}",
            outcome.stderr.text(),
            outcome.crashed
        )
    })
}

/// The policy of the decision matrix: decision `d` for one operation of each type, allow for the
/// rest.
fn matrix_policy(d: &str) -> WirePolicy {
    wire(&format!(
        r#"
version: 1
name: matrix-{d}
file_rules:
  - {{name: gated-read, paths: [/etc/hostname], operations: [read], decision: {d}}}
  - {{name: gated-write, paths: [/tmp/t/write.txt], operations: [write], decision: {d}}}
  - {{name: gated-create, paths: [/tmp/t/create.txt], operations: [create], decision: {d}}}
  - {{name: gated-delete, paths: [/tmp/t/delete.txt], operations: [delete], decision: {d}}}
  - {{name: everything-else, paths: ["/**"], operations: ["*"], decision: allow}}
command_rules:
  - {{name: gated-exec, commands: [id], decision: {d}}}
  - {{name: any-program, commands: ["*"], decision: allow}}
network_rules:
  - {{name: gated-connect, cidrs: [127.0.0.1], ports: [9], decision: {d}}}
  - {{name: loopback, cidrs: [127.0.0.0/8], decision: allow}}
  - {{name: no-network, decision: deny}}
"#
    ))
}

/// Performs one operation of each type and prints the errno each saw (0: it succeeded).
const MATRIX_SCRIPT: &str = r#"
import json, os, socket, subprocess
os.makedirs("/tmp/t", exist_ok=True)
with open("/tmp/t/write.txt", "w") as f:
    f.write("old")
with open("/tmp/t/delete.txt", "w") as f:
    f.write("x")

def attempt(fn):
    try:
        fn()
        return 0
    except OSError as e:
        return e.errno

def connect():
    s = socket.socket()
    s.settimeout(10)
    try:
        s.connect(("127.0.0.1", 9))
    finally:
        s.close()

def write():
    with open("/tmp/t/write.txt", "w") as f:
        f.write("new")

def create():
    with open("/tmp/t/create.txt", "x") as f:
        f.write("c")

r = {}
r["exec"] = attempt(lambda: subprocess.run(["id"], capture_output=True))
r["read"] = attempt(lambda: open("/etc/hostname").read())
r["write"] = attempt(write)
r["create"] = attempt(create)
r["delete"] = attempt(lambda: os.unlink("/tmp/t/delete.txt"))
r["connect"] = attempt(connect)
# A refused write must not have truncated the file (O_TRUNC happens only in the real open).
r["write_kept"] = open("/tmp/t/write.txt").read()
print(json.dumps(r))
"#;

const EACCES: i64 = 13;
const ECONNREFUSED: i64 = 111;

/// The decision matrix for one decision: the errnos the script saw, the events and the blocked
/// operations, and what the approver was asked.
async fn decision_matrix(decision: &str, answer: Answer) {
    let sandbox = sandbox(true, 100).await;
    let (tx, asked) = approver(answer);
    let outcome = run(
        &sandbox,
        Language::Python,
        MATRIX_SCRIPT,
        matrix_policy(decision),
        Some(tx),
        Duration::from_secs(60),
    )
    .await;
    let requests = asked.await.expect("approver");
    sandbox.shutdown().await;
    assert_eq!(outcome.exit_code, Some(0), "{outcome:?}");
    let proceeds = matches!(
        (decision, answer),
        ("allow" | "log", _) | ("approve", Answer::Approve)
    );
    let seen = stdout_json(&outcome);
    let expected = if proceeds {
        serde_json::json!({"exec": 0, "read": 0, "write": 0, "create": 0, "delete": 0, "connect": ECONNREFUSED, "write_kept": "new"})
    } else {
        serde_json::json!({"exec": EACCES, "read": EACCES, "write": EACCES, "create": EACCES, "delete": EACCES, "connect": EACCES, "write_kept": "old"})
    };
    assert_eq!(seen, expected, "{decision} / {answer:?}");
    let wanted: Decision =
        serde_json::from_value(Value::String(decision.into())).expect("decision");
    let ev = events(&outcome);
    let process = ev
        .processes
        .items()
        .iter()
        .find(|p| p.argv.first().map(String::as_str) == Some("id"))
        .expect("the exec of id is an event");
    assert_eq!(
        (process.decision, process.rule.as_deref()),
        (wanted, Some("gated-exec"))
    );
    assert_eq!(process.cwd, "/tmp");
    for (kind, path, rule) in [
        (FileOperationType::FileRead, "/etc/hostname", "gated-read"),
        (
            FileOperationType::FileWrite,
            "/tmp/t/write.txt",
            "gated-write",
        ),
        (
            FileOperationType::FileCreate,
            "/tmp/t/create.txt",
            "gated-create",
        ),
        (
            FileOperationType::FileDelete,
            "/tmp/t/delete.txt",
            "gated-delete",
        ),
    ] {
        let e = ev
            .file_operations
            .items()
            .iter()
            .find(|f| f.kind == kind && f.path == path)
            .unwrap_or_else(|| panic!("no {kind:?} event for {path}: {:?}", ev.file_operations));
        assert_eq!(
            (e.decision, e.rule.as_deref()),
            (wanted, Some(rule)),
            "{path}"
        );
    }
    let connect = ev
        .network_operations
        .items()
        .iter()
        .find_map(|n| match n {
            NetworkEvent::NetConnect {
                remote,
                port: 9,
                decision,
                rule,
                ..
            } => Some((remote.to_string(), *decision, rule.clone())),
            _ => None,
        })
        .expect("the connect is an event");
    assert_eq!(
        connect,
        ("127.0.0.1".into(), wanted, Some("gated-connect".into()))
    );
    let blocked: Vec<OperationType> = ev
        .blocked_operations
        .items()
        .iter()
        .map(|b| b.kind)
        .collect();
    if proceeds {
        assert!(blocked.is_empty(), "{blocked:?}");
    } else {
        for kind in [
            OperationType::Exec,
            OperationType::FileRead,
            OperationType::FileWrite,
            OperationType::FileCreate,
            OperationType::FileDelete,
            OperationType::NetConnect,
        ] {
            let b = ev
                .blocked_operations
                .items()
                .iter()
                .find(|b| b.kind == kind)
                .unwrap_or_else(|| panic!("{kind:?} is not blocked: {blocked:?}"));
            assert_eq!(b.errno, Some(13), "{kind:?}");
            assert!(b.pid.is_some_and(|p| p > 1), "{b:?}");
            let message = b.message.clone().unwrap_or_default();
            match answer {
                Answer::Deny => assert!(message.contains("denied by an operator"), "{message}"),
                Answer::Never if decision == "approve" => {
                    assert!(message.contains("expired"), "{message}")
                }
                _ => {}
            }
        }
    }
    if decision == "approve" {
        let mut ops: Vec<OperationType> = requests.iter().map(|r| r.operation).collect();
        // An exec refused with EACCES is tried again along PATH (/usr/bin, then /bin): each
        // attempt is an operation of its own.
        ops.sort_by_key(|o| format!("{o:?}"));
        ops.dedup();
        assert_eq!(
            ops,
            vec![
                OperationType::Exec,
                OperationType::FileCreate,
                OperationType::FileDelete,
                OperationType::FileRead,
                OperationType::FileWrite,
                OperationType::NetConnect,
            ],
            "{requests:?}"
        );
        for r in &requests {
            assert_eq!(r.cwd, "/tmp");
            assert!(r.pid > 1 && r.timeout_ms == 1500, "{r:?}");
            assert!(r.rule.as_deref().is_some_and(|n| n.starts_with("gated-")));
        }
        let exec = requests
            .iter()
            .find(|r| r.operation == OperationType::Exec)
            .expect("exec request");
        assert_eq!(exec.argv.as_deref(), Some(&["id".to_string()][..]));
        assert!(exec.command.as_deref().is_some_and(|c| c.ends_with("/id")));
    } else {
        assert!(requests.is_empty(), "{requests:?}");
    }
    let summary = outcome.enforcement.expect("a summary");
    assert!(summary.decided > 6, "{summary:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn allowed_operations_proceed_and_are_reported() {
    decision_matrix("allow", Answer::Never).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn denied_operations_fail_with_eacces_and_are_blocked() {
    decision_matrix("deny", Answer::Never).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn logged_operations_proceed_flagged() {
    decision_matrix("log", Answer::Never).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn approved_operations_proceed_after_the_answer() {
    decision_matrix("approve", Answer::Approve).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn operations_an_operator_denies_fail() {
    decision_matrix("approve", Answer::Deny).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn operations_nobody_approves_expire_and_fail() {
    decision_matrix("approve", Answer::Never).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bash_sees_the_policy_errno_and_its_commands_are_events() {
    let sandbox = sandbox(true, 100).await;
    let script = r#"
cat /etc/hostname >/dev/null 2>&1; echo "read=$?"
id >/dev/null 2>&1; echo "exec=$?"
echo x > /tmp/denied.txt 2>/dev/null; echo "create=$?"
ls /tmp >/dev/null; echo "ls=$?"
"#;
    let outcome = run(
        &sandbox,
        Language::Bash,
        script,
        matrix_policy("deny"),
        None,
        Duration::from_secs(30),
    )
    .await;
    sandbox.shutdown().await;
    assert_eq!(
        outcome.stdout.text(),
        "read=1\nexec=126\ncreate=0\nls=0\n",
        "{:?} {:?}",
        outcome.stderr.text(),
        outcome.crashed
    );
    let ev = events(&outcome);
    let argv0: Vec<&str> = ev
        .processes
        .items()
        .iter()
        .filter_map(|p| p.argv.first().map(String::as_str))
        .collect();
    assert_eq!(
        argv0,
        vec!["cat", "id", "ls"],
        "the interpreter's own launch is no event"
    );
    assert!(
        ev.blocked_operations
            .items()
            .iter()
            .any(|b| b.kind == OperationType::Exec && b.target == "id"),
        "{:?}",
        ev.blocked_operations
    );
}

/// The built-in default policy leaves an ordinary script as it was, and writes to the read-only
/// root still fail as the kernel fails them (`EACCES` for a root-owned file, `EROFS` for a new
/// one), while the events carry the policy's decision.
#[tokio::test(flavor = "multi_thread")]
async fn the_default_policy_leaves_ordinary_scripts_working() {
    let script = r#"
import csv, io, json, os, pathlib, subprocess, tempfile
with tempfile.TemporaryDirectory() as d:
    p = pathlib.Path(d) / "data.csv"
    p.write_text("a,b\n1,2\n")
    rows = list(csv.reader(io.StringIO(p.read_text())))
    os.rename(p, pathlib.Path(d) / "moved.csv")
    listing = sorted(os.listdir(d))
with tempfile.TemporaryFile() as f:
    f.write(b"x")
ls = subprocess.run(["ls", "/"], capture_output=True, text=True).stdout.split()
def errno(fn):
    try:
        fn()
        return 0
    except OSError as e:
        return e.errno
existing = errno(lambda: open("/etc/passwd", "a"))
new = errno(lambda: open("/etc/new-file", "w"))
print(json.dumps({"rows": rows, "listing": listing, "bin": "bin" in ls, "existing": existing,
                  "new": new, "home": os.path.expanduser("~")}))
"#;
    let policies = scriptgate::policy::Policies::load(&Default::default()).expect("built-ins");
    let default = policies
        .get("default")
        .expect("the built-in default policy")
        .policy
        .wire();
    let sandbox = sandbox(true, 100).await;
    let enforced = run(
        &sandbox,
        Language::Python,
        script,
        default,
        None,
        Duration::from_secs(30),
    )
    .await;
    let lease = sandbox
        .acquire(Language::Python, None)
        .await
        .expect("lease");
    let plain = lease
        .run(RunSpec {
            script: script.into(),
            stdin: String::new(),
            timeout: Duration::from_secs(30),
        })
        .await;
    sandbox.shutdown().await;
    assert_eq!(stdout_json(&enforced), stdout_json(&plain));
    assert_eq!(
        (
            &stdout_json(&plain)["existing"],
            &stdout_json(&plain)["new"]
        ),
        (&Value::from(13), &Value::from(30))
    );
    assert!(plain.events.is_none() && plain.enforcement.is_none());
    let ev = events(&enforced);
    let blocked: Vec<(&str, Option<i32>, Decision)> = ev
        .blocked_operations
        .items()
        .iter()
        .map(|b| (b.target.as_str(), b.errno, b.decision))
        .collect();
    assert_eq!(
        blocked,
        vec![
            ("/etc/passwd", Some(13), Decision::Deny),
            ("/etc/new-file", Some(30), Decision::Deny)
        ]
    );
}

/// Everything the supervisor performs for a process (opens relative to a `dirfd` or the working
/// directory, `/dev/fd/N`, `/proc/self`, the umask, `O_CLOEXEC`, `O_TRUNC`, `O_TMPFILE`, a
/// dangling symlink with `O_CREAT`, FIFOs, renames, links, stats, errors…) answers exactly as the
/// kernel does: a battery of file operations prints the same under an allow-all policy as without
/// one.
#[tokio::test(flavor = "multi_thread")]
async fn calls_performed_by_the_supervisor_answer_as_the_kernel_does() {
    let script = r#"
import ctypes, fcntl, json, os, stat, tempfile, threading, time
libc = ctypes.CDLL(None, use_errno=True)
out = {}
def rec(name, fn):
    try:
        out[name] = fn()
    except OSError as e:
        out[name] = "errno %d" % e.errno
os.umask(0o027)
os.makedirs("/tmp/s/d", exist_ok=True)
d = os.open("/tmp/s", os.O_RDONLY | os.O_DIRECTORY)
def openat_rel():
    os.close(os.open("d/../f1", os.O_CREAT | os.O_WRONLY, 0o666, dir_fd=d))
    return oct(os.stat("/tmp/s/f1").st_mode & 0o777)
rec("openat-relative-and-umask", openat_rel)
rec("mkdir-umask", lambda: (os.mkdir("/tmp/s/m", 0o777), oct(os.stat("/tmp/s/m").st_mode & 0o777))[1])
def cloexec(flags):
    fd = libc.open(b"/tmp/s/f1", flags)
    r = fcntl.fcntl(fd, fcntl.F_GETFD)
    os.close(fd)
    return r
rec("o-cloexec", lambda: cloexec(os.O_RDONLY | os.O_CLOEXEC))
rec("no-cloexec", lambda: cloexec(os.O_RDONLY))
def trunc():
    with open("/tmp/s/f1", "w") as f:
        f.write("hello")
    os.close(os.open("/tmp/s/f1", os.O_WRONLY | os.O_TRUNC))
    return os.path.getsize("/tmp/s/f1")
rec("o-trunc", trunc)
def append():
    with open("/tmp/s/f1", "a") as f:
        f.write("ab")
    with open("/tmp/s/f1", "a") as f:
        f.write("cd")
    return open("/tmp/s/f1").read()
rec("o-append", append)
def devfd():
    r, w = os.pipe()
    os.write(w, b"pipe!")
    fd = os.open(f"/dev/fd/{r}", os.O_RDONLY)
    return os.read(fd, 10).decode()
rec("dev-fd", devfd)
rec("proc-self", lambda: open("/proc/self/status").read().split("\n")[0])
rec("proc-self-fd", lambda: os.path.exists(f"/proc/self/fd/{d}"))
def tmpfile():
    with tempfile.TemporaryFile(dir="/tmp/s") as f:
        f.write(b"x")
        f.seek(0)
        return f.read().decode()
rec("o-tmpfile", tmpfile)
def dangling():
    os.symlink("/tmp/s/target", "/tmp/s/dl")
    with open("/tmp/s/dl", "w") as f:
        f.write("t")
    return open("/tmp/s/target").read()
rec("o-creat-dangling-symlink", dangling)
rec("rename", lambda: (os.rename("/tmp/s/f1", "/tmp/s/f2"), os.path.exists("/tmp/s/f2"))[1])
rec("link", lambda: (os.link("/tmp/s/f2", "/tmp/s/f3"), os.stat("/tmp/s/f3").st_nlink)[1])
rec("symlink-readlink", lambda: (os.symlink("f2", "/tmp/s/sl"), os.readlink("/tmp/s/sl"))[1])
rec("readlink-proc-exe", lambda: os.readlink("/proc/self/exe"))
rec("stat", lambda: [os.stat("/etc/hostname")[i] for i in (0, 3, 6)] + [os.stat("/tmp").st_uid == 0])
rec("lstat", lambda: stat.S_ISLNK(os.lstat("/tmp/s/sl").st_mode))
rec("fstat", lambda: os.fstat(d).st_mode == os.stat("/tmp/s").st_mode)
rec("access", lambda: [os.access("/etc/passwd", os.R_OK), os.access("/etc/passwd", os.W_OK), os.access("/nonexistent", os.F_OK)])
rec("chmod", lambda: (os.chmod("/tmp/s/f2", 0o600), oct(os.stat("/tmp/s/f2").st_mode & 0o777))[1])
def truncate():
    with open("/tmp/s/f2", "w") as f:
        f.write("12345")
    os.truncate("/tmp/s/f2", 2)
    return os.path.getsize("/tmp/s/f2")
rec("truncate", truncate)
rec("unlink-dir", lambda: os.unlink("/tmp/s/d"))
rec("rmdir-not-empty", lambda: os.rmdir("/tmp/s"))
rec("mkdir-exists", lambda: os.mkdir("/tmp/s/d"))
rec("open-missing", lambda: open("/nonexistent/x"))
rec("open-dir-for-writing", lambda: os.open("/tmp", os.O_WRONLY))
rec("o-excl-exists", lambda: os.open("/tmp/s/f2", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
rec("o-nofollow-symlink", lambda: os.open("/tmp/s/sl", os.O_RDONLY | os.O_NOFOLLOW))
rec("create-in-read-only-root", lambda: open("/usr/new", "w"))
def fifo():
    os.mkfifo("/tmp/s/fifo")
    def writer():
        time.sleep(0.2)
        with open("/tmp/s/fifo", "w") as f:
            f.write("fifo!")
    t = threading.Thread(target=writer)
    t.start()
    with open("/tmp/s/fifo") as f:
        data = f.read()
    t.join()
    return data
rec("fifo-waits-for-its-writer", fifo)
os.chdir("/tmp/s")
rec("cwd-relative", lambda: open("f3").read())
rec("listdir", lambda: sorted(os.listdir("/tmp/s")))
print(json.dumps(out, sort_keys=True))
"#;
    let allow_all = wire(
        r#"
version: 1
name: allow-all
file_rules:
  - {name: all, paths: ["/**"], operations: ["*"], decision: allow}
command_rules:
  - {name: any-program, commands: ["*"], decision: allow}
"#,
    );
    let sandbox = sandbox(true, 100).await;
    let enforced = run(
        &sandbox,
        Language::Python,
        script,
        allow_all,
        None,
        Duration::from_secs(60),
    )
    .await;
    let lease = sandbox
        .acquire(Language::Python, None)
        .await
        .expect("lease");
    let plain = lease
        .run(RunSpec {
            script: script.into(),
            stdin: String::new(),
            timeout: Duration::from_secs(60),
        })
        .await;
    sandbox.shutdown().await;
    let (e, p) = (stdout_json(&enforced), stdout_json(&plain));
    assert_eq!(p["openat-relative-and-umask"], "0o640", "{p}");
    assert_eq!(p["fifo-waits-for-its-writer"], "fifo!", "{p}");
    let keys: Vec<&String> = p.as_object().expect("object").keys().collect();
    for key in keys {
        assert_eq!(
            e[key], p[key],
            "{key}: enforced {} / plain {}",
            e[key], p[key]
        );
    }
    assert!(enforced.enforcement.is_some_and(|s| s.decided > 40));
}

/// A held call is not restarted by a signal (`WAIT_KILLABLE_RECV`): the handler runs after the
/// answer, and the host is asked once.
#[tokio::test(flavor = "multi_thread")]
async fn a_signal_does_not_restart_a_held_call() {
    let script = r#"
import json, signal, time
ticks = []
signal.signal(signal.SIGALRM, lambda *_: ticks.append(time.monotonic()))
signal.setitimer(signal.ITIMER_REAL, 0.3)
started = time.monotonic()
data = open("/etc/hostname").read()
ended = time.monotonic()
print(json.dumps({"read": bool(data), "ticks": len(ticks), "handler_after_answer": bool(ticks) and ticks[0] >= ended - 0.05, "waited": ended - started > 1.0}))
"#;
    let policy = wire(
        r#"
version: 1
name: held-read
file_rules:
  - {name: held, paths: [/etc/hostname], operations: [read], decision: approve}
  - {name: all, paths: ["/**"], operations: ["*"], decision: allow}
command_rules:
  - {name: any-program, commands: ["*"], decision: allow}
"#,
    );
    let sandbox = sandbox(true, 100).await;
    let (tx, asked) = approver(Answer::ApproveLater(Duration::from_millis(1200)));
    let lease = sandbox
        .acquire(Language::Python, None)
        .await
        .expect("lease");
    let outcome = lease
        .run_enforced(
            RunSpec {
                script: script.into(),
                stdin: String::new(),
                timeout: Duration::from_secs(30),
            },
            Enforcement {
                policy,
                event_cap: 1000,
                approval_timeout: Duration::from_secs(10),
                approvals: Some(tx),
            },
        )
        .await;
    let requests = asked.await.expect("approver");
    sandbox.shutdown().await;
    assert_eq!(
        stdout_json(&outcome),
        serde_json::json!({"read": true, "ticks": 1, "handler_after_answer": true, "waited": true})
    );
    assert_eq!(requests.len(), 1, "{requests:?}");
}

/// Without an interpreter started ready for a policy, a run with one starts its interpreter again
/// under the filter: the policy applies all the same.
#[tokio::test(flavor = "multi_thread")]
async fn a_policy_applies_to_an_interpreter_started_without_the_filter() {
    let sandbox = sandbox(false, 100).await;
    let outcome = run(
        &sandbox,
        Language::Python,
        MATRIX_SCRIPT,
        matrix_policy("deny"),
        None,
        Duration::from_secs(60),
    )
    .await;
    sandbox.shutdown().await;
    assert_eq!(stdout_json(&outcome)["read"], EACCES, "{outcome:?}");
    assert!(events(&outcome).blocked_operations.items().len() >= 6);
}

/// Under gVisor there is no seccomp user notification and no Landlock: a run that asks for a
/// policy is refused, never run without it.
#[tokio::test(flavor = "multi_thread")]
async fn under_gvisor_a_run_with_a_policy_is_refused() {
    let runtimes = harness::docker()
        .await
        .info()
        .await
        .ok()
        .and_then(|i| i.runtimes)
        .unwrap_or_default();
    if !runtimes.contains_key("runsc") {
        eprintln!("SKIPPED: runsc is not registered with the engine");
        return;
    }
    let plain = std::process::Command::new("docker")
        .args(["run", "--rm", "--runtime", "runsc", "--network", "none"])
        .args(["--entrypoint", "/bin/true", &image()])
        .output()
        .expect("docker CLI");
    if !plain.status.success() {
        eprintln!("SKIPPED: runsc cannot start a plain container here");
        return;
    }
    let sandbox = harness::sandbox(|c| {
        c.python_image = image();
        c.bash_image = image();
        c.runtime = Some("runsc".into());
        c.enforcement_ready = true;
    })
    .await;
    let outcome = run(
        &sandbox,
        Language::Python,
        "print('ran')",
        matrix_policy("allow"),
        None,
        Duration::from_secs(30),
    )
    .await;
    sandbox.shutdown().await;
    assert_eq!(outcome.exit_code, None);
    assert!(outcome.stdout.text().is_empty(), "the script must not run");
    let reason = outcome.crashed.unwrap_or_default();
    assert!(reason.contains("not available"), "{reason}");
}

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
async fn hostile_a_path_swapped_by_another_thread_never_reaches_the_denied_file() {
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
    let r = stdout_json(&outcome);
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
async fn hostile_a_symlink_flipped_in_tmp_never_reaches_the_denied_file() {
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
    let r = stdout_json(&outcome);
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
async fn hostile_a_hundred_processes_wait_for_approval_without_a_thread_each() {
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
            RunSpec {
                script: script.into(),
                stdin: String::new(),
                timeout: Duration::from_secs(120),
            },
            Enforcement {
                policy,
                event_cap: 5000,
                approval_timeout: Duration::from_secs(60),
                approvals: Some(tx),
            },
        )
        .await;
    let requests = asked.await.expect("approver");
    sandbox.shutdown().await;
    assert_eq!(stdout_json(&outcome)["ok"], 100, "{outcome:?}");
    assert_eq!(requests.len(), 100);
    let summary = outcome.enforcement.expect("summary");
    eprintln!("summary: {summary:?}");
    assert_eq!(summary.peak_pending, 100, "{summary:?}");
    assert!(
        summary.peak_supervisor_threads <= 4,
        "no thread per waiting operation: {summary:?}"
    );
}

/// A million opens: the events are capped, the rest counted; the supervisor's memory stays flat.
#[tokio::test(flavor = "multi_thread")]
async fn hostile_an_event_flood_is_counted_not_kept() {
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
            RunSpec {
                script: script.into(),
                stdin: String::new(),
                timeout: Duration::from_secs(280),
            },
            Enforcement {
                policy: wire(SECRET_POLICY),
                event_cap: 100,
                approval_timeout: Duration::from_secs(1),
                approvals: None,
            },
        )
        .await;
    sandbox.shutdown().await;
    assert_eq!(outcome.stdout.text(), "done\n", "{outcome:?}");
    let ev = events(&outcome);
    let kept = ev.file_operations.items().len() as u64;
    assert_eq!(kept, 100);
    assert!(
        kept + ev.file_operations.omitted() >= 1_000_000,
        "{}",
        ev.file_operations.omitted()
    );
    let summary = outcome.enforcement.expect("summary");
    eprintln!("summary: {summary:?}, file events kept {kept}");
    assert!(summary.decided >= 1_000_000, "{summary:?}");
    assert!(
        summary.supervisor_peak_rss_bytes < 32 << 20,
        "the supervisor's memory stays flat: {summary:?}"
    );
}
