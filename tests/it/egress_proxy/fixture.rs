//! One egress proxy with one sandbox, the in-container forwarder in front of it (on loopback
//! here), two local upstreams, and the real clients the tests drive it with.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use scriptgate::sandbox::egress::{
    ApprovalAnswer, ApprovalRequest, DnsQuery, EgressPolicy, EgressProxy, EgressSettings, Grant,
    NetConnect, NetLimits, NetworkApprover, NetworkEvent, NetworkReport, SandboxEgress,
    SandboxOptions,
};
use scriptgate_supervisor::forward::Forwarder;

use super::upstream::{self, Upstream};

/// Names the tests use and where the proxy's static `hosts` map points them.
const HOSTS: &[(&str, &str)] = &[
    ("allowed.test", "127.0.0.1"),
    ("denied.test", "127.0.0.1"),
    ("wild.test", "127.0.0.1"),
    ("api.wild.test", "127.0.0.1"),
    ("secret.wild.test", "127.0.0.1"),
    ("approve.test", "127.0.0.1"),
    ("private.test", "10.0.0.1"),
    ("metadata.test", "169.254.169.254"),
    ("mapped.test", "::ffff:10.1.2.3"),
    ("nat64.test", "64:ff9b::7f00:1"),
];

/// How a test wants its proxy.
pub struct Setup {
    /// `egress.allow_private_ranges = ["127.0.0.0/8"]`, the explicit setting that lets the
    /// proxy reach the local upstreams.
    pub allow_loopback: bool,
    /// `None`: the default grant ([`Env::grant`]).
    pub policy: Option<Arc<dyn EgressPolicy>>,
    pub limits: NetLimits,
    pub approver: Option<Arc<dyn NetworkApprover>>,
    pub approval_timeout_secs: u64,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            allow_loopback: true,
            policy: None,
            limits: EgressSettings::default().default_limits(),
            approver: None,
            approval_timeout_secs: 30,
        }
    }
}

pub struct Env {
    pub proxy: EgressProxy,
    pub egress: SandboxEgress,
    /// The forwarder's address: what `HTTP_PROXY` points at in a container.
    pub forward: SocketAddr,
    /// The upstream every allowed name points at (its port is the allowed one).
    pub up: Upstream,
    /// A second upstream on a port no rule allows.
    pub other: Upstream,
    _dir: tempfile::TempDir,
}

impl Env {
    /// The grant every test starts from: the upstream's port only.
    pub fn grant(port: u16) -> Grant {
        Grant {
            allowed_domains: [
                "allowed.test",
                "*.wild.test",
                "private.test",
                "metadata.test",
                "mapped.test",
                "nat64.test",
            ]
            .map(String::from)
            .to_vec(),
            blocked_domains: vec!["secret.wild.test".into()],
            allowed_ports: vec![port],
            cidrs: vec![],
        }
    }

    pub fn settings(setup: &Setup) -> EgressSettings {
        let hosts: BTreeMap<String, Vec<String>> = HOSTS
            .iter()
            .map(|(name, ip)| (name.to_string(), vec![ip.to_string()]))
            .collect();
        EgressSettings {
            allow_private_ranges: if setup.allow_loopback {
                vec!["127.0.0.0/8".into()]
            } else {
                vec![]
            },
            approval_timeout_secs: setup.approval_timeout_secs,
            hosts,
            ..EgressSettings::default()
        }
    }

    pub async fn start(setup: Setup) -> Env {
        let up = upstream::start().await;
        let other = upstream::start().await;
        let dir = tempfile::tempdir().expect("socket dir");
        let proxy = EgressProxy::start(&Env::settings(&setup), dir.path())
            .await
            .expect("proxy starts");
        let policy = setup.policy.unwrap_or_else(|| {
            Arc::new(
                Env::grant(up.addr.port())
                    .compile()
                    .expect("grant compiles"),
            )
        });
        let egress = proxy
            .open(SandboxOptions {
                id: "sandbox-1".into(),
                policy,
                limits: setup.limits,
                approver: setup.approver,
            })
            .await
            .expect("sandbox egress opens");
        let forwarder = Forwarder::bind(0, egress.socket_path()).expect("forwarder binds");
        let forward = forwarder.local_addrs().expect("forwarder address")[0];
        forwarder.spawn().expect("forwarder runs");
        Env {
            proxy,
            egress,
            forward,
            up,
            other,
            _dir: dir,
        }
    }

