//! Network egress through the whole service on the real engine: runs that ask for network access
//! reach exactly the names their request and the policy allow, through the in-process proxy and
//! the supervisor's forwarder, while their container keeps `network: none`.
//!
//! The upstreams are containers of the base image the test starts on an internal network of its
//! own (`upstream.py`); the proxy maps `allowed.test` and friends to them through `egress.hosts`
//! and the deployment opens exactly their addresses (`egress.allow_private_ranges`), the way a
//! deployment opens its own mirrors. The `minimal` image has no curl (and no `requests`): the
//! clients here are Python's `urllib` and `http.client`, which read `HTTP_PROXY` like curl and pip
//! do; `egress_work` drives the `data` image's `requests` and curl.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::api::{audit_tail, first_held, post_in_background, stored};
use crate::harness::Service;

const UPSTREAM: &str = include_str!("egress_service/upstream.py");

/// Upstream containers on a network of their own; removed on drop.
pub(crate) struct Upstreams {
    pub(crate) network: String,
    containers: Vec<String>,
    /// Address of each upstream by name.
    ips: BTreeMap<&'static str, String>,
    pub(crate) gateway: String,
}

pub(crate) fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().expect("docker");
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl Upstreams {
    pub(crate) fn start(names: &[&'static str]) -> Upstreams {
        let network = format!(
            "sg-egress-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        docker(&["network", "create", "--internal", &network]);
        let mut up = Upstreams {
            gateway: docker(&[
                "network",
                "inspect",
                "-f",
                "{{(index .IPAM.Config 0).Gateway}}",
                &network,
            ]),
            network,
            containers: Vec::new(),
            ips: BTreeMap::new(),
        };
        for name in names {
            let id = docker(&[
                "run",
                "-d",
                "--network",
                &up.network,
                "--read-only",
                "--user",
                "65534:65534",
                "--label",
                "scriptgate.test=egress",
                "--entrypoint",
                "python3",
                "scriptgate-base:latest",
                "-c",
                UPSTREAM,
                name,
                "8080",
                "9090",
            ]);
            up.containers.push(id.clone());
            let ip = docker(&[
                "inspect",
                "-f",
                "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                &id,
            ]);
            up.ips.insert(name, ip);
        }
        for id in &up.containers {
            wait_ready(id);
        }
        up
    }

    pub(crate) fn ip(&self, name: &str) -> &str {
        &self.ips[name]
    }

    /// What upstream `name` counted (from the host, which reaches the internal network).
    pub(crate) async fn stats(&self, name: &str) -> Value {
        reqwest::get(format!("http://{}:8080/stats", self.ip(name)))
            .await
            .expect("stats")
            .json()
            .await
            .expect("stats json")
    }
}

pub(crate) fn wait_ready(id: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !docker(&["logs", id]).contains("ready") {
        assert!(Instant::now() < deadline, "upstream {id} did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Drop for Upstreams {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rm", "-f"])
            .args(&self.containers)
            .output();
        let _ = Command::new("docker")
            .args(["network", "rm", &self.network])
            .output();
    }
}

/// The deployment default policy with network rules for the test names: `egress-test`.
fn test_policy() -> String {
    let default = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/default.yml"),
    )
    .expect("default policy");
    let rules = r#"  - name: test-upstreams
    domains: [allowed.test, denied.test, "*.wild.test", private.test, metadata.test, host.test,
              loopback.test, tls.test]
    ports: [8000, 8080, 8443, 9090]
    decision: allow
  - name: held
    domains: [approve.test]
    ports: [8080]
    decision: approve
  - name: no-network"#;
    default
        .replace("name: default\n", "name: egress-test\n")
        .replace("  - name: no-network", rules)
}

