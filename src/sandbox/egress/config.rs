//! The `[egress]` section of the configuration, and its compiled form the proxy runs with.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::EgressError;
use super::limits::NetLimits;
use super::names::normalize_name;
use super::ranges::DeniedRanges;

const MB: u64 = 1 << 20;

/// The egress proxy's deployment settings. Nothing here can be changed by a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EgressSettings {
    /// Run the egress proxy in `scriptgate serve`. Off: no run gets network access (requests
    /// that ask for it fail with `network_unavailable`) and containers get no egress directory.
    pub enabled: bool,
    /// The sandbox runtime (`sandbox.runtime`, when not runc) was set up to let containers
    /// connect to host Unix sockets (gVisor: `runsc --host-uds=open`). Without it, runs under
    /// such a runtime are refused network access.
    pub runtime_allows_host_sockets: bool,
    /// Directory of the per-sandbox sockets (default: `egress/` in the data directory). Its path
    /// plus 30 characters must fit a Unix socket address (107 bytes).
    pub socket_dir: Option<PathBuf>,
    /// Denied ranges the deployment opens anyway (CIDRs), e.g. the network of its own upstream
    /// mirrors. Cloud metadata addresses stay denied.
    pub allow_private_ranges: Vec<String>,
    /// Ranges denied on top of the built-in ones.
    pub denied_ranges: Vec<String>,
    /// DNS servers (`ip` or `ip:port`) the proxy asks; empty: the system resolver.
    pub dns_servers: Vec<String>,
    pub dns_timeout_secs: u64,
    pub connect_timeout_secs: u64,
    /// How long a client may take to send a request head or a SOCKS handshake.
    pub handshake_timeout_secs: u64,
    /// How long a connection under an `approve` rule waits for an operator before it is denied.
    pub approval_timeout_secs: u64,
    /// How long the health check of a sandbox's socket may take before the proxy counts as dead.
    pub health_timeout_ms: u64,
    /// Events kept per sandbox; beyond it they are counted, not kept.
    pub max_events: usize,
    pub limits: EgressLimits,
    /// Static answers (`name = ["address", ...]`), consulted before any resolver.
    pub hosts: BTreeMap<String, Vec<String>>,
}

/// Default limits of each sandbox (a run may be given lower ones). 0 means no limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EgressLimits {
    /// MiB sent plus received over a sandbox's life (a session's or a one-shot run's).
    pub max_network_mb: u64,
    /// MiB sent plus received by one command of a session.
    pub max_command_network_mb: u64,
    pub connections_per_second: u32,
    pub max_concurrent_connections: u32,
}

impl Default for EgressLimits {
    fn default() -> Self {
        EgressLimits {
            max_network_mb: 1024,
            max_command_network_mb: 512,
            connections_per_second: 50,
            max_concurrent_connections: 32,
        }
    }
}

impl From<&EgressLimits> for NetLimits {
    fn from(l: &EgressLimits) -> NetLimits {
        NetLimits {
            session_bytes: l.max_network_mb.saturating_mul(MB),
            command_bytes: l.max_command_network_mb.saturating_mul(MB),
            connections_per_second: l.connections_per_second,
            max_concurrent: l.max_concurrent_connections,
        }
    }
}

impl Default for EgressSettings {
    fn default() -> Self {
        EgressSettings {
            enabled: true,
            runtime_allows_host_sockets: false,
            socket_dir: None,
            allow_private_ranges: Vec::new(),
            denied_ranges: Vec::new(),
            dns_servers: Vec::new(),
            dns_timeout_secs: 5,
            connect_timeout_secs: 10,
            handshake_timeout_secs: 30,
            approval_timeout_secs: 120,
            health_timeout_ms: 2000,
            max_events: 10_000,
            limits: EgressLimits::default(),
            hosts: BTreeMap::new(),
        }
    }
}

/// Timeouts the proxy applies.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub(crate) dns: Duration,
    pub(crate) connect: Duration,
    pub(crate) handshake: Duration,
    pub(crate) approval: Duration,
    pub(crate) health: Duration,
}

/// Settings checked and parsed.
#[derive(Debug, Clone)]
pub(crate) struct Compiled {
    pub(crate) ranges: DeniedRanges,
    pub(crate) hosts: HashMap<String, Vec<IpAddr>>,
    pub(crate) dns_servers: Vec<SocketAddr>,
    pub(crate) timeouts: Timeouts,
    pub(crate) max_events: usize,
}

fn setting(key: &'static str, value: &str, reason: impl Into<String>) -> EgressError {
    EgressError::Setting {
        key,
        value: value.to_string(),
        reason: reason.into(),
    }
}

fn parse_nets(key: &'static str, values: &[String]) -> Result<Vec<IpNet>, EgressError> {
    values
        .iter()
        .map(|v| match v.parse::<IpAddr>() {
            Ok(ip) => Ok(IpNet::from(ip.to_canonical())),
            Err(_) => v
                .parse::<IpNet>()
                .map_err(|e| setting(key, v, format!("is not an address range: {e}"))),
        })
        .collect()
}

