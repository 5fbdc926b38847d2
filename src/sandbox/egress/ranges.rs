//! The address ranges no sandbox may reach through the egress proxy, and the check every resolved
//! address passes before the proxy connects to it.
//!
//! Addresses are canonicalised first (`::ffff:10.0.0.1` is `10.0.0.1`), so an IPv4-mapped form
//! never slips past an IPv4 range; NAT64 and IPv4-compatible forms are denied as whole ranges.
//! The built-in list can be narrowed only by the deployment's `egress.allow_private_ranges`, and
//! cloud metadata addresses never.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::Serialize;

/// Why a range is denied; named in events and in the proxy's answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RangeKind {
    /// Cloud instance metadata services (never reachable, whatever the settings say).
    Metadata,
    Loopback,
    /// RFC 1918.
    Private,
    /// Carrier-grade NAT, 100.64.0.0/10.
    Cgnat,
    /// `0.0.0.0/8` and `::`.
    Unspecified,
    LinkLocal,
    Multicast,
    Broadcast,
    /// IPv6 unique local addresses, `fc00::/7`.
    UniqueLocal,
    /// `::ffff:0:0/96` (only reached by a form that did not canonicalise).
    Ipv4Mapped,
    /// `64:ff9b::/96` and `64:ff9b:1::/48`: would reach an IPv4 address through a translator.
    Nat64,
    /// Reserved, documentation, benchmarking and tunnelling ranges (6to4, Teredo, ...).
    Reserved,
    /// A network of the container engine (its bridges and the networks its containers sit on).
    Engine,
    /// Denied by the deployment's `egress.denied_ranges`.
    Configured,
}

impl fmt::Display for RangeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            RangeKind::Metadata => "cloud metadata",
            RangeKind::Loopback => "loopback",
            RangeKind::Private => "private (RFC 1918)",
            RangeKind::Cgnat => "carrier-grade NAT",
            RangeKind::Unspecified => "unspecified / this network",
            RangeKind::LinkLocal => "link-local",
            RangeKind::Multicast => "multicast",
            RangeKind::Broadcast => "broadcast",
            RangeKind::UniqueLocal => "unique local",
            RangeKind::Ipv4Mapped => "IPv4-mapped",
            RangeKind::Nat64 => "NAT64",
            RangeKind::Reserved => "reserved",
            RangeKind::Engine => "container engine network",
            RangeKind::Configured => "denied by configuration",
        };
        f.write_str(name)
    }
}

/// Metadata endpoints: checked before anything else and never narrowed.
const METADATA: &[&str] = &[
    "169.254.169.254/32", // AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle
    "169.254.170.2/32",   // AWS ECS task metadata
    "169.254.169.253/32", // AWS VPC DNS
    "169.254.169.123/32", // AWS time sync
    "100.100.100.200/32", // Alibaba Cloud
    "fd00:ec2::254/128",  // AWS IMDS over IPv6
    "fd00:ec2::23/128",   // AWS VPC DNS over IPv6
];

/// Special-purpose ranges, most specific first so that the reason names the narrowest one.
const BUILT_IN: &[(&str, RangeKind)] = &[
    ("0.0.0.0/8", RangeKind::Unspecified),
    ("10.0.0.0/8", RangeKind::Private),
    ("100.64.0.0/10", RangeKind::Cgnat),
    ("127.0.0.0/8", RangeKind::Loopback),
    ("169.254.0.0/16", RangeKind::LinkLocal),
    ("172.16.0.0/12", RangeKind::Private),
    ("192.0.0.0/24", RangeKind::Reserved),
    ("192.0.2.0/24", RangeKind::Reserved),
    ("192.88.99.0/24", RangeKind::Reserved),
    ("192.168.0.0/16", RangeKind::Private),
    ("198.18.0.0/15", RangeKind::Reserved),
    ("198.51.100.0/24", RangeKind::Reserved),
    ("203.0.113.0/24", RangeKind::Reserved),
    ("224.0.0.0/4", RangeKind::Multicast),
    ("255.255.255.255/32", RangeKind::Broadcast),
    ("240.0.0.0/4", RangeKind::Reserved),
    ("::/128", RangeKind::Unspecified),
    ("::1/128", RangeKind::Loopback),
    ("::ffff:0:0/96", RangeKind::Ipv4Mapped),
    ("::/96", RangeKind::Reserved), // IPv4-compatible (deprecated)
    ("64:ff9b::/96", RangeKind::Nat64),
    ("64:ff9b:1::/48", RangeKind::Nat64),
    ("100::/64", RangeKind::Reserved),  // discard-only
    ("2001::/32", RangeKind::Reserved), // Teredo
    ("2001:db8::/32", RangeKind::Reserved),
    ("2002::/16", RangeKind::Reserved), // 6to4
    ("fc00::/7", RangeKind::UniqueLocal),
    ("fe80::/10", RangeKind::LinkLocal),
    ("fec0::/10", RangeKind::LinkLocal), // site-local (deprecated)
    ("ff00::/8", RangeKind::Multicast),
];

