//! End-to-end `/v1/execute` latency, throughput and service memory, against `docker run` with the
//! same hardening flags, all measured in one run on this machine.
//!
//! Run: `scripts/bench` (builds the release binaries and the runner image, then this benchmark).
//! Figures are printed, never asserted: the machine is shared and noisy.

#![allow(clippy::print_stdout)] // printing the figures is what this file is for

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Mutex;

const IMAGE: &str = "scriptgate-runner:latest";
const PACED: usize = 120;
const PACE: Duration = Duration::from_millis(250);

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
        let process = process::Spawn::new(&format!("bench-{}", std::process::id()), data.path())
            .env("SCRIPTGATE_SANDBOX__POOL__SIZE", &pool.to_string())
            .env("SCRIPTGATE_EXECUTION__MAX_CONCURRENT", "50")
            .env("SCRIPTGATE_EXECUTION__MAX_QUEUE", "200")
            .env("RUST_LOG", "warn")
            .inherit_stderr()
            .start();
        let service = Service {
            url: process.url(""),
            process,
            _data: data,
            client: reqwest::Client::builder()
                .pool_max_idle_per_host(64)
                .build()
                .expect("client"),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let body = service.get("/readyz").await;
            if body["ready"] == true
                && body["pool_ready"].as_u64().unwrap_or(0) >= (2 * pool) as u64
            {
                break;
            }
            assert!(Instant::now() < deadline, "service not ready: {body}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        service
    }

    async fn get(&self, path: &str) -> Value {
        match self.client.get(format!("{}{path}", self.url)).send().await {
            Ok(r) => r.json().await.unwrap_or(Value::Null),
            Err(_) => Value::Null,
        }
    }

    /// Latency of one execution, and whether it was served warm.
    async fn execute(&self, language: &str, script: &str) -> (Duration, bool) {
        let started = Instant::now();
        let r: Value = self
            .client
            .post(format!("{}/v1/execute", self.url))
            .json(&json!({"script_content": script, "script_type": language, "timeout": 30}))
            .send()
            .await
            .expect("request")
            .json()
            .await
            .expect("json");
        let elapsed = started.elapsed();
        assert_eq!(r["success"], true, "{r}");
        (elapsed, r["warm"] == true)
    }

    fn rss_mb(&self) -> f64 {
        proc_status(self.process.id(), "VmRSS:") / 1024.0
    }

    fn cpu_secs(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.process.id()))
            .unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        let ticks: f64 = fields
            .get(11)
            .and_then(|u| u.parse::<f64>().ok())
            .unwrap_or(0.0)
            + fields
                .get(12)
                .and_then(|s| s.parse::<f64>().ok())
                .unwrap_or(0.0);
        ticks / 100.0
    }

    /// A graceful stop (SIGTERM): the service removes its containers.
    fn stop(mut self) {
        self.process.terminate();
    }
}

fn proc_status(pid: u32, key: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0.0)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1e3
}

fn summary(mut v: Vec<Duration>) -> (f64, f64, f64) {
    v.sort();
    (
        percentile(&v, 0.50),
        percentile(&v, 0.95),
        percentile(&v, 0.99),
    )
}

/// `PACED` requests, one every `PACE` (open loop: a slow answer does not delay the next request).
async fn paced(
    service: &Arc<Service>,
    language: &'static str,
    script: &'static str,
) -> (Vec<Duration>, usize) {
    let t0 = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for i in 0..PACED {
        let s = service.clone();
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(t0 + PACE * i as u32).await;
            s.execute(language, script).await
        }));
    }
    let mut latencies = Vec::new();
    let mut warm = 0;
    for t in tasks {
        let (d, w) = t.await.expect("task");
        latencies.push(d);
        warm += usize::from(w);
    }
    (latencies, warm)
}

/// `total` requests with `workers` in flight at a time; returns (requests per second, latencies).
async fn saturate(service: &Arc<Service>, workers: usize, total: usize) -> (f64, Vec<Duration>) {
    let remaining = Arc::new(Mutex::new(total));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let s = service.clone();
        let remaining = remaining.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                {
                    let mut r = remaining.lock().await;
                    if *r == 0 {
                        break;
                    }
                    *r -= 1;
                }
                mine.push(s.execute("python", "print('hello')").await.0);
            }
            mine
        }));
    }
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await.expect("task"));
    }
    (total as f64 / started.elapsed().as_secs_f64(), latencies)
}

