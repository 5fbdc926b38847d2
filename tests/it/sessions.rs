//! Persistent sessions against the real engine, over HTTP: the lifecycle, state that persists
//! (cd/export/alias, files), the sandbox contract of a session container, busy/stopped/not
//! found, timeouts, kill, SSE, pagination, expiry and caps. Runs the image under test
//! (`RUNNER_IMAGE_UNDER_TEST`), whose supervisor serves `sessions/1`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::api::get;
use crate::api::session::{create, exec, line};
use crate::harness::{self, Service};

async fn delete(s: &Service, path: &str) -> u16 {
    s.client
        .delete(format!("{}{path}", s.url))
        .send()
        .await
        .expect("request")
        .status()
        .as_u16()
}

#[tokio::test]
async fn state_and_files_persist_across_commands_and_delete_removes_the_container() {
    let s = Service::start(|_| {}).await;
    let id = create(&s, json!({"environment": {"PROJECT": "demo"}})).await;
    let (status, view) = get(&s, &format!("/v1/sessions/{id}")).await;
    assert_eq!(
        (status, view["state"].as_str()),
        (200, Some("ready")),
        "{view}"
    );
    assert_eq!(view["cwd"], "/workspace");
    assert_eq!(harness::containers(&s.instance).await.len(), 1);

    let first = line(
        &s,
        &id,
        "mkdir -p src && cd src && export X=42 && alias hi='echo hello' && echo made > f.txt",
    )
    .await;
    assert_eq!(first["success"], true, "{first}");
    assert_eq!(first["cwd"], "/workspace/src", "{first}");
    let second = line(&s, &id, "pwd; echo $X $PROJECT; hi; cat f.txt").await;
    assert_eq!(
        second["stdout"], "/workspace/src\n42 demo\nhello\nmade\n",
        "{second}"
    );
    assert_eq!(
        second["command"],
        "pwd; echo $X $PROJECT; echo hello; cat f.txt"
    );
    let unset = line(&s, &id, "unset X; unalias hi; cd ..").await;
    assert_eq!(unset["cwd"], "/workspace", "{unset}");
    let after = line(&s, &id, "echo \"[$X]\"; alias").await;
    assert_eq!(after["stdout"], "[]\n", "{after}");
    let patched = s
        .client
        .patch(format!("{}/v1/sessions/{id}", s.url))
        .json(&json!({"environment": {"MODE": "patched", "PROJECT": null}}))
        .send()
        .await
        .expect("patch");
    assert_eq!(patched.status().as_u16(), 200);
    let seen = line(&s, &id, "echo \"$MODE[$PROJECT]\"").await;
    assert_eq!(seen["stdout"], "patched[]\n", "{seen}");

    // The sandbox contract: its own uid, no capabilities, a read-only root, a writable workspace.
    let contract = line(
        &s,
        &id,
        "id -u; grep CapEff /proc/self/status; touch /opt/x 2>/dev/null || echo ro; touch /workspace/w && echo rw",
    )
    .await;
    let out = contract["stdout"].as_str().expect("stdout");
    let uid: u64 = out.lines().next().expect("uid").parse().expect("a number");
    assert!(uid >= 2_000_000_000, "{out}");
    assert!(out.contains("CapEff:\t0000000000000000"), "{out}");
    assert!(out.contains("ro\nrw"), "{out}");

    // `exit` ends that command only; a failing validation runs nothing and leaves it usable.
    let exited = line(&s, &id, "exit 3").await;
    assert_eq!(exited["exit_code"], 3, "{exited}");
    let bomb = line(&s, &id, ":(){ :|:& };:").await;
    assert_eq!(bomb["validation_failed"], true, "{bomb}");
    assert_eq!(bomb["error"]["type"], "validation_failed");
    let argv = exec(&s, &id, json!({"argv": ["printf", "%s|", "a b", "$HOME"]})).await;
    assert_eq!(argv["stdout"], "a b|$HOME|", "{argv}");
    let script = exec(
        &s,
        &id,
        json!({"script_content": "import os\nprint(os.getcwd())", "script_type": "python"}),
    )
    .await;
    assert_eq!(script["stdout"], "/workspace\n", "{script}");

    // Nothing a command starts outlives it.
    line(
        &s,
        &id,
        "nohup sh -c 'while true; do echo x >> /workspace/bg; sleep 0.05; done' >/dev/null 2>&1 &",
    )
    .await;
    let bg = line(&s, &id, "a=$(wc -c < /workspace/bg); sleep 1; b=$(wc -c < /workspace/bg); [ \"$a\" = \"$b\" ] && echo still").await;
    assert_eq!(bg["stdout"], "still\n", "{bg}");

    // Files: upload, download with the same sha256, list, delete, path escapes.
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let sha = hex::encode(Sha256::digest(&data));
    let put = s
        .client
        .put(format!("{}/v1/sessions/{id}/files/data/blob.bin", s.url))
        .body(data.clone())
        .send()
        .await
        .expect("put");
    assert_eq!(put.status().as_u16(), 200);
    let written: Value = put.json().await.expect("json");
    assert_eq!(written["sha256"], sha.as_str(), "{written}");
    let back = s
        .client
        .get(format!("{}/v1/sessions/{id}/files/data/blob.bin", s.url))
        .send()
        .await
        .expect("get");
    assert_eq!(back.status().as_u16(), 200);
    assert_eq!(
        back.headers()["x-content-sha256"].to_str().expect("header"),
        sha
    );
    let bytes = back.bytes().await.expect("bytes");
    assert_eq!(hex::encode(Sha256::digest(&bytes)), sha);
    let seen = line(&s, &id, "sha256sum /workspace/data/blob.bin").await;
    assert!(
        seen["stdout"].as_str().expect("out").starts_with(&sha),
        "{seen}"
    );
    let (status, tree) = get(
        &s,
        &format!("/v1/sessions/{id}/files?path=/workspace&depth=2"),
    )
    .await;
    assert_eq!(status, 200, "{tree}");
    let names: Vec<&str> = tree["tree"]["children"]
        .as_array()
        .expect("children")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert!(names.contains(&"data") && names.contains(&"src"), "{tree}");
    assert_eq!(
        delete(&s, &format!("/v1/sessions/{id}/files/data/blob.bin")).await,
        204
    );
    let (status, gone) = get(&s, &format!("/v1/sessions/{id}/files/data/blob.bin")).await;
    assert_eq!(
        (status, gone["error"]["type"].as_str()),
        (404, Some("file_not_found"))
    );
    let (status, escape) = get(
        &s,
        &format!("/v1/sessions/{id}/files/..%2F..%2Fetc%2Fpasswd"),
    )
    .await;
    assert_eq!(
        (status, escape["error"]["type"].as_str()),
        (400, Some("invalid_path")),
        "{escape}"
    );
    let linked = line(&s, &id, "ln -s /workspace/src/f.txt /workspace/link").await;
    assert_eq!(linked["success"], true, "{linked}");
    let (status, link) = get(&s, &format!("/v1/sessions/{id}/files/link")).await;
    assert_eq!(status, 400, "{link}");
    let secret = s
        .client
        .put(format!("{}/v1/sessions/{id}/files/key.txt", s.url))
        .body(format!(
            "token = ghp_{}\n",
            "aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5"
        ))
        .send()
        .await
        .expect("put");
    assert_eq!(secret.status().as_u16(), 422);

    let (status, history) = get(&s, &format!("/v1/sessions/{id}/history")).await;
    assert_eq!(status, 200);
    assert!(
        history["commands"].as_array().expect("list").len() >= 10,
        "{history}"
    );

    // Delete: 204, the container goes, the record stays `stopped`.
    assert_eq!(delete(&s, &format!("/v1/sessions/{id}")).await, 204);
    assert_eq!(
        harness::settle(&s.instance, 0, Duration::from_secs(20)).await,
        0
    );
    let (status, view) = get(&s, &format!("/v1/sessions/{id}")).await;
    assert_eq!(
        (status, view["state"].as_str()),
        (200, Some("stopped")),
        "{view}"
    );
    let (status, refused) = s
        .post(
            &format!("/v1/sessions/{id}/exec"),
            &json!({"command": "true"}),
        )
        .await;
    assert_eq!(
        (status, refused["error"]["type"].as_str()),
        (409, Some("session_stopped"))
    );
    let unknown = uuid::Uuid::new_v4();
    let (status, missing) = get(&s, &format!("/v1/sessions/{unknown}")).await;
    assert_eq!(
        (status, missing["error"]["type"].as_str()),
        (404, Some("session_not_found"))
    );
    s.stop().await;
}

