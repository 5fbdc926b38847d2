//! Name resolution for the egress proxy: the deployment's static `hosts` map first, then the
//! system resolver or the explicit DNS servers of `egress.dns_servers`. Nothing is cached here, so
//! every connection's addresses are looked up and checked afresh and the proxy connects to exactly
//! what it checked.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{
    LookupIpStrategy, NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts,
};
use hickory_resolver::net::runtime::TokioRuntimeProvider;

/// A lookup that gave no address.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("lookup of {name} timed out after {secs} s")]
    Timeout { name: String, secs: u64 },
    #[error("{name} has no address")]
    NotFound { name: String },
    #[error("lookup of {name} failed: {source}")]
    Failed {
        name: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("the DNS resolver could not be set up: {0}")]
    Setup(#[source] Box<dyn std::error::Error + Send + Sync>),
}

enum Upstream {
    /// `getaddrinfo` (on tokio's blocking pool): `/etc/hosts`, `resolv.conf`, nsswitch.
    System,
    Servers(Box<TokioResolver>),
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Upstream::System => f.write_str("System"),
            Upstream::Servers(_) => f.write_str("Servers"),
        }
    }
}

#[derive(Debug)]
pub(crate) struct Resolver {
    hosts: HashMap<String, Vec<IpAddr>>,
    upstream: Upstream,
    timeout: Duration,
}

impl Resolver {
    /// `hosts` keys are normalised names; `servers` empty means the system resolver.
    pub(crate) fn new(
        hosts: HashMap<String, Vec<IpAddr>>,
        servers: &[SocketAddr],
        timeout: Duration,
    ) -> Result<Resolver, ResolveError> {
        let upstream = if servers.is_empty() {
            Upstream::System
        } else {
            Upstream::Servers(Box::new(explicit_resolver(servers, timeout)?))
        };
        Ok(Resolver {
            hosts,
            upstream,
            timeout,
        })
    }

    /// The addresses of `name` (normalised), in the order they should be tried.
    pub(crate) async fn resolve(&self, name: &str) -> Result<Vec<IpAddr>, ResolveError> {
        if let Some(addresses) = self.hosts.get(name) {
            return Ok(addresses.clone());
        }
        let lookup = async {
            match &self.upstream {
                Upstream::System => system_lookup(name).await,
                Upstream::Servers(resolver) => server_lookup(resolver, name).await,
            }
        };
        let mut addresses = tokio::time::timeout(self.timeout, lookup)
            .await
            .map_err(|_| ResolveError::Timeout {
                name: name.to_string(),
                secs: self.timeout.as_secs(),
            })??;
        dedup_in_order(&mut addresses);
        if addresses.is_empty() {
            return Err(ResolveError::NotFound {
                name: name.to_string(),
            });
        }
        Ok(addresses)
    }
}

fn explicit_resolver(
    servers: &[SocketAddr],
    timeout: Duration,
) -> Result<TokioResolver, ResolveError> {
    let configs = servers
        .iter()
        .map(|server| {
            let mut config = NameServerConfig::udp_and_tcp(server.ip());
            for connection in &mut config.connections {
                connection.port = server.port();
            }
            config
        })
        .collect();
    let mut options = ResolverOpts::default();
    options.timeout = timeout;
    options.attempts = 1;
    // Each connection looks its name up again: an allow verdict is never reused past a TTL.
    options.cache_size = 0;
    options.use_hosts_file = ResolveHosts::Never;
    options.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
    TokioResolver::builder_with_config(
        ResolverConfig::from_name_servers(configs),
        TokioRuntimeProvider::default(),
    )
    .with_options(options)
    .build()
    .map_err(|e| ResolveError::Setup(Box::new(e)))
}

async fn system_lookup(name: &str) -> Result<Vec<IpAddr>, ResolveError> {
    match tokio::net::lookup_host((name, 0)).await {
        Ok(addrs) => Ok(addrs.map(|a| a.ip()).collect()),
        Err(e) => Err(ResolveError::Failed {
            name: name.to_string(),
            source: Box::new(e),
        }),
    }
}

