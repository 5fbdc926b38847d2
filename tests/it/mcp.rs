//! `scriptgate mcp` on stdio against the real engine, driven by the official MCP Python SDK (the
//! same clients as the contract tests of `/mcp`, `contract::mcp`: one-shot tools and session
//! tools), and the cleanup of stdio servers'
//! containers.

use std::process::Command;

use crate::harness;

#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_uses_the_stdio_server() {
    let data = tempfile::tempdir().expect("tempdir");
    let instance_prefix = "mcp-";
    let before = harness::containers_with_prefix(instance_prefix).await;
    let runs = ["mcp_client.py", "mcp_sessions_client.py"]
        .into_iter()
        .flat_map(|script| ["legacy", "auto"].map(|mode| (script, mode)));
    for (script, mode) in runs {
        let mut client = Command::new(harness::python());
        client
            .arg(harness::py_script(script))
            .args(["stdio", env!("CARGO_BIN_EXE_scriptgate"), mode])
            .env("SCRIPTGATE_DATA_DIR", data.path())
            .env("SCRIPTGATE_SANDBOX__POOL__SIZE", "1")
            .env("RUST_LOG", "warn");
        let out = harness::run_ok(client).await;
        assert!(out.trim_end().ends_with("OK"), "{script} {mode}: {out}");
    }
    // Each stdio server removed its containers when its client closed the pipe.
    let after = harness::containers_with_prefix(instance_prefix).await;
    assert!(
        after.iter().all(|c| before.contains(c)),
        "left behind: {after:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "flaky since the data profile: a container the engine is still creating for the killed server can outlive the next server's sweeps; see the closing note"]
async fn a_killed_stdio_servers_containers_are_reaped_by_the_next_one() {
    use std::io::{BufRead, Write};
    let data = tempfile::tempdir().expect("tempdir");
    let spawn = || {
        Command::new(env!("CARGO_BIN_EXE_scriptgate"))
            .arg("mcp")
            .env("SCRIPTGATE_DATA_DIR", data.path())
            .env("SCRIPTGATE_SANDBOX__POOL__SIZE", "1")
            .env("RUST_LOG", "warn")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("scriptgate mcp")
    };
    let mut first = spawn();
    // Talk to it once, so its warm pool exists before it is killed.
    let mut stdin = first.stdin.take().expect("stdin");
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-06-18","capabilities":{{}},"clientInfo":{{"name":"t","version":"0"}}}}}}"#
    )
    .expect("write");
    let mut line = String::new();
    std::io::BufReader::new(first.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read");
    assert!(line.contains("scriptgate"), "{line}");
    let pid = first.id();
    let owner_containers = || async move {
        let owner_suffix = format!("/{pid}");
        harness::managed()
            .await
            .into_iter()
            .filter(|(_, labels)| {
                labels
                    .get("scriptgate.owner")
                    .is_some_and(|o| o.ends_with(&owner_suffix))
            })
            .count()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while owner_containers().await < 2 {
        assert!(std::time::Instant::now() < deadline, "pool did not fill");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    first.kill().expect("kill -9");
    first.wait().expect("reaped");
    assert!(
        owner_containers().await >= 2,
        "the containers outlive a SIGKILL"
    );
    // The next stdio server removes them at start-up.
    let mut second = spawn();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while owner_containers().await > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "orphans were not reaped"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    drop(second.stdin.take()); // end of input: it shuts down and removes its own containers
    let status = second.wait().expect("second exits");
    assert!(status.success(), "{status}");
}
