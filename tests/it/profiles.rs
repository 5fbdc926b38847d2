//! Runner profiles against the real engine and the `data` image (`scriptgate images build`):
//! pandas and numpy with exact output, a plot returned as a PNG whose download matches its
//! sha256, an unknown profile, `/v1/profiles` versions against what the container reports, the
//! pool refilled per profile, the sandbox contract in the data image, and MCP image content
//! through the official Python SDK.

use std::process::Command;

use scriptgate::sandbox::profiles::ProfileConfig;
use serde_json::{Value, json};

use crate::harness::{self, Service, token};

async fn run(s: &Service, profile: &str, script: &str) -> Value {
    let (status, body) = s
        .post(
            "/v1/execute",
            &json!({"script_content": script, "script_type": "python", "profile": profile, "timeout": 120}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

async fn profiles(s: &Service) -> Value {
    s.client
        .get(format!("{}/v1/profiles", s.url))
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json")
}

fn profile<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["profiles"]
        .as_array()
        .expect("profiles")
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no profile {name} in {list}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn pandas_and_numpy_compute_exactly_and_the_result_names_its_image_and_supervisor() {
    let s = Service::start(|_| {}).await;
    let out = run(
        &s,
        "data",
        "import pandas as pd; import numpy as np\n\
         df = pd.DataFrame({'a': np.arange(5), 'b': np.linspace(0, 1, 5)})\n\
         print(df['a'].sum(), df['b'].mean(), round(np.linalg.det(np.eye(3) * 2)))\n\
         print(pd.DataFrame(np.ones((3, 3))).sum().sum())",
    )
    .await;
    assert_eq!(out["stdout"], "10 0.5 8\n9.0\n", "{out}");
    assert_eq!(out["success"], true, "{out}");
    assert_eq!(out["profile"], "data");
    let listed = profiles(&s).await;
    let data = profile(&listed, "data");
    assert_eq!(out["image_digest"], data["image_digest"], "{out}");
    assert!(
        out["image_digest"]
            .as_str()
            .is_some_and(|d| d.starts_with("sha256:"))
    );
    assert_eq!(out["supervisor_version"], env!("CARGO_PKG_VERSION"));
    // The default profile has no third-party packages.
    let (status, body) = s
        .post(
            "/v1/execute",
            &json!({"script_content": "import pandas", "script_type": "python"}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(body["profile"], "minimal");
    assert!(
        body["stderr"]
            .as_str()
            .is_some_and(|e| e.contains("ModuleNotFoundError")),
        "{body}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plot_comes_back_as_a_png_whose_download_matches_its_sha256() {
    let s = Service::start(|_| {}).await;
    let out = run(
        &s,
        "data",
        "import matplotlib.pyplot as plt\n\
         plt.figure(figsize=(6.4, 4.8))\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()\n\
         plt.figure(figsize=(3, 2))\nplt.bar(['a', 'b'], [3, 4])\nprint('done')",
    )
    .await;
    assert_eq!(out["stdout"], "done\n", "{out}");
    let artifacts = out["artifacts"].as_array().expect("artifacts");
    assert_eq!(artifacts.len(), 2, "{out}");
    let sizes = [(640, 480), (300, 200)];
    for (artifact, want) in artifacts.iter().zip(sizes) {
        assert_eq!(artifact["mime_type"], "image/png");
        let path = artifact["path"].as_str().expect("path");
        let url = format!(
            "{}/v1/executions/{}/artifacts/{}",
            s.url,
            out["execution_id"].as_str().expect("id"),
            path.trim_start_matches('/')
        );
        let response = s.client.get(url).send().await.expect("download");
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.headers()["content-type"].to_str().ok(),
            Some("image/png")
        );
        let bytes = response.bytes().await.expect("body");
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
        assert_eq!(&bytes[12..16], b"IHDR");
        let dim = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        assert_eq!((dim(16), dim(20)), want);
        assert_eq!(
            bytes.len() as u64,
            artifact["size_bytes"].as_u64().expect("size")
        );
        use sha2::Digest;
        assert_eq!(
            hex::encode(sha2::Sha256::digest(&bytes)),
            artifact["sha256"].as_str().expect("sha256")
        );
    }
    let missing = s
        .client
        .get(format!(
            "{}/v1/executions/{}/artifacts/tmp/nothing.png",
            s.url,
            out["execution_id"].as_str().expect("id")
        ))
        .send()
        .await
        .expect("request");
    assert_eq!(missing.status(), 404);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn images_beyond_the_configured_count_are_dropped_and_counted() {
    let s = Service::start(|c| c.sandbox.limits.max_images = 1).await;
    let out = run(
        &s,
        "data",
        "import matplotlib.pyplot as plt\nfor i in range(3):\n    plt.figure(); plt.plot([i])",
    )
    .await;
    assert_eq!(out["artifacts"].as_array().map(Vec::len), Some(1), "{out}");
    assert_eq!(out["artifacts_dropped"], 2, "{out}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_profile_is_a_schema_error_naming_the_valid_ones() {
    let s = Service::start(|_| {}).await;
    for path in ["/v1/execute", "/v1/executions"] {
        let (status, body) = s
            .post(
                path,
                &json!({"script_content": "print(1)", "script_type": "python", "profile": "gpu"}),
            )
            .await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["type"], "schema_error");
        assert_eq!(
            body["error"]["message"],
            "profile: unknown profile `gpu`; valid profiles: minimal, data"
        );
    }
    assert!(harness::containers(&s.instance).await.is_empty());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn listed_versions_are_what_the_container_reports() {
    let s = Service::start(|_| {}).await;
    let listed = profiles(&s).await;
    assert_eq!(listed["default"], "minimal");
    let data = profile(&listed, "data");
    assert_eq!(data["available"], true, "{data}");
    assert_eq!(data["languages"], json!(["python", "bash"]));
    let out = run(
        &s,
        "data",
        "import json, platform, importlib.metadata as md\n\
         names = ['numpy', 'pandas', 'scipy', 'matplotlib', 'scikit-learn', 'statsmodels', 'sympy',\n\
                  'networkx', 'Pillow', 'requests', 'beautifulsoup4', 'lxml', 'openpyxl', 'PyYAML', 'tabulate']\n\
         print(json.dumps({'python': platform.python_version(), 'packages': {n: md.version(n) for n in names}}))",
    )
    .await;
    let seen: Value = serde_json::from_str(out["stdout"].as_str().expect("stdout")).expect("json");
    assert_eq!(data["python_version"], seen["python"]);
    assert_eq!(data["packages"], seen["packages"]);
    let minimal = profile(&listed, "minimal");
    assert!(minimal["python_version"].is_string(), "{minimal}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn each_profile_keeps_and_refills_its_own_warm_pool() {
    let s = Service::start(|c| {
        c.sandbox.pool.size = 0;
        c.sandbox.profiles = vec![ProfileConfig {
            pool_size: Some(1),
            languages: vec![scriptgate::domain::script::Language::Python],
            ..scriptgate::sandbox::profiles::builtin_data()
        }];
    })
    .await;
    s.wait_profile_pool("data", 1).await;
    assert_eq!(profile(&profiles(&s).await, "minimal")["pool_ready"], 0);
    let first = run(&s, "data", "import sys; print('pandas' in sys.modules)").await;
    assert_eq!(first["warm"], true, "{first}");
    // Imported before the script arrived.
    assert_eq!(first["stdout"], "True\n", "{first}");
    s.wait_profile_pool("data", 1).await;
    let second = run(&s, "data", "print(2)").await;
    assert_eq!(second["warm"], true, "{second}");
    assert_ne!(first["execution_id"], second["execution_id"]);
    // Minimal still runs cold (its pool is off), in its own image.
    let cold = run(&s, "minimal", "print(3)").await;
    assert_eq!(cold["warm"], false);
    assert_ne!(cold["image_digest"], second["image_digest"]);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_data_profile_keeps_the_sandbox_contract() {
    let s = Service::start(|_| {}).await;
    let out = run(
        &s,
        "data",
        r#"
import os, socket, json
status = {l.split(":")[0]: l.split()[1] for l in open("/proc/self/status") if ":" in l and len(l.split()) > 1}
def attempt(f):
    try:
        f(); return "ok"
    except Exception as e:
        return type(e).__name__
print(json.dumps({
    "uid": os.getuid(), "capeff": status["CapEff"], "nonewprivs": status["NoNewPrivs"],
    "seccomp": status["Seccomp"],
    "connect": attempt(lambda: socket.create_connection(("1.1.1.1", 53), timeout=2)),
    "write_root": attempt(lambda: open("/opt/x", "w")),
    "write_tmp": attempt(lambda: open("/tmp/x", "w").write("1")),
}))
"#,
    )
    .await;
    let v: Value = serde_json::from_str(out["stdout"].as_str().expect("stdout").trim())
        .unwrap_or_else(|e| panic!("{e}: {out}"));
    assert!(v["uid"].as_u64() >= Some(u64::from(scriptgate::sandbox::docker::spec::UID_BASE)));
    assert_eq!(v["capeff"], "0000000000000000");
    assert_eq!(v["nonewprivs"], "1");
    assert_eq!(v["seccomp"], "2", "a seccomp filter is installed");
    assert_ne!(v["connect"], "ok");
    assert_ne!(v["write_root"], "ok");
    assert_eq!(v["write_tmp"], "ok");
    // Limits apply as in every profile: a memory hog is killed.
    let (_, hog) = s
        .post(
            "/v1/execute",
            &json!({"script_content": "import numpy as np\nx = np.ones((1024, 1024, 1024), dtype=np.uint8)\nx[:] = 1",
                    "script_type": "python", "profile": "data", "timeout": 60}),
        )
        .await;
    assert_eq!(hog["error"]["type"], "resource_limit_exceeded", "{hog}");
    s.stop().await;
}

const AGENT: &str = "agent-token-profiles-5c1d";

#[tokio::test(flavor = "multi_thread")]
async fn mcp_returns_plots_as_image_content() {
    let s = Service::start(|c| {
        c.agent_tokens = vec![token("profiles-agent", AGENT)];
    })
    .await;
    let mut client = Command::new(harness::python());
    client
        .arg(harness::py_script("mcp_plot_client.py"))
        .args([&format!("{}/mcp", s.url), AGENT]);
    let out = harness::run_ok(client).await;
    assert!(out.trim_end().ends_with("OK"), "{out}");
    s.stop().await;
}
