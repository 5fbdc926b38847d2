//! Persistent sessions over HTTP: session create p50, command overhead p50/p95 for `true` and
//! `print(1)` in a session (without and under the `default` run-time policy; sent back to back, and
//! after the session idled 200 ms as an agent's think time would) beside a warm one-shot
//! `/v1/execute`, and what idle sessions cost the service (memory per session, CPU), all in one
//! run on this machine.
//!
//! Run: `cargo bench --bench sessions` (needs the Docker engine and the runner image;
//! `BENCH_COMMANDS`, `BENCH_CREATES` and `BENCH_IDLE_SESSIONS` change the sample sizes).
//! Figures and ratios are printed, never asserted: the machine is shared and noisy.

#![allow(clippy::print_stdout)] // printing the figures is what this file is for

use std::time::{Duration, Instant};

use serde_json::{Value, json};

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
    async fn start(sessions: usize) -> Service {
        let data = tempfile::tempdir().expect("data dir");
        let cap = (sessions + 4).to_string();
        let process = process::Spawn::new(
            &format!("bench-sessions-{}", std::process::id()),
            data.path(),
        )
        .env("SCRIPTGATE_SANDBOX__POOL__SIZE", "2")
        .env("SCRIPTGATE_SESSIONS__MAX_PER_AGENT", &cap)
        .env("SCRIPTGATE_SESSIONS__MAX_TOTAL", &cap)
        .env("RUST_LOG", "warn")
        .inherit_stderr()
        .start();
        let service = Service {
            url: process.url(""),
            process,
            _data: data,
            client: reqwest::Client::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let body = service.call("GET", "/readyz", None).await.1;
            if body["ready"] == true && body["pool_ready"].as_u64().unwrap_or(0) >= 2 {
                break;
            }
            assert!(Instant::now() < deadline, "service not ready: {body}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        service
    }

    /// One request: its latency and its JSON answer.
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (Duration, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut request = self.client.request(method, format!("{}{path}", self.url));
        if let Some(b) = body {
            request = request.json(&b);
        }
        let started = Instant::now();
        let answer = match request.send().await {
            Ok(r) => r.json().await.unwrap_or(Value::Null),
            Err(_) => Value::Null,
        };
        (started.elapsed(), answer)
    }

    async fn create(&self) -> (Duration, String) {
        self.create_with(json!({})).await
    }

    async fn create_with(&self, body: Value) -> (Duration, String) {
        let (took, out) = self.call("POST", "/v1/sessions", Some(body)).await;
        let id = out["session_id"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {out}"))
            .to_string();
        (took, id)
    }

    async fn destroy(&self, id: &str) {
        self.call("DELETE", &format!("/v1/sessions/{id}"), None)
            .await;
    }

    async fn exec(&self, id: &str, body: &Value) -> Duration {
        let (took, out) = self
            .call(
                "POST",
                &format!("/v1/sessions/{id}/exec"),
                Some(body.clone()),
            )
            .await;
        assert_eq!(out["success"], true, "{out}");
        took
    }

    /// A warm one-shot run; `None` when it was served cold (the pool had not refilled).
    async fn execute(&self, language: &str, script: &str) -> Option<Duration> {
        let body = json!({"script_content": script, "script_type": language, "timeout": 30});
        let (took, out) = self.call("POST", "/v1/execute", Some(body)).await;
        assert_eq!(out["success"], true, "{out}");
        (out["warm"] == true).then_some(took)
    }

    fn rss_kb(&self) -> f64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.process.id()))
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0.0)
    }

    fn cpu_secs(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.process.id()))
            .unwrap_or_default();
        let fields: Vec<f64> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .skip(11)
            .take(2)
            .filter_map(|f| f.parse().ok())
            .collect();
        fields.iter().sum::<f64>() / 100.0
    }
}

/// The pause before each command of the rows that model an agent's think time.
const IDLE: Duration = Duration::from_millis(200);

fn ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1e3
}

