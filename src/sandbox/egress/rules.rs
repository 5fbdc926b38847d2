//! Which destinations a sandbox may reach: ordered network rules (first match wins, no match
//! denies) and the [`EgressPolicy`] seam the proxy asks (a grant or a policy file drives it).
//!
//! Evaluation has two steps because the proxy must not look up names no rule lists:
//! [`EgressPolicy::check_name`] runs before any lookup and only lets a name be resolved when a
//! rule naming it (or a catch-all) is reached first; [`EgressPolicy::check_address`] then runs the
//! full first-match evaluation for each resolved address, where CIDR rules apply too. A CIDR-only
//! rule therefore never causes a lookup: it matches address literals, and names once a rule
//! naming them let them be resolved.

use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::names::{DomainPattern, Host, NameError};

/// What a rule decides (the policy file's vocabulary).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleDecision {
    Allow,
    Deny,
    /// Hold the connection until an operator decides (see [`super::NetworkApprover`]).
    Approve,
    /// Allow, and flag the event for the audit log.
    Log,
}

/// A network rule as written: the policy file's `network_rules` entries and the shape the
/// grant compiles to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkRuleSpec {
    pub name: String,
    /// Name patterns (`example.com`, `*.example.com`, `*`); absent: any destination.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domains: Option<Vec<String>>,
    /// Address ranges (`203.0.113.0/24`, `2001:db8::/32`, or a single address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cidrs: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<u16>>,
    pub decision: RuleDecision,
    /// Shown to the client when the rule denies; `{domain}` is replaced by the destination.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A rule that does not compile.
#[derive(Debug, thiserror::Error)]
pub enum RuleError {
    #[error("network rule `{rule}`: {source}")]
    Domain {
        rule: String,
        #[source]
        source: NameError,
    },
    #[error("network rule `{rule}`: `{value}` is not an address range: {source}")]
    Cidr {
        rule: String,
        value: String,
        #[source]
        source: ipnet::AddrParseError,
    },
    #[error("network rule `{rule}`: {reason}")]
    Invalid { rule: String, reason: &'static str },
}

/// A compiled rule.
#[derive(Debug, Clone)]
pub struct NetworkRule {
    name: Arc<str>,
    domains: Option<Vec<DomainPattern>>,
    cidrs: Option<Vec<IpNet>>,
    ports: Option<Vec<u16>>,
    decision: RuleDecision,
    message: Option<Arc<str>>,
}

fn parse_cidr(rule: &str, value: &str) -> Result<IpNet, RuleError> {
    if let Ok(ip) = value.parse::<IpAddr>() {
        return Ok(IpNet::from(ip.to_canonical()));
    }
    value
        .parse::<IpNet>()
        .map(|n| n.trunc())
        .map_err(|source| RuleError::Cidr {
            rule: rule.to_string(),
            value: value.to_string(),
            source,
        })
}

impl NetworkRule {
    pub fn compile(spec: &NetworkRuleSpec) -> Result<NetworkRule, RuleError> {
        let invalid = |reason| RuleError::Invalid {
            rule: spec.name.clone(),
            reason,
        };
        if spec.name.trim().is_empty() {
            return Err(invalid("a rule needs a name"));
        }
        let domains = match &spec.domains {
            Some(list) if list.is_empty() => return Err(invalid("`domains` is empty")),
            Some(list) => Some(
                list.iter()
                    .map(|d| DomainPattern::parse(d))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|source| RuleError::Domain {
                        rule: spec.name.clone(),
                        source,
                    })?,
            ),
            None => None,
        };
        let cidrs = match &spec.cidrs {
            Some(list) if list.is_empty() => return Err(invalid("`cidrs` is empty")),
            Some(list) => Some(
                list.iter()
                    .map(|c| parse_cidr(&spec.name, c))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            None => None,
        };
        match &spec.ports {
            Some(list) if list.is_empty() => return Err(invalid("`ports` is empty")),
            Some(list) if list.contains(&0) => return Err(invalid("port 0 is not a port")),
            _ => {}
        }
        Ok(NetworkRule {
            name: spec.name.as_str().into(),
            domains,
            cidrs,
            ports: spec.ports.clone(),
            decision: spec.decision,
            message: spec.message.as_deref().map(Arc::from),
        })
    }

