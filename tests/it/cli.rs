//! The command line (`validate`, `rules`, `healthcheck`, start-up errors): output shape and exit
//! codes, by running the real binary.

use std::process::Command;

fn scriptgate(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_scriptgate"))
        .args(args)
        .output()
        .expect("binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("write temp file");
    path.display().to_string()
}

#[test]
fn valid_files_exit_zero_with_one_json_line_each() {
    let dir = tempfile::tempdir().expect("tempdir");
    let py = write(&dir, "ok.py", "print('hello')\n");
    let sh = write(&dir, "ok.sh", "echo hello\n");
    let (code, stdout, _) = scriptgate(&["validate", &py, &sh]);
    assert_eq!(code, 0);
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["file"], py.as_str());
    assert_eq!(lines[0]["language"], "python");
    assert_eq!(lines[0]["valid"], true);
    assert!(lines[0]["layer"].is_null());
    assert_eq!(lines[1]["language"], "bash");
}

#[test]
fn a_rejected_file_exits_one_and_names_layer_rule_and_position() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = write(&dir, "bad.py", "import os\nx = 1\nos.system(input())\n");
    let (code, stdout, _) = scriptgate(&["validate", &bad]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("JSON");
    assert_eq!(v["valid"], false);
    assert_eq!(v["layer"], "dangerous");
    let f = &v["findings"][0];
    assert_eq!(f["layer"], "dangerous");
    assert_eq!(f["rule"], "python-os-command");
    assert_eq!(f["severity"], "block");
    assert_eq!(
        (f["line"].as_u64(), f["column"].as_u64()),
        (Some(3), Some(1))
    );
}

#[test]
fn language_comes_from_flag_then_extension_then_shebang() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shebang = write(&dir, "noext", "#!/usr/bin/env python3\nprint(1)\n");
    let (code, stdout, _) = scriptgate(&["validate", &shebang]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("\"language\":\"python\""));
    let txt = write(&dir, "script.txt", "echo hi\n");
    let (code, stdout, _) = scriptgate(&["validate", "--language", "bash", &txt]);
    assert_eq!(code, 0);
    assert!(stdout.contains("\"language\":\"bash\""));
}

#[test]
fn usage_and_read_errors_exit_two_with_a_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let unknown = write(&dir, "notes.txt", "hello\n");
    let (code, stdout, stderr) = scriptgate(&["validate", &unknown]);
    assert_eq!(code, 2);
    assert!(stdout.is_empty());
    assert!(stderr.contains("cannot tell the language"), "{stderr}");
    let (code, _, stderr) = scriptgate(&["validate", "/nonexistent/x.py"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("cannot read"), "{stderr}");
    let (code, _, _) = scriptgate(&["validate"]);
    assert_eq!(code, 2);
}

#[test]
fn rules_lists_every_rule_id_with_its_family() {
    let (code, stdout, _) = scriptgate(&["rules"]);
    assert_eq!(code, 0);
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(rows.len() > 60, "{stdout}");
    let row = |id: &str| rows.iter().find(|r| r[0] == id).cloned();
    assert_eq!(row("python-ctypes").map(|r| r[1]), Some("python"));
    assert_eq!(row("github-token").map(|r| r[1]), Some("secrets"));
    assert_eq!(row("bash-rm-root").map(|r| r[2]), Some("block"));
}

#[test]
fn a_disabled_rule_pattern_that_names_no_rule_stops_start_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write(
        &dir,
        "config.toml",
        "[validation]\ndisabled_rules = [\"python-ctypes\", \"pyhton-*\"]\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_scriptgate"))
        .args(["serve", "--insecure-no-auth", "--listen", "127.0.0.1:0"])
        .env("SCRIPTGATE_CONFIG", &config)
        .env("SCRIPTGATE_DATA_DIR", dir.path())
        .output()
        .expect("binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("`pyhton-*` matches no rule"), "{stderr}");
}

