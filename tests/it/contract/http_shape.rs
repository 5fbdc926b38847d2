//! HTTP shape against the real router over the fake runner: status codes, typed error bodies, and
//! the result object for every outcome.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use scriptgate::App;
use scriptgate::config::Config;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::fake::{Answer, Fake, FakeRunner};

/// The router of the real app over `runner` (requests go straight to it, without a socket).
async fn app_with(
    runner: FakeRunner,
    tweak: impl FnOnce(&mut Config),
) -> (Arc<FakeRunner>, axum::Router) {
    let mut config = Config {
        data_dir: Some(tempfile::tempdir().expect("data dir").keep()),
        ..Config::default()
    };
    tweak(&mut config);
    let validator = scriptgate::validator(&config).expect("rules");
    let runner = Arc::new(runner);
    let app = App::with_runner(&config, validator, Arc::new(Fake(runner.clone())))
        .await
        .expect("app");
    (runner, app.router)
}

async fn app() -> (Arc<FakeRunner>, axum::Router) {
    app_with(FakeRunner::new(), |_| {}).await
}

async fn call(
    router: &axum::Router,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: impl Into<Body>,
) -> (StatusCode, Option<String>, Value) {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let response = router
        .clone()
        .oneshot(req.body(body.into()).expect("request"))
        .await
        .expect("response");
    let status = response.status();
    let retry = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap_or("").to_string());
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    (
        status,
        retry,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn post(router: &axum::Router, path: &str, body: &Value) -> (StatusCode, Value) {
    let (status, _, body) = call(
        router,
        "POST",
        path,
        Some("application/json"),
        body.to_string(),
    )
    .await;
    (status, body)
}

fn assert_error(
    status: StatusCode,
    body: &Value,
    want_status: u16,
    want_type: &str,
    mentions: &str,
) {
    assert_eq!(status.as_u16(), want_status, "{body}");
    assert_eq!(body["error"]["type"], want_type, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or("");
    assert!(
        message.contains(mentions),
        "{message:?} should mention {mentions:?}"
    );
}

#[tokio::test]
async fn malformed_requests_are_typed_4xx_naming_the_field() {
    let (runner, app) = app().await;
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"script_content": "x", "script_type": "ruby"}),
            "script_type",
        ),
        (json!({"script_content": "x"}), "script_type"),
        (json!({"script_type": "python"}), "script_content"),
        (
            json!({"script_content": "x", "script_type": "python", "timeout": 0}),
            "timeout",
        ),
        (
            json!({"script_content": "x", "script_type": "python", "timeout": 301}),
            "timeout",
        ),
        (
            json!({"script_content": "x", "script_type": "python", "timeout": -5}),
            "timeout",
        ),
        (
            json!({"script_content": "x", "script_type": "python", "timeout": 1e300}),
            "timeout",
        ),
        (
            json!({"script_content": "x", "script_type": "python", "timeout": "10"}),
            "timeout",
        ),
        (
            json!({"script_content": "x", "script_type": "python", "extra": 1}),
            "extra",
        ),
        (
            json!({"script_content": 5, "script_type": "python"}),
            "script_content",
        ),
        (
            json!({"script_content": "x", "script_type": "python", "stdin": "y".repeat(64 * 1024 + 1)}),
            "stdin",
        ),
        (json!(["print(1)", "python"]), "JSON object"),
    ];
    for (body, field) in cases {
        let (status, response) = post(&app, "/v1/execute", &body).await;
        assert_error(status, &response, 400, "schema_error", field);
    }
    for raw in [
        "{",
        "",
        "{\"script_content\": \"\\ud800\", \"script_type\": \"python\"}",
        "null",
    ] {
        let (status, _, response) = call(
            &app,
            "POST",
            "/v1/execute",
            Some("application/json"),
            raw.to_string(),
        )
        .await;
        assert_error(status, &response, 400, "schema_error", "");
    }
    let invalid_utf8: Vec<u8> =
        b"{\"script_content\": \"\xff\", \"script_type\": \"python\"}".to_vec();
    let (status, _, response) = call(
        &app,
        "POST",
        "/v1/execute",
        Some("application/json"),
        invalid_utf8,
    )
    .await;
    assert_error(status, &response, 400, "schema_error", "");
    let deep = format!("{}{}", "[".repeat(50_000), "]".repeat(50_000));
    let (status, _, response) =
        call(&app, "POST", "/v1/execute", Some("application/json"), deep).await;
    assert_error(status, &response, 400, "schema_error", "");
    assert_eq!(
        runner.calls.load(Ordering::SeqCst),
        0,
        "nothing malformed reaches the sandbox"
    );
}