/// p50 and p95 in milliseconds.
fn p50_p95(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    (ms(&v, 0.50), ms(&v, 0.95))
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Warm one-shot runs, spaced so the pool refills between them (cold ones are not counted).
async fn one_shot(s: &Service, language: &str, script: &str, n: usize) -> Vec<Duration> {
    let mut warm = Vec::new();
    for _ in 0..n {
        if let Some(d) = s.execute(language, script).await {
            warm.push(d);
        }
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    warm
}

#[tokio::main]
async fn main() {
    let commands = env_usize("BENCH_COMMANDS", 200);
    let creates = env_usize("BENCH_CREATES", 20);
    let idle = env_usize("BENCH_IDLE_SESSIONS", 50);
    println!(
        "scriptgate session benchmark ({} cores; {commands} commands, {creates} creates, {idle} idle sessions)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let s = Service::start(idle).await;

    let mut created = Vec::new();
    for _ in 0..creates {
        let (took, id) = s.create().await;
        created.push(took);
        s.destroy(&id).await;
    }
    let (create_p50, create_p95) = p50_p95(created);

    let (_, id) = s.create().await;
    let truth = json!({"command": "true"});
    let print = json!({"script_content": "print(1)", "script_type": "python"});
    for _ in 0..5 {
        s.exec(&id, &truth).await; // the first commands warm the session's shell
    }
    let mut t = Vec::new();
    let mut p = Vec::new();
    for _ in 0..commands {
        t.push(s.exec(&id, &truth).await);
        p.push(s.exec(&id, &print).await);
    }
    // As an agent sends them: each command after the session idled (its think time, shortened).
    let paused = (commands / 4).max(10);
    let mut ti = Vec::new();
    let mut pi = Vec::new();
    for _ in 0..paused {
        tokio::time::sleep(IDLE).await;
        ti.push(s.exec(&id, &truth).await);
        tokio::time::sleep(IDLE).await;
        pi.push(s.exec(&id, &print).await);
    }
    s.destroy(&id).await;
    let (true_p50, true_p95) = p50_p95(t);
    let (print_p50, print_p95) = p50_p95(p);
    let (true_idle_p50, true_idle_p95) = p50_p95(ti);
    let (print_idle_p50, print_idle_p95) = p50_p95(pi);

    // The same script in a session under the deployment's `default` run-time policy.
    let (_, id) = s.create_with(json!({"policy": "default"})).await;
    for _ in 0..5 {
        s.exec(&id, &print).await;
    }
    let mut pp = Vec::new();
    for _ in 0..commands {
        pp.push(s.exec(&id, &print).await);
    }
    let mut ppi = Vec::new();
    for _ in 0..paused {
        tokio::time::sleep(IDLE).await;
        ppi.push(s.exec(&id, &print).await);
    }
    s.destroy(&id).await;
    let (policy_p50, policy_p95) = p50_p95(pp);
    let (policy_idle_p50, policy_idle_p95) = p50_p95(ppi);

    let shots = (commands / 5).max(10);
    let (bash_p50, bash_p95) = p50_p95(one_shot(&s, "bash", "true", shots).await);
    let (py_p50, py_p95) = p50_p95(one_shot(&s, "python", "print(1)", shots).await);

    let rss0 = s.rss_kb();
    let mut held = Vec::new();
    for _ in 0..idle {
        held.push(s.create().await.1);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let per_session_kb = (s.rss_kb() - rss0) / idle.max(1) as f64;
    let cpu0 = s.cpu_secs();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle_cpu = (s.cpu_secs() - cpu0) / 10.0 * 100.0;
    for id in &held {
        s.destroy(id).await;
    }

    println!();
    println!("{:<44} {:>9} {:>9}", "", "p50 ms", "p95 ms");
    let row = |name: &str, p50: f64, p95: f64| println!("{name:<44} {p50:>9.2} {p95:>9.2}");
    row("session create (POST /v1/sessions)", create_p50, create_p95);
    row("session command `true` (POST …/exec)", true_p50, true_p95);
    row(
        "session command `print(1)` (python script)",
        print_p50,
        print_p95,
    );
    row(
        "  the same after 200 ms idle: `true`",
        true_idle_p50,
        true_idle_p95,
    );
    row(
        "  the same after 200 ms idle: `print(1)`",
        print_idle_p50,
        print_idle_p95,
    );
    row(
        "session command `print(1)`, `default` policy",
        policy_p50,
        policy_p95,
    );
    row(
        "  the same after 200 ms idle",
        policy_idle_p50,
        policy_idle_p95,
    );
    row("one-shot warm /v1/execute bash `true`", bash_p50, bash_p95);
    row(
        "one-shot warm /v1/execute python `print(1)`",
        py_p50,
        py_p95,
    );
    println!();
    println!("ratios (p50):");
    println!(
        "  session `true` / one-shot bash `true`:        {:.2}",
        true_p50 / bash_p50
    );
    println!(
        "  session `print(1)` / one-shot `print(1)`:     {:.2}",
        print_p50 / py_p50
    );
    println!(
        "  session `print(1)` policy / no policy:        {:.2}",
        policy_p50 / print_p50
    );
    println!(
        "  after idle: session `print(1)` / one-shot:    {:.2}",
        print_idle_p50 / py_p50
    );
    println!(
        "  after idle: `print(1)` policy / no policy:    {:.2}",
        policy_idle_p50 / print_idle_p50
    );
    println!(
        "  session create / one-shot warm python run:    {:.2}",
        create_p50 / py_p50
    );
    println!();
    println!("goals (issue): command overhead p50 <= 5 ms; create p50 <= the one-shot cold path;");
    println!("               <= 200 KB service memory per idle session; idle sessions cost no CPU");
    println!("service memory per idle session: {per_session_kb:.0} KB ({idle} sessions)");
    println!("service CPU with {idle} idle sessions: {idle_cpu:.2}% of one core over 10 s");
    let mut s = s;
    s.process.terminate();
}
