//! The egress proxy: the only way out of a sandbox that opted in to network access, letting it
//! reach exactly the destinations its rules name and recording every lookup and connection.
//!
//! # How a sandbox reaches it
//! Each sandbox gets its own Unix socket in a directory of its own under `egress.socket_dir`
//! ([`SandboxEgress::mount_source`]). That directory is bind-mounted read-only at
//! [`CONTAINER_SOCKET_DIR`] into a container that keeps `network: none`; inside, the supervisor's
//! forwarder (`scriptgate_supervisor::forward`) listens on `127.0.0.1:3128` and splices each TCP
//! connection to the socket, and [`proxy_env`] points `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY`
//! at it. The container has no other interface than loopback, so anything that ignores the proxy
//! fails closed, and the socket a connection arrives on says which sandbox it is: no address
//! bookkeeping, no host firewall rules, no Docker networks.
//!
//! # What the proxy does with a connection
//! One socket speaks HTTP/1.1 forward proxying (absolute-form requests, keep-alive, Host checks),
//! `CONNECT` tunnels (TLS passes through by host name, never intercepted) and SOCKS5 with remote
//! name resolution (`socks5h`). For every upstream connection it:
//! 1. normalises the host the client asked for and applies the limits (rate, concurrency, bytes);
//! 2. asks the sandbox's [`EgressPolicy`] whether the name may be looked up at all, so an unlisted
//!    name is never resolved (no DNS exfiltration);
//! 3. resolves the name itself ([`EgressSettings::hosts`], then the system resolver or
//!    `egress.dns_servers`), recording a `dns_query` event;
//! 4. refuses every address in a denied range ([`ranges`]) and asks the policy again per
//!    address (CIDR rules), holding the connection for an operator under `approve`;
//! 5. connects to exactly an address it checked (no second lookup, no cached verdict: no DNS
//!    rebinding), and records a `net_connect` event with the bytes both ways when it ends.
//!
//! # API for the sandbox and executions layers
//! ```text
//! EgressProxy::start(&settings, socket_dir)          once, at service start
//! proxy.set_engine_networks(&nets)                    the engine's networks, denied
//! proxy.open(SandboxOptions { id, policy, limits, approver }) -> SandboxEgress   per sandbox
//!   egress.check().await?                             before the container starts: fail fast
//!   egress.bind() / proxy_env()                       the read-only mount and the environment
//!   egress.subscribe()                                live events (SSE)
//!   egress.begin_command(limit) / command_report()    per command of a session
//!   egress.close().await -> NetworkReport             after the run: final list and summary
//! proxy.shutdown().await                              stops everything, removes the sockets
//! ```

pub(crate) mod bound;
mod config;
mod decide;
mod events;
mod grant;
mod http;
mod limits;
mod names;
pub mod ranges;
mod resolve;
mod rules;
mod server;
mod socks;
mod tunnel;

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde::Serialize;

pub use config::{EgressLimits, EgressSettings};
pub use events::{
    ApprovalRecord, Cause, Decision, DnsQuery, Ended, EventMeta, NetConnect, NetLimit,
    NetworkEvent, NetworkReport, NetworkSummary, Protocol,
};
pub use grant::{AllOf, DEFAULT_PORTS, Grant};
pub use limits::{LimitKind, NetLimits};
pub use names::{DomainPattern, Host, NameError, normalize_name};
pub use resolve::ResolveError;
pub use rules::{
    EgressPolicy, NameCheck, NetworkRule, NetworkRuleSpec, RuleDecision, RuleError, RuleSet,
    Verdict,
};
pub use scriptgate_supervisor::forward::{
    CONTAINER_SOCKET_DIR, HEALTH_PATH, PROXY_PORT, SOCKET_NAME,
};
pub use server::{EgressDir, EgressProxy, SandboxEgress};

/// The environment a container needs to use the proxy through the in-container forwarder:
/// `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` (`socks5h`, so names are resolved by the proxy) and
/// `NO_PROXY` for the container's own loopback, each also in lower case (curl reads only
/// `http_proxy` in lower case).
pub fn proxy_env() -> Vec<(String, String)> {
    let http = format!("http://127.0.0.1:{PROXY_PORT}");
    let socks = format!("socks5h://127.0.0.1:{PROXY_PORT}");
    let no_proxy = "localhost,127.0.0.1,::1".to_string();
    let mut env = Vec::new();
    for (key, value) in [
        ("HTTP_PROXY", http.clone()),
        ("HTTPS_PROXY", http),
        ("ALL_PROXY", socks),
        ("NO_PROXY", no_proxy),
    ] {
        env.push((key.to_lowercase(), value.clone()));
        env.push((key.to_string(), value));
    }
    env
}

/// What the sandbox layer gives the proxy for one sandbox.
#[derive(Debug, Clone)]
pub struct SandboxOptions {
    /// The sandbox's id (an execution or session id); named in every event.
    pub id: String,
    pub policy: Arc<dyn EgressPolicy>,
    pub limits: NetLimits,
    /// Who decides `approve` rules; without one they deny.
    pub approver: Option<Arc<dyn NetworkApprover>>,
}

/// A connection held under an `approve` rule, as the operator sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApprovalRequest {
    pub sandbox: Arc<str>,
    pub domain: String,
    pub port: u16,
    /// The checked addresses the proxy would connect to.
    pub addresses: Vec<IpAddr>,
    pub protocol: Protocol,
    pub rule: Option<String>,
    /// The rule's message, `{domain}` filled in.
    pub message: Option<String>,
}

/// The operator's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalAnswer {
    Approved {
        by: Option<String>,
    },
    Denied {
        by: Option<String>,
        reason: Option<String>,
    },
}

/// Decides connections held under `approve` rules (the approvals flow implements it). The proxy
/// waits at most `egress.approval_timeout_secs`, then denies; the future may be dropped then.
pub trait NetworkApprover: Send + Sync + std::fmt::Debug {
    fn decide(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalAnswer>;
}

/// Errors of the egress proxy's set-up and health (connection-level refusals are events).
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error("egress.{key}: `{value}` {reason}")]
    Setting {
        key: &'static str,
        value: String,
        reason: String,
    },
    #[error(transparent)]
    Rule(#[from] RuleError),
    #[error(transparent)]
    Resolver(#[from] ResolveError),
    #[error("egress proxy: cannot {what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "egress socket path {} is longer than a Unix socket address allows ({max} bytes); \
         set a shorter egress.socket_dir",
        path.display()
    )]
    SocketPathTooLong { path: PathBuf, max: usize },
    #[error("egress for sandbox {0} is already open")]
    AlreadyOpen(String),
    #[error("the egress proxy is stopped")]
    Stopped,
    /// The sandbox's proxy did not answer its health check: the run must not start.
    #[error("the egress proxy of sandbox {sandbox} is unavailable: {reason}")]
    Unavailable { sandbox: String, reason: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_points_every_client_at_the_forwarder() {
        let env: std::collections::HashMap<_, _> = proxy_env().into_iter().collect();
        assert_eq!(env["HTTP_PROXY"], "http://127.0.0.1:3128");
        assert_eq!(env["https_proxy"], "http://127.0.0.1:3128");
        assert_eq!(env["ALL_PROXY"], "socks5h://127.0.0.1:3128");
        assert!(env["no_proxy"].contains("127.0.0.1"));
    }
}
