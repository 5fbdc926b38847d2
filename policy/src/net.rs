//! Network destinations: domain wildcards (case-insensitive, IDNA-normalised), CIDR blocks (with
//! IPv4-mapped IPv6 unmapped) and ports.

use std::borrow::Cow;
use std::net::IpAddr;

use crate::limits::MAX_PATTERN_BYTES;

/// A compiled `domains` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DomainPattern {
    /// `*`: any name.
    Any,
    /// `example.com`: that name only.
    Exact(Box<str>),
    /// `*.example.com`, kept as `.example.com`: any name below it, at any depth, not the name
    /// itself.
    Below(Box<str>),
}

/// The canonical text of a `domains` entry: lower-case ASCII (punycode for Unicode labels), no
/// trailing dot; `*` or a leading `*.` are the only wildcards.
pub(crate) fn normalize_pattern(source: &str) -> Result<String, String> {
    if source.len() > MAX_PATTERN_BYTES {
        return Err(format!("longer than {MAX_PATTERN_BYTES} bytes"));
    }
    if source == "*" {
        return Ok(source.to_string());
    }
    let (prefix, name) = match source.strip_prefix("*.") {
        Some(rest) => ("*.", rest),
        None => ("", source),
    };
    if name.contains('*') {
        return Err("the only wildcards are `*` and a leading `*.`".into());
    }
    Ok(format!("{prefix}{}", normalize_name(name)?))
}

impl DomainPattern {
    /// From the canonical text of [`normalize_pattern`].
    pub(crate) fn new(normalized: &str) -> DomainPattern {
        match normalized {
            "*" => DomainPattern::Any,
            _ => match normalized.strip_prefix('*') {
                Some(below) => DomainPattern::Below(below.into()),
                None => DomainPattern::Exact(normalized.into()),
            },
        }
    }

    /// `name` as [`query_name`] gives it: ASCII, any case, no trailing dot.
    pub(crate) fn matches(&self, name: &str) -> bool {
        match self {
            DomainPattern::Any => true,
            DomainPattern::Exact(exact) => exact.eq_ignore_ascii_case(name),
            DomainPattern::Below(suffix) => {
                name.len() > suffix.len()
                    && name.is_char_boundary(name.len() - suffix.len())
                    && name[name.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
            }
        }
    }
}

/// A name as a rule holds it: validated labels, lower-case ASCII.
fn normalize_name(name: &str) -> Result<String, String> {
    let name = name.strip_suffix('.').unwrap_or(name);
    let ascii = if name.is_ascii() {
        name.to_ascii_lowercase()
    } else {
        to_ascii(name).ok_or("not a valid internationalised domain name")?
    };
    if ascii.is_empty() || ascii.len() > 253 {
        return Err("a domain name has 1 to 253 characters".into());
    }
    for label in ascii.split('.') {
        let well_formed = !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !well_formed {
            return Err(format!(
                "label `{label}`: 1 to 63 letters, digits, `-` or `_`"
            ));
        }
    }
    Ok(ascii)
}

#[cfg(feature = "idna")]
fn to_ascii(name: &str) -> Option<String> {
    idna::domain_to_ascii(name).ok()
}

#[cfg(not(feature = "idna"))]
fn to_ascii(_name: &str) -> Option<String> {
    None
}

/// A name as a decision compares it: ASCII names are borrowed as they are (comparison ignores
/// case); Unicode names are converted to punycode (the one allocating case); `None` when the name
/// cannot be converted, so that no domain rule matches it.
pub(crate) fn query_name(name: &str) -> Option<Cow<'_, str>> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() {
        None
    } else if name.is_ascii() {
        Some(Cow::Borrowed(name))
    } else {
        to_ascii(name).map(Cow::Owned)
    }
}

/// A compiled `cidrs` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cidr {
    V4 { net: u32, prefix: u8 },
    V6 { net: u128, prefix: u8 },
}

