//! The OpenAPI contract: the committed `openapi.yaml` is what the code generates, it is valid
//! OpenAPI, the service serves it, and a client generated from it (by openapi-python-client, not
//! written here) drives the live service (over the fake runner). Contract fuzzing against the
//! service on the real engine is in `reliability`.

use std::process::Command;

use crate::fake::{Answer, FakeRunner};
use crate::harness::{self, Service, token};

const AGENT: &str = "agent-token-openapi-5c1e";

fn committed() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml"))
        .expect("openapi.yaml at the repository root")
}

#[test]
fn the_committed_contract_is_current() {
    let generated = scriptgate::http::openapi::yaml();
    if generated != committed() {
        let first = generated
            .lines()
            .zip(committed().lines())
            .position(|(a, b)| a != b)
            .map_or_else(|| "length".to_string(), |i| format!("line {}", i + 1));
        panic!(
            "openapi.yaml is stale (first difference: {first}); regenerate it with \
             `cargo run -q -- openapi > openapi.yaml`"
        );
    }
}

#[tokio::test]
async fn the_contract_is_valid_openapi_3_1() {
    let mut check = Command::new(harness::python());
    check.args([
        "-c",
        "import sys; from openapi_spec_validator import validate; from openapi_spec_validator.readers import read_from_filename; \
         spec, _ = read_from_filename(sys.argv[1]); validate(spec); print('valid', spec['openapi'])",
        concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml"),
    ]);
    let out = harness::run_ok(check).await;
    assert!(out.contains("valid 3.1"), "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_service_serves_the_same_contract() {
    let s = Service::fake(FakeRunner::new(), |_| {}).await;
    let yaml = s
        .client
        .get(format!("{}/openapi.yaml", s.url))
        .send()
        .await
        .expect("request");
    assert_eq!(yaml.status(), 200);
    assert_eq!(yaml.text().await.expect("body"), committed());
    let json: serde_json::Value = s
        .client
        .get(format!("{}/openapi.json", s.url))
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("JSON");
    assert_eq!(json["openapi"], "3.1.0");
    assert!(json["paths"]["/v1/execute"]["post"].is_object());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_generated_python_client_drives_the_live_service() {
    let runner = FakeRunner::new()
        .answering(
            "print('hello from the generated client')",
            Answer::prints("hello from the generated client\n"),
        )
        .answering("echo \"$((6*7))\"", Answer::prints("42\n"));
    let s = Service::fake(runner, |c| {
        c.agent_tokens = vec![token("generated-client", AGENT)];
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("config.yml"), "post_hooks: []\n").expect("config");
    let generator = harness::python()
        .parent()
        .expect("venv bin")
        .join("openapi-python-client");
    let mut generate = Command::new(generator);
    generate
        .current_dir(dir.path())
        .args(["generate", "--meta", "none", "--config", "config.yml"])
        .args(["--output-path", "scriptgate_client", "--path"])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml"));
    let generated = harness::run_ok(generate).await;
    assert!(
        !generated.contains("will not be generated"),
        "every endpoint must be generated:\n{generated}"
    );
    let mut drive = Command::new(harness::python());
    drive
        .arg(harness::py_script("generated_client.py"))
        .arg(dir.path())
        .arg(&s.url)
        .arg(AGENT);
    let out = harness::run_ok(drive).await;
    assert!(out.trim_end().ends_with("OK"), "{out}");
    s.stop().await;
}