    pub fn proxy_url(&self) -> String {
        format!("http://{}", self.forward)
    }

    /// `http://host:<allowed port>/path`.
    pub fn url(&self, host: &str, path: &str) -> String {
        format!("http://{host}:{}{path}", self.up.addr.port())
    }

    /// curl through the forwarder (`-x`), with `extra` arguments before the URL.
    pub async fn curl(&self, extra: &[&str], url: &str) -> Curl {
        let mut args: Vec<String> = vec!["-x".into(), self.proxy_url()];
        args.extend(extra.iter().map(|s| s.to_string()));
        args.push(url.into());
        curl(&args).await
    }
}

/// What curl printed: the body (stdout), `%{http_code}` is appended after a newline by
/// [`curl`], and the exit code.
#[derive(Debug)]
pub struct Curl {
    pub code: Option<i32>,
    pub status: u16,
    pub body: String,
    pub stderr: String,
}

/// Runs curl with `args` (no proxy from the environment), bounded in time.
pub async fn curl(args: &[String]) -> Curl {
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--max-time", "30", "-w", "\n%{http_code}"])
        .args(args)
        .env_remove("http_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("https_proxy")
        .env_remove("HTTPS_PROXY")
        .env_remove("all_proxy")
        .env_remove("ALL_PROXY")
        .output()
        .await
        .expect("curl runs (install curl for these tests)");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
    Curl {
        code: out.status.code(),
        status: status.trim().parse().unwrap_or(0),
        body: body.to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The test virtualenv's Python (`scripts/test-deps.sh`), else `python3` from the PATH.
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("SCRIPTGATE_TEST_PYTHON") {
        return p.into();
    }
    let venv = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/py-env/bin/python");
    if venv.exists() {
        venv
    } else {
        PathBuf::from("python3")
    }
}

/// Runs `code` with `env` set (and no other proxy variables).
pub async fn run_python(code: &str, env: &[(&str, String)]) -> Output {
    let mut command = tokio::process::Command::new(python());
    command.arg("-c").arg(code);
    for key in [
        "http_proxy",
        "HTTP_PROXY",
        "https_proxy",
        "HTTPS_PROXY",
        "all_proxy",
        "ALL_PROXY",
    ] {
        command.env_remove(key);
    }
    command.envs(env.iter().map(|(k, v)| (k, v)));
    tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("python finishes")
        .expect("python runs")
}

pub fn connects(report: &NetworkReport) -> Vec<&NetConnect> {
    report
        .network_operations
        .iter()
        .filter_map(|e| match e {
            NetworkEvent::NetConnect(c) => Some(c),
            _ => None,
        })
        .collect()
}

pub fn queries(report: &NetworkReport) -> Vec<&DnsQuery> {
    report
        .network_operations
        .iter()
        .filter_map(|e| match e {
            NetworkEvent::DnsQuery(q) => Some(q),
            _ => None,
        })
        .collect()
}

/// The net_connect events for `domain`.
pub fn connects_to<'a>(report: &'a NetworkReport, domain: &str) -> Vec<&'a NetConnect> {
    connects(report)
        .into_iter()
        .filter(|c| c.domain == domain)
        .collect()
}

/// Waits (bounded) until `done` holds for the sandbox's report: connections are recorded when
/// they end, a moment after the client has its answer.
pub async fn settled(
    egress: &SandboxEgress,
    done: impl Fn(&NetworkReport) -> bool,
) -> NetworkReport {
    for _ in 0..200 {
        let report = egress.report();
        if done(&report) {
            return report;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    egress.report()
}

/// An operator stand-in: answers every request with `answer` (or never, with `None`) and keeps
/// what it was asked.
#[derive(Debug)]
pub struct Operator {
    pub answer: Option<ApprovalAnswer>,
    pub asked: Mutex<Vec<ApprovalRequest>>,
}

impl Operator {
    pub fn new(answer: Option<ApprovalAnswer>) -> Arc<Operator> {
        Arc::new(Operator {
            answer,
            asked: Mutex::new(Vec::new()),
        })
    }
}

impl NetworkApprover for Operator {
    fn decide(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalAnswer> {
        self.asked.lock().expect("lock").push(request);
        match self.answer.clone() {
            Some(answer) => Box::pin(async move { answer }),
            None => Box::pin(futures::future::pending()),
        }
    }
}
