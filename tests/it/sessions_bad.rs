//! Sessions under bad input, against the real engine: full writable places (uploads that do not
//! fit, commands that fill /tmp or /dev/shm), clients that disconnect mid-stream, a memory
//! balloon, fork bombs and process floods, `kill -9 -1`, commands that never end, and a thousand
//! sessions requested at once.
//! Each ends with the session usable (or stopped with a typed reason), the service healthy and
//! nothing of the test's instance left behind.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::api::get;
use crate::api::session::{create, exec, line};
use crate::harness::{self, Service, token};

async fn put(s: &Service, id: &str, path: &str, data: Vec<u8>) -> (u16, Value) {
    let r = s
        .client
        .put(format!("{}/v1/sessions/{id}/files/{path}", s.url))
        .body(data)
        .send()
        .await
        .expect("put");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// The session's view once it is no longer busy (a bound on a hang, not a speed claim).
async fn settled(s: &Service, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, view) = get(s, &format!("/v1/sessions/{id}")).await;
        if view["state"] != "busy" {
            return view;
        }
        assert!(Instant::now() < deadline, "still busy: {view}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

const MIB: usize = 1 << 20;

#[tokio::test]
async fn full_places_answer_enospc_or_507_and_leave_no_partial_file() {
    // /tmp and /dev/shm: 8 MiB each; the session's workspace 16 MiB (the largest file, fsize,
    // is the larger of /tmp and /workspace: 16 MiB, so /tmp and /dev/shm fill before it).
    let s = Service::start(|c| {
        c.sandbox.limits.tmpfs_mb = 8;
        c.sandbox.limits.shm_mb = 8;
        c.sandbox.limits.workspace_mb = 32;
    })
    .await;
    let id = create(&s, json!({"limits": {"workspace_mb": 16}})).await;

    let sizes = line(
        &s,
        &id,
        "df -k --output=size,target /workspace /tmp /dev/shm",
    )
    .await;
    let out = sizes["stdout"].as_str().expect("stdout");
    for (kib, place) in [(16384, "/workspace"), (8192, "/tmp"), (8192, "/dev/shm")] {
        assert!(
            out.lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>() == [&kib.to_string(), place]),
            "{place} is not {kib} KiB: {out}"
        );
    }

    // A command that fills /tmp or /dev/shm gets ENOSPC; the session goes on.
    for place in ["/tmp", "/dev/shm"] {
        let fill = line(&s, &id, &format!("head -c 12M /dev/zero > {place}/big")).await;
        assert_ne!(fill["exit_code"], 0, "{fill}");
        assert!(
            fill["stderr"]
                .as_str()
                .expect("stderr")
                .contains("No space left on device"),
            "{fill}"
        );
        let (_, view) = get(&s, &format!("/v1/sessions/{id}")).await;
        assert_eq!(view["state"], "ready", "{view}");
        let next = line(
            &s,
            &id,
            &format!("cd /workspace && echo usable && rm {place}/big"),
        )
        .await;
        assert_eq!(next["stdout"], "usable\n", "{next}");
        assert_eq!(next["exit_code"], 0, "{next}");
    }

    // An upload larger than the workspace: 507, nothing written.
    let (status, refused) = put(&s, &id, "huge.bin", vec![7u8; 20 * MIB]).await;
    assert_eq!(
        (status, refused["error"]["type"].as_str()),
        (507, Some("workspace_full")),
        "{refused}"
    );
    // An upload that would fit an empty workspace but not this one; an existing file it would
    // replace stays as it was.
    let keep = b"the old contents\n".to_vec();
    let (status, _) = put(&s, &id, "keep.txt", keep.clone()).await;
    assert_eq!(status, 200);
    let filled = line(&s, &id, "head -c 10M /dev/zero > /workspace/filler").await;
    assert_eq!(filled["exit_code"], 0, "{filled}");
    for path in ["data/new.bin", "keep.txt"] {
        let (status, refused) = put(&s, &id, path, vec![1u8; 8 * MIB]).await;
        assert_eq!(
            (status, refused["error"]["type"].as_str()),
            (507, Some("workspace_full")),
            "{path}: {refused}"
        );
    }
    let left = line(
        &s,
        &id,
        "cd /workspace && find . -name 'new.bin' -o -name '*scriptgate*' -o -name 'huge.bin'; sha256sum keep.txt",
    )
    .await;
    assert_eq!(
        left["stdout"],
        format!("{}  keep.txt\n", hex::encode(Sha256::digest(&keep))).as_str(),
        "no partial or staged file may remain, the old file stays: {left}"
    );

    // Once there is room again, the same upload is written whole.
    line(&s, &id, "rm /workspace/filler").await;
    let data = vec![1u8; 8 * MIB];
    let (status, written) = put(&s, &id, "data/new.bin", data.clone()).await;
    assert_eq!(status, 200, "{written}");
    assert_eq!(
        written["sha256"],
        hex::encode(Sha256::digest(&data)).as_str()
    );
    s.stop().await;
}

/// Starts `command` on `…/exec/stream`, reads until its first stdout chunk, then hangs up; the
/// command's id.
async fn stream_then_hang_up(s: &Service, id: &str, command: &str) -> String {
    let mut response = s
        .client
        .post(format!("{}/v1/sessions/{id}/exec/stream", s.url))
        .json(&json!({"command": command, "timeout": 60}))
        .send()
        .await
        .expect("stream");
    assert_eq!(response.status().as_u16(), 200);
    let mut seen = String::new();
    while !seen.contains("event: stdout") {
        let chunk = response.chunk().await.expect("chunk").expect("more events");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    drop(response);
    let data = seen
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .expect("the command event");
    let first: Value = serde_json::from_str(data).expect("json");
    first["command_id"]
        .as_str()
        .expect("command id")
        .to_string()
}

/// The history entry of `command_id`.
async fn entry(s: &Service, id: &str, command_id: &str) -> Value {
    let (status, history) = get(s, &format!("/v1/sessions/{id}/history")).await;
    assert_eq!(status, 200, "{history}");
    history["commands"]
        .as_array()
        .expect("commands")
        .iter()
        .find(|c| c["command_id"] == command_id)
        .cloned()
        .unwrap_or_else(|| panic!("{command_id} is not in the history: {history}"))
}

#[tokio::test]
async fn a_client_that_hangs_up_mid_stream_leaves_the_command_running_unless_configured() {
    const SLOW: &str =
        "for i in 1 2 3 4 5 6 7 8; do echo $i; sleep 0.25; done; echo done > /workspace/marker";
    // Default: the command runs to its end; its result is in the history.
    let s = Service::start(|_| {}).await;
    let id = create(&s, json!({})).await;
    let command_id = stream_then_hang_up(&s, &id, SLOW).await;
    let view = settled(&s, &id).await;
    assert_eq!(view["state"], "ready", "{view}");
    let ran = entry(&s, &id, &command_id).await;
    assert_eq!(
        (ran["exit_code"].as_i64(), ran["error"].is_null()),
        (Some(0), true),
        "{ran}"
    );
    assert_eq!(ran["stdout_total_bytes"], 16, "{ran}");
    let marker = line(&s, &id, "cat /workspace/marker").await;
    assert_eq!(marker["stdout"], "done\n", "{marker}");
    s.stop().await;

    // `sessions.kill_on_disconnect`: the command is killed; the session stays usable.
    let s = Service::start(|c| c.sessions.kill_on_disconnect = true).await;
    let id = create(&s, json!({})).await;
    let command_id = stream_then_hang_up(&s, &id, SLOW).await;
    let view = settled(&s, &id).await;
    assert_eq!(view["state"], "ready", "{view}");
    let killed = entry(&s, &id, &command_id).await;
    assert_eq!(killed["error"]["type"], "killed", "{killed}");
    let marker = line(&s, &id, "cat /workspace/marker 2>/dev/null || echo absent").await;
    assert_eq!(marker["stdout"], "absent\n", "{marker}");
    // The same for a client of `…/exec` (no stream) that gives up waiting.
    let (_, before) = get(&s, &format!("/v1/sessions/{id}/history")).await;
    let before = before["commands"].as_array().map_or(0, Vec::len);
    let gave_up = s
        .client
        .post(format!("{}/v1/sessions/{id}/exec", s.url))
        .json(&json!({"command": SLOW, "timeout": 60}))
        .timeout(Duration::from_millis(700))
        .send()
        .await;
    assert!(gave_up.is_err(), "the command cannot have ended yet");
    let view = settled(&s, &id).await;
    assert_eq!(view["state"], "ready", "{view}");
    let (_, history) = get(&s, &format!("/v1/sessions/{id}/history")).await;
    let commands = history["commands"].as_array().expect("commands");
    assert_eq!(commands.len(), before + 1, "{history}");
    assert_eq!(commands[before]["command"], SLOW, "{history}");
    assert_eq!(commands[before]["error"]["type"], "killed", "{history}");
    let marker = line(&s, &id, "cat /workspace/marker 2>/dev/null || echo absent").await;
    assert_eq!(marker["stdout"], "absent\n", "{marker}");
    s.stop().await;
}

/// The state every command checks for: the working directory and an exported name.
async fn state_kept(s: &Service, id: &str) {
    let after = line(s, id, "pwd; echo $STAYS").await;
    assert_eq!(after["stdout"], "/workspace/kept\nyes\n", "{after}");
    let (_, view) = get(s, &format!("/v1/sessions/{id}")).await;
    assert_eq!(view["state"], "ready", "{view}");
}

#[tokio::test]
async fn a_balloon_kill_of_every_process_and_an_endless_command_end_that_command_only() {
    let s = Service::start(|_| {}).await;
    let id = create(&s, json!({"limits": {"memory_mb": 128}})).await;
    line(&s, &id, "mkdir -p kept && cd kept && export STAYS=yes").await;

    // A memory balloon: the memory cgroup ends the command, typed; the session goes on.
    let balloon = exec(
        &s,
        &id,
        json!({"script_content": "chunks = []\nfor _ in range(1 << 16):\n    chunks.append(bytearray(16 << 20))\n", "script_type": "python", "timeout": 60}),
    )
    .await;
    assert_eq!(
        balloon["error"]["type"], "resource_limit_exceeded",
        "{balloon}"
    );
    state_kept(&s, &id).await;

    // `kill -9 -1`: the command line is refused by validation (nothing runs) ...
    let refused = line(&s, &id, "kill -9 -1").await;
    assert_eq!(refused["error"]["type"], "validation_failed", "{refused}");
    state_kept(&s, &id).await;
    // ... and where it gets past it (Python's os.kill with a pid only computed at run time, from a
    // child: kill(-1) spares only the caller), it ends that command and everything it started, not
    // the session.
    let everything = exec(
        &s,
        &id,
        json!({"script_content": "import os, subprocess\nsubprocess.Popen(['sleep', '30'])\nevery = os.getpid() - os.getpid() - 1\nif os.fork() == 0:\n    os.kill(every, 9)\n    os._exit(0)\nos.wait()\nprint('not reached')\n", "script_type": "python", "timeout": 30}),
    )
    .await;
    assert_eq!(
        (
            everything["exit_code"].as_i64(),
            everything["stdout"].as_str()
        ),
        (Some(137), Some("")),
        "{everything}"
    );
    state_kept(&s, &id).await;
    let sleepers = line(&s, &id, "ps -e -o comm= | grep -cx sleep || true").await;
    assert_eq!(sleepers["stdout"], "0\n", "{sleepers}");

    // A command that never ends and ignores the polite signals, with a child doing the same:
    // both are gone at its timeout.
    let endless = exec(
        &s,
        &id,
        json!({"command": "trap '' TERM INT HUP; sh -c 'trap \"\" TERM INT HUP; while :; do :; done' & while :; do :; done", "timeout": 2}),
    )
    .await;
    assert_eq!(
        (
            endless["timeout"].as_bool(),
            endless["error"]["type"].as_str()
        ),
        (Some(true), Some("timeout")),
        "{endless}"
    );
    state_kept(&s, &id).await;
    let left = line(&s, &id, "ps -e -o comm= | grep -cx sh || true").await;
    assert_eq!(left["stdout"], "0\n", "{left}");

    let (status, health) = get(&s, "/healthz").await;
    assert_eq!(status, 200, "{health}");
    s.stop().await;
}

#[tokio::test]
async fn a_thousand_sessions_requested_at_once_get_the_caps_and_leak_nothing() {
    const AGENTS: [(&str, &str); 2] = [
        ("burst-a", "burst-token-a-5d1f0c"),
        ("burst-b", "burst-token-b-8e2a7b"),
    ];
    // Caps of a few sessions keep the engine's load small: two per agent, three in all.
    let s = Service::start(|c| {
        c.sessions.max_per_agent = 2;
        c.sessions.max_total = 3;
        c.agent_tokens = AGENTS
            .iter()
            .map(|(name, secret)| token(name, secret))
            .collect();
    })
    .await;
    let requests = (0..1000).map(|i| {
        let (agent, token) = AGENTS[i % 2];
        let request = s
            .client
            .post(format!("{}/v1/sessions", s.url))
            .bearer_auth(token)
            .json(&json!({"idle_timeout_secs": 600}));
        async move {
            let r = request.send().await.expect("request");
            let status = r.status().as_u16();
            (
                agent,
                status,
                r.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    });
    let answers = futures::future::join_all(requests).await;
    let mut created: Vec<(&str, String)> = Vec::new();
    for (agent, status, body) in &answers {
        match status {
            201 => created.push((agent, body["session_id"].as_str().expect("id").into())),
            429 => assert_eq!(body["error"]["type"], "too_many_sessions", "{body}"),
            other => panic!("{other}: {body}"),
        }
    }
    assert_eq!(created.len(), 3, "the total cap");
    for (agent, _) in AGENTS {
        let mine = created.iter().filter(|(a, _)| *a == agent).count();
        assert!((1..=2).contains(&mine), "{agent} holds {mine}");
    }
    assert_eq!(harness::containers(&s.instance).await.len(), 3);
    let (status, health) = get(&s, "/healthz").await;
    assert_eq!(status, 200, "{health}");

    for (agent, id) in &created {
        let token = AGENTS.iter().find(|(a, _)| a == agent).expect("agent").1;
        let r = s
            .client
            .delete(format!("{}/v1/sessions/{id}", s.url))
            .bearer_auth(token)
            .send()
            .await
            .expect("delete");
        assert_eq!(r.status().as_u16(), 204);
    }
    assert_eq!(
        harness::settle(&s.instance, 0, Duration::from_secs(30)).await,
        0,
        "every session container is removed"
    );
    s.stop().await;
}

#[tokio::test]
async fn a_fork_bomb_is_refused_and_a_process_flood_ends_with_its_command() {
    let s = Service::start(|_| {}).await;
    let id = create(&s, json!({})).await;
    line(&s, &id, "mkdir -p kept && cd kept && export STAYS=yes").await;
    // Fork bombs are refused by validation (the shell's, and Python's fork in a loop) ...
    let refused = line(&s, &id, ":(){ :|:& };:").await;
    assert_eq!(refused["error"]["type"], "validation_failed", "{refused}");
    let refused = exec(
        &s,
        &id,
        json!({"script_content": "import os\nwhile True:\n    os.fork()\n", "script_type": "python"}),
    )
    .await;
    assert_eq!(refused["error"]["type"], "validation_failed", "{refused}");
    // ... a flood of processes gets past it and meets the pids limit: the command ends with
    // everything it started, and the session goes on.
    let flood = exec(
        &s,
        &id,
        json!({"script_content": "import subprocess\nprocs = []\nfailed = 0\nwhile failed < 1000:\n    try:\n        procs.append(subprocess.Popen(['sleep', '600']))\n    except OSError:\n        failed += 1\nprint(len(procs) > 10, failed)\n", "script_type": "python", "timeout": 30}),
    )
    .await;
    assert_eq!(flood["stdout"], "True 1000\n", "{flood}");
    state_kept(&s, &id).await;
    let left = line(&s, &id, "ps -e -o comm= | grep -c sleep || true").await;
    assert_eq!(left["stdout"], "0\n", "{left}");
    let (status, health) = get(&s, "/healthz").await;
    assert_eq!(status, 200, "{health}");
    s.stop().await;
}