fn docker_run_args() -> Vec<String> {
    [
        "run",
        "--rm",
        "--network",
        "none",
        "--read-only",
        "--user",
        "65534:65534",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--pids-limit",
        "100",
        "--memory",
        "512m",
        "--memory-swap",
        "512m",
        "--cpus",
        "1",
        "--tmpfs",
        "/tmp:rw,nosuid,nodev,noexec,size=64m,mode=1777",
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "fsize=67108864",
        "--ulimit",
        "core=0",
        "--ipc",
        "private",
        "--shm-size",
        "64m",
        "--log-driver",
        "none",
        "--hostname",
        "sandbox",
        "-e",
        "HOME=/tmp",
        "-w",
        "/tmp",
        "--entrypoint",
        "python3",
        IMAGE,
        "-c",
        "print('hello')",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

async fn docker_run() -> Duration {
    let started = Instant::now();
    let out = tokio::process::Command::new("docker")
        .args(docker_run_args())
        .output()
        .await
        .expect("docker run");
    assert!(
        out.status.success() && out.stdout == b"hello\n",
        "docker run: {:?}",
        out
    );
    started.elapsed()
}

async fn docker_saturate(workers: usize, total: usize) -> f64 {
    let remaining = Arc::new(Mutex::new(total));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let remaining = remaining.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                {
                    let mut r = remaining.lock().await;
                    if *r == 0 {
                        break;
                    }
                    *r -= 1;
                }
                docker_run().await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    total as f64 / started.elapsed().as_secs_f64()
}

#[tokio::main]
async fn main() {
    let pool: usize = std::env::var("BENCH_POOL")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(3);
    println!(
        "scriptgate end-to-end benchmark (pool {pool} per language; {} cores)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    let warm = Arc::new(Service::start(pool).await);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cpu0 = warm.cpu_secs();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle_cpu = (warm.cpu_secs() - cpu0) / 10.0 * 100.0;
    let idle_rss = warm.rss_mb();

    let (py, py_warm) = paced(&warm, "python", "print('hello')").await;
    let (sh, sh_warm) = paced(&warm, "bash", "echo hello").await;
    let mut b2b = Vec::new();
    let mut b2b_warm = 0;
    for _ in 0..40 {
        let (d, w) = warm.execute("python", "print('hello')").await;
        b2b.push(d);
        b2b_warm += usize::from(w);
    }
    let (c8, c8_latencies) = saturate(&warm, 8, 80).await;
    // 50 requests at once, sampling the service's RSS while they run.
    let sampler = {
        let w = warm.clone();
        tokio::spawn(async move {
            let mut peak: f64 = 0.0;
            for _ in 0..400 {
                peak = peak.max(w.rss_mb());
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            peak
        })
    };
    let (_, c50_latencies) = saturate(&warm, 50, 50).await;
    let peak_rss = sampler.await.expect("sampler");
    Arc::try_unwrap(warm).ok().expect("sole owner").stop();

    let cold = Service::start(0).await;
    let mut cold_latencies = Vec::new();
    for _ in 0..20 {
        cold_latencies.push(cold.execute("python", "print('hello')").await.0);
    }
    cold.stop();

    let mut docker = Vec::new();
    for _ in 0..20 {
        docker.push(docker_run().await);
    }
    let docker_c8 = docker_saturate(8, 40).await;

    let (py50, py95, py99) = summary(py);
    let (sh50, sh95, sh99) = summary(sh);
    let (b2b50, _, _) = summary(b2b);
    let (c8_50, _, _) = summary(c8_latencies);
    let (c50_50, _, c50_99) = summary(c50_latencies);
    let (cold50, cold95, _) = summary(cold_latencies);
    let (dr50, dr95, _) = summary(docker);

    println!();
    println!("| measurement | result | goal | ratio |");
    println!("|---|---:|---:|---:|");
    println!(
        "| paced 4/s python `print('hello')` p50 / p95 / p99 | {py50:.1} / {py95:.1} / {py99:.1} ms ({py_warm}/{PACED} warm) | p50 ≤ 20, p95 ≤ 50 ms | p50 {:.1}× faster than docker run |",
        dr50 / py50
    );
    println!(
        "| paced 4/s bash `echo hello` p50 / p95 / p99 | {sh50:.1} / {sh95:.1} / {sh99:.1} ms ({sh_warm}/{PACED} warm) | p50 ≤ 20, p95 ≤ 50 ms | p50 {:.1}× faster |",
        dr50 / sh50
    );
    println!(
        "| back-to-back python p50 | {b2b50:.1} ms ({b2b_warm}/40 warm) | ≤ cold path | {:.2}× cold |",
        b2b50 / cold50
    );
    println!(
        "| concurrency 8 throughput (p50 latency) | {c8:.1} req/s ({c8_50:.0} ms) | ≥ 1.2× docker run | {:.2}× docker run |",
        c8 / docker_c8
    );
    println!(
        "| cold path (pool off) p50 / p95 | {cold50:.1} / {cold95:.1} ms | ≤ 1.0× docker run | {:.2}× docker run |",
        cold50 / dr50
    );
    println!(
        "| docker run --rm, same flags, p50 / p95 | {dr50:.1} / {dr95:.1} ms | baseline | 1.00× |"
    );
    println!("| docker run --rm at concurrency 8 | {docker_c8:.1} runs/s | baseline | 1.00× |");
    println!("| service RSS idle, pool filled | {idle_rss:.1} MB | < 40 MB | |");
    println!(
        "| service RSS peak, 50 concurrent requests (p50 / p99 latency) | {peak_rss:.1} MB ({c50_50:.0} / {c50_99:.0} ms) | < 100 MB | |"
    );
    println!("| service CPU idle, pool filled | {idle_cpu:.2} % of a core | next to none | |");
}
