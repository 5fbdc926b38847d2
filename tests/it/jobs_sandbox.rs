//! Jobs (Job protocol 1.0) in real containers, driven through `DockerSandbox` directly: every
//! step type, every failure type, bad inputs, artifacts with their sha256, warm and cold
//! containers, and gVisor. (The agent on its own: `jobs_standalone`.)

use std::time::{Duration, Instant};

use scriptgate::domain::content::JobVerdict;
use scriptgate::domain::script::Language;
use scriptgate::sandbox::docker::DockerSandbox;
use scriptgate::sandbox::job::{
    self, ErrorType, JobResult, JobStatus, Maxima, StepOutput, StepStatus,
};
use scriptgate::sandbox::{JobOutcome, JobRun, Runner, RunnerExt, job_sha256};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::harness;

pub(crate) fn checked(value: Value) -> JobRun {
    let parsed = job::parse_value(&value).expect("a well-formed job");
    let job = job::check(parsed, &Maxima::default()).expect("passes the static checks");
    // Driven below the lifecycle: the content is vouched for here, as scripts' verdicts are.
    let verdict = JobVerdict {
        job_sha256: job_sha256(&job),
        contents: Vec::new(),
    };
    JobRun::cleared(job, &verdict).expect("a passing verdict clears the job")
}

pub(crate) async fn run(sandbox: &DockerSandbox, value: Value) -> JobOutcome {
    sandbox.run_job(checked(value)).await.expect("a sandbox")
}

pub(crate) fn job(commands: &[&str], steps: Value, artifacts: &[&str]) -> Value {
    json!({"protocol_version": "1.0",
           "constraints": {"allowed_commands": commands, "max_runtime_seconds": 60},
           "steps": steps, "artifacts": artifacts})
}

pub(crate) fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

pub(crate) fn statuses(result: &JobResult) -> Vec<StepStatus> {
    result.steps.iter().map(|s| s.status).collect()
}

pub(crate) fn command_output(result: &JobResult, index: usize) -> &job::CommandOutput {
    match &result.steps[index].result {
        Some(StepOutput::RunCommand(out)) => out,
        other => panic!("step {index} has no command output: {other:?}"),
    }
}

pub(crate) fn error_type(result: &JobResult, index: usize) -> Option<ErrorType> {
    result.steps[index].error.as_ref().map(|e| e.kind)
}

const DIFF: &str = "--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,2 @@\n import json\n-print('hello')\n+print('hello, world')\n";

/// The benchmark's job too: write a .py, run it, apply a diff, read a file, list the tree.
pub(crate) fn five_steps() -> Value {
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

    // continue_on_error: the failure stays on its step, the job goes on; stdin, environment and
    // working directory reach the command.
    let echo =
        "import os, sys; print(sys.stdin.read().upper(), os.environ['GREETING'], os.getcwd())";
    let outcome = run(
        &sandbox,
        job(
            &["python3"],
            json!([
                {"id": "fail", "type": "run_command", "continue_on_error": true,
                    "arguments": {"command": "python3", "args": ["-c", "raise SystemExit(1)"]}},
                {"id": "dir", "type": "write_file", "arguments": {"path": "sub/.keep", "content": ""}},
                {"id": "echo", "type": "run_command", "arguments": {"command": "python3", "args": ["-c", echo],
                    "stdin": "abc", "env": {"GREETING": "hi"}, "working_dir": "/workspace/sub"}}
            ]),
            &[],
        ),
    )
    .await;
    assert_eq!(
        statuses(&outcome.result),
        [
            StepStatus::Failure,
            StepStatus::Success,
            StepStatus::Success
        ]
    );
    assert_eq!(outcome.result.status, JobStatus::Success);
    assert_eq!(
        command_output(&outcome.result, 2).stdout,
        "ABC hi /workspace/sub\n"
    );
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
async fn a_write_past_the_file_size_limit_is_a_resource_limit() {
    // fsize is the larger of /tmp and /workspace (1 MiB): the write meets it before the
    // workspace is full, and fails with EFBIG rather than dying of SIGXFSZ.
    let sandbox = harness::sandbox(|c| {
        c.limits.tmpfs_mb = 1;
        c.limits.workspace_mb = 1;
    })
    .await;
    let content = "x".repeat(3 << 19);
    let outcome = run(
        &sandbox,
        job(
            &[],
            json!([
                {"id": "big", "type": "write_file", "arguments": {"path": "/workspace/big.txt", "content": content}}
            ]),
            &[],
        ),
    )
    .await;
    assert_eq!(
        error_type(&outcome.result, 0),
        Some(ErrorType::ResourceLimitExceeded),
        "{:#?}",
        outcome.result.steps[0]
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
        // A waiting container the engine lost in the meantime is discarded at acquire and the
        // lease is cold; the pool replaces it, so wait for a warm one (bounded).
        let lease = loop {
            let lease = sandbox.acquire(language, None).await.expect("a lease");
            if lease.warm() {
                break lease;
            }
            drop(lease);
            assert!(Instant::now() < deadline, "no warm {language:?} container");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
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
