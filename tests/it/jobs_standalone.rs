//! The job agent on its own, in a plain `docker run` of the runner image: file mode with a
//! mounted job directory, and stdin mode, each with its JSON-lines log on stderr.

use scriptgate::sandbox::job::{ErrorType, JobResult, JobStatus};
use serde_json::{Value, json};

use crate::harness;
use crate::jobs_sandbox::{command_output, five_steps, job, sha256};

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
        &harness::runner_image(),
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
        let mut command = docker_run(&[&harness::runner_image(), "job", "--stdin"]);
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