fn parse_server(value: &str) -> Result<SocketAddr, EgressError> {
    if let Ok(addr) = value.parse::<SocketAddr>() {
        return Ok(addr);
    }
    value
        .parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, 53))
        .map_err(|_| setting("dns_servers", value, "is not an address or address:port"))
}

fn secs(key: &'static str, value: u64) -> Result<Duration, EgressError> {
    if value == 0 {
        return Err(setting(key, "0", "must be at least 1"));
    }
    Ok(Duration::from_secs(value))
}

impl EgressSettings {
    /// Where the sockets live for a service whose data directory is `data_dir`.
    pub fn socket_dir(&self, data_dir: &Path) -> PathBuf {
        self.socket_dir
            .clone()
            .unwrap_or_else(|| data_dir.join("egress"))
    }

    /// Each sandbox's limits unless its run asks for lower ones.
    pub fn default_limits(&self) -> NetLimits {
        NetLimits::from(&self.limits)
    }

    /// Checks every value (start-up calls this so a bad setting stops the service).
    pub fn check(&self) -> Result<(), EgressError> {
        self.compile().map(|_| ())
    }

    pub(crate) fn compile(&self) -> Result<Compiled, EgressError> {
        let allowed = parse_nets("allow_private_ranges", &self.allow_private_ranges)?;
        let denied = parse_nets("denied_ranges", &self.denied_ranges)?;
        let dns_servers = self
            .dns_servers
            .iter()
            .map(|s| parse_server(s))
            .collect::<Result<Vec<_>, _>>()?;
        let mut hosts = HashMap::new();
        for (name, addresses) in &self.hosts {
            let key = normalize_name(name).map_err(|e| setting("hosts", name, e.reason))?;
            let parsed = addresses
                .iter()
                .map(|a| {
                    a.parse::<IpAddr>()
                        .map_err(|_| setting("hosts", a, format!("(for {name}) is not an address")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            if parsed.is_empty() {
                return Err(setting("hosts", name, "has no address"));
            }
            hosts.insert(key, parsed);
        }
        if self.health_timeout_ms == 0 {
            return Err(setting("health_timeout_ms", "0", "must be at least 1"));
        }
        Ok(Compiled {
            ranges: DeniedRanges::new(&denied, &allowed),
            hosts,
            dns_servers,
            timeouts: Timeouts {
                dns: secs("dns_timeout_secs", self.dns_timeout_secs)?,
                connect: secs("connect_timeout_secs", self.connect_timeout_secs)?,
                handshake: secs("handshake_timeout_secs", self.handshake_timeout_secs)?,
                approval: secs("approval_timeout_secs", self.approval_timeout_secs)?,
                health: Duration::from_millis(self.health_timeout_ms),
            },
            max_events: self.max_events,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_compile() {
        let compiled = EgressSettings::default().compile().expect("defaults");
        assert!(compiled.dns_servers.is_empty());
        assert!(
            compiled
                .ranges
                .check("127.0.0.1".parse().expect("ip"))
                .is_err()
        );
        assert_eq!(
            EgressSettings::default().default_limits().session_bytes,
            1024 * MB
        );
    }

    #[test]
    fn settings_parse_ranges_servers_and_hosts() {
        let settings = EgressSettings {
            allow_private_ranges: vec!["127.0.0.0/8".into(), "10.1.2.3".into()],
            dns_servers: vec!["192.0.2.53".into(), "127.0.0.1:5353".into()],
            hosts: BTreeMap::from([("Allowed.Test.".to_string(), vec!["127.0.0.1".to_string()])]),
            ..EgressSettings::default()
        };
        let c = settings.compile().expect("valid");
        assert!(c.ranges.check("127.0.0.1".parse().expect("ip")).is_ok());
        assert!(c.ranges.check("10.1.2.3".parse().expect("ip")).is_ok());
        assert_eq!(c.dns_servers[0], "192.0.2.53:53".parse().expect("addr"));
        assert_eq!(c.dns_servers[1], "127.0.0.1:5353".parse().expect("addr"));
        assert!(c.hosts.contains_key("allowed.test"));
    }

    #[test]
    fn bad_settings_name_their_key() {
        let cases = [
            EgressSettings {
                allow_private_ranges: vec!["10.0.0.0/40".into()],
                ..EgressSettings::default()
            },
            EgressSettings {
                dns_servers: vec!["dns.example".into()],
                ..EgressSettings::default()
            },
            EgressSettings {
                hosts: BTreeMap::from([("a.test".to_string(), vec!["nowhere".to_string()])]),
                ..EgressSettings::default()
            },
            EgressSettings {
                connect_timeout_secs: 0,
                ..EgressSettings::default()
            },
        ];
        for (settings, key) in cases.iter().zip([
            "allow_private_ranges",
            "dns_servers",
            "hosts",
            "connect_timeout_secs",
        ]) {
            let err = settings.compile().expect_err("refused");
            assert!(err.to_string().contains(&format!("egress.{key}")), "{err}");
        }
    }
}
