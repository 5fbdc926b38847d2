//! Policies built from other policies: the per-run [`Grant`] (what an execute, job or session
//! request may ask for) compiled into rules, and [`AllOf`], which makes a grant apply only within
//! what the deployment's policy allows.

use std::net::IpAddr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::names::Host;
use super::rules::{
    EgressPolicy, NameCheck, NetworkRuleSpec, RuleDecision, RuleError, RuleSet, Verdict,
};

/// Several policies that must all agree, such as the deployment's policy and the narrower grant
/// a request carries ("within what the policy allows"). A denial by any denies; otherwise the
/// strictest non-denying decision wins (approve over log over allow).
#[derive(Debug, Clone)]
pub struct AllOf(pub Vec<Arc<dyn EgressPolicy>>);

fn strictness(d: RuleDecision) -> u8 {
    match d {
        RuleDecision::Allow => 0,
        RuleDecision::Log => 1,
        RuleDecision::Approve => 2,
        RuleDecision::Deny => 3,
    }
}

impl EgressPolicy for AllOf {
    fn check_name(&self, name: &str, port: u16) -> NameCheck {
        for policy in &self.0 {
            if let NameCheck::Deny(v) = policy.check_name(name, port) {
                return NameCheck::Deny(v);
            }
        }
        if self.0.is_empty() {
            return NameCheck::Deny(Verdict::no_match());
        }
        NameCheck::Resolve
    }

    fn check_address(&self, host: &Host, address: IpAddr, port: u16) -> Verdict {
        self.0
            .iter()
            .map(|p| p.check_address(host, address, port))
            .max_by_key(|v| strictness(v.decision))
            .unwrap_or_else(Verdict::no_match)
    }
}

/// The per-run network grant (`network: {allowed_domains, blocked_domains, allowed_ports}` on an
/// execute, job or session request, plus optional address ranges).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Grant {
    pub allowed_domains: Vec<String>,
    pub blocked_domains: Vec<String>,
    /// Ports the allowed destinations may be reached on; empty: 80 and 443.
    pub allowed_ports: Vec<u16>,
    /// Address ranges reachable by literal address (never used to look a name up).
    pub cidrs: Vec<String>,
}

/// Ports a grant allows when it names none.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

impl Grant {
    /// The grant as rules, in the order they apply: `blocked_domains` (deny, any port), then
    /// `allowed_domains` and `cidrs` (allow, on the allowed ports).
    pub fn rules(&self) -> Vec<NetworkRuleSpec> {
        let ports = if self.allowed_ports.is_empty() {
            DEFAULT_PORTS.to_vec()
        } else {
            self.allowed_ports.clone()
        };
        let mut specs = Vec::new();
        let rule = |name: &str, decision| NetworkRuleSpec {
            name: name.to_string(),
            domains: None,
            cidrs: None,
            ports: None,
            decision,
            message: None,
        };
        if !self.blocked_domains.is_empty() {
            specs.push(NetworkRuleSpec {
                domains: Some(self.blocked_domains.clone()),
                ..rule("blocked_domains", RuleDecision::Deny)
            });
        }
        if !self.allowed_domains.is_empty() {
            specs.push(NetworkRuleSpec {
                domains: Some(self.allowed_domains.clone()),
                ports: Some(ports.clone()),
                ..rule("allowed_domains", RuleDecision::Allow)
            });
        }
        if !self.cidrs.is_empty() {
            specs.push(NetworkRuleSpec {
                cidrs: Some(self.cidrs.clone()),
                ports: Some(ports),
                ..rule("cidrs", RuleDecision::Allow)
            });
        }
        specs
    }

    pub fn compile(&self) -> Result<RuleSet, RuleError> {
        RuleSet::compile(&self.rules())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    fn host(s: &str) -> Host {
        Host::parse(s).expect("host")
    }

    fn rule_of(v: &Verdict) -> Option<&str> {
        v.rule.as_deref()
    }

    fn domains(name: &str, d: &[&str], decision: RuleDecision) -> NetworkRuleSpec {
        NetworkRuleSpec {
            name: name.into(),
            domains: Some(d.iter().map(|s| s.to_string()).collect()),
            cidrs: None,
            ports: None,
            decision,
            message: None,
        }
    }

    #[test]
    fn a_grant_blocks_before_it_allows_and_defaults_to_web_ports() {
        let grant = Grant {
            allowed_domains: vec!["*.example.com".into()],
            blocked_domains: vec!["secret.example.com".into()],
            allowed_ports: vec![],
            cidrs: vec![],
        };
        let set = grant.compile().expect("grant");
        assert!(matches!(
            set.check_name("secret.example.com", 443),
            NameCheck::Deny(_)
        ));
        assert_eq!(set.check_name("api.example.com", 443), NameCheck::Resolve);
        assert_eq!(set.check_name("api.example.com", 80), NameCheck::Resolve);
        assert!(matches!(
            set.check_name("api.example.com", 8080),
            NameCheck::Deny(_)
        ));
    }

    #[test]
    fn all_of_needs_every_policy_and_keeps_the_strictest_decision() {
        let policy: Arc<dyn EgressPolicy> = Arc::new(
            RuleSet::compile(&[
                domains("gh", &["*.github.com"], RuleDecision::Approve),
                domains("pypi", &["pypi.org"], RuleDecision::Allow),
            ])
            .expect("policy"),
        );
        let grant: Arc<dyn EgressPolicy> = Arc::new(
            Grant {
                allowed_domains: vec!["api.github.com".into(), "example.org".into()],
                ..Grant::default()
            }
            .compile()
            .expect("grant"),
        );
        let both = AllOf(vec![policy, grant]);
        // Outside the policy: the grant cannot widen it.
        assert!(matches!(
            both.check_name("example.org", 443),
            NameCheck::Deny(_)
        ));
        // Outside the grant: the policy alone does not let it through.
        assert!(matches!(
            both.check_name("pypi.org", 443),
            NameCheck::Deny(_)
        ));
        assert_eq!(both.check_name("api.github.com", 443), NameCheck::Resolve);
        let v = both.check_address(&host("api.github.com"), ip("140.82.112.6"), 443);
        assert_eq!(
            (v.decision, rule_of(&v)),
            (RuleDecision::Approve, Some("gh"))
        );
    }
}
