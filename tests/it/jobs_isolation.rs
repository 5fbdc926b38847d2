//! Jobs against their constraints in real containers: symlinks planted by earlier steps, FIFOs,
//! overwrites, half-applying diffs, huge globs, processes outliving their step, PID 1 out of
//! reach, constraints refused before any container, and gVisor with separate identities.

use std::time::{Duration, Instant};

use scriptgate::domain::script::Language;
use scriptgate::sandbox::Runner;
use scriptgate::sandbox::job::{self, ErrorType, JobStatus, Maxima, StepOutput, StepStatus};
use serde_json::{Value, json};

use crate::harness;
use crate::jobs_sandbox::{checked, command_output, error_type, five_steps, job, run};

#[tokio::test(flavor = "multi_thread")]
async fn a_symlink_planted_by_an_earlier_step_redirects_nothing() {
    let sandbox = harness::sandbox(|_| {}).await;
    let plant = "import os; os.symlink('/tmp', '/workspace/out'); os.symlink('/etc/passwd', '/workspace/passwd'); \
                 os.symlink('real.txt', '/workspace/inside')";
    let outcome = run(&sandbox, job(&["python3"], json!([
        {"id": "real", "type": "write_file", "arguments": {"path": "real.txt", "content": "r"}},
        {"id": "plant", "type": "run_command", "arguments": {"command": "python3", "args": ["-c", plant]}},
        {"id": "via-dir", "type": "write_file", "continue_on_error": true, "arguments": {"path": "out/x.txt", "content": "x"}},
        {"id": "via-file", "type": "read_file", "continue_on_error": true, "arguments": {"path": "passwd"}},
        {"id": "inside", "type": "read_file", "continue_on_error": true, "arguments": {"path": "inside"}},
        {"id": "diff", "type": "apply_unified_diff", "continue_on_error": true,
            "arguments": {"diff": "--- a/passwd\n+++ b/passwd\n@@ -1 +1 @@\n-root:x:0:0:root:/root:/bin/bash\n+evil\n"}},
        {"id": "check", "type": "run_command", "arguments": {"command": "python3",
            "args": ["-c", "import os; print(os.path.exists('/tmp/x.txt'))"]}}
    ]), &["/workspace/passwd", "/workspace/out", "/workspace/real.txt"])).await;
    let r = &outcome.result;
    for index in 2..=5 {
        assert_eq!(
            error_type(r, index),
            Some(ErrorType::PolicyViolation),
            "step {index}: {:?}",
            r.steps[index]
        );
    }
    assert_eq!(command_output(r, 6).stdout, "False\n");
    // Artifacts: a symlink and a symlinked directory are per-artifact errors, not a job failure.
    assert_eq!(r.status, JobStatus::Success);
    let errors: Vec<Option<ErrorType>> = r
        .artifacts
        .iter()
        .map(|a| a.error.as_ref().map(|e| e.kind))
        .collect();
    assert_eq!(
        errors,
        [
            Some(ErrorType::PolicyViolation),
            Some(ErrorType::PolicyViolation),
            None
        ]
    );
    sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_inputs_inside_the_container_are_typed_errors() {
    let sandbox = harness::sandbox(|_| {}).await;
    let make = "import os\nos.mkfifo('/workspace/fifo')\nos.mkdir('/workspace/dir')\nos.mkdir('/workspace/many')\n\
                for i in range(100000):\n    open(f'/workspace/many/{i}.txt', 'w').close()\n";
    let half = "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-one\n+ONE\n--- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-not b\n+B\n";
    let started = Instant::now();
    let outcome = run(&sandbox, job(&["python3"], json!([
        {"id": "a", "type": "write_file", "arguments": {"path": "a.txt", "content": "one\n"}},
        {"id": "b", "type": "write_file", "arguments": {"path": "b.txt", "content": "b\n"}},
        {"id": "again", "type": "write_file", "continue_on_error": true, "arguments": {"path": "a.txt", "content": "x"}},
        {"id": "half", "type": "apply_unified_diff", "continue_on_error": true, "arguments": {"diff": half}},
        {"id": "unchanged", "type": "read_file", "arguments": {"path": "a.txt"}},
        {"id": "make", "type": "run_command", "arguments": {"command": "python3", "args": ["-c", make]}},
        {"id": "fifo", "type": "read_file", "continue_on_error": true, "arguments": {"path": "fifo"}},
        {"id": "fifo-write", "type": "write_file", "continue_on_error": true,
            "arguments": {"path": "fifo", "content": "x"}},
        {"id": "missing", "type": "read_file", "continue_on_error": true, "arguments": {"path": "none"}},
        {"id": "no-dir", "type": "run_command", "continue_on_error": true, "arguments": {"command": "python3", "args": ["-c", "pass"], "working_dir": "/workspace/nowhere"}}
    ]), &["/workspace/dir", "/workspace/fifo", "/workspace/many/*.txt"])).await;
    let r = &outcome.result;
    assert_eq!(
        error_type(r, 2),
        Some(ErrorType::PolicyViolation),
        "overwrite: {:?}",
        r.steps[2]
    );
    assert_eq!(
        error_type(r, 3),
        Some(ErrorType::ExecutionFailure),
        "half-applying diff: {:?}",
        r.steps[3]
    );
    let Some(StepOutput::ReadFile(read)) = &r.steps[4].result else {
        panic!("read")
    };
    assert_eq!(read.content, "one\n", "nothing half applied");
    assert_eq!(r.steps[5].status, StepStatus::Success, "{:?}", r.steps[5]);
    assert_eq!(
        error_type(r, 6),
        Some(ErrorType::PolicyViolation),
        "FIFO read: {:?}",
        r.steps[6]
    );
    assert_eq!(
        error_type(r, 7),
        Some(ErrorType::PolicyViolation),
        "FIFO write: {:?}",
        r.steps[7]
    );
    assert_eq!(error_type(r, 8), Some(ErrorType::ExecutionFailure));
    assert_eq!(
        error_type(r, 9),
        Some(ErrorType::ExecutionFailure),
        "{:?}",
        r.steps[9]
    );
    let errors: Vec<Option<ErrorType>> = r
        .artifacts
        .iter()
        .map(|a| a.error.as_ref().map(|e| e.kind))
        .collect();
    assert_eq!(
        errors,
        [
            Some(ErrorType::PolicyViolation),
            Some(ErrorType::PolicyViolation),
            Some(ErrorType::ResourceLimitExceeded)
        ],
        "{:?}",
        r.artifacts
    );
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "bound on a hang"
    );
    sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn host_visible_violations_are_refused_before_any_container() {
    let refused = |value: Value| -> job::JobResult {
        let parsed = job::parse_value(&value).expect("well-formed");
        job::check(parsed, &Maxima::default())
            .expect_err("refused")
            .result(time::OffsetDateTime::now_utc())
    };
    let step = |t: &str, args: Value| json!({"id": "s", "type": t, "arguments": args});
    for (value, kind) in [
        (
            job(
                &["python3"],
                json!([step(
                    "run_command",
                    json!({"command": "sh", "args": ["-c", "id"]})
                )]),
                &[],
            ),
            ErrorType::PolicyViolation,
        ),
        (
            job(
                &["python3"],
                json!([step(
                    "run_command",
                    json!({"command": "bash", "args": ["-c", "id"]})
                )]),
                &[],
            ),
            ErrorType::PolicyViolation,
        ),
        (
            job(
                &[],
                json!([step("read_file", json!({"path": "../etc/passwd"}))]),
                &[],
            ),
            ErrorType::PolicyViolation,
        ),
        (
            job(
                &[],
                json!([step("read_file", json!({"path": "/etc/passwd"}))]),
                &[],
            ),
            ErrorType::PolicyViolation,
        ),
        (
            job(
                &[],
                json!([step(
                    "read_file",
                    json!({"path": "x", "max_bytes": 1_000_000_000u64})
                )]),
                &[],
            ),
            ErrorType::ResourceLimitExceeded,
        ),
        (
            job(
                &[],
                json!([step(
                    "apply_unified_diff",
                    json!({"diff": "--- a/../etc/passwd\n+++ b/../etc/passwd\n@@ -1 +1 @@\n-a\n+b\n"})
                )]),
                &[],
            ),
            ErrorType::PolicyViolation,
        ),
        (
            job(
                &[],
                json!([step(
                    "apply_unified_diff",
                    json!({"diff": "diff --git a/x b/x\nGIT binary patch\nliteral 1\nA\n"})
                )]),
                &[],
            ),
            ErrorType::PolicyViolation,
        ),
    ] {
        let result = refused(value);
        assert_eq!(result.status, JobStatus::Failure);
        assert_eq!(result.steps[0].status, StepStatus::Failure);
        assert_eq!(result.error.expect("error").kind, kind);
    }
    let ten_thousand: Vec<Value> = (0..10_000)
        .map(|i| json!({"id": format!("s{i}"), "type": "list_tree", "arguments": {"path": "x"}}))
        .collect();
    let result = refused(job(&[], Value::Array(ten_thousand), &[]));
    assert!(
        result.steps.iter().all(|s| s.status == StepStatus::Skipped),
        "nothing run"
    );
    assert_eq!(
        result.error.expect("error").kind,
        ErrorType::ResourceLimitExceeded
    );
    for bad in [
        json!({"protocol_version": "2.0", "steps": []}),
        json!({"protocol_version": "1.0", "steps": [{"id": "a", "type": "rm_rf", "arguments": {}}]}),
        json!({"protocol_version": "1.0", "steps": [{"id": "a", "type": "run_command", "arguments": {}}]}),
    ] {
        let e = job::parse_value(&bad).expect_err("schema error");
        assert_eq!(e.to_job_error().kind, ErrorType::SchemaError);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_steps_processes_die_with_it_and_leave_nothing_to_wait_for() {
    let sandbox = harness::sandbox(|_| {}).await;
    // A daemon in a session of its own, holding the step's stdout open.
    let daemon = "import subprocess, sys; subprocess.Popen(['sleep', '300'], start_new_session=True, stdout=sys.stdout); print('left')";
    let started = Instant::now();
    // A Python container: its pre-started interpreter is discarded when a job arrives.
    let lease = sandbox
        .acquire(Language::Python, None)
        .await
        .expect("a lease");
    let outcome = lease.run_job(checked(job(&["python3", "ps"], json!([
        {"id": "daemon", "type": "run_command", "arguments": {"command": "python3", "args": ["-c", daemon]}},
        {"id": "ps", "type": "run_command", "arguments": {"command": "ps", "args": ["-eo", "pid,comm"]}},
        {"id": "pid1", "type": "run_command", "continue_on_error": true, "arguments": {"command": "python3",
            "args": ["-c", "open('/proc/1/mem', 'rb').read(1)"]}}
    ]), &[]))).await;
    let r = &outcome.result;
    assert_eq!(command_output(r, 0).stdout, "left\n");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the step did not wait for the daemon's pipe"
    );
    let ps = &command_output(r, 1).stdout;
    assert!(!ps.contains("sleep"), "the daemon outlived its step:\n{ps}");
    assert!(ps.contains("scriptgate-supe"), "{ps}");
    assert!(
        !ps.contains("python3"),
        "the pre-started interpreter is gone too:\n{ps}"
    );
    assert_eq!(
        error_type(r, 2),
        Some(ErrorType::ExecutionFailure),
        "PID 1's memory is out of reach"
    );
    assert!(
        command_output(r, 2).stderr.contains("PermissionError"),
        "{:?}",
        command_output(r, 2)
    );
    sandbox.shutdown().await;
}

/// gVisor: the supervisor and the steps run as different uids, and `openat2` is missing (the
/// agent walks paths component by component instead).
#[tokio::test(flavor = "multi_thread")]
async fn jobs_run_under_gvisor_with_separate_identities() {
    if !harness_has_runsc().await {
        eprintln!("SKIPPED: the engine has no runsc runtime");
        return;
    }
    let sandbox = harness::sandbox(|c| c.runtime = Some("runsc".into())).await;
    let outcome = run(&sandbox, five_steps()).await;
    assert_eq!(
        outcome.result.status,
        JobStatus::Success,
        "{:#?} {:?}",
        outcome.result,
        outcome.crashed
    );
    assert_eq!(outcome.files.len(), 2);
    let ids =
        "import os; print(os.getuid(), open('/proc/1/status').read().split('Uid:')[1].split()[0])";
    let plant = "import os; os.symlink('/etc', '/workspace/etc')";
    let outcome = run(&sandbox, job(&["python3"], json!([
        {"id": "ids", "type": "run_command", "arguments": {"command": "python3", "args": ["-c", ids]}},
        {"id": "plant", "type": "run_command", "arguments": {"command": "python3", "args": ["-c", plant]}},
        {"id": "via", "type": "read_file", "arguments": {"path": "etc/passwd"}}
    ]), &[])).await;
    let r = &outcome.result;
    let out = command_output(r, 0).stdout.clone();
    let (script, supervisor) = out.trim().split_once(' ').expect("two uids");
    assert_ne!(script, supervisor, "steps and supervisor are apart");
    assert!(script.parse::<u32>().expect("uid") >= scriptgate::sandbox::docker::spec::UID_BASE);
    assert_eq!(
        error_type(r, 2),
        Some(ErrorType::PolicyViolation),
        "{:?}",
        r.steps[2]
    );
    sandbox.shutdown().await;
}

async fn harness_has_runsc() -> bool {
    harness::docker()
        .await
        .info()
        .await
        .ok()
        .and_then(|i| i.runtimes)
        .is_some_and(|r| r.contains_key("runsc"))
}