async fn server_lookup(resolver: &TokioResolver, name: &str) -> Result<Vec<IpAddr>, ResolveError> {
    // Fully qualified: no search domain is ever appended to a name a rule matched.
    match resolver.lookup_ip(format!("{name}.")).await {
        Ok(lookup) => Ok(lookup.iter().collect()),
        Err(e) if e.is_no_records_found() || e.is_nx_domain() => Err(ResolveError::NotFound {
            name: name.to_string(),
        }),
        Err(e) => Err(ResolveError::Failed {
            name: name.to_string(),
            source: Box::new(e),
        }),
    }
}

fn dedup_in_order(addresses: &mut Vec<IpAddr>) {
    let mut seen = std::collections::HashSet::new();
    addresses.retain(|a| seen.insert(*a));
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::net::UdpSocket;

    use super::*;

    /// A DNS server for one test: answers A queries for `name` with `address`, anything else
    /// with no records; counts the queries it got.
    async fn dns_server(name: &'static str, address: Ipv4Addr) -> (SocketAddr, Arc<AtomicUsize>) {
        let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        let local = socket.local_addr().expect("addr");
        let count = Arc::new(AtomicUsize::new(0));
        let seen = count.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 512];
            while let Ok((n, peer)) = socket.recv_from(&mut buf).await {
                seen.fetch_add(1, Ordering::SeqCst);
                let reply = answer(&buf[..n], name, address);
                let _ = socket.send_to(&reply, peer).await;
            }
        });
        (local, count)
    }

    /// The reply to `query`: its header and question, with one A record when it asks for `name`.
    fn answer(query: &[u8], name: &str, address: Ipv4Addr) -> Vec<u8> {
        // The question starts at 12 and ends after the name's zero byte plus type and class.
        let mut end = 12;
        let mut labels = Vec::new();
        while query[end] != 0 {
            let len = query[end] as usize;
            labels.push(String::from_utf8_lossy(&query[end + 1..end + 1 + len]).to_lowercase());
            end += len + 1;
        }
        let qtype = u16::from_be_bytes([query[end + 1], query[end + 2]]);
        end += 5;
        let hit = labels.join(".") == name && qtype == 1;
        let mut reply = query[..end].to_vec();
        reply[2] = 0x81; // response, recursion desired
        reply[3] = 0x80; // recursion available, NOERROR
        reply[6..8].copy_from_slice(&u16::from(hit).to_be_bytes()); // answers
        reply[8..12].fill(0); // no authority / additional records
        if hit {
            reply.extend_from_slice(&[0xC0, 0x0C, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
            reply.extend_from_slice(&address.octets());
        }
        reply
    }

    #[tokio::test]
    async fn static_hosts_answer_first_and_explicit_servers_answer_the_rest() {
        let (server, queries) = dns_server("api.dns.test", Ipv4Addr::new(192, 0, 2, 7)).await;
        let hosts = HashMap::from([(
            "pinned.test".to_string(),
            vec!["192.0.2.9".parse().expect("ip")],
        )]);
        let resolver = Resolver::new(hosts, &[server], Duration::from_secs(5)).expect("resolver");
        let pinned = resolver.resolve("pinned.test").await.expect("hosts");
        assert_eq!(pinned, ["192.0.2.9".parse::<IpAddr>().expect("ip")]);
        assert_eq!(
            queries.load(Ordering::SeqCst),
            0,
            "no query for a static name"
        );
        let answers = resolver.resolve("api.dns.test").await.expect("dns");
        assert_eq!(answers, [IpAddr::from([192, 0, 2, 7])]);
        let before = queries.load(Ordering::SeqCst);
        resolver.resolve("api.dns.test").await.expect("dns again");
        assert!(
            queries.load(Ordering::SeqCst) > before,
            "answers are not cached"
        );
        let missing = resolver.resolve("missing.dns.test").await;
        assert!(
            matches!(missing, Err(ResolveError::NotFound { .. })),
            "{missing:?}"
        );
    }

    #[tokio::test]
    async fn a_silent_server_times_out() {
        // A socket that never answers.
        let silent = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        let resolver = Resolver::new(
            HashMap::new(),
            &[silent.local_addr().expect("addr")],
            Duration::from_millis(300),
        )
        .expect("resolver");
        let err = resolver.resolve("quiet.test").await.expect_err("no answer");
        assert!(
            matches!(
                err,
                ResolveError::Timeout { .. } | ResolveError::Failed { .. }
            ),
            "{err:?}"
        );
    }
}
