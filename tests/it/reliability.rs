//! Reliability on the service's worst day, against the real service and the real engine: mixed
//! load beyond its concurrency and queue, a SIGKILL with executions in flight, the engine stopped
//! and restarted under load, hostile requests, and contract fuzzing (schemathesis).
//!
//! CI runs reduced variants; `SCRIPTGATE_RELIABILITY_FULL=1` runs the full ones (500 requests at
//! concurrency 50). Figures are printed (`--no-capture`) and collected in docs/RELIABILITY.md; no
//! assertion here is a speed claim, only "answered", "typed", "nothing leaked" and hang bounds.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{self, Service};
use crate::process::{Process, Spawn};

fn full_mode() -> bool {
    std::env::var("SCRIPTGATE_RELIABILITY_FULL").is_ok_and(|v| v == "1")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Hello,
    Burn,
    Invalid,
}

/// Request `i` of the mix: 6 in 10 print a token unique to the request, 1 in 10 burns CPU until
/// its 2 s deadline, 3 in 10 fail validation.
fn request(i: usize) -> (Kind, Value) {
    match i % 10 {
        0 => (
            Kind::Burn,
            json!({"script_content": "while True:\n    pass\n", "script_type": "python", "timeout": 2}),
        ),
        1..=3 => (
            Kind::Invalid,
            json!({"script_content": format!("import os\nos.system(input('{i}'))\n"), "script_type": "python"}),
        ),
        n if n % 2 == 0 => (
            Kind::Hello,
            json!({"script_content": format!("print('request-{i}')"), "script_type": "python", "timeout": 20}),
        ),
        _ => (
            Kind::Hello,
            json!({"script_content": format!("echo request-{i}"), "script_type": "bash", "timeout": 20}),
        ),
    }
}

/// Checks one answer against its request; `None` when it is right.
fn check(i: usize, kind: Kind, status: u16, retry_after: bool, body: &Value) -> Option<String> {
    let wrong = |what: &str| Some(format!("request {i} ({kind:?}): {what}: {status} {body}"));
    match status {
        200 => match kind {
            Kind::Hello if body["stdout"] != format!("request-{i}\n") => {
                wrong("not its own output")
            }
            Kind::Hello if body["success"] != true => wrong("did not succeed"),
            Kind::Burn if body["timeout"] != true || body["error"]["type"] != "timeout" => {
                wrong("not stopped at its deadline")
            }
            Kind::Invalid if body["error"]["type"] != "validation_failed" => {
                wrong("not rejected by validation")
            }
            _ => None,
        },
        429 | 503 => {
            let kind = body["error"]["type"].as_str().unwrap_or("");
            if !retry_after {
                wrong("no Retry-After")
            } else if !matches!(kind, "overloaded" | "engine_unavailable") {
                wrong("untyped refusal")
            } else {
                None
            }
        }
        _ => wrong("unexpected status"),
    }
}

