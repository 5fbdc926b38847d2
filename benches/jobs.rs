//! Jobs at the sandbox level, measured against what they replace, all in one run on this machine:
//!
//! 1. a 5-step job (write a .py, run it, apply a diff, read a file, list the tree) on a warm
//!    container, beside a single warm script run (`print(1)`): p50/p95 and their ratio (goal:
//!    p50 ≤ 3×);
//! 2. returning 50 MB of artifacts (hashed in the container, streamed in frames, hashed and
//!    spooled again by the service) beside a `docker cp` of the same files from a running
//!    container (goal: ≤ 1.5×). The artifact cost is the difference between the same job with and
//!    without its artifacts.
//!
//! Run: `scripts/prepare.sh --release && cargo bench --bench jobs` (the runner image must carry
//! a supervisor that runs jobs; `RUNNER_IMAGE_UNDER_TEST` names another image than the default).
//! Figures are printed, never asserted: the machine is shared.

#![allow(clippy::print_stdout)] // printing the figures is what this file is for

use std::process::Command;
use std::time::{Duration, Instant};

use scriptgate::domain::content::JobVerdict;
use scriptgate::domain::script::{Language, Script};
use scriptgate::domain::verdict::Verdict;
use scriptgate::domain::work::{DEFAULT_PROFILE, ScriptRun};
use scriptgate::sandbox::docker::{DockerConfig, DockerSandbox};
use scriptgate::sandbox::job::{self, JobStatus, Maxima};
use scriptgate::sandbox::profiles::{ProfileConfig, builtin_data};
use scriptgate::sandbox::{JobRun, Lease, RunSpec, Runner, job_sha256};
use serde_json::{Value, json};

const ROUNDS: usize = 30;
const ARTIFACT_ROUNDS: usize = 8;
/// The runner image (`RUNNER_IMAGE_UNDER_TEST` on an engine shared by several checkouts).
fn image() -> String {
    std::env::var("RUNNER_IMAGE_UNDER_TEST").unwrap_or_else(|_| "scriptgate-runner:latest".into())
}

fn checked(value: Value) -> JobRun {
    let parsed = job::parse_value(&value).expect("a well-formed job");
    let job = job::check(parsed, &Maxima::default()).expect("passes the checks");
    // Driven below the lifecycle: the content is vouched for here, as scripts' verdicts are.
    let verdict = JobVerdict {
        job_sha256: job_sha256(&job),
        contents: Vec::new(),
    };
    JobRun::cleared(job, &verdict).expect("a passing verdict clears the job")
}

fn five_steps() -> Value {
    let diff = "--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,2 @@\n import sys\n-print('hello')\n+print('hello, world')\n";
    json!({"protocol_version": "1.0",
    "constraints": {"allowed_commands": ["python3"], "max_runtime_seconds": 60},
    "steps": [
        {"id": "write", "type": "write_file", "arguments": {"path": "app.py", "content": "import sys\nprint('hello')\n"}},
        {"id": "run", "type": "run_command", "arguments": {"command": "python3", "args": ["app.py"]}},
        {"id": "patch", "type": "apply_unified_diff", "arguments": {"diff": diff}},
        {"id": "read", "type": "read_file", "arguments": {"path": "app.py"}},
        {"id": "list", "type": "list_tree", "arguments": {"path": "/workspace"}}
    ]})
}

/// 50 MB in three files (30 + 15 + 5 MiB would be 50 MiB; these are 50,000,000 bytes).
const MAKE_FILES: &str = "import os\nos.makedirs('/workspace/big', exist_ok=True)\n\
    for i, n in enumerate([30_000_000, 15_000_000, 5_000_000]):\n    open(f'/workspace/big/{i}.bin', 'wb').write(os.urandom(n))\n";

fn big_files(collect: bool) -> Value {
    let artifacts: &[&str] = if collect {
        &["/workspace/big/*.bin"]
    } else {
        &[]
    };
    json!({"protocol_version": "1.0",
        "constraints": {"allowed_commands": ["python3"], "max_runtime_seconds": 120},
        "steps": [{"id": "make", "type": "run_command", "arguments": {"command": "python3", "args": ["-c", MAKE_FILES]}}],
        "artifacts": artifacts})
}