/// Reads SSE events (name, data) until `result`, noting which arrived before it.
async fn sse(s: &Service, id: &str, body: Value) -> Vec<(String, Value)> {
    let mut response = s
        .client
        .post(format!("{}/v1/sessions/{id}/exec/stream", s.url))
        .json(&body)
        .send()
        .await
        .expect("stream");
    assert_eq!(response.status().as_u16(), 200);
    let mut buf = String::new();
    let mut events = Vec::new();
    while let Some(chunk) = response.chunk().await.expect("chunk") {
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let mut name = String::new();
            let mut data = String::new();
            for l in block.lines() {
                if let Some(v) = l.strip_prefix("event: ") {
                    name = v.to_string();
                } else if let Some(v) = l.strip_prefix("data: ") {
                    data.push_str(v);
                }
            }
            if name.is_empty() {
                continue;
            }
            let value: Value = serde_json::from_str(&data).expect("json data");
            let done = name == "result";
            events.push((name, value));
            if done {
                return events;
            }
        }
    }
    events
}

#[tokio::test]
async fn timeouts_kills_busy_sessions_streams_and_pages() {
    let s = Service::start(|c| c.sessions.result_output_bytes = 1000).await;
    let id = create(&s, json!({})).await;

    let slow = exec(&s, &id, json!({"command": "sleep 100", "timeout": 2})).await;
    assert_eq!(
        (slow["timeout"].as_bool(), slow["error"]["type"].as_str()),
        (Some(true), Some("timeout")),
        "{slow}"
    );
    assert_eq!(line(&s, &id, "echo ok").await["stdout"], "ok\n");

    // SSE: the command id first, chunks before the result.
    let events = sse(
        &s,
        &id,
        json!({"command": "for i in 1 2 3; do echo $i; sleep 0.3; done; echo err >&2"}),
    )
    .await;
    assert_eq!(events.first().map(|e| e.0.as_str()), Some("command"));
    let command_id = events[0].1["command_id"].as_str().expect("id").to_string();
    let out: String = events
        .iter()
        .filter(|e| e.0 == "stdout")
        .map(|e| e.1["data"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(out, "1\n2\n3\n");
    assert!(events.iter().any(|e| e.0 == "stderr"));
    let (name, result) = events.last().expect("result");
    assert_eq!(name, "result");
    assert_eq!(result["command_id"], command_id.as_str());
    assert_eq!(result["stdout"], "1\n2\n3\n");

    // Busy, and kill.
    let s2 = s.client.clone();
    let url = format!("{}/v1/sessions/{id}/exec", s.url);
    let running = tokio::spawn(async move {
        s2.post(url)
            .json(&json!({"command": "sleep 60", "timeout": 120}))
            .send()
            .await
            .expect("exec")
            .json::<Value>()
            .await
            .expect("json")
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let current = loop {
        let (_, view) = get(&s, &format!("/v1/sessions/{id}")).await;
        if view["state"] == "busy" {
            break view["current_command_id"]
                .as_str()
                .expect("current")
                .to_string();
        }
        assert!(Instant::now() < deadline, "never busy: {view}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (status, busy) = s
        .post(
            &format!("/v1/sessions/{id}/exec"),
            &json!({"command": "true"}),
        )
        .await;
    assert_eq!(
        (status, busy["error"]["type"].as_str()),
        (409, Some("session_busy")),
        "{busy}"
    );
    let (status, killed) = s
        .post(
            &format!("/v1/sessions/{id}/commands/{current}/kill"),
            &json!({}),
        )
        .await;
    assert_eq!(
        (status, killed["error"]["type"].as_str()),
        (200, Some("killed")),
        "{killed}"
    );
    let ended = running.await.expect("task");
    assert_eq!(ended["error"]["type"], "killed", "{ended}");
    assert_eq!(line(&s, &id, "echo again").await["stdout"], "again\n");

    // Pagination beyond what the result carries, with totals.
    let big = line(&s, &id, "head -c 300000 /dev/zero | tr '\\0' a").await;
    assert_eq!(
        big["stdout_total_bytes"], 300_000,
        "{}",
        big["stdout_total_bytes"]
    );
    assert_eq!(big["stdout_truncated"], true);
    assert_eq!(big["stdout"].as_str().map(str::len), Some(1000));
    let cid = big["command_id"].as_str().expect("id");
    let mut offset = 0u64;
    let mut total = 0u64;
    loop {
        let (status, page) = get(
            &s,
            &format!(
                "/v1/sessions/{id}/commands/{cid}/output?stream=stdout&offset={offset}&limit=65536"
            ),
        )
        .await;
        assert_eq!(status, 200, "{page}");
        assert_eq!(page["total_bytes"], 300_000);
        assert_eq!(page["kept_bytes"], 300_000);
        total += page["length"].as_u64().expect("length");
        assert!(
            page["data"]
                .as_str()
                .expect("data")
                .bytes()
                .all(|b| b == b'a')
        );
        match page["next_offset"].as_u64() {
            Some(next) => offset = next,
            None => break,
        }
    }
    assert_eq!(total, 300_000);
    s.stop().await;
}

#[tokio::test]
async fn idle_lifetime_and_command_limits_stop_sessions_and_caps_answer_429() {
    let s = Service::start(|c| {
        c.sessions.max_per_agent = 3;
        c.sessions.sweep_interval_secs = 1;
    })
    .await;
    let idle = create(&s, json!({"idle_timeout_secs": 1})).await;
    let short = create(&s, json!({"max_duration_secs": 2})).await;
    let counted = create(&s, json!({"max_commands": 1})).await;
    let (status, over) = s.post("/v1/sessions", &json!({})).await;
    assert_eq!(
        (status, over["error"]["type"].as_str()),
        (429, Some("too_many_sessions")),
        "{over}"
    );
    assert_eq!(line(&s, &counted, "true").await["success"], true);

    for (id, reason) in [
        (&idle, "idle_timeout"),
        (&short, "max_duration"),
        (&counted, "max_commands"),
    ] {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (_, view) = get(&s, &format!("/v1/sessions/{id}")).await;
            if view["state"] == "stopped" {
                let why = view["reason"].as_str().unwrap_or("");
                assert!(why.starts_with(reason), "{view}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{reason} never stopped it: {view}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    assert_eq!(
        harness::settle(&s.instance, 0, Duration::from_secs(20)).await,
        0
    );
    // Stopped sessions no longer count toward the cap.
    let again = create(&s, json!({})).await;
    assert_eq!(line(&s, &again, "echo fresh").await["stdout"], "fresh\n");
    s.stop().await;
}

#[tokio::test]
async fn a_session_container_opens_and_closes() {
    use scriptgate::sandbox::Runner;
    use scriptgate::sandbox::sessions::SessionSpec;
    let sandbox = harness::sandbox(|_| {}).await;
    let spec = SessionSpec {
        session_id: uuid::Uuid::new_v4(),
        profile: "minimal".into(),
        env: Default::default(),
        expires_at_ms: u64::MAX / 2,
        output_limit: 1 << 20,
        limits: sandbox.config().limits.clone(),
        owner: "test".into(),
        enforcement: None,
        network: None,
    };
    let session = sandbox.open_session(spec).await.expect("the session opens");
    session.close().await;
    sandbox.shutdown().await;
}