#[tokio::test(flavor = "multi_thread")]
#[allow(clippy::print_stdout)] // the figures are the report
async fn mixed_load_beyond_capacity_is_all_answered_and_nothing_leaks() {
    let (total, concurrency) = if full_mode() { (500, 50) } else { (200, 50) };
    // The load runs in the default profile: its warm pool is what must remain afterwards.
    let s = Service::start(|c| {
        c.sandbox.pool.size = 2;
        harness::without_data_pool(c);
    })
    .await;
    let limits = scriptgate::config::ExecutionSettings::default();
    let gate = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let client = reqwest::Client::builder()
        // The longest a request can legitimately take: queue wait + deadline + start-up.
        .timeout(Duration::from_secs(limits.queue_timeout_secs + 2 + 30))
        .build()
        .expect("client");
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..total {
        let (kind, body) = request(i);
        let (gate, client, url) = (gate.clone(), client.clone(), s.url.clone());
        tasks.push(tokio::spawn(async move {
            let _slot = gate.acquire_owned().await.expect("semaphore");
            let t = Instant::now();
            // Like a well-behaved agent: a 429/503 is retried after its Retry-After.
            let mut refusals = Vec::new();
            loop {
                let response = client
                    .post(format!("{url}/v1/execute"))
                    .json(&body)
                    .send()
                    .await
                    .map_err(|e| format!("request {i}: no answer: {e}"))?;
                let status = response.status().as_u16();
                let retry_after = response
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok());
                let answer: Value = response
                    .json()
                    .await
                    .map_err(|e| format!("request {i}: body is not JSON: {e}"))?;
                if matches!(status, 429 | 503) && refusals.len() < 120 {
                    refusals.push((status, retry_after.is_some(), answer));
                    tokio::time::sleep(Duration::from_secs(retry_after.unwrap_or(1))).await;
                    continue;
                }
                return Ok::<_, String>((
                    i,
                    kind,
                    status,
                    retry_after.is_some(),
                    answer,
                    t.elapsed(),
                    refusals,
                ));
            }
        }));
    }
    let mut failures = Vec::new();
    let mut latencies: BTreeMap<Kind, Vec<Duration>> = BTreeMap::new();
    let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
    let mut refused = 0;
    for task in tasks {
        match task.await.expect("task") {
            Ok((i, kind, status, retry, body, latency, refusals)) => {
                for (status, retry, answer) in &refusals {
                    refused += 1;
                    failures.extend(check(i, kind, *status, *retry, answer));
                }
                *statuses.entry(status).or_default() += 1;
                if status == 200 {
                    latencies.entry(kind).or_default().push(latency);
                }
                failures.extend(check(i, kind, status, retry, &body));
            }
            Err(e) => failures.push(e),
        }
    }
    let elapsed = started.elapsed();
    let mut all: Vec<Duration> = latencies.values().flatten().copied().collect();
    all.sort();
    println!(
        "load: {total} requests at concurrency {concurrency} in {:.1} s = {:.1} req/s; final statuses {statuses:?}; {refused} refusals (429/503 with Retry-After) retried on the way",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64()
    );
    println!(
        "load: latency to the final 200 (including retries): p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        ms(percentile(&all, 0.5)),
        ms(percentile(&all, 0.99)),
        ms(percentile(&all, 1.0))
    );
    for (kind, mut l) in latencies {
        l.sort();
        println!(
            "load: {kind:?} ({}): p50 {:.0} ms, p99 {:.0} ms",
            l.len(),
            ms(percentile(&l, 0.5)),
            ms(percentile(&l, 0.99))
        );
    }
    assert!(
        failures.is_empty(),
        "{} wrong answers:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(statuses.get(&200).copied(), Some(total), "{statuses:?}");
    // Only the warm pool remains, then nothing.
    assert!(harness::settle(&s.instance, 4, Duration::from_secs(30)).await <= 4);
    s.stop().await;
}

/// The service as its own process (a SIGKILL must not take the test with it), logging to a file.
fn spawn(instance: &str, data_dir: &std::path::Path, log: std::path::PathBuf) -> Process {
    Spawn::new(instance, data_dir)
        .env("SCRIPTGATE_SANDBOX__POOL__SIZE", "2")
        .env("SCRIPTGATE_EXECUTION__MAX_CONCURRENT", "12")
        .log_to(log)
        .start()
}

