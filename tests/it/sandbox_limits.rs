//! Hostile scripts against the sandbox alone (validation bypassed): the container must contain each.

use std::time::{Duration, Instant};

use scriptgate::domain::script::Language;
use scriptgate::sandbox::{RunOutcome, Runner, RunnerExt};

use crate::harness;

async fn run(language: Language, script: &str, timeout: u64) -> (RunOutcome, Duration, String) {
    let sandbox = harness::sandbox(|_| {}).await;
    let started = Instant::now();
    let outcome = sandbox
        .run(harness::vouched(language, script, timeout))
        .await
        .expect("the sandbox answers");
    let elapsed = started.elapsed();
    let instance = sandbox.config().instance.clone();
    sandbox.shutdown().await;
    (outcome, elapsed, instance)
}

/// An answer this many seconds past a run's deadline counts as a hang.
const HANG_SECS: u64 = 20;

async fn assert_gone(instance: &str) {
    let left = harness::settle(instance, 0, Duration::from_secs(10)).await;
    assert_eq!(left, 0, "containers of {instance} remain");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fork_bomb_is_contained_by_the_pids_limit() {
    // The bomb keeps forking while the script lives; the deadline ends it, the pids limit caps it.
    let script = ":(){ :|:& };:\nsleep 4\necho survived";
    let (o, elapsed, instance) = run(Language::Bash, script, 3).await;
    assert!(o.timed_out, "{o:?}");
    // A hang bound, not a speed claim (the machine is shared).
    assert!(
        elapsed < Duration::from_secs(3 + HANG_SECS),
        "answered in {elapsed:?} for a 3s timeout"
    );
    assert_gone(&instance).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_pids_limit_caps_processes_at_100() {
    let script = r#"
import os, time, errno
children = 0
while True:
    try:
        pid = os.fork()
    except OSError as e:
        print("stopped", errno.errorcode[e.errno], children)
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    children += 1
"#;
    let (o, _, instance) = run(Language::Python, script, 20).await;
    let out = o.stdout.text();
    let count: usize = out
        .split_whitespace()
        .last()
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX);
    assert!(
        out.starts_with("stopped EAGAIN"),
        "{out} {}",
        o.stderr.text()
    );
    assert!(
        (50..100).contains(&count),
        "forked {count} children under a limit of 100"
    );
    assert_gone(&instance).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_memory_balloon_is_oom_killed_and_reported() {
    let (o, _, instance) = run(
        Language::Python,
        "b = bytearray(2 * 1024 ** 3)\nprint(len(b))",
        30,
    )
    .await;
    assert!(o.oom_killed, "{o:?}");
    assert_eq!(o.signal, Some(9));
    assert!(
        o.usage.max_memory_bytes >= 400 << 20,
        "peak {} bytes",
        o.usage.max_memory_bytes
    );
    assert_gone(&instance).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_term_ignoring_sleeper_is_killed_at_the_deadline() {
    let script = "trap '' TERM INT HUP\necho started\nwhile true; do sleep 1; done";
    let (o, elapsed, instance) = run(Language::Bash, script, 2).await;
    assert!(o.timed_out, "{o:?}");
    assert_eq!(o.exit_code, None);
    assert_eq!(
        o.stdout.text(),
        "started\n",
        "output before the kill is kept"
    );
    assert!(
        elapsed < Duration::from_secs(2 + HANG_SECS),
        "answered in {elapsed:?} (timeout 2s)"
    );
    assert_gone(&instance).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn background_daemons_die_with_the_container() {
    let script = "setsid nohup sleep 300 >/dev/null 2>&1 &\n( sleep 300 & ) \necho spawned";
    let (o, _, instance) = run(Language::Bash, script, 10).await;
    // Had the run waited for the daemons, the 10 s deadline would have killed it.
    assert!(!o.timed_out, "the run waited for its daemons: {o:?}");
    assert_eq!(o.exit_code, Some(0), "{o:?}");
    assert_eq!(o.stdout.text(), "spawned\n");
    assert_gone(&instance).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gigabyte_of_output_is_truncated_without_growing_the_service() {
    let before = rss_bytes();
    let script = "import sys\nchunk = 'x' * 65536\nfor _ in range(16384):\n    sys.stdout.write(chunk)\nsys.stderr.write('e' * (3 << 20))\n";
    let (o, _, instance) = run(Language::Python, script, 60).await;
    let after = rss_bytes();
    assert_eq!(o.exit_code, Some(0), "{o:?}");
    assert!(o.stdout.truncated() && o.stderr.truncated());
    assert_eq!(o.stdout.len(), 1 << 20);
    assert_eq!(o.stderr.len(), 1 << 20);
    let grown = after.saturating_sub(before);
    assert!(
        grown < 64 << 20,
        "service RSS grew by {} MiB for 1 GiB of output",
        grown >> 20
    );
    assert_gone(&instance).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn tmpfs_and_file_limits_stop_disk_and_descriptor_floods() {
    let script = r#"
import os, errno
def fill(path):
    try:
        with open(path, "wb") as f:
            while True:
                f.write(b"x" * (1 << 20))
                f.flush()
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
print("tmp", fill("/tmp/fill"))
os.remove("/tmp/fill")
print("shm", fill("/dev/shm/fill"))
fds = []
try:
    while True:
        fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError as e:
    print("fds", errno.errorcode[e.errno], len(fds) < 1024)
"#;
    let (o, _, instance) = run(Language::Python, script, 30).await;
    let out = o.stdout.text();
    // fsize equals the tmpfs size, so the per-file limit (EFBIG) may come before the full disk.
    assert!(
        out.contains("tmp ENOSPC") || out.contains("tmp EFBIG"),
        "{out} {}",
        o.stderr.text()
    );
    assert!(
        out.contains("shm ENOSPC") || out.contains("shm EFBIG"),
        "{out}"
    );
    assert!(out.contains("fds EMFILE True"), "{out}");
    assert_gone(&instance).await;
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}
