//! Python script commands of a session against the real engine, over HTTP: they run on the
//! session's standby interpreter (started while the session idles) and see exactly what a fresh
//! interpreter sees (working directory, environment, `sys.argv`, `sys.path`, modules, flags,
//! descriptors), share nothing with the command before them, end by kill and timeout like any
//! command, and leave no interpreter behind. Runs the image under test (`RUNNER_IMAGE_UNDER_TEST`).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::api::get;
use crate::api::session::{create, exec, line};
use crate::harness::{self, Service};

/// What a script sees of its interpreter, as JSON; `standby` says which bootstrap runs it.
const PROBE: &str = r#"import sys
modules = sorted(sys.modules)
import json, os, signal
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines())
print(json.dumps({
    "argv": sys.argv,
    "path": sys.path,
    "cwd": os.getcwd(),
    "env": dict(os.environ),
    "flags": repr(sys.flags),
    "executable": sys.executable,
    "prefix": [sys.prefix, sys.base_prefix],
    "modules": modules,
    "globals": {k: repr(v) for k, v in globals().items() if k.startswith("__")},
    "stdin": sys.stdin.read(),
    "streams": [repr(s) for s in (sys.stdin, sys.stdout, sys.stderr)],
    "buffering": [sys.stdout.line_buffering, sys.stdout.write_through],
    "ids": [os.getuid(), os.getgid(), os.getgroups(), os.getppid(), os.getsid(0) == os.getpid()],
    "fds": sorted(os.listdir("/proc/self/fd")),
    "mask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    "limits": [open("/proc/self/limits").read()],
    "oom": open("/proc/self/oom_score_adj").read(),
    "status": [status["NoNewPrivs"].strip(), status["Seccomp"].strip(), status["CapEff"].strip()],
    "umask": os.umask(0o22),
    "standby": "os.environ.update(env)" in sys.orig_argv[-1],
}))
"#;

/// Lets the session idle long enough for its standby to start (it starts once the session idled
/// 20 ms after a command; a command sent sooner starts its own interpreter).
async fn idle() {
    tokio::time::sleep(Duration::from_millis(500)).await;
}

async fn probe(s: &Service, id: &str) -> Value {
    idle().await;
    let out = exec(
        s,
        id,
        json!({"script_content": PROBE, "script_type": "python", "stdin": "hello\n", "timeout": 30}),
    )
    .await;
    assert_eq!(out["exit_code"], 0, "{out}");
    let mut seen: Value =
        serde_json::from_str(out["stdout"].as_str().expect("stdout")).expect("the probe's JSON");
    // Whether the command ran under a run-time policy (the suite may run with one by default).
    seen["policy"] = json!(!out["events"].is_null());
    seen
}

fn python(source: &str) -> Value {
    json!({"script_content": source, "script_type": "python", "timeout": 30})
}

#[tokio::test]
async fn a_standby_interpreter_sees_what_a_fresh_one_sees() {
    let s = Service::start(|_| {}).await;
    let id = create(&s, json!({"environment": {"PROJECT": "demo"}})).await;
    line(&s, &id, "mkdir -p src && cd src && export X=42").await;

    let mut standby = probe(&s, &id).await;
    assert_eq!(standby["standby"], true, "{standby}");
    assert_eq!(standby["cwd"], "/workspace/src");
    assert_eq!(standby["env"]["X"], "42");
    assert_eq!(standby["env"]["PROJECT"], "demo");
    assert_eq!(standby["argv"], json!(["<script>"]));
    assert_eq!(standby["path"][0], "", "{}", standby["path"]);
    assert_eq!(standby["stdin"], "hello\n");

    // A `$HOME/.local` (empty, so no user site a fresh interpreter would load) rules the standby
    // out: the next command starts a fresh interpreter, as every Python command did before.
    line(&s, &id, "mkdir \"$HOME/.local\"").await;
    let mut fresh = probe(&s, &id).await;
    assert_eq!(fresh["standby"], false, "{fresh}");
    fresh["standby"] = json!(true);
    if !fresh["policy"].is_null() {
        // Under a run-time policy the standby has loaded ctypes to apply the policy's exec floor
        // (as a one-shot run's interpreter has); a fresh one had its floor applied before exec.
        let floor = ["_ctypes", "_struct", "ctypes", "ctypes._endian", "struct"];
        standby["modules"]
            .as_array_mut()
            .expect("modules")
            .retain(|m| !floor.iter().any(|f| m == f));
    }
    for (key, value) in standby.as_object().expect("object") {
        assert_eq!(
            &fresh[key], value,
            "`{key}` differs from a fresh interpreter's"
        );
    }

    // Environment changed while the standby waits is the command's, not the standby's.
    line(&s, &id, "rmdir \"$HOME/.local\"").await;
    let patched = s
        .client
        .patch(format!("{}/v1/sessions/{id}", s.url))
        .json(&json!({"environment": {"MODE": "patched", "PROJECT": null}}))
        .send()
        .await
        .expect("patch");
    assert_eq!(patched.status().as_u16(), 200);
    let after = probe(&s, &id).await;
    assert_eq!(after["standby"], true, "{after}");
    assert_eq!(after["env"]["MODE"], "patched");
    assert_eq!(after["env"].get("PROJECT"), None, "{after}");
    s.stop().await;
}