    fn port_matches(&self, port: u16) -> bool {
        self.ports.as_ref().is_none_or(|p| p.contains(&port))
    }

    fn name_matches(&self, host: &Host) -> bool {
        match (&self.domains, host) {
            (None, _) => true,
            (Some(patterns), Host::Name(name)) => patterns.iter().any(|p| p.matches(name)),
            (Some(_), Host::Ip(_)) => false,
        }
    }

    fn address_matches(&self, address: IpAddr) -> bool {
        let address = address.to_canonical();
        self.cidrs
            .as_ref()
            .is_none_or(|c| c.iter().any(|n| n.contains(&address)))
    }

    fn verdict(&self) -> Verdict {
        Verdict {
            decision: self.decision,
            rule: Some(self.name.clone()),
            message: self.message.clone(),
        }
    }
}

/// What a policy decided for one destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub decision: RuleDecision,
    /// The rule that decided; `None` when no rule matched (which denies).
    pub rule: Option<Arc<str>>,
    /// The rule's message for the client, if it has one.
    pub message: Option<Arc<str>>,
}

impl Verdict {
    /// No rule matched: deny.
    pub fn no_match() -> Verdict {
        Verdict {
            decision: RuleDecision::Deny,
            rule: None,
            message: None,
        }
    }
}

/// The answer before any lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameCheck {
    /// A rule naming the destination (or a catch-all) was reached first: the proxy may resolve
    /// it and decide per address.
    Resolve,
    Deny(Verdict),
}

/// Decides where one sandbox may connect. The proxy asks [`EgressPolicy::check_name`] before it
/// resolves a name and [`EgressPolicy::check_address`] for every address it would connect to;
/// both must be pure and fast (no I/O).
pub trait EgressPolicy: Send + Sync + std::fmt::Debug {
    fn check_name(&self, name: &str, port: u16) -> NameCheck;
    fn check_address(&self, host: &Host, address: IpAddr, port: u16) -> Verdict;
}

/// Rules in order: first match wins, no match denies.
#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    rules: Vec<NetworkRule>,
}

impl RuleSet {
    pub fn new(rules: Vec<NetworkRule>) -> RuleSet {
        RuleSet { rules }
    }

    pub fn compile(specs: &[NetworkRuleSpec]) -> Result<RuleSet, RuleError> {
        specs
            .iter()
            .map(NetworkRule::compile)
            .collect::<Result<Vec<_>, _>>()
            .map(RuleSet::new)
    }
}

impl EgressPolicy for RuleSet {
    fn check_name(&self, name: &str, port: u16) -> NameCheck {
        let host = Host::Name(name.to_string());
        for rule in &self.rules {
            if !rule.port_matches(port) {
                continue;
            }
            // CIDR-only rules cannot be decided without a lookup, and never cause one.
            if rule.domains.is_none() && rule.cidrs.is_some() {
                continue;
            }
            if !rule.name_matches(&host) {
                continue;
            }
            if rule.decision == RuleDecision::Deny && rule.cidrs.is_none() {
                return NameCheck::Deny(rule.verdict());
            }
            return NameCheck::Resolve;
        }
        NameCheck::Deny(Verdict::no_match())
    }

    fn check_address(&self, host: &Host, address: IpAddr, port: u16) -> Verdict {
        self.rules
            .iter()
            .find(|r| r.port_matches(port) && r.name_matches(host) && r.address_matches(address))
            .map_or_else(Verdict::no_match, NetworkRule::verdict)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, decision: RuleDecision) -> NetworkRuleSpec {
        NetworkRuleSpec {
            name: name.into(),
            domains: None,
            cidrs: None,
            ports: None,
            decision,
            message: None,
        }
    }

