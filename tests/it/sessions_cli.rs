//! The command-line client (`scriptgate session create|list|show|exec|destroy`, `scriptgate
//! exec`, `--json`, `--stream`) against the real service binary on the real engine: the process
//! fixture starts `scriptgate serve`, the client runs as its own process. `--stream` output is
//! read while the client still runs, so chunks are seen to arrive before the command's end.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::harness;
use crate::process::{Process, Spawn};

async fn service(instance: &str, data: &std::path::Path) -> Process {
    let image = harness::runner_image();
    let p = Spawn::new(instance, data)
        .env("SCRIPTGATE_SANDBOX__PYTHON_IMAGE", &image)
        .env("SCRIPTGATE_SANDBOX__BASH_IMAGE", &image)
        .env("SCRIPTGATE_SANDBOX__POOL__SIZE", "0")
        .start();
    p.ready().await;
    p
}

fn client(url: &str, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_scriptgate"));
    command.args(args).env("SG_URL", url).env_remove("SG_TOKEN");
    command
}

async fn run(url: &str, args: &[&str]) -> Output {
    let mut command = client(url, args);
    tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("join")
        .expect("the client runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A command that prints `1`, then waits until `/workspace/go` exists before it prints the
/// rest: its end depends on what the test does after it read the first line.
const GATED: &str =
    "echo 1; while [ ! -e /workspace/go ]; do sleep 0.05; done; echo 2; echo 3; exit 5";

/// Runs a streaming client; once its first stdout line arrived, lets the command go on by
/// uploading `go` into `session` (or, when `None`, into the one other live session), then
/// returns its exit code and stdout lines. A client that printed only at the end never shows a
/// first line (the command waits for it): the test fails at the hang bound.
async fn streamed(url: &str, args: &[&str], session: Option<&str>) -> (Option<i32>, Vec<String>) {
    let mut child = client(url, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the client starts");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, first) = tokio::sync::oneshot::channel();
    let reader = tokio::task::spawn_blocking(move || {
        let mut lines = BufReader::new(stdout).lines().map(|l| l.expect("utf-8"));
        let mut all: Vec<String> = lines.next().into_iter().collect();
        let _ = tx.send(());
        all.extend(lines);
        all
    });
    tokio::time::timeout(Duration::from_secs(60), first)
        .await
        .expect("no output within 60 s: the client does not stream")
        .expect("the reader");
    let target = match session {
        Some(id) => id.to_string(),
        None => other_live_session(url).await,
    };
    let http = reqwest::Client::new();
    let go = http
        .put(format!("{url}/v1/sessions/{target}/files/go"))
        .body("go")
        .send()
        .await
        .expect("upload");
    assert_eq!(go.status().as_u16(), 200);
    let lines = reader.await.expect("join");
    let code = tokio::task::spawn_blocking(move || child.wait().expect("exit").code())
        .await
        .expect("join");
    (code, lines)
}

/// The one live session that a streaming one-shot run created (the test's own holds `go`
/// already).
async fn other_live_session(url: &str) -> String {
    let listed: Value = reqwest::get(format!("{url}/v1/sessions"))
        .await
        .expect("list")
        .json()
        .await
        .expect("json");
    let mut found = Vec::new();
    for s in listed["sessions"].as_array().expect("sessions") {
        let id = s["session_id"].as_str().expect("id");
        let has_go = reqwest::get(format!("{url}/v1/sessions/{id}/files/go"))
            .await
            .expect("probe")
            .status()
            == 200;
        if s["state"] != "stopped" && !has_go {
            found.push(id.to_string());
        }
    }
    assert_eq!(found.len(), 1, "{listed}");
    found.remove(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_client_drives_sessions_and_one_shot_runs_on_the_real_engine() {
    let instance = harness::instance();
    let data = tempfile::tempdir().expect("data dir");
    let p = service(&instance, data.path()).await;
    let url = p.url("");

    // `--url` wins over `SG_URL` (which points nowhere here).
    let out = run(
        "http://127.0.0.1:9",
        &["session", "create", "--url", &url, "--env", "PROJECT=demo"],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    assert!(uuid::Uuid::parse_str(&id).is_ok(), "{id}");

    let out = run(
        &url,
        &[
            "session",
            "exec",
            &id,
            "mkdir -p src && cd src && export X=1",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = run(&url, &["session", "exec", &id, "pwd; echo $X $PROJECT"]).await;
    assert_eq!(text(&out.stdout), "/workspace/src\n1 demo\n");
    let out = run(
        &url,
        &[
            "session",
            "exec",
            &id,
            "--argv",
            "python3",
            "-c",
            "import sys; print('py'); sys.exit(3)",
        ],
    )
    .await;
    assert_eq!(
        (out.status.code(), text(&out.stdout)),
        (Some(3), "py\n".into())
    );
    let out = run(&url, &["session", "exec", &id, "kill -9 -1"]).await;
    assert_eq!(
        out.status.code(),
        Some(1),
        "validation: {}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stderr).contains("rejected by validation"),
        "{}",
        text(&out.stderr)
    );

    // --stream: chunks as the command produces them, then the command's exit code.
    let (code, lines) = streamed(
        &url,
        &["session", "exec", &id, "--stream", GATED],
        Some(&id),
    )
    .await;
    assert_eq!(
        (code, lines),
        (Some(5), vec!["1".into(), "2".into(), "3".into()])
    );
    let out = run(&url, &["session", "exec", &id, "rm /workspace/go"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let (code, events) = streamed(
        &url,
        &["session", "exec", &id, "--stream", "--json", GATED],
        Some(&id),
    )
    .await;
    assert_eq!(code, Some(5));
    let events: Vec<Value> = events
        .iter()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(
        events.first().map(|e| e["event"].clone()),
        Some("command".into())
    );
    let last = events.last().expect("result");
    assert_eq!(last["event"], "result");
    assert_eq!(last["data"]["stdout"], "1\n2\n3\n");
    assert_eq!(last["data"]["exit_code"], 5);

    let out = run(&url, &["session", "show", &id, "--json"]).await;
    let view: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        (view["state"].as_str(), view["cwd"].as_str()),
        (Some("ready"), Some("/workspace/src")),
        "{view}"
    );
    let out = run(&url, &["session", "show", &id]).await;
    assert!(
        text(&out.stdout).contains("env PROJECT=demo"),
        "{}",
        text(&out.stdout)
    );
    let out = run(&url, &["session", "list"]).await;
    assert!(
        text(&out.stdout).contains(&format!("{id}\tready")),
        "{}",
        text(&out.stdout)
    );

    // One-shot runs: plain, --json, and --stream (a session of its own, destroyed after).
    let out = run(&url, &["exec", "echo one-shot; exit 4"]).await;
    assert_eq!(
        (out.status.code(), text(&out.stdout)),
        (Some(4), "one-shot\n".into())
    );
    let out = run(&url, &["exec", "--json", "echo hi"]).await;
    let result: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        (result["stdout"].as_str(), result["exit_code"].as_i64()),
        (Some("hi\n"), Some(0))
    );
    let (code, lines) = streamed(&url, &["exec", "--stream", GATED], None).await;
    assert_eq!(
        (code, lines),
        (Some(5), vec!["1".into(), "2".into(), "3".into()])
    );
    let out = run(&url, &["session", "list", "--json"]).await;
    let listed: Value = serde_json::from_slice(&out.stdout).expect("json");
    let live: Vec<&str> = listed["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .filter(|s| s["state"] != "stopped")
        .filter_map(|s| s["session_id"].as_str())
        .collect();
    assert_eq!(
        live,
        [id.as_str()],
        "the streaming one-shot's session is gone: {listed}"
    );

    let out = run(&url, &["session", "destroy", &id]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(&url, &["session", "exec", &id, "true"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("session_stopped"),
        "{}",
        text(&out.stderr)
    );
    drop(p);
    assert_eq!(
        harness::settle(&instance, 0, Duration::from_secs(30)).await,
        0,
        "nothing of this service is left"
    );
}