/// `scriptgate.example.toml` documents every key: it loads, it equals the defaults, and every key
/// of the effective configuration (including the optional ones) appears in it with a comment.
#[test]
fn the_example_config_names_every_key_and_loads_as_the_defaults() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/scriptgate.example.toml");
    let example = std::fs::read_to_string(path).expect("example config");
    let loaded = scriptgate::config::Config::load(Some(std::path::Path::new(path))).expect("loads");
    let mut defaults = scriptgate::config::Config {
        data_dir: loaded.data_dir.clone(), // derived from the file's location
        ..scriptgate::config::Config::default()
    };
    // The environment overrides the file; the suite may run with this one set.
    if std::env::var("SCRIPTGATE_POLICY__ENFORCE_DEFAULT").is_ok_and(|v| v == "true") {
        defaults.policy.enforce_default = true;
    }
    assert_eq!(loaded, defaults, "the example's values are the defaults");

    // Every key `config show` prints, plus the optional ones it omits when unset.
    let shown = toml::to_string(&defaults).expect("toml");
    let mut section = String::new();
    let mut keys: Vec<String> = [
        "data_dir",
        "validation.rules_dir",
        "sandbox.host",
        "sandbox.runtime",
        "mcp.allowed_hosts",
        "policy.policies_dir",
        "egress.socket_dir",
    ]
    .iter()
    .map(|k| k.to_string())
    .collect();
    for line in shown.lines() {
        if let Some(s) = line.strip_prefix('[') {
            section = s.trim_end_matches(']').to_string();
        } else if let Some((key, _)) = line.split_once(" = ") {
            keys.push(if section.is_empty() {
                key.to_string()
            } else {
                format!("{section}.{key}")
            });
        }
    }
    let mut section = String::new();
    let mut documented = std::collections::HashSet::new();
    // A key is documented when a comment opens its block (keys grouped under one comment share it).
    let mut commented_block = false;
    for line in example.lines() {
        let bare = line.trim_start_matches("# ");
        if line.starts_with('[') {
            section = line.trim_matches(['[', ']']).to_string();
        } else if let Some((key, _)) = bare.split_once(" = ")
            && !key.contains(' ')
            && (commented_block || line.starts_with("# "))
        {
            documented.insert(if section.is_empty() {
                key.to_string()
            } else {
                format!("{section}.{key}")
            });
        }
        if line.starts_with('#') {
            commented_block = true;
        } else if line.trim().is_empty() || line.starts_with('[') {
            commented_block = false;
        }
    }
    let missing: Vec<&String> = keys.iter().filter(|k| !documented.contains(*k)).collect();
    assert!(
        missing.is_empty(),
        "keys not documented in scriptgate.example.toml: {missing:?}"
    );
}

/// `scriptgate healthcheck` with `envs`, off the async runtime.
async fn healthcheck(args: &[&str], envs: &[(&str, String)]) -> (i32, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_scriptgate"));
    command
        .arg("healthcheck")
        .args(args)
        .env_remove("SCRIPTGATE_CONFIG")
        .envs(envs.iter().map(|(k, v)| (k, v)));
    let out = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("join")
        .expect("binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn healthcheck_exits_zero_only_when_the_service_is_ready() {
    let ready = crate::harness::Service::start(|_| {}).await;
    let unready = crate::harness::Service::start(|c| {
        c.sandbox.python_image = "scriptgate-test-missing:none".into();
    })
    .await;
    // Default: /readyz at the configured address, a wildcard one reached through loopback (as in
    // the compose service, which listens on 0.0.0.0).
    let port = ready.url.rsplit(':').next().expect("port").to_string();
    let (code, stdout, stderr) =
        healthcheck(&[], &[("SCRIPTGATE_LISTEN", format!("0.0.0.0:{port}"))]).await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    let body: serde_json::Value = serde_json::from_str(&stdout).expect("the /readyz body");
    assert_eq!(body["ready"], true);
    // 503 (an image is missing): exit 1, with the reason on stdout.
    let url = format!("{}/readyz", unready.url);
    let (code, stdout, stderr) = healthcheck(&["--url", &url], &[]).await;
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stdout.contains("scriptgate-test-missing:none"), "{stdout}");
    assert!(stderr.contains("503"), "{stderr}");
    // Nothing listening, and a URL it cannot use: exit 1 too (Docker reserves 2).
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let url = format!("http://127.0.0.1:{closed}/readyz");
    let (code, _, stderr) = healthcheck(&["--url", &url, "--timeout", "2"], &[]).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("connect"), "{stderr}");
    let (code, _, stderr) = healthcheck(&["--url", "https://localhost/readyz"], &[]).await;
    assert_eq!(code, 1, "{stderr}");
    ready.stop().await;
    unready.stop().await;
}