#[tokio::test]
async fn wrong_content_type_size_route_and_method_are_typed() {
    let (_, app) = app().await;
    let body = json!({"script_content": "print(1)", "script_type": "python"}).to_string();
    let (status, _, r) = call(
        &app,
        "POST",
        "/v1/execute",
        Some("text/plain"),
        body.clone(),
    )
    .await;
    assert_error(
        status,
        &r,
        415,
        "unsupported_media_type",
        "application/json",
    );
    let (status, _, r) = call(&app, "POST", "/v1/execute", None, body).await;
    assert_error(status, &r, 415, "unsupported_media_type", "none");
    let huge = json!({"script_content": "x".repeat(2 << 20), "script_type": "python"}).to_string();
    let (status, _, r) = call(&app, "POST", "/v1/execute", Some("application/json"), huge).await;
    assert_error(status, &r, 413, "payload_too_large", "limit");
    let (status, _, r) = call(&app, "GET", "/v2/nothing", None, Body::empty()).await;
    assert_error(status, &r, 404, "not_found", "/v2/nothing");
    let (status, _, r) = call(&app, "GET", "/v1/execute", None, Body::empty()).await;
    assert_error(status, &r, 405, "method_not_allowed", "GET");
}

#[tokio::test]
async fn a_successful_run_has_the_full_result_shape() {
    let runner = FakeRunner::new()
        .answering("print('hi')", Answer::prints("out put data"))
        .output_bytes(8);
    let (_, app) = app_with(runner, |_| {}).await;
    let (status, r) = post(
        &app,
        "/v1/execute",
        &json!({"script_content": "print('hi')", "script_type": "python"}),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["success"], true);
    assert_eq!(r["exit_code"], 0);
    assert!(uuid::Uuid::parse_str(r["execution_id"].as_str().unwrap_or("")).is_ok());
    assert_eq!(r["stdout"], "out put ");
    assert_eq!(r["stdout_truncated"], true);
    assert_eq!(r["stderr"], "");
    assert_eq!(r["timeout"], false);
    assert_eq!(r["validation_failed"], false);
    assert_eq!(r["validation"]["valid"], true);
    assert!(r["error"].is_null());
    assert_eq!(r["resource_usage"]["cpu_time_ms"], 7);
    assert_eq!(r["resource_usage"]["max_memory_bytes"], 1234);
    assert_eq!(r["timings_ms"]["create"], 3);
    for key in ["validate", "queue", "start", "run", "cleanup"] {
        assert!(r["timings_ms"][key].is_u64(), "timings_ms.{key}");
    }
    assert!(r["duration_ms"].is_u64());
}

#[tokio::test]
async fn outcomes_map_to_typed_errors() {
    let (_, app) = app().await;
    let cases = [
        (
            "print(1)  # EXIT 3",
            "execution_failure",
            Value::from(3),
            false,
        ),
        ("print(1)  # TIMEOUT", "timeout", Value::Null, true),
        (
            "print(1)  # OOM",
            "resource_limit_exceeded",
            Value::from(0),
            false,
        ),
        ("print(1)  # CRASH", "internal_error", Value::Null, false),
    ];
    for (script, kind, exit_code, timeout) in cases {
        let (status, r) = post(
            &app,
            "/v1/execute",
            &json!({"script_content": script, "script_type": "python"}),
        )
        .await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(r["success"], false, "{script}");
        assert_eq!(r["error"]["type"], kind, "{script}");
        assert_eq!(r["exit_code"], exit_code, "{script}");
        assert_eq!(r["timeout"], timeout, "{script}");
    }
}