#[tokio::test]
async fn python_commands_share_nothing_end_as_before_and_leave_nothing() {
    let s = Service::start(|_| {}).await;
    let id = create(&s, json!({})).await;

    // Two commands in a row: a fresh process each, no module or variable carried over.
    let first = exec(
        &s,
        &id,
        python("import json, os\njson.marker = 1\nSEEN = 1\nprint(os.getpid())"),
    )
    .await;
    assert_eq!(first["exit_code"], 0, "{first}");
    idle().await;
    let second = exec(
        &s,
        &id,
        python("import json, os\nprint(hasattr(json, 'marker'), 'SEEN' in globals())\nprint(os.getpid())"),
    )
    .await;
    let out = second["stdout"].as_str().expect("stdout");
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("False False"), "{second}");
    assert_ne!(lines.next(), first["stdout"].as_str().map(str::trim_end));

    // Tracebacks name the script, exit codes are the script's.
    idle().await;
    let failed = exec(&s, &id, python("x = 1\nraise ValueError('boom')")).await;
    assert_eq!(failed["exit_code"], 1, "{failed}");
    let err = failed["stderr"].as_str().expect("stderr");
    assert!(
        err.starts_with(
            "Traceback (most recent call last):\n  File \"<script>\", line 2, in <module>\n"
        ),
        "{err}"
    );
    assert!(err.ends_with("ValueError: boom\n"), "{err}");
    let exited = exec(&s, &id, python("import sys\nsys.exit(3)")).await;
    assert_eq!(exited["exit_code"], 3, "{exited}");

    // Timeout and kill end the interpreter and what it started; the next one runs.
    idle().await;
    let spin = exec(
        &s,
        &id,
        json!({"script_content": "while True: pass", "script_type": "python", "timeout": 2}),
    )
    .await;
    assert_eq!(spin["error"]["type"], "timeout", "{spin}");
    idle().await;
    let client = s.client.clone();
    let url = format!("{}/v1/sessions/{id}/exec", s.url);
    let running = tokio::spawn(async move {
        let body = json!({"script_content": "import subprocess, time\nsubprocess.Popen(['sleep', '300'])\ntime.sleep(300)", "script_type": "python", "timeout": 120});
        client
            .post(url)
            .json(&body)
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
            break view["current_command_id"].as_str().expect("id").to_string();
        }
        assert!(Instant::now() < deadline, "never busy: {view}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (status, _) = s
        .post(
            &format!("/v1/sessions/{id}/commands/{current}/kill"),
            &json!({}),
        )
        .await;
    assert_eq!(status, 200);
    let killed = running.await.expect("join");
    assert_eq!(killed["error"]["type"], "killed", "{killed}");

    // No interpreter waits beside a command, none is left of the ones before.
    let ps = "import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()))";
    idle().await;
    let seen = exec(&s, &id, python(ps)).await;
    assert_eq!(seen["stdout"], "[1]\n", "{seen}");
    idle().await;
    let bash = line(
        &s,
        &id,
        "readlink /proc/[0-9]*/exe 2>/dev/null | grep -c python || true",
    )
    .await;
    assert_eq!(bash["stdout"], "0\n", "{bash}");

    // A standby killed while it waits (from outside: no command runs beside it) is not used:
    // the next Python command starts its own interpreter.
    let uid = exec(&s, &id, python("import os\nprint(os.getuid())")).await["stdout"]
        .as_str()
        .expect("stdout")
        .trim()
        .to_string();
    let container = harness::containers(&s.instance)
        .await
        .pop()
        .expect("the session's container");
    idle().await;
    let killer = "for p in /proc/[0-9]*; do case $(tr '\\0' ' ' < $p/cmdline) in *python3\\ -u\\ -c*) kill -9 ${p#/proc/} && echo killed;; esac; done";
    let docker = std::process::Command::new("docker")
        .args([
            "exec",
            "-u",
            &format!("{uid}:{uid}"),
            &container,
            "sh",
            "-c",
            killer,
        ])
        .output()
        .expect("docker exec");
    assert_eq!(
        String::from_utf8_lossy(&docker.stdout),
        "killed\n",
        "{}",
        String::from_utf8_lossy(&docker.stderr)
    );
    let which = "import sys\nprint('os.environ.update(env)' in sys.orig_argv[-1])";
    let after = exec(&s, &id, python(which)).await;
    assert_eq!(after["stdout"], "False\n", "{after}");
    // And the command after it has its standby again.
    idle().await;
    let again = exec(&s, &id, python(which)).await;
    assert_eq!(again["stdout"], "True\n", "{again}");

    // The session's close removes its container with everything in it.
    let closed = s
        .client
        .delete(format!("{}/v1/sessions/{id}", s.url))
        .send()
        .await
        .expect("delete");
    assert_eq!(closed.status().as_u16(), 204);
    assert_eq!(harness::containers(&s.instance).await, Vec::<String>::new());
    s.stop().await;
}
