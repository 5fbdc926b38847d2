//! The whole service over HTTP with a real engine: results, deadlines, disconnects, start-up reaping.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{self, Service};
use crate::process::Spawn;

#[tokio::test(flavor = "multi_thread")]
async fn hello_world_in_both_languages() {
    let service = Service::start(|_| {}).await;
    let r = service.execute("python", "print('hello')", 30).await;
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(r["stdout"], "hello\n");
    assert_eq!(r["exit_code"], 0);
    assert!(r["resource_usage"]["cpu_time_ms"].as_u64().unwrap_or(0) > 0);
    assert!(
        r["resource_usage"]["max_memory_bytes"]
            .as_u64()
            .unwrap_or(0)
            > 1 << 20
    );
    let r = service
        .execute("bash", "echo hello; echo err >&2; exit 4", 30)
        .await;
    assert_eq!(r["success"], false);
    assert_eq!(r["stdout"], "hello\n");
    assert_eq!(r["stderr"], "err\n");
    assert_eq!(r["exit_code"], 4);
    assert_eq!(r["error"]["type"], "execution_failure");
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn stdin_reaches_the_script_and_tracebacks_name_the_script() {
    let service = Service::start(|_| {}).await;
    let (status, r) = service
        .post("/v1/execute", &json!({"script_content": "import sys\ndata = sys.stdin.read()\nprint(data.upper())\nraise ValueError('boom')", "script_type": "python", "stdin": "abc"}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(r["stdout"], "ABC\n");
    let stderr = r["stderr"].as_str().unwrap_or("");
    assert!(
        stderr.contains("File \"<script>\", line 4") && stderr.contains("ValueError: boom"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("_scriptgate_main"),
        "the bootstrap stays out of tracebacks: {stderr}"
    );
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_memory_balloon_is_resource_limit_exceeded() {
    let service = Service::start(|_| {}).await;
    let r = service
        .execute(
            "python",
            "data = bytearray(2 * 1024 ** 3)\nprint(len(data))",
            60,
        )
        .await;
    assert_eq!(r["success"], false, "{r}");
    assert_eq!(r["error"]["type"], "resource_limit_exceeded");
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_deadline_holds_and_the_answer_follows_it() {
    let service = Service::start(|_| {}).await;
    let started = Instant::now();
    let r = service.execute("python", "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('working', flush=True)\nwhile True:\n    time.sleep(0.1)\n", 2).await;
    let elapsed = started.elapsed();
    assert_eq!(r["timeout"], true, "{r}");
    assert_eq!(r["error"]["type"], "timeout");
    assert!(r["exit_code"].is_null());
    assert_eq!(r["stdout"], "working\n");
    // A hang bound, not a speed claim (the machine is shared): the figure is printed.
    eprintln!("service: answered {elapsed:?} after the request, for a 2s deadline");
    assert!(
        elapsed < Duration::from_secs(2 + 20),
        "answered after {elapsed:?} for a 2s timeout"
    );
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_hangs_up_still_gets_its_container_removed() {
    let service = Service::start(|_| {}).await;
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(1500))
        .build()
        .expect("client");
    let result = impatient
        .post(format!("{}/v1/execute", service.url))
        .json(&json!({"script_content": "sleep 60", "script_type": "bash", "timeout": 120}))
        .send()
        .await;
    assert!(result.is_err(), "the client gave up");
    let left = harness::settle(&service.instance, 0, Duration::from_secs(10)).await;
    assert_eq!(left, 0);
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn leftovers_of_a_crashed_instance_are_reaped_at_start() {
    let instance = harness::instance();
    // What a crash leaves: started containers with the instance's labels that nothing tracks.
    let docker = harness::docker().await;
    for _ in 0..2 {
        let labels = std::collections::HashMap::from([
            ("scriptgate.managed".to_string(), "true".to_string()),
            ("scriptgate.instance".to_string(), instance.clone()),
        ]);
        let created = docker
            .create_container(
                None::<bollard::query_parameters::CreateContainerOptions>,
                bollard::models::ContainerCreateBody {
                    image: Some("scriptgate-runner:latest".into()),
                    cmd: Some(vec!["bash".into()]),
                    open_stdin: Some(true),
                    labels: Some(labels),
                    ..Default::default()
                },
            )
            .await
            .expect("create");
        docker
            .start_container(
                &created.id,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
            .expect("start");
    }
    assert_eq!(harness::containers(&instance).await.len(), 2);
    let service = Service::start(|c| c.sandbox.instance = instance.clone()).await;
    assert_eq!(
        harness::containers(&instance).await.len(),
        0,
        "reaped before serving"
    );
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn readiness_needs_the_runner_image() {
    let service =
        Service::start(|c| c.sandbox.python_image = "scriptgate-no-such-image:0".into()).await;
    let r = service
        .client
        .get(format!("{}/readyz", service.url))
        .send()
        .await
        .expect("readyz");
    assert_eq!(r.status(), 503);
    let body: serde_json::Value = r.json().await.expect("json");
    assert_eq!(body["engine"], true);
    assert_eq!(body["ready"], false);
    let (status, r) = service
        .post(
            "/v1/execute",
            &json!({"script_content": "print(1)", "script_type": "python"}),
        )
        .await;
    assert_eq!(status, 503, "{r}");
    assert_eq!(r["error"]["type"], "engine_unavailable");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("images build")
    );
    service.stop().await;
}

/// `log_format = "json"`: one JSON object per line, and the line that closes an execution carries
/// both the request id (from `X-Request-Id`, echoed back) and the execution id.
#[tokio::test(flavor = "multi_thread")]
async fn json_logs_carry_request_and_execution_ids() {
    use std::io::BufRead;
    let data = tempfile::tempdir().expect("data dir");
    let mut service = Spawn::new(&harness::instance(), data.path())
        .env("SCRIPTGATE_LOG_FORMAT", "json")
        .env("SCRIPTGATE_SANDBOX__POOL__SIZE", "0")
        .env("RUST_LOG", "info")
        .piped_stderr()
        .start();
    service.wait_for("/healthz", Duration::from_secs(20)).await;
    let url = service.url("");
    let client = reqwest::Client::new();
    let request_id = "req-json-logs-7f3a";
    let response = client
        .post(format!("{url}/v1/execute"))
        .header("x-request-id", request_id)
        .json(&json!({"script_content": "print(1)", "script_type": "python"}))
        .send()
        .await
        .expect("execute");
    assert_eq!(
        response
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok()),
        Some(request_id)
    );
    let body: Value = response.json().await.expect("JSON");
    let execution_id = body["execution_id"].as_str().expect("id").to_string();
    // SIGTERM: graceful stop, then read everything it logged.
    service.signal_term();
    let stderr = service.child().stderr.take().expect("stderr");
    let lines: Vec<Value> = std::io::BufReader::new(stderr)
        .lines()
        .map_while(Result::ok)
        .map(|l| serde_json::from_str(&l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(service.child().wait().expect("exit").success());
    let finished = lines
        .iter()
        .find(|l| l["message"] == "execution finished")
        .unwrap_or_else(|| panic!("no 'execution finished' line in {lines:?}"));
    assert_eq!(
        finished["execution_id"],
        execution_id.as_str(),
        "{finished}"
    );
    assert_eq!(finished["span"]["request_id"], request_id, "{finished}");
    assert_eq!(finished["status"], "completed");
    assert!(lines.iter().any(|l| l["message"] == "scriptgate stopped"));
}
