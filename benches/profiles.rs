//! Runner profiles, measured in one run on this machine: warm `data` profile latency (pandas and
//! numpy already imported) beside `print(1)` on `minimal` and beside a cold import in a fresh
//! container, the latency of a 640×480 plot returned as an artifact, and the data image's size
//! (and its build time when `SCRIPTGATE_BENCH_BUILD=1`: a full mmdebstrap build takes minutes).
//!
//! Run: `cargo bench --bench profiles` after `scriptgate images build`. Figures are printed,
//! never asserted: the machine is shared and noisy.

#![allow(clippy::print_stdout)] // printing the figures is what this file is for

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const DATA_SCRIPT: &str =
    "import pandas as pd; import numpy as np; print(pd.DataFrame(np.ones((3,3))).sum().sum())";
const PLOT_SCRIPT: &str = "import matplotlib.pyplot as plt\nplt.figure(figsize=(6.4, 4.8))\nplt.plot(range(100), [i * i for i in range(100)])\nplt.title('line')";
/// Sequential requests, one at a time with a pause that lets the pool refill.
const RUNS: usize = 20;
const PAUSE: Duration = Duration::from_millis(1500);

/// The tests' process fixture: it hands the service a listener it bound itself.
#[allow(dead_code)] // the benchmark needs only part of it
#[path = "../tests/it/process.rs"]
mod process;

struct Service {
    process: process::Process,
    url: String,
    client: reqwest::Client,
    _data: tempfile::TempDir,
}

impl Service {
    async fn start(pool: usize) -> Service {
        let data = tempfile::tempdir().expect("data dir");
        let instance = format!("bench-prof-{}", std::process::id());
        let process = process::Spawn::new(&instance, data.path())
            .env("SCRIPTGATE_SANDBOX__POOL__SIZE", &pool.to_string())
            .env("RUST_LOG", "warn")
            .inherit_stderr()
            .start();
        let service = Service {
            url: process.url(""),
            process,
            client: reqwest::Client::new(),
            _data: data,
        };
        service.wait_pools(pool).await;
        service
    }

    /// Until every profile's pool holds `n` per language (python and bash).
    async fn wait_pools(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let body = self.get("/v1/profiles").await;
            let full = body["profiles"].as_array().is_some_and(|ps| {
                ps.iter()
                    .all(|p| p["pool_ready"].as_u64().unwrap_or(0) >= (2 * n) as u64)
            });
            if full {
                return;
            }
            assert!(Instant::now() < deadline, "pools did not fill: {body}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn get(&self, path: &str) -> Value {
        match self.client.get(format!("{}{path}", self.url)).send().await {
            Ok(r) => r.json().await.unwrap_or(Value::Null),
            Err(_) => Value::Null,
        }
    }

    /// Latency of one execution over HTTP, and its result.
    async fn execute(&self, profile: &str, script: &str) -> (Duration, Value) {
        let started = Instant::now();
        let r: Value = self
            .client
            .post(format!("{}/v1/execute", self.url))
            .json(&json!({"script_content": script, "script_type": "python", "profile": profile, "timeout": 120}))
            .send()
            .await
            .expect("request")
            .json()
            .await
            .expect("json");
        let elapsed = started.elapsed();
        assert_eq!(r["success"], true, "{r}");
        (elapsed, r)
    }

    async fn series(&self, profile: &str, script: &str, runs: usize) -> (Vec<Duration>, usize) {
        let mut latencies = Vec::new();
        let mut warm = 0;
        for _ in 0..runs {
            let (d, r) = self.execute(profile, script).await;
            latencies.push(d);
            warm += usize::from(r["warm"] == true);
            tokio::time::sleep(PAUSE).await;
        }
        (latencies, warm)
    }

    /// A graceful stop (SIGTERM): the service removes its containers.
    fn stop(mut self) {
        self.process.terminate();
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1e3
}

fn p50_p95(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    (percentile(&v, 0.50), percentile(&v, 0.95))
}

fn image_size_mb(image: &str) -> f64 {
    let out = Command::new("docker")
        .args(["image", "inspect", "--format", "{{.Size}}", image])
        .output()
        .expect("docker image inspect");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse::<f64>()
        .unwrap_or(0.0)
        / 1e6
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if std::env::var_os("SCRIPTGATE_BENCH_BUILD").is_some() {
        let started = Instant::now();
        let status = Command::new(env!("CARGO_BIN_EXE_scriptgate"))
            .args(["images", "build", "--profile", "data", "--force"])
            .status()
            .expect("images build");
        assert!(status.success());
        println!(
            "data image build (forced, mmdebstrap + docker build): {:.1} s",
            started.elapsed().as_secs_f64()
        );
    } else {
        println!(
            "data image build: not measured (set SCRIPTGATE_BENCH_BUILD=1 to force a full build)"
        );
    }
    println!(
        "image sizes: scriptgate-runner-data:latest {:.0} MB, scriptgate-runner:latest {:.0} MB",
        image_size_mb("scriptgate-runner-data:latest"),
        image_size_mb("scriptgate-runner:latest")
    );

    let warm = Service::start(2).await;
    let (minimal, minimal_warm) = warm.series("minimal", "print(1)", RUNS).await;
    let (data, data_warm) = warm.series("data", DATA_SCRIPT, RUNS).await;
    let (plot, plot_warm) = warm.series("data", PLOT_SCRIPT, RUNS).await;
    let (_, r) = warm.execute("data", PLOT_SCRIPT).await;
    assert_eq!(r["artifacts"].as_array().map(Vec::len), Some(1), "{r}");
    warm.stop();

    let cold = Service::start(0).await;
    let (cold_data, _) = cold.series("data", DATA_SCRIPT, 5).await;
    cold.stop();

    let (m50, m95) = p50_p95(minimal);
    let (d50, d95) = p50_p95(data);
    let (p50, p95) = p50_p95(plot);
    let (c50, c95) = p50_p95(cold_data);
    println!("over HTTP, {RUNS} sequential runs each (warm = served by a pre-started container):");
    println!(
        "  minimal print(1)                 p50 {m50:7.1} ms  p95 {m95:7.1} ms  ({minimal_warm}/{RUNS} warm)"
    );
    println!(
        "  data pandas+numpy, warm          p50 {d50:7.1} ms  p95 {d95:7.1} ms  ({data_warm}/{RUNS} warm)  {:.2}x print(1)",
        d50 / m50
    );
    println!(
        "  data pandas+numpy, cold import   p50 {c50:7.1} ms  p95 {c95:7.1} ms  (5 runs, fresh container)  {:.1}x warm",
        c50 / d50
    );
    println!(
        "  data 640x480 plot as artifact    p50 {p50:7.1} ms  p95 {p95:7.1} ms  ({plot_warm}/{RUNS} warm)"
    );
}