impl Cidr {
    /// `10.0.0.0/8`, `2001:db8::/32`, or an address alone (a single host). An IPv4-mapped IPv6
    /// block (`::ffff:10.0.0.0/104`) becomes the IPv4 block it maps, as addresses are unmapped
    /// before matching.
    pub(crate) fn parse(source: &str) -> Result<Cidr, String> {
        let (addr, prefix) = match source.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (source, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("`{addr}` is not an IP address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|&p| p <= max)
                .ok_or_else(|| format!("the prefix length is 0 to {max}"))?,
            None => max,
        };
        let cidr = match addr {
            IpAddr::V4(a) => Cidr::V4 {
                net: u32::from(a),
                prefix,
            },
            IpAddr::V6(a) => match (a.to_ipv4_mapped(), prefix) {
                (Some(v4), p) if p >= 96 => Cidr::V4 {
                    net: u32::from(v4),
                    prefix: p - 96,
                },
                _ => Cidr::V6 {
                    net: u128::from(a),
                    prefix,
                },
            },
        };
        if !cidr.host_bits_clear() {
            return Err("host bits are set below the prefix length".into());
        }
        Ok(cidr)
    }

    fn host_bits_clear(self) -> bool {
        match self {
            Cidr::V4 { net, prefix } => net & !mask32(prefix) == 0,
            Cidr::V6 { net, prefix } => net & !mask128(prefix) == 0,
        }
    }

    /// `ip` unmapped first ([`IpAddr::to_canonical`]).
    pub(crate) fn contains(self, ip: IpAddr) -> bool {
        match (self, ip) {
            (Cidr::V4 { net, prefix }, IpAddr::V4(a)) => u32::from(a) & mask32(prefix) == net,
            (Cidr::V6 { net, prefix }, IpAddr::V6(a)) => u128::from(a) & mask128(prefix) == net,
            _ => false,
        }
    }
}

fn mask32(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

fn mask128(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(s: &str) -> DomainPattern {
        DomainPattern::new(&normalize_pattern(s).expect("valid"))
    }

    #[test]
    fn wildcards_cover_subdomains_only_and_ignore_case() {
        let p = pattern("*.Example.COM.");
        assert!(p.matches("api.example.com"));
        assert!(p.matches("A.B.EXAMPLE.com"));
        assert!(!p.matches("example.com"));
        assert!(!p.matches("badexample.com"));
        let exact = pattern("pypi.org");
        assert!(exact.matches("PyPI.org"));
        assert!(!exact.matches("files.pypi.org"));
        assert!(pattern("*").matches("anything.at.all"));
    }

    #[cfg(feature = "idna")]
    #[test]
    fn unicode_names_are_compared_in_punycode() {
        assert_eq!(
            normalize_pattern("*.Bücher.de").expect("valid"),
            "*.xn--bcher-kva.de"
        );
        let p = pattern("bücher.de");
        assert!(p.matches(&query_name("BÜCHER.de").expect("converts")));
        assert!(p.matches(&query_name("xn--bcher-kva.de.").expect("ascii")));
    }

    #[test]
    fn malformed_domains_are_refused() {
        for bad in [
            "",
            "exa*mple.com",
            "*example.com",
            "a..b",
            "a b.com",
            "*.*.com",
        ] {
            assert!(normalize_pattern(bad).is_err(), "{bad}");
        }
        assert!(normalize_pattern(&format!("{}.com", "a".repeat(64))).is_err());
    }

    #[test]
    fn cidrs_match_their_block_and_unmap_ipv4_in_ipv6() {
        let net = Cidr::parse("10.0.0.0/8").expect("valid");
        assert!(net.contains("10.1.2.3".parse().expect("ip")));
        assert!(!net.contains("11.0.0.1".parse().expect("ip")));
        let mapped: IpAddr = "::ffff:10.9.9.9".parse().expect("ip");
        assert!(net.contains(mapped.to_canonical()));
        let mapped_rule = Cidr::parse("::ffff:192.168.0.0/112").expect("valid");
        assert_eq!(
            mapped_rule,
            Cidr::V4 {
                net: u32::from(std::net::Ipv4Addr::new(192, 168, 0, 0)),
                prefix: 16
            }
        );
        let v6 = Cidr::parse("2001:db8::/32").expect("valid");
        assert!(v6.contains("2001:db8::1".parse().expect("ip")));
        assert!(!v6.contains("10.0.0.1".parse().expect("ip")));
        assert!(
            Cidr::parse("0.0.0.0/0")
                .expect("all")
                .contains("8.8.8.8".parse().expect("ip"))
        );
        assert!(
            Cidr::parse("127.0.0.1")
                .expect("host")
                .contains("127.0.0.1".parse().expect("ip"))
        );
    }

    #[test]
    fn malformed_cidrs_are_refused() {
        for bad in [
            "10.0.0.1/8",
            "10.0.0.0/33",
            "::/129",
            "example.com/8",
            "10.0.0.0/x",
            "",
        ] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }
}