#[tokio::test(flavor = "multi_thread")]
#[allow(clippy::print_stdout)]
async fn a_sigkill_with_ten_executions_in_flight_loses_nothing_and_leaks_nothing() {
    const IN_FLIGHT: usize = 10;
    let instance = harness::instance();
    let data = tempfile::tempdir().expect("data dir");
    let mut first = spawn(&instance, data.path(), data.path().join("first.log"));
    first.ready().await;
    let client = reqwest::Client::new();
    let mut ids = Vec::new();
    for i in 0..IN_FLIGHT {
        let r: Value = client
            .post(first.url("/v1/executions"))
            .json(&json!({"script_content": format!("echo started-{i}; sleep 120"), "script_type": "bash", "timeout": 300}))
            .send()
            .await
            .expect("submit")
            .json()
            .await
            .expect("JSON");
        ids.push(r["execution_id"].as_str().expect("id").to_string());
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut running = 0;
        for id in &ids {
            let r: Value = client
                .get(first.url(&format!("/v1/executions/{id}")))
                .send()
                .await
                .expect("get")
                .json()
                .await
                .expect("JSON");
            running += usize::from(r["status"] == "running");
        }
        if running == IN_FLIGHT {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{running} of {IN_FLIGHT} running"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    first.child().kill().expect("SIGKILL");
    first.child().wait().expect("reaped");
    let orphans = harness::containers(&instance).await;
    assert!(
        orphans.len() >= IN_FLIGHT,
        "{} containers after SIGKILL",
        orphans.len()
    );

    let restarted_at = Instant::now();
    let mut second = spawn(&instance, data.path(), data.path().join("second.log"));
    second.ready().await;
    let ready_after = restarted_at.elapsed();
    // Every orphan is removed at start-up, and the count is logged.
    let still: Vec<&String> = {
        let now = harness::containers(&instance).await;
        orphans.iter().filter(|id| now.contains(id)).collect()
    };
    assert!(still.is_empty(), "orphans survived the restart: {still:?}");
    let logged = second
        .log_lines()
        .into_iter()
        .find(|l| l["message"] == "removed containers left over from a previous run")
        .unwrap_or_else(|| panic!("no reaping line in {:?}", second.log_lines()));
    assert_eq!(
        logged["count"].as_u64(),
        Some(orphans.len() as u64),
        "{logged}"
    );
    // With durable state, every execution that was running reads as failed (interrupted).
    for id in &ids {
        let r: Value = client
            .get(second.url(&format!("/v1/executions/{id}")))
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("JSON");
        assert_eq!(r["status"], "failed", "{r}");
        assert_eq!(r["error"]["type"], "internal_error", "{r}");
        assert!(
            r["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("interrupted")),
            "{r}"
        );
    }
    println!(
        "sigkill: {IN_FLIGHT} in flight, {} orphan containers, all removed at restart (ready after {:.1} s); {IN_FLIGHT} executions read as failed/interrupted",
        orphans.len(),
        ready_after.as_secs_f64()
    );
    second.terminate();
    assert!(harness::containers(&instance).await.is_empty());
}

/// Hostile requests against the live service (real sockets, real body limits): each one gets a
/// typed 4xx, none reaches the sandbox, and the service keeps answering.
#[tokio::test(flavor = "multi_thread")]
async fn hostile_requests_get_typed_4xx_answers() {
    let s = Service::start(|_| {}).await;
    let url = format!("{}/v1/execute", s.url);
    let json_body = |body: String| ("application/json", body.into_bytes());
    // (what, (content type, body), expected status, expected error type)
    type Case = (&'static str, (&'static str, Vec<u8>), u16, &'static str);
    let cases: Vec<Case> = vec![
        (
            "body over the limit",
            json_body(json!({"script_content": "x".repeat(3 << 20), "script_type": "python"}).to_string()),
            413,
            "payload_too_large",
        ),
        (
            "deeply nested JSON",
            json_body(format!("{}{}", "[".repeat(200_000), "]".repeat(200_000))),
            400,
            "schema_error",
        ),
        (
            "nested objects in a field",
            json_body(format!(
                "{{\"script_content\": {}1{}, \"script_type\": \"python\"}}",
                "{\"a\":".repeat(10_000),
                "}".repeat(10_000)
            )),
            400,
            "schema_error",
        ),
        (
            "huge number",
            json_body(format!(
                "{{\"script_content\": \"print(1)\", \"script_type\": \"python\", \"timeout\": 1{}}}",
                "0".repeat(400)
            )),
            400,
            "schema_error",
        ),
        (
            "number beyond u64",
            json_body(r#"{"script_content": "print(1)", "script_type": "python", "timeout": 18446744073709551616}"#.into()),
            400,
            "schema_error",
        ),
        (
            "invalid UTF-8",
            ("application/json", b"{\"script_content\": \"print('\xc3\x28')\", \"script_type\": \"python\"}".to_vec()),
            400,
            "schema_error",
        ),
        (
            "raw NUL bytes",
            ("application/json", b"{\"script_content\": \"print(1)\"\0\0, \"script_type\": \"python\"}".to_vec()),
            400,
            "schema_error",
        ),
        (
            "escaped NUL in the script",
            json_body(r#"{"script_content": "print(1)\u0000", "script_type": "python"}"#.into()),
            400,
            "schema_error",
        ),
        (
            "empty script",
            json_body(r#"{"script_content": "", "script_type": "bash"}"#.into()),
            400,
            "schema_error",
        ),
        (
            "lone surrogate",
            json_body(r#"{"script_content": "\ud800", "script_type": "python"}"#.into()),
            400,
            "schema_error",
        ),
        (
            "wrong content type",
            ("text/plain", json!({"script_content": "print(1)", "script_type": "python"}).to_string().into_bytes()),
            415,
            "unsupported_media_type",
        ),
        (
            "form encoding",
            ("application/x-www-form-urlencoded", b"script_content=print(1)&script_type=python".to_vec()),
            415,
            "unsupported_media_type",
        ),
        (
            "JSON array",
            json_body(r#"["print(1)", "python"]"#.into()),
            400,
            "schema_error",
        ),
        (
            "duplicate field",
            json_body(r#"{"script_content": "print(1)", "script_content": "print(2)", "script_type": "python"}"#.into()),
            400,
            "schema_error",
        ),
    ];
    let mut failures = Vec::new();
    for (name, (content_type, body), want_status, want_type) in cases {
        let response = s
            .client
            .post(&url)
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .expect("an answer");
        let status = response.status().as_u16();
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        if status != want_status || answer["error"]["type"] != want_type {
            failures.push(format!("{name}: {status} {answer}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Nothing reached the sandbox (no execution ran), and the service still works.
    let ok = s.execute("python", "print('still here')", 20).await;
    assert_eq!(ok["stdout"], "still here\n");
    s.stop().await;
}

/// schemathesis (property-based, from the contract) against the live service: no server errors,
/// no response outside the contract, schema-valid requests accepted and invalid ones rejected.
/// `SCRIPTGATE_FUZZ_EXAMPLES` sets the examples per operation (CI: 25; full mode: 500 with a
/// random seed, see docs/RELIABILITY.md).
#[tokio::test(flavor = "multi_thread")]
#[allow(clippy::print_stdout)] // the figures are part of the reliability report
async fn schemathesis_finds_no_server_errors_or_contract_violations() {
    const AGENT: &str = "agent-token-openapi-5c1e";
    const OPERATOR: &str = "operator-token-openapi-9d2f";
    let s = Service::start(|c| {
        c.agent_tokens = vec![scriptgate::auth::TokenSpec {
            name: "fuzzer".into(),
            token: Some(AGENT.into()),
            sha256: None,
        }];
        c.operator_tokens = vec![scriptgate::auth::TokenSpec {
            name: "fuzz-operator".into(),
            token: Some(OPERATOR.into()),
            sha256: None,
        }];
        c.sandbox.pool.size = 1;
        // Only the default profile keeps warm containers: those are what must remain at the end.
        harness::without_data_pool(c);
    })
    .await;
    let examples = std::env::var("SCRIPTGATE_FUZZ_EXAMPLES").unwrap_or_else(|_| "25".into());
    let seed = std::env::var("SCRIPTGATE_FUZZ_SEED").unwrap_or_else(|_| "20261122".into());
    let dir = tempfile::tempdir().expect("tempdir");
    let schemathesis = harness::python()
        .parent()
        .expect("venv bin")
        .join("schemathesis");
    // Agents' operations with the agent token, operators' with the operator token (each token
    // is refused by the other side, which would only test the 403).
    // Sessions are left out for now: their contract is not yet tight enough for every check
    // (the exec body's "exactly one of" and the query ranges are not in the schema), and a
    // session the fuzzer creates holds a container until it is deleted.
    // The requests that carry workspace paths and jobs (`POST /v1/execute`, `/v1/executions`,
    // `/v1/jobs`) run without the two acceptance checks: their path and glob grammar (canonical
    // components, glob syntax, byte lengths) is only partly expressible in JSON Schema, and a
    // job that breaks a deployment maximum is answered 200 with a failed step, by the protocol's
    // decision. Everything else is still checked on them: no server error, every status, body
    // and header as documented.
    const ACCEPTANCE: &str = ",positive_data_acceptance,negative_data_rejection";
    const WORKSPACE_OPS: &str = "^POST /v1/(execute|executions|jobs)$";
    // One exclusion filter (two of a kind would have to match together).
    let strict = "--exclude-name-regex=^(POST /v1/(execute|executions|jobs)|[A-Z]+ /v1/(approvals|sessions)(/.*)?)$";
    let loose = format!("--include-name-regex={WORKSPACE_OPS}");
    for (token, filter, more_excluded) in [
        (AGENT, strict.to_string(), ""),
        (AGENT, loose, ACCEPTANCE),
        (OPERATOR, "--include-tag=approvals".to_string(), ""),
    ] {
        let mut run = std::process::Command::new(&schemathesis);
        run.current_dir(dir.path())
            .env("NO_COLOR", "1")
            .arg("run")
            .arg(format!("{}/openapi.json", s.url))
            .args(["--header", &format!("Authorization: Bearer {token}")])
            .arg(&filter)
            .args(["--checks", "all"])
            // These need resources the fuzzer can create and delete; executions cannot be deleted.
            .args([
                "--exclude-checks",
                &format!(
                    "use_after_free,ensure_resource_availability,object_level_authorization{more_excluded}"
                ),
            ])
            .args(["--max-examples", &examples, "--seed", &seed])
            .args(["--generation-database", "none", "--no-color"]);
        let out = harness::run_ok(run).await;
        let summary = out
            .lines()
            // "N generated, N passed, …" (a warning may also say "generated").
            .find(|l| {
                l.trim_start().starts_with(|c: char| c.is_ascii_digit()) && l.contains(" generated")
            })
            .unwrap_or("no summary");
        println!("schemathesis {filter}: {}", summary.trim());
        assert!(summary.contains("passed"), "{out}");
    }
    assert_eq!(
        harness::settle(&s.instance, 2, std::time::Duration::from_secs(10)).await,
        2
    );
    s.stop().await;
}