    fn domains(name: &str, d: &[&str], decision: RuleDecision) -> NetworkRuleSpec {
        NetworkRuleSpec {
            domains: Some(d.iter().map(|s| s.to_string()).collect()),
            ..spec(name, decision)
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    fn host(s: &str) -> Host {
        Host::parse(s).expect("host")
    }

    fn rule_of(v: &Verdict) -> Option<&str> {
        v.rule.as_deref()
    }

    #[test]
    fn the_first_matching_rule_wins_and_no_match_denies() {
        let set = RuleSet::compile(&[
            domains("no-internal", &["internal.example.com"], RuleDecision::Deny),
            domains("example", &["*.example.com"], RuleDecision::Allow),
            domains("late", &["internal.example.com"], RuleDecision::Allow),
        ])
        .expect("rules");
        let denied = set.check_name("internal.example.com", 443);
        assert_eq!(
            denied,
            NameCheck::Deny(Verdict {
                decision: RuleDecision::Deny,
                rule: Some("no-internal".into()),
                message: None
            })
        );
        assert_eq!(set.check_name("api.example.com", 443), NameCheck::Resolve);
        let v = set.check_address(&host("api.example.com"), ip("93.184.216.34"), 443);
        assert_eq!(
            (v.decision, rule_of(&v)),
            (RuleDecision::Allow, Some("example"))
        );
        assert_eq!(
            set.check_name("example.org", 443),
            NameCheck::Deny(Verdict::no_match())
        );
        let v = set.check_address(&host("example.org"), ip("93.184.216.34"), 443);
        assert_eq!((v.decision, rule_of(&v)), (RuleDecision::Deny, None));
    }

    #[test]
    fn ports_restrict_a_rule() {
        let set = RuleSet::compile(&[NetworkRuleSpec {
            ports: Some(vec![443]),
            ..domains("tls-only", &["api.test"], RuleDecision::Allow)
        }])
        .expect("rules");
        assert_eq!(set.check_name("api.test", 443), NameCheck::Resolve);
        assert_eq!(
            set.check_name("api.test", 80),
            NameCheck::Deny(Verdict::no_match())
        );
        let v = set.check_address(&host("api.test"), ip("8.8.8.8"), 8080);
        assert_eq!(v.decision, RuleDecision::Deny);
    }

    #[test]
    fn cidr_rules_never_let_a_name_be_resolved_but_apply_to_its_addresses() {
        let set = RuleSet::compile(&[
            NetworkRuleSpec {
                cidrs: Some(vec!["203.0.113.0/24".into()]),
                ..spec("no-doc-net", RuleDecision::Deny)
            },
            domains("pypi", &["pypi.org"], RuleDecision::Allow),
            NetworkRuleSpec {
                cidrs: Some(vec!["198.51.100.7".into()]),
                ..spec("one-host", RuleDecision::Allow)
            },
        ])
        .expect("rules");
        // A name only a CIDR rule could allow is never looked up.
        assert_eq!(
            set.check_name("anything.org", 443),
            NameCheck::Deny(Verdict::no_match())
        );
        // An address literal is matched by the CIDR rules.
        let v = set.check_address(&host("198.51.100.7"), ip("198.51.100.7"), 443);
        assert_eq!(rule_of(&v), Some("one-host"));
        // A listed name resolving into a denied CIDR is denied by the earlier rule.
        assert_eq!(set.check_name("pypi.org", 443), NameCheck::Resolve);
        let v = set.check_address(&host("pypi.org"), ip("203.0.113.9"), 443);
        assert_eq!(
            (v.decision, rule_of(&v)),
            (RuleDecision::Deny, Some("no-doc-net"))
        );
        let v = set.check_address(&host("pypi.org"), ip("151.101.0.223"), 443);
        assert_eq!(
            (v.decision, rule_of(&v)),
            (RuleDecision::Allow, Some("pypi"))
        );
    }

    #[test]
    fn a_rule_with_names_and_ranges_needs_both() {
        let set = RuleSet::compile(&[NetworkRuleSpec {
            cidrs: Some(vec!["192.0.2.0/24".into()]),
            ..domains("corp", &["*.corp.test"], RuleDecision::Allow)
        }])
        .expect("rules");
        assert_eq!(set.check_name("git.corp.test", 443), NameCheck::Resolve);
        let inside = set.check_address(&host("git.corp.test"), ip("192.0.2.10"), 443);
        assert_eq!(inside.decision, RuleDecision::Allow);
        let outside = set.check_address(&host("git.corp.test"), ip("192.0.3.10"), 443);
        assert_eq!(outside.decision, RuleDecision::Deny);
        // Names are never matched against an address literal.
        let literal = set.check_address(&host("192.0.2.10"), ip("192.0.2.10"), 443);
        assert_eq!(literal.decision, RuleDecision::Deny);
    }

    #[test]
    fn a_catch_all_decides_everything_after_the_rules_before_it() {
        let set = RuleSet::compile(&[
            domains("bad", &["bad.test"], RuleDecision::Deny),
            spec("everything-else", RuleDecision::Log),
        ])
        .expect("rules");
        assert!(matches!(set.check_name("bad.test", 80), NameCheck::Deny(_)));
        assert_eq!(set.check_name("good.test", 80), NameCheck::Resolve);
        let v = set.check_address(&host("10.0.0.1"), ip("10.0.0.1"), 22);
        assert_eq!(
            (v.decision, rule_of(&v)),
            (RuleDecision::Log, Some("everything-else"))
        );
    }

    #[test]
    fn rules_match_names_case_insensitively_and_in_punycode() {
        let set = RuleSet::compile(&[domains("idn", &["*.Bücher.example"], RuleDecision::Allow)])
            .expect("rules");
        let name = host("Shop.BÜCHER.example.");
        assert_eq!(name, Host::Name("shop.xn--bcher-kva.example".into()));
        assert_eq!(
            set.check_name(name.name().expect("name"), 443),
            NameCheck::Resolve
        );
    }

    #[test]
    fn malformed_rules_are_refused_with_their_name() {
        let bad = [
            domains("empty", &[], RuleDecision::Allow),
            domains("star", &["foo*.test"], RuleDecision::Allow),
            NetworkRuleSpec {
                cidrs: Some(vec!["10.0.0.0/33".into()]),
                ..spec("cidr", RuleDecision::Allow)
            },
            NetworkRuleSpec {
                ports: Some(vec![0]),
                ..spec("port", RuleDecision::Allow)
            },
        ];
        for spec in bad {
            let err = NetworkRule::compile(&spec).expect_err("refused");
            assert!(err.to_string().contains(&spec.name), "{err}");
        }
    }

    #[test]
    fn the_yaml_shape_of_the_policy_file_deserialises() {
        let rules: Vec<NetworkRuleSpec> = serde_norway::from_str(
            "- name: pypi\n  domains: ['pypi.org', '*.pythonhosted.org']\n  ports: [443]\n  decision: allow\n\
             - name: ask\n  domains: ['*']\n  decision: approve\n  message: 'needs an operator for {domain}'\n",
        )
        .expect("yaml");
        let set = RuleSet::compile(&rules).expect("rules");
        let v = set.check_address(&host("files.pythonhosted.org"), ip("151.101.0.1"), 443);
        assert_eq!(rule_of(&v), Some("pypi"));
        let v = set.check_address(&host("example.org"), ip("93.184.216.34"), 443);
        assert_eq!(v.decision, RuleDecision::Approve);
        assert!(
            serde_norway::from_str::<Vec<NetworkRuleSpec>>(
                "- name: x\n  decision: allow\n  domain: [a]\n"
            )
            .is_err(),
            "unknown keys are refused"
        );
    }
}