/// `serve --listen-fd` takes a socket a parent bound; anything else is a start-up error with a
/// message, never an abort (owning a closed descriptor aborts a Rust process).
#[test]
fn serve_refuses_a_listen_fd_that_is_not_an_open_socket() {
    let data = tempfile::tempdir().expect("data dir");
    let data_dir = data.path().display().to_string();
    for fd in ["99", "1"] {
        let out = Command::new(env!("CARGO_BIN_EXE_scriptgate"))
            .args(["serve", "--listen-fd", fd])
            .env("SCRIPTGATE_DATA_DIR", &data_dir)
            .output()
            .expect("binary runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "--listen-fd {fd}: {stderr}");
        assert!(stderr.contains("not an open descriptor"), "{stderr}");
    }
}

const JOB: &str = r#"{"protocol_version": "1.0",
 "constraints": {"allowed_commands": ["python3"]},
 "steps": [
  {"id": "write", "type": "write_file", "arguments": {"path": "app.py", "content": "print('hi from a job')\n"}},
  {"id": "run", "type": "run_command", "arguments": {"command": "python3", "args": ["app.py"]}}
 ],
 "artifacts": ["/workspace/app.py"]}"#;

#[test]
fn job_validate_answers_without_an_engine() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ok = write(&dir, "ok.json", JOB);
    let (code, stdout, stderr) = scriptgate(&["job", "validate", &ok]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(v["valid"], true, "{v}");
    assert_eq!(v["validation"][0]["target"], "/workspace/app.py");
    let outside = JOB.replace("\"app.py\", \"content\"", "\"/etc/app.py\", \"content\"");
    let refused = write(&dir, "refused.json", &outside);
    let (code, stdout, _) = scriptgate(&["job", "validate", &refused]);
    assert_eq!(code, 1, "{stdout}");
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(
        v["result"]["steps"][0]["error"]["type"], "policy_violation",
        "{v}"
    );
    assert_eq!(v["result"]["steps"][1]["status"], "skipped", "{v}");
    let malformed = write(
        &dir,
        "bad.json",
        r#"{"protocol_version": "2.0", "steps": []}"#,
    );
    let (code, stdout, _) = scriptgate(&["job", "validate", &malformed]);
    assert_eq!(code, 2, "{stdout}");
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(v["error"]["type"], "schema_error", "{v}");
}

#[tokio::test(flavor = "multi_thread")]
async fn job_run_runs_on_the_local_engine_and_leaves_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let job = write(&dir, "job.json", JOB);
    let image = crate::harness::runner_image();
    let out = Command::new(env!("CARGO_BIN_EXE_scriptgate"))
        .args(["job", "run", &job])
        .env("SCRIPTGATE_SANDBOX__PYTHON_IMAGE", &image)
        .env("SCRIPTGATE_SANDBOX__BASH_IMAGE", &image)
        .env("RUST_LOG", "warn")
        .output()
        .expect("binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(v["status"], "success", "{v}");
    assert_eq!(v["steps"][1]["result"]["stdout"], "hi from a job\n", "{v}");
    assert_eq!(v["artifacts"][0]["size_bytes"], 23, "{v}");
    let left = crate::harness::containers_with_prefix(scriptgate::JOB_CLI_INSTANCE_PREFIX).await;
    assert!(left.is_empty(), "left behind: {left:?}");
}
