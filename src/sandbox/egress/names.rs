//! Host names as the egress rules see them: normalised once (case, trailing dot, IDNA/punycode),
//! and domain patterns with wildcards that match them.

use std::fmt;
use std::net::IpAddr;

use idna::AsciiDenyList;

/// A destination as a client named it: a (normalised) name or an IP literal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    /// Lower-case ASCII (punycode), without a trailing dot.
    Name(String),
    /// An address literal (`1.2.3.4`, `[::1]`); only CIDR rules and catch-alls match it.
    Ip(IpAddr),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// A host or pattern that is not a usable DNS name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{input}` is not a valid host name: {reason}")]
pub struct NameError {
    pub input: String,
    pub reason: &'static str,
}

fn bad(input: &str, reason: &'static str) -> NameError {
    NameError {
        input: input.chars().take(300).collect(),
        reason,
    }
}

impl Host {
    /// Parses what a client asked for: a bracketed or bare IP literal, or a DNS name that is
    /// lower-cased, stripped of one trailing dot and converted to punycode.
    pub fn parse(raw: &str) -> Result<Host, NameError> {
        let unbracketed = raw
            .strip_prefix('[')
            .and_then(|r| r.strip_suffix(']'))
            .unwrap_or(raw);
        if let Ok(ip) = unbracketed.parse::<IpAddr>() {
            return Ok(Host::Ip(ip));
        }
        normalize_name(raw).map(Host::Name)
    }

    pub fn name(&self) -> Option<&str> {
        match self {
            Host::Name(name) => Some(name),
            Host::Ip(_) => None,
        }
    }
}

/// The one normal form of a DNS name that rules and lookups use.
pub fn normalize_name(raw: &str) -> Result<String, NameError> {
    if raw.is_empty() {
        return Err(bad(raw, "empty"));
    }
    let ascii = idna::domain_to_ascii_cow(raw.as_bytes(), AsciiDenyList::URL)
        .map_err(|_| bad(raw, "not a valid internationalised name"))?;
    let name = ascii.strip_suffix('.').unwrap_or(&ascii);
    if name.is_empty() || name.len() > 253 {
        return Err(bad(raw, "empty or longer than 253 characters"));
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(bad(raw, "empty label or label longer than 63 characters"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        {
            return Err(bad(raw, "characters outside letters, digits, '-' and '_'"));
        }
    }
    // `127.1`, `2130706433` or `0x7f.1` are addresses to inet_aton, never names: refusing them
    // here keeps a numeric "name" from being resolved into an address no rule named.
    let last = name.rsplit('.').next().unwrap_or(name);
    if last.bytes().all(|b| b.is_ascii_digit()) || last.starts_with("0x") {
        return Err(bad(raw, "a numeric address written as a name"));
    }
    Ok(name.to_string())
}

/// A domain pattern of a rule: `example.com` (that name), `*.example.com` (any name below it, at
/// any depth, not the apex) or `*` (every name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DomainPattern {
    Any,
    Exact(String),
    /// The suffix with its leading dot: `.example.com`.
    Below(String),
}

impl DomainPattern {
    pub fn parse(raw: &str) -> Result<DomainPattern, NameError> {
        if raw == "*" {
            return Ok(DomainPattern::Any);
        }
        if let Some(rest) = raw.strip_prefix("*.") {
            if rest.contains('*') {
                return Err(bad(raw, "'*' is allowed only as the whole first label"));
            }
            return Ok(DomainPattern::Below(format!(".{}", normalize_name(rest)?)));
        }
        if raw.contains('*') {
            return Err(bad(raw, "'*' is allowed only as the whole first label"));
        }
        if raw.starts_with('.') {
            return Err(bad(
                raw,
                "write `*.example.com` for the names below a domain",
            ));
        }
        Ok(DomainPattern::Exact(normalize_name(raw)?))
    }

    /// Whether `name` (already normalised) matches.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            DomainPattern::Any => true,
            DomainPattern::Exact(exact) => name == exact,
            DomainPattern::Below(suffix) => name.len() > suffix.len() && name.ends_with(suffix),
        }
    }
}

impl fmt::Display for DomainPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DomainPattern::Any => f.write_str("*"),
            DomainPattern::Exact(name) => f.write_str(name),
            DomainPattern::Below(suffix) => write!(f, "*{suffix}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> String {
        normalize_name(s).expect("valid name")
    }

    #[test]
    fn names_are_lower_case_without_trailing_dot_and_in_punycode() {
        assert_eq!(name("Example.COM"), "example.com");
        assert_eq!(name("example.com."), "example.com");
        assert_eq!(name("bücher.example"), "xn--bcher-kva.example");
        assert_eq!(name("BÜCHER.example."), "xn--bcher-kva.example");
        assert_eq!(name("xn--bcher-kva.example"), "xn--bcher-kva.example");
        // Full-width dots are dots.
        assert_eq!(name("files。example。org"), "files.example.org");
        assert_eq!(name("_acme.example.org"), "_acme.example.org");
    }

    #[test]
    fn names_that_are_not_names_are_refused() {
        for bad in [
            "",
            ".",
            "a..b",
            "exa mple.com",
            "example.com/x",
            "user@example.com",
            "127.1",
            "2130706433",
            "0x7f.0x1",
            "10.0.0.1.",
            &"a".repeat(64),
        ] {
            assert!(normalize_name(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn hosts_are_ip_literals_or_names() {
        assert_eq!(
            Host::parse("[::1]").expect("v6"),
            Host::Ip("::1".parse().expect("ip"))
        );
        assert_eq!(
            Host::parse("10.0.0.1").expect("v4"),
            Host::Ip("10.0.0.1".parse().expect("ip"))
        );
        assert_eq!(
            Host::parse("Allowed.Test.").expect("name"),
            Host::Name("allowed.test".into())
        );
    }

    #[test]
    fn wildcards_match_names_below_the_domain_only() {
        let p = DomainPattern::parse("*.Example.com").expect("pattern");
        assert!(p.matches("api.example.com"));
        assert!(p.matches("a.b.example.com"));
        assert!(!p.matches("example.com"));
        assert!(!p.matches("badexample.com"));
        assert!(!p.matches("example.com.evil.org"));
        let exact = DomainPattern::parse("example.com.").expect("pattern");
        assert!(exact.matches("example.com"));
        assert!(!exact.matches("api.example.com"));
        assert!(
            DomainPattern::parse("*")
                .expect("any")
                .matches("anything.org")
        );
        let idn = DomainPattern::parse("*.bücher.example").expect("pattern");
        assert!(idn.matches(&name("shop.BÜCHER.example")));
    }

    #[test]
    fn malformed_patterns_are_refused() {
        for bad in ["foo*.com", "*.*.com", "a.*.com", ".example.com", "*.", "**"] {
            assert!(DomainPattern::parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}