#[tokio::test]
async fn a_rejected_script_answers_200_and_never_runs() {
    let (runner, app) = app().await;
    let (status, r) = post(
        &app,
        "/v1/execute",
        &json!({"script_content": "import os\nos.system(input())", "script_type": "python"}),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["success"], false);
    assert_eq!(r["validation_failed"], true);
    assert_eq!(r["error"]["type"], "validation_failed");
    assert_eq!(r["validation"]["layer"], "dangerous");
    assert!(r["exit_code"].is_null());
    assert_eq!(runner.calls.load(Ordering::SeqCst), 0);
    let (status, v) = post(
        &app,
        "/v1/validate",
        &json!({"script_content": "x = (", "script_type": "python"}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(v["valid"], false);
    assert_eq!(v["layer"], "syntax");
    assert_eq!(v["findings"][0]["line"], 1);
    assert!(v.get("file").is_none());
}

#[tokio::test]
async fn beyond_concurrency_and_queue_the_answer_is_429_with_retry_after() {
    let (runner, app) = app_with(FakeRunner::new(), |c| {
        c.execution.max_concurrent = 1;
        c.execution.max_queue = 0;
    })
    .await;
    let blocked = tokio::spawn({
        let app = app.clone();
        async move {
            post(
                &app,
                "/v1/execute",
                &json!({"script_content": "print(1)  # BLOCK", "script_type": "python"}),
            )
            .await
        }
    });
    while runner.calls.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (status, retry, r) = call(
        &app,
        "POST",
        "/v1/execute",
        Some("application/json"),
        json!({"script_content": "print(2)", "script_type": "python"}).to_string(),
    )
    .await;
    assert_error(status, &r, 429, "overloaded", "retry");
    assert_eq!(retry.as_deref(), Some("1"));
    runner.release.notify_one();
    let (status, _) = blocked.await.expect("blocked request");
    assert_eq!(status, 200);
}

#[tokio::test]
async fn engine_unavailable_is_503_and_readiness_reports_it() {
    let (_, app) = app_with(FakeRunner::new().down(), |_| {}).await;
    let (status, retry, r) = call(
        &app,
        "POST",
        "/v1/execute",
        Some("application/json"),
        json!({"script_content": "print(1)", "script_type": "python"}).to_string(),
    )
    .await;
    assert_error(status, &r, 503, "engine_unavailable", "engine");
    assert!(retry.is_some());
    let (status, _, r) = call(&app, "GET", "/readyz", None, Body::empty()).await;
    assert_eq!(status, 503);
    assert_eq!(r["ready"], false);
    let (status, _, r) = call(&app, "GET", "/healthz", None, Body::empty()).await;
    assert_eq!(status, 200);
    assert_eq!(r["status"], "ok");
}

#[tokio::test]
async fn tool_definitions_come_in_both_shapes_with_the_configured_limits() {
    let (_, router) = app_with(FakeRunner::new(), |c| {
        c.validation.max_chars = 4000;
        c.execution.max_timeout_secs = 90;
        c.approval = scriptgate::domain::record::ApprovalMode::OnWarn;
    })
    .await;
    let (status, _, both) = call(&router, "GET", "/v1/tools", None, Body::empty()).await;
    assert_eq!(status, StatusCode::OK, "{both}");
    let openai = both["openai"].as_array().expect("openai tools");
    let anthropic = both["anthropic"].as_array().expect("anthropic tools");
    assert_eq!(openai.len(), 8);
    assert_eq!(openai[0]["type"], "function");
    assert_eq!(openai[0]["function"]["name"], "execute_script");
    let params = &openai[0]["function"]["parameters"];
    assert_eq!(params["properties"]["script_content"]["maxLength"], 4000);
    assert_eq!(params["properties"]["timeout"]["maximum"], 90);
    assert_eq!(
        params["properties"]["script_type"]["enum"],
        json!(["python", "bash"])
    );
    assert_eq!(anthropic[1]["name"], "validate_script");
    assert_eq!(anthropic[1]["input_schema"]["type"], "object");
    assert_eq!(both["metadata"]["execute_script"]["risk_level"], "high");
    assert_eq!(
        both["metadata"]["execute_script"]["approval_mode"],
        "on_warn"
    );
    assert_eq!(both["metadata"]["validate_script"]["read_only"], true);

    let (_, _, only) = call(
        &router,
        "GET",
        "/v1/tools?format=anthropic",
        None,
        Body::empty(),
    )
    .await;
    assert!(
        only.get("openai").is_none() && only["anthropic"].is_array(),
        "{only}"
    );
    let (status, _, bad) = call(
        &router,
        "GET",
        "/v1/tools?format=gemini",
        None,
        Body::empty(),
    )
    .await;
    assert_error(status, &bad, 400, "schema_error", "gemini");
}

#[tokio::test]
async fn metrics_count_outcomes_rejections_and_stages() {
    let (_runner, router) = app().await;
    let metric = |text: &str, name: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    let scrape = || async {
        let response = router
            .clone()
            .oneshot(
                Request::builder()
                    .uri("/metrics")
                    .body(Body::empty())
                    .expect("request"),
            )
            .await
            .expect("response");
        assert_eq!(response.status(), StatusCode::OK);
        let ct = response.headers()["content-type"]
            .to_str()
            .unwrap_or("")
            .to_string();
        assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        String::from_utf8(bytes.to_vec()).expect("UTF-8")
    };
    // The recorder is process-wide: compare before and after.
    let before = scrape().await;
    let ok = json!({"script_content": "print('hi')", "script_type": "python"});
    let bad = json!({"script_content": "import os\nos.system(input())\n", "script_type": "python"});
    assert_eq!(post(&router, "/v1/execute", &ok).await.0, StatusCode::OK);
    assert_eq!(post(&router, "/v1/execute", &bad).await.0, StatusCode::OK);
    let after = scrape().await;
    let delta = |name: &str| metric(&after, name) - metric(&before, name);
    assert_eq!(
        delta("scriptgate_executions_total{outcome=\"success\"}"),
        1.0,
        "{after}"
    );
    assert_eq!(
        delta("scriptgate_executions_total{outcome=\"validation_failed\"}"),
        1.0
    );
    assert_eq!(
        delta(
            "scriptgate_validation_rejections_total{layer=\"dangerous\",rule=\"python-os-command\"}"
        ),
        1.0,
        "{after}"
    );
    assert!(
        delta("scriptgate_stage_seconds_count{stage=\"run\"}") >= 1.0,
        "{after}"
    );
    assert!(after.contains("scriptgate_stage_seconds_bucket{stage=\"validate\",le=\"0.001\"}"));
    assert!(after.contains("scriptgate_containers_in_flight "));
    assert!(after.contains("scriptgate_pool_ready "));
}