/// Why an address was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeniedAddress {
    /// The address as checked (canonical form).
    pub address: IpAddr,
    pub range: IpNet,
    pub kind: RangeKind,
}

impl fmt::Display for DeniedAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is in a denied range ({} {})",
            self.address, self.kind, self.range
        )
    }
}

/// The denied ranges in force: the built-in list, the deployment's additions, the engine's
/// networks, minus what the deployment explicitly allows.
#[derive(Debug, Clone)]
pub struct DeniedRanges {
    metadata: Vec<IpNet>,
    denied: Vec<(IpNet, RangeKind)>,
    allowed: Vec<IpNet>,
}

fn net(s: &str) -> IpNet {
    // The tables above are constants; a typo is caught by the unit tests.
    s.parse().unwrap_or_else(|_| panic!("built-in range {s}"))
}

impl DeniedRanges {
    /// The built-in ranges, plus `extra` (the deployment's `denied_ranges`), minus `allowed`
    /// (`allow_private_ranges`; never a metadata address).
    pub fn new(extra: &[IpNet], allowed: &[IpNet]) -> DeniedRanges {
        let mut denied: Vec<(IpNet, RangeKind)> =
            BUILT_IN.iter().map(|(s, k)| (net(s), *k)).collect();
        denied.extend(extra.iter().map(|n| (n.trunc(), RangeKind::Configured)));
        DeniedRanges {
            metadata: METADATA.iter().map(|s| net(s)).collect(),
            denied,
            allowed: allowed.iter().map(IpNet::trunc).collect(),
        }
    }

    /// The same ranges with the engine's networks denied as well (replacing earlier ones).
    pub fn with_engine_networks(&self, networks: &[IpNet]) -> DeniedRanges {
        let mut next = self.clone();
        next.denied.retain(|(_, k)| *k != RangeKind::Engine);
        next.denied
            .extend(networks.iter().map(|n| (n.trunc(), RangeKind::Engine)));
        next
    }

