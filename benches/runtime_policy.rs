//! The run-time policy's cost, measured in one run on this machine at the sandbox level: warm
//! containers (started and ready before the clock starts), each workload run with enforcement off
//! (an interpreter without the filter), on (the built-in `default` policy), and on a container
//! started ready for a policy but given none (what every run pays when `enforcement_ready` is
//! set). Runs are interleaved; medians and their ratios are printed:
//!
//! - Python hello world, and `import json, csv, pathlib` (goal: p50 ≤ 1.3× off);
//! - 100,000 `open`+`close` of one file (the script times its own loop: the per-operation cost).
//!
//! Run: `cargo bench --bench runtime_policy` after `scriptgate images build` (the image is
//! `RUNNER_IMAGE_UNDER_TEST` when set). Figures are printed, never asserted: the machine is
//! shared and noisy.

#![allow(clippy::print_stdout)] // printing the figures is what this file is for

use std::time::{Duration, Instant};

use scriptgate::domain::script::{Language, Script};
use scriptgate::domain::verdict::Verdict;
use scriptgate::domain::work::ScriptRun;
use scriptgate::policy::Policies;
use scriptgate::sandbox::docker::images::DEFAULT_IMAGE;
use scriptgate::sandbox::docker::{DockerConfig, DockerSandbox};
use scriptgate::sandbox::profiles::DEFAULT_PROFILE;
use scriptgate::sandbox::{Enforcement, RunOutcome, RunSpec, Runner};
use scriptgate_policy::WirePolicy;

const RUNS: usize = 15;
const OPEN_RUNS: usize = 3;
const HELLO: &str = "print('hello')";
const IMPORTS: &str = "import json, csv, pathlib\nprint(json.dumps([1]))";
const OPENS: &str = "import os, time\nt = time.perf_counter()\nfor _ in range(100_000):\n    os.close(os.open('/etc/hostname', os.O_RDONLY))\nprint(time.perf_counter() - t)";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Off,
    On,
    ReadyWithoutPolicy,
}

struct Bench {
    plain: DockerSandbox,
    ready: DockerSandbox,
    policy: WirePolicy,
}

impl Bench {
    /// Runs `script` once in a warm container; (wall time of the run, its outcome).
    async fn once(&self, mode: Mode, script: &str) -> (Duration, RunOutcome) {
        let sandbox = match mode {
            Mode::Off => &self.plain,
            Mode::On | Mode::ReadyWithoutPolicy => &self.ready,
        };
        let lease = sandbox
            .acquire(Language::Python, None)
            .await
            .expect("a container");
        // Let the interpreter finish starting (as a pooled container has).
        tokio::time::sleep(Duration::from_millis(300)).await;
        let spec = cleared(script);
        let started = Instant::now();
        let outcome = match mode {
            Mode::On => {
                let enforcement = Enforcement {
                    policy: self.policy.clone(),
                    event_cap: 1000,
                    approval_timeout: Duration::from_secs(1),
                    approvals: None,
                    live: None,
                    approved_commands: Vec::new(),
                };
                lease.run_enforced(spec, enforcement).await.outcome
            }
            _ => lease.run(spec).await,
        };
        let took = started.elapsed();
        assert_eq!(outcome.exit_code, Some(0), "{mode:?}: {outcome:?}");
        (took, outcome)
    }
}

/// `script`, cleared as the service clears a script its validation passed.
fn cleared(script: &str) -> RunSpec {
    let work = ScriptRun::new(
        Script::new(Language::Python, script),
        String::new(),
        Duration::from_secs(120),
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

async fn compare(bench: &Bench, name: &str, script: &str, runs: usize, inner: bool) {
    let modes = [Mode::Off, Mode::On, Mode::ReadyWithoutPolicy];
    let mut wall: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    let mut own: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    for _ in 0..runs {
        for (i, mode) in modes.iter().enumerate() {
            let (took, outcome) = bench.once(*mode, script).await;
            wall[i].push(took.as_secs_f64());
            if inner {
                let t = outcome.stdout.text().trim().parse::<f64>();
                own[i].push(t.expect("the script prints its loop time"));
            }
        }
    }
    print_row(&format!("{name} (run latency)"), wall);
    if inner {
        print_row(&format!("{name} (the loop itself)"), own);
    }
}

fn print_row(name: &str, times: Vec<Vec<f64>>) {
    let p50: Vec<f64> = times.into_iter().map(median).collect();
    println!(
        "{name:<40} off {:>8.1} ms   on {:>8.1} ms ({:.2}×)   ready, no policy {:>8.1} ms ({:.2}×)",
        p50[0] * 1e3,
        p50[1] * 1e3,
        p50[1] / p50[0],
        p50[2] * 1e3,
        p50[2] / p50[0],
    );
}

#[tokio::main]
async fn main() {
    let image = std::env::var("RUNNER_IMAGE_UNDER_TEST").unwrap_or(DEFAULT_IMAGE.into());
    let config = |ready: bool| {
        let mut c = DockerConfig {
            instance: format!("bench-policy-{}-{ready}", std::process::id()),
            python_image: image.clone(),
            bash_image: image.clone(),
            enforcement_ready: ready,
            ..DockerConfig::default()
        };
        c.pool.size = 0;
        c
    };
    let policies = Policies::load(&Default::default()).expect("built-in policies");
    let bench = Bench {
        plain: DockerSandbox::start(config(false)).await.expect("sandbox"),
        ready: DockerSandbox::start(config(true)).await.expect("sandbox"),
        policy: policies
            .get("default")
            .expect("the default policy")
            .policy
            .wire(),
    };
    println!("run-time policy, warm containers, p50 of {RUNS} interleaved runs ({image}):");
    compare(&bench, "hello world", HELLO, RUNS, false).await;
    compare(&bench, "import json, csv, pathlib", IMPORTS, RUNS, false).await;
    println!("p50 of {OPEN_RUNS} runs:");
    compare(&bench, "100,000 opens", OPENS, OPEN_RUNS, true).await;
    bench.plain.shutdown().await;
    bench.ready.shutdown().await;
}
