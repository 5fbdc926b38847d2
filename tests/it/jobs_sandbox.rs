//! Jobs (Job protocol 1.0) in real containers, driven through `DockerSandbox` directly: every
//! step type, every failure type, bad inputs, artifacts with their sha256, warm and cold
//! containers, gVisor, and the agent's standalone modes in a plain `docker run`.

use std::time::{Duration, Instant};

use scriptgate::domain::script::Language;
use scriptgate::sandbox::docker::DockerSandbox;
use scriptgate::sandbox::job::{
    self, ErrorType, JobResult, JobStatus, Maxima, StepOutput, StepStatus,
};
use scriptgate::sandbox::{JobOutcome, JobRun, Runner, RunnerExt};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::harness;

const IMAGE: &str = "scriptgate-runner:latest";

fn checked(value: Value) -> JobRun {
    let parsed = job::parse_value(&value).expect("a well-formed job");
    JobRun::new(job::check(parsed, &Maxima::default()).expect("passes the static checks"))
}

async fn run(sandbox: &DockerSandbox, value: Value) -> JobOutcome {
    sandbox.run_job(checked(value)).await.expect("a sandbox")
}

fn job(commands: &[&str], steps: Value, artifacts: &[&str]) -> Value {
    json!({"protocol_version": "1.0",
           "constraints": {"allowed_commands": commands, "max_runtime_seconds": 60},
           "steps": steps, "artifacts": artifacts})
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn statuses(result: &JobResult) -> Vec<StepStatus> {
    result.steps.iter().map(|s| s.status).collect()
}

fn command_output(result: &JobResult, index: usize) -> &job::CommandOutput {
    match &result.steps[index].result {
        Some(StepOutput::RunCommand(out)) => out,
        other => panic!("step {index} has no command output: {other:?}"),
    }
}

fn error_type(result: &JobResult, index: usize) -> Option<ErrorType> {
    result.steps[index].error.as_ref().map(|e| e.kind)
}

const DIFF: &str = "--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,2 @@\n import json\n-print('hello')\n+print('hello, world')\n";

/// The benchmark's job too: write a .py, run it, apply a diff, read a file, list the tree.
pub fn five_steps() -> Value {
    job(
        &["python3"],
        json!([
            {"id": "write", "type": "write_file", "arguments": {"path": "/workspace/app.py",
                "content": "import json\nprint('hello')\njson.dump({'ok': True}, open('/workspace/out/report.json', 'w'))\n"}},
            {"id": "mkdir", "type": "write_file", "arguments": {"path": "/workspace/out/.keep", "content": ""}},
            {"id": "run", "type": "run_command", "arguments": {"command": "python3", "args": ["app.py"]}},
            {"id": "patch", "type": "apply_unified_diff", "arguments": {"diff": DIFF}},
            {"id": "read", "type": "read_file", "arguments": {"path": "/workspace/app.py"}},
            {"id": "list", "type": "list_tree", "arguments": {"path": "/workspace", "max_depth": 2}}
        ]),
        &["/workspace/out/*.json", "/workspace/app.py"],
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn every_step_type_runs_and_returns_its_result_and_artifacts() {
    let sandbox = harness::sandbox(|_| {}).await;
    let outcome = run(&sandbox, five_steps()).await;
    let r = &outcome.result;
    assert_eq!(r.status, JobStatus::Success, "{r:#?} {:?}", outcome.crashed);
    assert!(statuses(r).iter().all(|s| *s == StepStatus::Success));
    let out = command_output(r, 2);
    assert_eq!((out.exit_code, out.stdout.as_str()), (Some(0), "hello\n"));
    let Some(StepOutput::ApplyUnifiedDiff(diff)) = &r.steps[3].result else {
        panic!("diff result")
    };
    assert_eq!(diff.files_modified, ["/workspace/app.py"]);
    let Some(StepOutput::ReadFile(read)) = &r.steps[4].result else {
        panic!("read result")
    };
    assert!(
        read.content.contains("print('hello, world')"),
        "{}",
        read.content
    );
    assert_eq!(read.sha256, sha256(read.content.as_bytes()));
    let Some(StepOutput::ListTree(tree)) = &r.steps[5].result else {
        panic!("tree result")
    };
    let names: Vec<&str> = tree
        .tree
        .children
        .as_ref()
        .expect("children")
        .iter()
        .map(|n| n.name.as_str())
        .collect();
    assert_eq!(names, ["app.py", "out"]);
    // Artifacts: listed with their sha256, and the bytes that arrived hash the same.
    let paths: Vec<&str> = r.artifacts.iter().map(|a| a.path.as_str()).collect();
    assert_eq!(paths, ["/workspace/out/report.json", "/workspace/app.py"]);
    assert_eq!(
        r.artifacts[0].mime_type.as_deref(),
        Some("application/json")
    );
    assert_eq!(outcome.files.len(), 2);
    for (entry, file) in r.artifacts.iter().zip(&outcome.files) {
        let bytes = file.read_all().expect("spooled bytes");
        assert_eq!(Some(sha256(&bytes)), entry.sha256, "{}", entry.path);
        assert_eq!(Some(bytes.len() as u64), entry.size_bytes);
    }
    assert_eq!(
        outcome.files[0].read_all().expect("bytes"),
        br#"{"ok": true}"#
    );
    assert!(
        r.resource_usage.cpu_time_ms > 0 && r.resource_usage.max_rss_bytes > 0,
        "{:?}",
        r.resource_usage
    );
    assert_eq!(r.protocol_version.to_string(), "1.0");
    sandbox.shutdown().await;
    assert!(
        harness::containers(&sandbox.config().instance)
            .await
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_command_ends_the_job_and_artifacts_are_still_collected() {
    let sandbox = harness::sandbox(|_| {}).await;
    let outcome = run(&sandbox, job(&["python3"], json!([
        {"id": "w", "type": "write_file", "arguments": {"path": "report.txt", "content": "partial"}},
        {"id": "fail", "type": "run_command", "arguments": {"command": "python3",
            "args": ["-c", "import sys; print('out'); sys.stderr.write('bad\\n'); sys.exit(3)"]}},
        {"id": "never", "type": "list_tree", "arguments": {"path": "/workspace"}}
    ]), &["/workspace/report.txt"])).await;
    let r = &outcome.result;
    assert_eq!(r.status, JobStatus::Failure);
    assert_eq!(
        statuses(r),
        [
            StepStatus::Success,
            StepStatus::Failure,
            StepStatus::Skipped
        ]
    );
    assert_eq!(error_type(r, 1), Some(ErrorType::ExecutionFailure));
    let out = command_output(r, 1);
    assert_eq!(
        (out.exit_code, out.stdout.as_str(), out.stderr.as_str()),
        (Some(3), "out\n", "bad\n")
    );
    let error = r.error.as_ref().expect("job error");
    assert_eq!(error.kind, ErrorType::ExecutionFailure);
    assert!(error.message.contains("step `fail`"), "{}", error.message);
    assert_eq!(outcome.files.len(), 1, "{:?}", r.artifacts);
    assert_eq!(outcome.files[0].read_all().expect("bytes"), b"partial");

    // continue_on_error: the failure stays on its step, the job goes on.
    let outcome = run(
        &sandbox,
        job(
            &["python3"],
            json!([
                {"id": "fail", "type": "run_command", "continue_on_error": true,
                    "arguments": {"command": "python3", "args": ["-c", "raise SystemExit(1)"]}},
                {"id": "next", "type": "list_tree", "arguments": {"path": "/workspace"}}
            ]),
            &[],
        ),
    )
    .await;
    assert_eq!(
        statuses(&outcome.result),
        [StepStatus::Failure, StepStatus::Success]
    );
    assert_eq!(outcome.result.status, JobStatus::Success);
    sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn timeouts_kill_the_step_and_keep_what_was_collected() {
    let sandbox = harness::sandbox(|_| {}).await;
    let started = Instant::now();
    let outcome = run(&sandbox, job(&["python3", "sleep"], json!([
        {"id": "w", "type": "write_file", "arguments": {"path": "before.txt", "content": "kept"}},
        {"id": "slow", "type": "run_command", "arguments": {"command": "python3",
            "args": ["-c", "import time; print('started', flush=True); time.sleep(120)"], "timeout_seconds": 2}},
        {"id": "never", "type": "list_tree", "arguments": {"path": "/workspace"}}
    ]), &["/workspace/before.txt"])).await;
    let r = &outcome.result;
    assert_eq!(r.status, JobStatus::Timeout, "{r:#?}");
    assert_eq!(
        statuses(r),
        [
            StepStatus::Success,
            StepStatus::Failure,
            StepStatus::Skipped
        ]
    );
    assert_eq!(error_type(r, 1), Some(ErrorType::Timeout));
    let out = command_output(r, 1);
    assert_eq!((out.exit_code, out.stdout.as_str()), (None, "started\n"));
    assert_eq!(outcome.files.len(), 1, "artifacts of a timed-out job");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "bound on a hang"
    );

    // The job's own deadline ends it whatever the step's timeout says.
    let mut value = job(
        &["sleep"],
        json!([
            {"id": "slow", "type": "run_command", "continue_on_error": true,
                "arguments": {"command": "sleep", "args": ["60"]}},
            {"id": "never", "type": "list_tree", "arguments": {"path": "/workspace"}}
        ]),
        &[],
    );
    value["constraints"]["max_runtime_seconds"] = json!(2);
    let outcome = run(&sandbox, value).await;
    assert_eq!(outcome.result.status, JobStatus::Timeout);
    assert_eq!(
        statuses(&outcome.result),
        [StepStatus::Failure, StepStatus::Skipped]
    );
    assert!(
        outcome
            .result
            .error
            .as_ref()
            .expect("error")
            .message
            .contains("max_runtime_seconds")
    );
    sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn memory_exhaustion_is_a_resource_limit() {
    let sandbox = harness::sandbox(|c| c.limits.memory_mb = 128).await;
    let outcome = run(
        &sandbox,
        job(
            &["python3"],
            json!([
                {"id": "balloon", "type": "run_command", "arguments": {"command": "python3",
                    "args": ["-c", "x = b'x' * (1 << 30)"]}}
            ]),
            &[],
        ),
    )
    .await;
    assert_eq!(
        error_type(&outcome.result, 0),
        Some(ErrorType::ResourceLimitExceeded),
        "{:#?}",
        outcome.result
    );
    sandbox.shutdown().await;
}

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

#[tokio::test(flavor = "multi_thread")]
async fn outputs_are_capped_and_large_artifacts_stream_in_chunks() {
    let sandbox = harness::sandbox(|_| {}).await;
    let make = "import os\nos.makedirs('/workspace/big', exist_ok=True)\n\
                for i, mb in enumerate([30, 15, 5]):\n    open(f'/workspace/big/{i}.bin', 'wb').write(os.urandom(mb << 20))\n\
                print('x' * 5000)";
    let mut value = job(
        &["python3", "sha256sum"],
        json!([
            {"id": "make", "type": "run_command", "arguments": {"command": "python3", "args": ["-c", make]}},
            {"id": "sums", "type": "run_command", "arguments": {"command": "sha256sum", "args": ["big/0.bin", "big/1.bin", "big/2.bin"]}}
        ]),
        &["/workspace/big/*.bin"],
    );
    value["constraints"]["max_output_bytes"] = json!(1000);
    let outcome = run(&sandbox, value).await;
    let r = &outcome.result;
    assert_eq!(r.status, JobStatus::Success, "{r:#?}");
    let out = command_output(r, 0);
    assert_eq!((out.stdout.len(), out.stdout_truncated), (1000, true));
    let sums = &command_output(r, 1).stdout;
    assert_eq!(outcome.files.len(), 3);
    let mut total = 0;
    for (entry, file) in r.artifacts.iter().zip(&outcome.files) {
        let bytes = file.read_all().expect("bytes");
        total += bytes.len();
        let sha = sha256(&bytes);
        assert_eq!(entry.sha256.as_deref(), Some(sha.as_str()));
        assert!(sums.contains(&sha), "{sha} in\n{sums}");
    }
    assert_eq!(total, 50 << 20);
    sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn warm_containers_of_either_language_take_a_job() {
    let sandbox = harness::sandbox(|c| c.pool.size = 1).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while sandbox.stats().pool_ready < 2 {
        assert!(Instant::now() < deadline, "the pool did not fill");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for language in [Language::Bash, Language::Python] {
        let lease = sandbox.acquire(language, None).await.expect("a lease");
        assert!(lease.warm());
        let outcome = lease.run_job(checked(five_steps())).await;
        assert_eq!(
            outcome.result.status,
            JobStatus::Success,
            "{language:?}: {:#?}",
            outcome.result
        );
        assert!(outcome.warm);
    }
    sandbox.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_container_that_dies_mid_job_still_gives_a_complete_result() {
    let sandbox = harness::sandbox(|_| {}).await;
    let id = uuid::Uuid::new_v4();
    let lease = sandbox
        .acquire(Language::Bash, Some(id))
        .await
        .expect("a lease");
    let run = lease.run_job(checked(job(&["sleep"], json!([
        {"id": "w", "type": "write_file", "arguments": {"path": "a", "content": "a"}},
        {"id": "slow", "type": "run_command", "arguments": {"command": "sleep", "args": ["30"]}},
        {"id": "never", "type": "list_tree", "arguments": {"path": "/workspace"}}
    ]), &[])));
    let killer = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let found = harness::labelled(&[format!("scriptgate.execution_id={id}")])
            .await
            .expect("list");
        let docker = harness::docker().await;
        let _ = docker
            .kill_container(
                found[0].id.as_deref().unwrap_or(""),
                None::<bollard::query_parameters::KillContainerOptions>,
            )
            .await;
    };
    let (outcome, ()) = tokio::join!(run, killer);
    let r = &outcome.result;
    assert_eq!(r.status, JobStatus::Failure);
    assert_eq!(
        statuses(r),
        [
            StepStatus::Success,
            StepStatus::Failure,
            StepStatus::Skipped
        ]
    );
    assert_eq!(
        r.error.as_ref().map(|e| e.kind),
        Some(ErrorType::InternalError)
    );
    assert!(outcome.crashed.is_some());
    sandbox.shutdown().await;
    assert!(
        harness::containers(&sandbox.config().instance)
            .await
            .is_empty()
    );
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

/// `docker run` flags of the runner contract, for the agent on its own.
fn docker_run(extra: &[&str]) -> std::process::Command {
    let mut command = std::process::Command::new("docker");
    command.args([
        "run",
        "--rm",
        "-i",
        "--read-only",
        "--network",
        "none",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--user",
        "2000000321:2000000321",
        "--tmpfs",
        "/workspace:size=64m,uid=2000000321,gid=2000000321,mode=0700",
        "--tmpfs",
        "/tmp:size=16m,mode=1777",
        "--label",
        "scriptgate.test=standalone",
    ]);
    command.args(extra);
    command
}

fn log_events(stderr: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stderr)
        .lines()
        .map(|l| {
            let v: Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}"));
            v["event"].as_str().expect("an event").to_string()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_agent_runs_standalone_in_file_mode() {
    let dir = tempfile::tempdir().expect("job dir");
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .expect("chmod");
    std::fs::write(dir.path().join("job.json"), five_steps().to_string()).expect("job.json");
    let mut command = docker_run(&[
        "-v",
        &format!("{}:/job", dir.path().display()),
        IMAGE,
        "job",
        "--file",
    ]);
    command.stdin(std::process::Stdio::null());
    let out = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("join")
        .expect("docker run");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: JobResult = serde_json::from_slice(
        &std::fs::read(dir.path().join("result.json")).expect("result.json"),
    )
    .expect("a result");
    assert_eq!(result.status, JobStatus::Success);
    for entry in &result.artifacts {
        let bytes = std::fs::read(
            dir.path()
                .join("artifacts")
                .join(entry.path.trim_start_matches('/')),
        )
        .expect("artifact file");
        assert_eq!(Some(sha256(&bytes)), entry.sha256, "{}", entry.path);
    }
    let events = log_events(&out.stderr);
    for expected in [
        "job_start",
        "step_start",
        "step_end",
        "artifact",
        "usage",
        "job_end",
    ] {
        assert!(
            events.iter().any(|e| e == expected),
            "{expected} in {events:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_agent_runs_standalone_in_stdin_mode() {
    let run = |job: Value| async move {
        let mut command = docker_run(&[IMAGE, "job", "--stdin"]);
        command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        tokio::task::spawn_blocking(move || {
            let mut child = command.spawn().expect("docker run");
            std::io::Write::write_all(
                &mut child.stdin.take().expect("stdin"),
                job.to_string().as_bytes(),
            )
            .expect("job");
            child.wait_with_output().expect("output")
        })
        .await
        .expect("join")
    };
    let mut value = job(
        &["python3"],
        json!([
            {"id": "loud", "type": "run_command", "arguments": {"command": "python3", "args": ["-c", "print('y' * 100)"]}}
        ]),
        &[],
    );
    value["constraints"]["max_output_bytes"] = json!(10);
    let out = run(value).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: JobResult = serde_json::from_slice(&out.stdout).expect("the result on stdout");
    assert_eq!(command_output(&result, 0).stdout, "y".repeat(10));
    assert!(
        log_events(&out.stderr)
            .iter()
            .any(|e| e == "output_truncated")
    );
    // A malformed job: a schema error as a complete result, exit status 2.
    let out = run(json!({"protocol_version": "2.0", "steps": []})).await;
    assert_eq!(out.status.code(), Some(2));
    let result: JobResult = serde_json::from_slice(&out.stdout).expect("a result");
    assert_eq!(result.error.expect("error").kind, ErrorType::SchemaError);
    assert_eq!(log_events(&out.stderr), ["job_refused"]);
}
