//! The HTTP contract of `/v1/sessions` over the fake runner: shapes, typed errors, the state
//! machine (busy, stopped, not found), validation before anything runs, caps, and that every
//! session's sandbox is closed by the time the service stops.

use serde_json::{Value, json};

use crate::api::get;
use crate::api::session::create;
use crate::fake::FakeRunner;
use crate::harness::Service;

/// `POST /v1/sessions` with the defaults, for the answers whose headers count.
async fn post_session(s: &Service) -> reqwest::Response {
    s.client
        .post(format!("{}/v1/sessions", s.url))
        .json(&json!({}))
        .send()
        .await
        .expect("create")
}

fn error_type(body: &Value) -> Option<&str> {
    body["error"]["type"].as_str()
}

#[tokio::test]
async fn a_session_answers_with_the_documented_shapes() {
    let s = Service::fake(FakeRunner::new(), |_| {}).await;
    let (status, created) = s
        .post(
            "/v1/sessions",
            &json!({"environment": {"PROJECT": "x"}, "idle_timeout_secs": 60}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    for field in ["session_id", "state", "created_at", "expires_at", "links"] {
        assert!(created.get(field).is_some(), "{field} missing: {created}");
    }
    let id = created["session_id"].as_str().expect("id");
    assert_eq!(created["links"]["exec"], format!("/v1/sessions/{id}/exec"));

    let (status, view) = get(&s, &format!("/v1/sessions/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(view["state"], "ready");
    assert_eq!(view["environment"]["PROJECT"], "x");
    assert_eq!(view["idle_timeout_secs"], 60);
    for field in [
        "cwd",
        "command_count",
        "last_activity_at",
        "resource_usage",
        "node",
    ] {
        assert!(view.get(field).is_some(), "{field} missing: {view}");
    }

    let (status, result) = s
        .post(
            &format!("/v1/sessions/{id}/exec"),
            &json!({"command": "cd /workspace/src"}),
        )
        .await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["cwd"], "/workspace/src");
    assert_eq!(result["success"], true);
    for field in [
        "command_id",
        "stdout_total_bytes",
        "stderr_total_bytes",
        "validation",
    ] {
        assert!(result.get(field).is_some(), "{field} missing: {result}");
    }
    let command_id = result["command_id"].as_str().expect("id");
    let (status, page) = get(
        &s,
        &format!("/v1/sessions/{id}/commands/{command_id}/output?stream=stdout&offset=3&limit=4"),
    )
    .await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["data"], "/wor");
    assert_eq!(page["next_offset"], 7);
    assert_eq!(page["total_bytes"], "cd /workspace/src\n".len());
    let (status, bad) = get(
        &s,
        &format!("/v1/sessions/{id}/commands/{command_id}/output?stream=err"),
    )
    .await;
    assert_eq!((status, error_type(&bad)), (400, Some("schema_error")));

    let (status, history) = get(&s, &format!("/v1/sessions/{id}/history")).await;
    assert_eq!(status, 200);
    assert_eq!(history["commands"][0]["command_id"], command_id);

    let patched = s
        .client
        .patch(format!("{}/v1/sessions/{id}", s.url))
        .json(&json!({"idle_timeout_secs": 120, "environment": {"MODE": "fast", "PROJECT": null}}))
        .send()
        .await
        .expect("patch");
    assert_eq!(patched.status().as_u16(), 200);
    let patched: Value = patched.json().await.expect("json");
    assert_eq!(patched["idle_timeout_secs"], 120, "{patched}");
    assert_eq!(patched["environment"]["MODE"], "fast", "{patched}");
    assert!(patched["environment"].get("PROJECT").is_none(), "{patched}");
    let refused = s
        .client
        .patch(format!("{}/v1/sessions/{id}", s.url))
        .json(&json!({"environment": {"BASH_ENV": "/tmp/x"}}))
        .send()
        .await
        .expect("patch");
    assert_eq!(refused.status().as_u16(), 400);

    let (status, list) = get(&s, "/v1/sessions").await;
    assert_eq!(
        (status, list["sessions"].as_array().map(Vec::len)),
        (200, Some(1))
    );

    // Files: upload, download, delete; errors typed.
    let put = s
        .client
        .put(format!("{}/v1/sessions/{id}/files/a/b.txt", s.url))
        .body("hello")
        .send()
        .await
        .expect("put");
    assert_eq!(put.status().as_u16(), 200);
    let back = s
        .client
        .get(format!("{}/v1/sessions/{id}/files/a/b.txt", s.url))
        .send()
        .await
        .expect("get");
    assert_eq!(back.text().await.expect("text"), "hello");
    let full = s
        .client
        .put(format!("{}/v1/sessions/{id}/files/FULL.bin", s.url))
        .body("x")
        .send()
        .await
        .expect("put");
    assert_eq!(full.status().as_u16(), 507);
    let body: Value = full.json().await.expect("json");
    assert_eq!(error_type(&body), Some("workspace_full"));
    let (status, escape) = get(&s, &format!("/v1/sessions/{id}/files/..%2Fetc%2Fpasswd")).await;
    assert_eq!(
        (status, error_type(&escape)),
        (400, Some("invalid_path")),
        "{escape}"
    );
    let removed = s
        .client
        .delete(format!("{}/v1/sessions/{id}/files/a/b.txt", s.url))
        .send()
        .await
        .expect("delete");
    assert_eq!(removed.status().as_u16(), 204);
    let (status, gone) = get(&s, &format!("/v1/sessions/{id}/files/a/b.txt")).await;
    assert_eq!((status, error_type(&gone)), (404, Some("file_not_found")));

    // Delete: 204; the record stays, stopped; commands answer session_stopped.
    let deleted = s
        .client
        .delete(format!("{}/v1/sessions/{id}", s.url))
        .send()
        .await
        .expect("delete");
    assert_eq!(deleted.status().as_u16(), 204);
    assert_eq!(s.runner().leased(), 0, "the session's sandbox was closed");
    let (status, view) = get(&s, &format!("/v1/sessions/{id}")).await;
    assert_eq!((status, view["state"].as_str()), (200, Some("stopped")));
    assert!(
        view["reason"].as_str().unwrap_or("").starts_with("deleted"),
        "{view}"
    );
    let (status, stopped) = s
        .post(
            &format!("/v1/sessions/{id}/exec"),
            &json!({"command": "true"}),
        )
        .await;
    assert_eq!(
        (status, error_type(&stopped)),
        (409, Some("session_stopped"))
    );
    let unknown = uuid::Uuid::new_v4();
    let (status, missing) = get(&s, &format!("/v1/sessions/{unknown}")).await;
    assert_eq!(
        (status, error_type(&missing)),
        (404, Some("session_not_found"))
    );
    let (status, bad_id) = get(&s, "/v1/sessions/not-a-uuid").await;
    assert_eq!((status, error_type(&bad_id)), (400, Some("schema_error")));
    s.stop().await;
}

#[tokio::test]
async fn bad_requests_are_refused_before_anything_runs() {
    let s = Service::fake(FakeRunner::new(), |_| {}).await;
    for (body, needle) in [
        (
            json!({"environment": {"LD_PRELOAD": "/tmp/x.so"}}),
            "LD_PRELOAD",
        ),
        (json!({"environment": {"PS1": "$(id)"}}), "PS1"),
        (
            json!({"environment": {"TOKEN": format!("ghp_{}", "aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5")}}),
            "secret",
        ),
        (json!({"idle_timeout_secs": 0}), "idle_timeout_secs"),
        (
            json!({"max_duration_secs": 10_000_000}),
            "max_duration_secs",
        ),
        (
            json!({"limits": {"memory_mb": 1_000_000}}),
            "limits.memory_mb",
        ),
        (json!({"profile": "nope"}), "profile"),
        (json!({"unknown": 1}), "unknown"),
    ] {
        let (status, out) = s.post("/v1/sessions", &body).await;
        assert_eq!(
            (status, error_type(&out)),
            (400, Some("schema_error")),
            "{body}: {out}"
        );
        assert!(
            out["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains(needle),
            "{out}"
        );
    }
    assert_eq!(
        s.runner().calls.load(std::sync::atomic::Ordering::SeqCst),
        0
    );

    let id = create(&s, json!({})).await;
    let exec = format!("/v1/sessions/{id}/exec");
    for body in [
        json!({}),
        json!({"command": "ls", "argv": ["ls"]}),
        json!({"script_content": "print(1)"}),
        json!({"argv": []}),
        json!({"command": "ls", "timeout": 0}),
    ] {
        let (status, out) = s.post(&exec, &body).await;
        assert_eq!(
            (status, error_type(&out)),
            (400, Some("schema_error")),
            "{body}: {out}"
        );
    }
    // A command that fails validation runs nothing; the session stays usable.
    let (status, bomb) = s.post(&exec, &json!({"command": ":(){ :|:& };:"})).await;
    assert_eq!(status, 200, "{bomb}");
    assert_eq!(bomb["validation_failed"], true);
    assert_eq!(error_type(&bomb), Some("validation_failed"));
    assert!(s.runner().ran().is_empty(), "{:?}", s.runner().ran());
    let (status, ok) = s.post(&exec, &json!({"argv": ["echo", "fine"]})).await;
    assert_eq!((status, ok["success"].as_bool()), (200, Some(true)), "{ok}");
    assert_eq!(s.runner().ran(), vec!["echo fine".to_string()]);
    // A secret in an upload is refused.
    let secret = s
        .client
        .put(format!("{}/v1/sessions/{id}/files/k.txt", s.url))
        .body(format!("ghp_{}", "aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5"))
        .send()
        .await
        .expect("put");
    assert_eq!(secret.status().as_u16(), 422);
    s.stop().await;
}

#[tokio::test]
async fn a_busy_session_answers_409_and_a_kill_ends_the_command() {
    let s = Service::fake(FakeRunner::new(), |_| {}).await;
    let id = create(&s, json!({})).await;
    let events = s
        .client
        .post(format!("{}/v1/sessions/{id}/exec/stream", s.url))
        .json(&json!({"command": "echo BLOCK"}))
        .send()
        .await
        .expect("stream");
    assert_eq!(events.status().as_u16(), 200);
    // The session is busy from the moment the stream answered.
    let (_, view) = get(&s, &format!("/v1/sessions/{id}")).await;
    assert_eq!(view["state"], "busy", "{view}");
    let current = view["current_command_id"]
        .as_str()
        .expect("current")
        .to_string();
    let (status, busy) = s
        .post(
            &format!("/v1/sessions/{id}/exec"),
            &json!({"command": "true"}),
        )
        .await;
    assert_eq!((status, error_type(&busy)), (409, Some("session_busy")));
    let (status, killed) = s
        .post(
            &format!("/v1/sessions/{id}/commands/{current}/kill"),
            &json!({}),
        )
        .await;
    assert_eq!(
        (status, error_type(&killed)),
        (200, Some("killed")),
        "{killed}"
    );
    let text = events.text().await.expect("events");
    let command = text.find("event: command").expect("command event");
    let stdout = text.find("event: stdout").expect("stdout event");
    let result = text.find("event: result").expect("result event");
    assert!(command < stdout && stdout < result, "{text}");
    assert!(text.contains(&current), "{text}");
    let (status, unknown) = s
        .post(
            &format!("/v1/sessions/{id}/commands/{}/kill", uuid::Uuid::new_v4()),
            &json!({}),
        )
        .await;
    assert_eq!(
        (status, error_type(&unknown)),
        (404, Some("command_not_found"))
    );
    s.stop().await;
}

#[tokio::test]
async fn caps_answer_429_and_stopped_sessions_do_not_count() {
    let s = Service::fake(FakeRunner::new(), |c| {
        c.sessions.max_per_agent = 2;
        c.sessions.max_total = 2;
    })
    .await;
    let first = create(&s, json!({})).await;
    create(&s, json!({})).await;
    let response = post_session(&s).await;
    assert_eq!(response.status().as_u16(), 429);
    assert!(response.headers().get("retry-after").is_some());
    let body: Value = response.json().await.expect("json");
    assert_eq!(error_type(&body), Some("too_many_sessions"));
    let deleted = s
        .client
        .delete(format!("{}/v1/sessions/{first}", s.url))
        .send()
        .await
        .expect("delete");
    assert_eq!(deleted.status().as_u16(), 204);
    create(&s, json!({})).await;
    s.stop().await;
}

#[tokio::test]
async fn an_engine_that_is_down_answers_503_and_leaves_a_stopped_record() {
    let s = Service::fake(FakeRunner::new().down(), |_| {}).await;
    let response = post_session(&s).await;
    // As the contract says (openapi::EngineUnavailable): retry after `Retry-After` seconds.
    assert!(response.headers().get("retry-after").is_some());
    let status = response.status().as_u16();
    let out: Value = response.json().await.expect("json");
    assert_eq!(
        (status, error_type(&out)),
        (503, Some("engine_unavailable")),
        "{out}"
    );
    let (_, list) = get(&s, "/v1/sessions").await;
    assert_eq!(list["sessions"][0]["state"], "stopped", "{list}");
    s.stop().await;
}

#[tokio::test]
async fn after_a_restart_every_session_of_the_previous_process_answers_stopped() {
    let data = tempfile::tempdir().expect("data dir").keep();
    // A process that crashed left a live session behind (its container is the reaper's).
    let crashed = uuid::Uuid::new_v4();
    {
        let store = scriptgate::store::Store::open(&data).expect("store");
        let now = time::OffsetDateTime::now_utc();
        let record = scriptgate::domain::session::SessionRecord {
            id: crashed,
            agent: "anonymous".into(),
            profile: "minimal".into(),
            node: "n1".into(),
            created_at: now,
            expires_at: now + time::Duration::hours(1),
            stopped_at: None,
            reason: None,
            policy: None,
        };
        store.save_session(&record).await.expect("saved");
    }
    let dir = data.clone();
    let s = Service::fake(FakeRunner::new(), move |c| c.data_dir = Some(dir)).await;
    let (status, view) = get(&s, &format!("/v1/sessions/{crashed}")).await;
    assert_eq!(
        (status, view["state"].as_str()),
        (200, Some("stopped")),
        "{view}"
    );
    assert!(
        view["reason"]
            .as_str()
            .unwrap_or("")
            .starts_with("service_restarted"),
        "{view}"
    );
    // A session open at a graceful stop is stopped by it, and says so after the restart.
    let id = create(&s, json!({})).await;
    s.stop().await;
    let dir = data.clone();
    let s = Service::fake(FakeRunner::new(), move |c| c.data_dir = Some(dir)).await;
    let (status, view) = get(&s, &format!("/v1/sessions/{id}")).await;
    assert_eq!(
        (status, view["state"].as_str()),
        (200, Some("stopped")),
        "{view}"
    );
    assert!(
        view["reason"]
            .as_str()
            .unwrap_or("")
            .starts_with("service_stopped"),
        "{view}"
    );
    let (status, refused) = s
        .post(
            &format!("/v1/sessions/{id}/exec"),
            &json!({"command": "true"}),
        )
        .await;
    assert_eq!(
        (status, error_type(&refused)),
        (409, Some("session_stopped"))
    );
    s.stop().await;
}