pub(crate) async fn service(
    up: &Upstreams,
    tweak: impl FnOnce(&mut scriptgate::config::Config) + Send + 'static,
) -> Service {
    let allowed = up.ip("allowed");
    let wild = up.ips.get("wild").map_or(allowed, String::as_str);
    let hosts: BTreeMap<String, Vec<String>> = [
        ("allowed.test", allowed),
        ("denied.test", allowed),
        ("approve.test", allowed),
        ("api.wild.test", wild),
        ("wild.test", wild),
        ("blocked.wild.test", wild),
        ("private.test", "10.1.2.3"),
        ("metadata.test", "169.254.169.254"),
        ("host.test", &up.gateway),
        ("loopback.test", "127.0.0.1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), vec![v.to_string()]))
    .collect();
    let open: Vec<String> = up.ips.values().map(|ip| format!("{ip}/32")).collect();
    Service::setup()
        .policy("egress-test", &test_policy())
        .config(move |c| {
            // The deployment default grants network to runs that ask for it; it is not enforced
            // on every run, whatever the suite's `enforce_default` (it would give every run
            // network, and these tests need runs without).
            c.policy.default = "egress-test".into();
            c.policy.enforce_default = false;
            c.sandbox.enforcement_ready = true;
            c.egress.hosts = hosts;
            c.egress.allow_private_ranges = open;
            c.egress.limits.max_network_mb = 1;
        })
        .config(tweak)
        .start()
        .await
}

async fn run(s: &Service, script: &str, extra: Value) -> Value {
    let mut body = json!({"script_content": script, "script_type": "python", "timeout": 60});
    for (k, v) in extra.as_object().expect("object") {
        body[k] = v.clone();
    }
    let (status, result) = s.post("/v1/execute", &body).await;
    assert_eq!(status, 200, "{result}");
    result
}

pub(crate) fn ops<'a>(result: &'a Value, kind: &str) -> Vec<&'a Value> {
    result["network_operations"]
        .as_array()
        .unwrap_or_else(|| panic!("no network_operations: {result}"))
        .iter()
        .filter(|e| e["type"] == kind)
        .collect()
}

pub(crate) fn connect<'a>(result: &'a Value, domain: &str, port: u64) -> &'a Value {
    ops(result, "net_connect")
        .into_iter()
        .find(|e| e["domain"] == domain && e["port"] == port)
        .unwrap_or_else(|| panic!("no net_connect to {domain}:{port}: {result}"))
}

/// Every client the run uses, each printing one line `name result`.
const CLIENTS: &str = r#"
import http.client, socket, urllib.error, urllib.request

def get(url):
    try:
        with urllib.request.urlopen(url, timeout=20) as r:
            return f"{r.status} {r.read().decode().strip()}"
    except urllib.error.HTTPError as e:
        return str(e.code)
    except OSError as e:
        return f"error {e}"

def tunnel(host, port):
    c = http.client.HTTPConnection("127.0.0.1", 3128, timeout=20)
    try:
        c.set_tunnel(host, port)
        c.request("GET", "/hello")
        r = c.getresponse()
        return f"{r.status} {r.read().decode().strip()}"
    except OSError as e:
        return f"refused {e}"

def raw(ip, port):
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect((ip, port))
        return "connected"
    except OSError as e:
        return f"errno {e.errno}"

print("allowed", get("http://allowed.test:8080/hello"))
print("connect", tunnel("allowed.test", 8080))
print("denied", get("http://denied.test:8080/hello"))
print("wildcard", get("http://api.wild.test:8080/hello"))
print("apex", get("http://wild.test:8080/hello"))
print("blocked", get("http://blocked.wild.test:8080/hello"))
print("port", get("http://allowed.test:9090/hello"))
print("private", get("http://private.test:8080/hello"))
print("metadata", get("http://metadata.test:8080/hello"))
print("host", get("http://host.test:8080/hello"))
print("raw", raw("UPSTREAM", 8080))
print("interfaces", sorted(n for _, n in socket.if_nameindex()))
"#;