fn percentile(samples: &[Duration], p: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn wait_for_pool(sandbox: &DockerSandbox, ready: u64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while sandbox.stats().pool_ready < ready {
        assert!(Instant::now() < deadline, "the warm pool did not fill");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn warm_lease(sandbox: &DockerSandbox, language: Language) -> Box<dyn Lease> {
    wait_for_pool(sandbox, 4).await;
    let lease = sandbox.acquire(language, None).await.expect("a lease");
    assert!(lease.warm(), "a warm container");
    lease
}

/// `print(1)`, cleared as the service clears a script its validation passed.
fn print_one() -> RunSpec {
    let work = ScriptRun::new(
        Script::new(Language::Python, "print(1)"),
        String::new(),
        Duration::from_secs(30),
        DEFAULT_PROFILE.into(),
    );
    let verdict = Verdict {
        language: Language::Python,
        valid: true,
        layer: None,
        findings: Vec::new(),
    };
    RunSpec::cleared(&work, &verdict).expect("a passing verdict clears the run")
}

async fn script_vs_job(sandbox: &DockerSandbox) -> (Vec<Duration>, Vec<Duration>) {
    let (mut scripts, mut jobs) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let lease = warm_lease(sandbox, Language::Python).await;
        let started = Instant::now();
        let outcome = lease.run(print_one()).await;
        scripts.push(started.elapsed());
        assert_eq!(outcome.exit_code, Some(0));
        let run = checked(five_steps());
        let lease = warm_lease(sandbox, Language::Bash).await;
        let started = Instant::now();
        let outcome = lease.run_job(run).await;
        jobs.push(started.elapsed());
        assert_eq!(
            outcome.result.status,
            JobStatus::Success,
            "{:?}",
            outcome.result.error
        );
    }
    (scripts, jobs)
}

async fn artifacts(sandbox: &DockerSandbox) -> (Vec<Duration>, Vec<Duration>) {
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for _ in 0..ARTIFACT_ROUNDS {
        for (collect, samples) in [(false, &mut without), (true, &mut with)] {
            let run = checked(big_files(collect));
            let lease = warm_lease(sandbox, Language::Bash).await;
            let started = Instant::now();
            let outcome = lease.run_job(run).await;
            samples.push(started.elapsed());
            assert_eq!(
                outcome.result.status,
                JobStatus::Success,
                "{:?}",
                outcome.result.error
            );
            let bytes: u64 = outcome.files.iter().map(|f| f.size_bytes).sum();
            assert_eq!(bytes, if collect { 50_000_000 } else { 0 });
        }
    }
    (without, with)
}

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().expect("docker");
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `docker cp` of the same 50 MB out of a running container (its writable layer).
fn docker_cp() -> Vec<Duration> {
    let name = format!("bench-jobs-cp-{}", std::process::id());
    // In the container's own layer (no tmpfs at /tmp there): `docker cp` reads layers and volumes.
    let script = format!(
        "{}\nimport time\ntime.sleep(3600)\n",
        MAKE_FILES.replace("/workspace", "/tmp/data")
    );
    let _remove = RemoveOnDrop(name.clone());
    docker(&[
        "run",
        "-d",
        "--name",
        &name,
        "--network",
        "none",
        "--user",
        "65534:65534",
        "--entrypoint",
        "python3",
        "--label",
        "scriptgate.bench=jobs",
        &image(),
        "-c",
        &script,
    ]);
    let ready = Instant::now() + Duration::from_secs(60);
    while docker(&[
        "exec",
        &name,
        "python3",
        "-c",
        "import os; print(sum(os.path.getsize(f'/tmp/data/big/{i}.bin') for i in range(3)) if os.path.exists('/tmp/data/big/2.bin') else 0)",
    ]) != "50000000"
    {
        assert!(Instant::now() < ready, "the files did not appear");
        std::thread::sleep(Duration::from_millis(100));
    }
    let dest = tempfile::tempdir().expect("tempdir");
    let mut samples = Vec::new();
    for i in 0..ARTIFACT_ROUNDS {
        let target = dest.path().join(i.to_string());
        let started = Instant::now();
        docker(&[
            "cp",
            &format!("{name}:/tmp/data/big"),
            &target.to_string_lossy(),
        ]);
        samples.push(started.elapsed());
    }
    samples
}

/// Removes the `docker cp` container however the benchmark ends.
struct RemoveOnDrop(String);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rm", "-f", &self.0]).output();
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut config = DockerConfig {
            instance: format!("bench-jobs-{}", std::process::id()),
            python_image: image(),
            bash_image: image(),
            ..DockerConfig::default()
        };
        config.pool.size = 2;
        config.profiles = vec![ProfileConfig {
            pool_size: Some(0),
            ..builtin_data()
        }];
        let sandbox = DockerSandbox::start(config).await.expect("the sandbox starts");
        let row = |name: &str, s: &[Duration]| {
            println!("{name:<44} p50 {:>8.1} ms   p95 {:>8.1} ms   (n={})", ms(percentile(s, 0.5)), ms(percentile(s, 0.95)), s.len());
        };
        let (scripts, jobs) = script_vs_job(&sandbox).await;
        println!("\n== jobs at the sandbox level (warm containers) ==");
        row("single warm script run (print(1))", &scripts);
        row("5-step job (write, run, diff, read, list)", &jobs);
        println!("ratio of p50: {:.2}x (goal <= 3x)",
            percentile(&jobs, 0.5).as_secs_f64() / percentile(&scripts, 0.5).as_secs_f64());
        let (without, with) = artifacts(&sandbox).await;
        sandbox.shutdown().await;
        let cp = docker_cp();
        println!("\n== 50 MB of artifacts (3 files) ==");
        row("job making the files, no artifacts", &without);
        row("same job returning them as artifacts", &with);
        row("docker cp of the same files", &cp);
        let cost = percentile(&with, 0.5).saturating_sub(percentile(&without, 0.5));
        println!("artifact cost (p50 difference): {:.1} ms; ratio to docker cp p50: {:.2}x (goal <= 1.5x)",
            ms(cost), cost.as_secs_f64() / percentile(&cp, 0.5).as_secs_f64());
    });
}