    /// `Ok` when the proxy may connect to `address`.
    pub fn check(&self, address: IpAddr) -> Result<(), DeniedAddress> {
        let address = address.to_canonical();
        if let Some(range) = self.metadata.iter().find(|n| n.contains(&address)) {
            return Err(DeniedAddress {
                address,
                range: *range,
                kind: RangeKind::Metadata,
            });
        }
        if self.allowed.iter().any(|n| n.contains(&address)) {
            return Ok(());
        }
        match self.denied.iter().find(|(n, _)| n.contains(&address)) {
            Some((range, kind)) => Err(DeniedAddress {
                address,
                range: *range,
                kind: *kind,
            }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("address")
    }

    fn kind(r: &DeniedRanges, s: &str) -> Option<RangeKind> {
        r.check(ip(s)).err().map(|d| d.kind)
    }

    #[test]
    fn the_built_in_tables_parse() {
        for (s, _) in BUILT_IN {
            let _ = net(s);
        }
        for s in METADATA {
            let _ = net(s);
        }
    }

    #[test]
    fn special_purpose_ipv4_addresses_are_denied() {
        let r = DeniedRanges::new(&[], &[]);
        let cases = [
            ("127.0.0.1", RangeKind::Loopback),
            ("127.255.255.254", RangeKind::Loopback),
            ("10.1.2.3", RangeKind::Private),
            ("172.16.0.1", RangeKind::Private),
            ("172.31.255.255", RangeKind::Private),
            ("192.168.1.1", RangeKind::Private),
            ("169.254.169.254", RangeKind::Metadata),
            ("169.254.170.2", RangeKind::Metadata),
            ("100.100.100.200", RangeKind::Metadata),
            ("169.254.1.1", RangeKind::LinkLocal),
            ("100.64.0.1", RangeKind::Cgnat),
            ("100.127.255.255", RangeKind::Cgnat),
            ("0.0.0.0", RangeKind::Unspecified),
            ("0.1.2.3", RangeKind::Unspecified),
            ("224.0.0.251", RangeKind::Multicast),
            ("239.255.255.250", RangeKind::Multicast),
            ("255.255.255.255", RangeKind::Broadcast),
            ("240.0.0.1", RangeKind::Reserved),
            ("198.18.0.1", RangeKind::Reserved),
        ];
        for (addr, want) in cases {
            assert_eq!(kind(&r, addr), Some(want), "{addr}");
        }
    }

    #[test]
    fn public_addresses_pass() {
        let r = DeniedRanges::new(&[], &[]);
        for addr in [
            "1.1.1.1",
            "8.8.8.8",
            "172.15.255.255",
            "172.32.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "2606:4700::1111",
            "2a00:1450:4001:80b::200e",
        ] {
            assert_eq!(r.check(ip(addr)), Ok(()), "{addr}");
        }
    }

    #[test]
    fn ipv6_special_purpose_addresses_are_denied() {
        let r = DeniedRanges::new(&[], &[]);
        let cases = [
            ("::1", RangeKind::Loopback),
            ("::", RangeKind::Unspecified),
            ("fc00::1", RangeKind::UniqueLocal),
            ("fd12:3456::1", RangeKind::UniqueLocal),
            ("fd00:ec2::254", RangeKind::Metadata),
            ("fe80::1", RangeKind::LinkLocal),
            ("ff02::1", RangeKind::Multicast),
            ("2001:db8::1", RangeKind::Reserved),
            ("2002:7f00:1::", RangeKind::Reserved),
        ];
        for (addr, want) in cases {
            assert_eq!(kind(&r, addr), Some(want), "{addr}");
        }
    }

    #[test]
    fn ipv4_mapped_forms_are_checked_as_ipv4() {
        let r = DeniedRanges::new(&[], &[]);
        assert_eq!(kind(&r, "::ffff:127.0.0.1"), Some(RangeKind::Loopback));
        assert_eq!(kind(&r, "::ffff:7f00:1"), Some(RangeKind::Loopback));
        assert_eq!(kind(&r, "::ffff:10.0.0.1"), Some(RangeKind::Private));
        assert_eq!(
            kind(&r, "::ffff:169.254.169.254"),
            Some(RangeKind::Metadata)
        );
        assert_eq!(r.check(ip("::ffff:8.8.8.8")), Ok(()));
        // The reported address is the canonical one.
        let denied = r.check(ip("::ffff:192.168.0.1")).expect_err("denied");
        assert_eq!(denied.address, ip("192.168.0.1"));
    }

    #[test]
    fn nat64_and_ipv4_compatible_forms_are_denied_whatever_they_embed() {
        let r = DeniedRanges::new(&[], &[]);
        assert_eq!(kind(&r, "64:ff9b::7f00:1"), Some(RangeKind::Nat64));
        assert_eq!(kind(&r, "64:ff9b::808:808"), Some(RangeKind::Nat64));
        assert_eq!(kind(&r, "64:ff9b:1::a00:1"), Some(RangeKind::Nat64));
        // ::127.0.0.1, the deprecated IPv4-compatible form.
        assert_eq!(kind(&r, "::7f00:1"), Some(RangeKind::Reserved));
    }

    #[test]
    fn allowed_ranges_narrow_the_list_but_never_metadata() {
        let allowed = [
            net("127.0.0.0/8"),
            net("169.254.0.0/16"),
            net("10.9.0.0/16"),
        ];
        let r = DeniedRanges::new(&[], &allowed);
        assert_eq!(r.check(ip("127.0.0.1")), Ok(()));
        assert_eq!(r.check(ip("::ffff:127.0.0.1")), Ok(()));
        assert_eq!(r.check(ip("10.9.1.1")), Ok(()));
        assert_eq!(kind(&r, "10.8.1.1"), Some(RangeKind::Private));
        assert_eq!(kind(&r, "169.254.169.254"), Some(RangeKind::Metadata));
        assert_eq!(r.check(ip("169.254.1.1")), Ok(()));
        assert_eq!(kind(&r, "::1"), Some(RangeKind::Loopback));
    }

    #[test]
    fn configured_and_engine_ranges_are_denied() {
        let r = DeniedRanges::new(&[net("93.184.216.0/24")], &[]);
        assert_eq!(kind(&r, "93.184.216.34"), Some(RangeKind::Configured));
        let r = r.with_engine_networks(&[net("44.1.0.0/16")]);
        assert_eq!(kind(&r, "44.1.2.3"), Some(RangeKind::Engine));
        // Replacing the engine's networks forgets the old ones.
        let r = r.with_engine_networks(&[net("44.2.0.0/16")]);
        assert_eq!(r.check(ip("44.1.2.3")), Ok(()));
        assert_eq!(kind(&r, "44.2.0.1"), Some(RangeKind::Engine));
    }
}
