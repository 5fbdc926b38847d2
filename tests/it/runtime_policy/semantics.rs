//! What a policy leaves as it was: ordinary scripts, the kernel's answers to the calls the
//! supervisor performs, signals during a wait; and where it cannot run (gVisor).

use std::time::Duration;

use scriptgate::domain::script::Language;
use scriptgate::sandbox::{Enforcement, Runner};
use scriptgate_policy::Decision;
use serde_json::Value;

use super::matrix::{EACCES, MATRIX_SCRIPT, matrix_policy};
use super::*;

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
        outcome.outcome.stdout.text(),
        "read=1\nexec=126\ncreate=0\nls=0\n",
        "{:?} {:?}",
        outcome.outcome.stderr.text(),
        outcome.outcome.crashed
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
        .run(harness::vouched(Language::Python, script, 30).spec)
        .await;
    sandbox.shutdown().await;
    assert_eq!(stdout_json(&enforced.outcome), stdout_json(&plain));
    assert_eq!(
        (
            &stdout_json(&plain)["existing"],
            &stdout_json(&plain)["new"]
        ),
        (&Value::from(13), &Value::from(30))
    );
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
        .run(harness::vouched(Language::Python, script, 60).spec)
        .await;
    sandbox.shutdown().await;
    let (e, p) = (stdout_json(&enforced.outcome), stdout_json(&plain));
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
    assert!(enforced.summary.is_some_and(|s| s.decided > 40));
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
            harness::vouched(Language::Python, script, 30).spec,
            Enforcement {
                policy,
                event_cap: 1000,
                approval_timeout: Duration::from_secs(10),
                approvals: Some(tx),
                live: None,
                approved_commands: Vec::new(),
            },
        )
        .await;
    let requests = asked.await.expect("approver");
    sandbox.shutdown().await;
    assert_eq!(
        stdout_json(&outcome.outcome),
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
    assert_eq!(stdout_json(&outcome.outcome)["read"], EACCES, "{outcome:?}");
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
    assert_eq!(outcome.outcome.exit_code, None);
    assert!(
        outcome.outcome.stdout.text().is_empty(),
        "the script must not run"
    );
    let reason = outcome.outcome.crashed.unwrap_or_default();
    assert!(reason.contains("not available"), "{reason}");
}