pub(crate) fn lines(result: &Value) -> BTreeMap<String, String> {
    result["stdout"]
        .as_str()
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_reaches_exactly_the_names_it_was_granted_and_everything_is_reported() {
    let up = Upstreams::start(&["allowed", "wild"]);
    let s = service(&up, |_| {}).await;
    let before = up.stats("allowed").await;
    let script = CLIENTS.replace("UPSTREAM", up.ip("allowed"));
    let grant = json!({"network": {
        "allowed_domains": ["allowed.test", "denied.test", "*.wild.test", "private.test",
                            "metadata.test", "host.test"],
        "blocked_domains": ["denied.test", "blocked.wild.test"],
        "allowed_ports": [8080],
    }});
    let result = run(&s, &script, grant).await;
    let out = lines(&result);
    assert_eq!(
        out["allowed"], "200 hello from allowed port 8080",
        "{result}"
    );
    assert_eq!(
        out["connect"], "200 hello from allowed port 8080",
        "{result}"
    );
    assert_eq!(out["wildcard"], "200 hello from wild port 8080", "{result}");
    // Denied by the request's own block list, outside the wildcard, on a port it did not ask
    // for, and names that resolve to private, metadata and host addresses: the proxy's 403.
    for key in [
        "denied", "apex", "blocked", "port", "private", "metadata", "host",
    ] {
        assert_eq!(out[key], "403", "{key}: {result}");
    }
    // The container has loopback only: a raw connect has no route.
    assert_eq!(out["raw"], "errno 101", "{result}");
    assert_eq!(out["interfaces"], "['lo']", "{result}");

    let denied = connect(&result, "denied.test", 8080);
    assert_eq!(denied["decision"], "deny", "{denied}");
    assert_eq!(denied["rule"], "blocked_domains", "{denied}");
    assert!(
        denied["remote"].is_null(),
        "no lookup, no connection: {denied}"
    );
    let ok = connect(&result, "allowed.test", 8080);
    assert_eq!(ok["decision"], "allow", "{ok}");
    assert_eq!(ok["remote"], up.ip("allowed"), "{ok}");
    for key in ["bytes_sent", "bytes_received", "duration_ms"] {
        assert!(ok[key].is_u64(), "{key}: {ok}");
    }
    for name in ["private.test", "metadata.test", "host.test"] {
        let c = connect(&result, name, 8080);
        assert_eq!(c["decision"], "deny", "{c}");
        assert_eq!(c["cause"], "denied_range", "{c}");
        let q = ops(&result, "dns_query")
            .into_iter()
            .find(|q| q["domain"] == name)
            .unwrap_or_else(|| panic!("no dns_query for {name}: {result}"));
        assert_eq!(q["decision"], "deny", "{q}");
        assert!(q["answers"].is_array(), "{q}");
    }
    assert!(
        !ops(&result, "dns_query")
            .iter()
            .any(|q| q["domain"] == "denied.test" || q["domain"] == "wild.test"),
        "names no rule allows are never looked up: {result}"
    );

    // The totals match what the upstreams saw on their sockets.
    let after = up.stats("allowed").await;
    let wild = up.stats("wild").await;
    let summary = &result["network_summary"];
    let seen = |k: &str| {
        after[k].as_u64().unwrap_or(0) - before[k].as_u64().unwrap_or(0)
            + wild[k].as_u64().unwrap_or(0)
    };
    assert_eq!(
        summary["connections"],
        seen("connections"),
        "{summary} vs {after} {wild}"
    );
    assert_eq!(summary["connections"], 3, "{summary}");
    assert_eq!(summary["unique_destinations"], 2, "{summary}");
    assert_eq!(summary["blocked"], 7, "{summary}");
    let received = summary["bytes_received"].as_u64().expect("bytes");
    let body_bytes = seen("bytes_out");
    assert!(
        received >= body_bytes && received <= body_bytes + 3 * 1024,
        "received {received}, the upstreams sent {body_bytes} bytes of body"
    );
    assert!(
        summary["bytes_sent"].as_u64().expect("bytes") >= seen("bytes_in"),
        "{summary} vs {after}"
    );

    // The record keeps the same, and the audit chain has every denial.
    let id = result["execution_id"].as_str().expect("id").to_string();
    let stored = stored(&s, &id).await;
    assert_eq!(stored["network_operations"], result["network_operations"]);
    assert_eq!(stored["network_summary"], result["network_summary"]);
    let data_dir = s.data_dir.clone();
    s.stop().await;
    let audit = audit_tail(&data_dir);
    let network: Vec<&Value> = audit
        .iter()
        .filter(|r| r["event"] == "network_decision" && r["execution_id"] == id.as_str())
        .collect();
    assert_eq!(network.len(), 7, "one entry per denial: {network:?}");
    assert!(network.iter().all(|r| r["outcome"]["decision"] == "deny"));
}

const DOWNLOAD: &str = r#"
import urllib.request
try:
    with urllib.request.urlopen("http://allowed.test:8080/bytes/4000000", timeout=30) as r:
        print("read", len(r.read()))
except Exception as e:
    print("cut", type(e).__name__)
"#;

const NO_NETWORK: &str = r#"
import socket, urllib.error, urllib.request
print("interfaces", sorted(n for _, n in socket.if_nameindex()))
try:
    urllib.request.urlopen("http://allowed.test:8080/hello", timeout=10)
    print("proxy reached")
except urllib.error.HTTPError as e:
    print("proxy", e.code)
s = socket.socket()
s.settimeout(5)
try:
    s.connect(("UPSTREAM", 8080))
except OSError as e:
    print("raw", e.errno)
"#;

#[tokio::test(flavor = "multi_thread")]
async fn limits_cut_a_download_and_a_run_without_network_sees_only_loopback() {
    let up = Upstreams::start(&["allowed"]);
    let s = service(&up, |_| {}).await;
    let grant = json!({"network": {"allowed_domains": ["allowed.test"], "allowed_ports": [8080]}});
    let result = run(&s, DOWNLOAD, grant).await;
    assert!(
        result["stdout"]
            .as_str()
            .unwrap_or_default()
            .starts_with("cut"),
        "{result}"
    );
    let limit = ops(&result, "net_limit");
    assert_eq!(limit.len(), 1, "{result}");
    assert_eq!(limit[0]["limit"], "session_bytes", "{result}");
    let c = connect(&result, "allowed.test", 8080);
    assert_eq!(c["ended"], "limit", "{c}");
    let received = c["bytes_received"].as_u64().expect("bytes");
    assert!(received <= (1 << 20) + 65536, "cut near 1 MiB: {c}");

    let result = run(
        &s,
        &NO_NETWORK.replace("UPSTREAM", up.ip("allowed")),
        json!({}),
    )
    .await;
    let out = lines(&result);
    assert_eq!(out["interfaces"], "['lo']", "{result}");
    assert_eq!(
        out["proxy"], "502",
        "no socket behind the forwarder: {result}"
    );
    assert_eq!(out["raw"], "101", "{result}");
    assert!(result["network_operations"].is_null(), "{result}");
    assert!(result["network_summary"].is_null(), "{result}");
    s.stop().await;
}

const APPROVE: &str = r#"
import urllib.request
with urllib.request.urlopen("http://approve.test:8080/hello", timeout=60) as r:
    print(r.status, r.read().decode().strip())
"#;

const ENFORCED: &str = r#"
import socket, urllib.request
with urllib.request.urlopen("http://allowed.test:8080/hello", timeout=20) as r:
    print("allowed", r.status)
s = socket.socket()
s.settimeout(5)
try:
    s.connect(("UPSTREAM", 8080))
except OSError as e:
    print("raw", e.errno)
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_policy_opts_a_run_in_blocks_raw_connects_and_holds_approve_rules_for_an_operator() {
    let up = Upstreams::start(&["allowed"]);
    let s = service(&up, |_| {}).await;
    // Under the policy alone (no `network` field): its named rules give the run the network, and
    // the supervisor blocks the raw connect before the kernel sees it.
    let script = ENFORCED.replace("UPSTREAM", up.ip("allowed"));
    let result = run(&s, &script, json!({"policy": "egress-test"})).await;
    let out = lines(&result);
    assert_eq!(out["allowed"], "200", "{result}");
    assert_eq!(out["raw"], "13", "{result}");
    let blocked = result["events"]["blocked_operations"]
        .as_array()
        .expect("blocked");
    assert!(
        blocked.iter().any(|b| b["type"] == "net_connect"
            && b["target"]
                .as_str()
                .is_some_and(|t| t.contains(up.ip("allowed")))),
        "{result}"
    );
    assert_eq!(
        connect(&result, "allowed.test", 8080)["rule"],
        "test-upstreams"
    );

    // An `approve` rule holds the connection until an operator answers in /v1/approvals.
    let body = json!({"script_content": APPROVE, "script_type": "python", "timeout": 90,
                      "network": {"allowed_domains": ["approve.test"], "allowed_ports": [8080]}});
    let pending = post_in_background(&s, "/v1/execute", body);
    let held = first_held(&s, "operations").await;
    assert_eq!(held["operation"], "net_connect", "{held}");
    assert_eq!(held["target"], "approve.test:8080", "{held}");
    assert_eq!(held["rule"], "held", "{held}");
    assert!(
        !pending.is_finished(),
        "the connection waits for the operator"
    );
    // The run's live stream carries the proxy's events as kind `network`.
    let execution = held["execution_id"].as_str().expect("execution id");
    let stream = s
        .client
        .get(format!(
            "{}/v1/executions/{execution}/events?types=network",
            s.url
        ))
        .send()
        .await
        .expect("events");
    assert_eq!(stream.status(), 200);
    let id = held["approval_id"].as_str().expect("approval id");
    let (status, after) = s
        .post(
            &format!("/v1/approvals/{id}"),
            &json!({"decision": "approve", "reason": "test"}),
        )
        .await;
    assert_eq!(status, 200, "{after}");
    let result = tokio::time::timeout(Duration::from_secs(90), pending)
        .await
        .expect("the run ends")
        .expect("task");
    assert_eq!(
        result["stdout"], "200 hello from allowed port 8080\n",
        "{result}"
    );
    let streamed = tokio::time::timeout(Duration::from_secs(30), stream.text())
        .await
        .expect("the stream ends with the run")
        .expect("stream body");
    assert!(
        streamed.contains("event: network") && streamed.contains("\"type\":\"net_connect\""),
        "{streamed}"
    );
    assert!(
        streamed.contains("\"domain\":\"approve.test\""),
        "{streamed}"
    );
    let c = connect(&result, "approve.test", 8080);
    assert_eq!(c["approval"]["approved"], true, "{c}");
    let exec = result["execution_id"].as_str().expect("id").to_string();
    let data_dir = s.data_dir.clone();
    s.stop().await;
    let audit = audit_tail(&data_dir);
    assert!(
        audit.iter().any(|r| r["event"] == "operation_decision"
            && r["execution_id"] == exec.as_str()
            && r["outcome"]["operation"]["target"] == "approve.test:8080"),
        "the operator's answer is audited"
    );
    assert!(
        audit.iter().any(|r| r["event"] == "network_decision"
            && r["execution_id"] == exec.as_str()
            && r["outcome"]["approval"]["approved"] == true),
        "the approved connection is audited"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn warm_runs_get_network_and_a_dead_proxy_fails_the_run_at_once() {
    let up = Upstreams::start(&["allowed"]);
    let s = service(&up, |c| c.sandbox.pool.size = 1).await;
    let grant = json!({"network": {"allowed_domains": ["allowed.test"], "allowed_ports": [8080]}});
    // Every profile and language has its warm container (Python's among them).
    s.wait_pool(4).await;
    let script = "import urllib.request\nprint(urllib.request.urlopen('http://allowed.test:8080/hello', timeout=20).status)";
    let result = run(&s, script, grant.clone()).await;
    assert_eq!(result["stdout"], "200\n", "{result}");
    assert_eq!(
        result["warm"], true,
        "a run with network stays warm: {result}"
    );

    // The proxy's directories vanish under it: the next run fails fast with a typed error.
    s.wait_pool(4).await;
    let egress = s.data_dir.join("egress");
    for entry in std::fs::read_dir(&egress).expect("egress dir") {
        std::fs::remove_dir_all(entry.expect("entry").path()).expect("remove");
    }
    let started = Instant::now();
    let result = run(&s, script, grant).await;
    assert_eq!(result["status"], "failed", "{result}");
    assert_eq!(result["error"]["type"], "network_unavailable", "{result}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "no hang: {result}"
    );
    s.stop().await;
    let left = std::fs::read_dir(&egress).map(|d| d.count()).unwrap_or(0);
    assert_eq!(left, 0, "shutdown removes every socket directory");
}
