//! What bounds the network of a run or a session: the network rules of the policy it runs
//! under (in the proxy's vocabulary), a request's `network` field checked against them (it may
//! narrow, never widen), and the [`NetworkAccess`] they compile to, with operators deciding
//! connections held by `approve` rules through the held operations of `/v1/approvals`.
//!
//! A run or session opts in when its request has `network`, or when its policy has a non-deny
//! network rule that names domains (catch-all rules such as `audit`'s `log` rule bound a
//! request's names but do not by themselves give network access).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use scriptgate_policy::Decision as PolicyDecision;
use scriptgate_policy::events::OperationType;
use tokio::sync::{mpsc, oneshot};

use super::{
    AllOf, ApprovalAnswer, ApprovalRequest, DEFAULT_PORTS, DomainPattern, EgressPolicy, Grant,
    NameCheck, NetLimits, NetworkApprover, NetworkRuleSpec, RuleDecision, RuleSet,
};
use crate::domain::network::NetworkGrant;
use crate::sandbox::{ApprovalAsk, ApprovalVerdict, NetworkAccess};

/// Names and ports a request may list at most (each list).
const MAX_ENTRIES: usize = 64;

/// A `network` field a request may not have.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NetworkChoiceError {
    /// Malformed: a bad name or port (400).
    #[error("network: {0}")]
    Invalid(String),
    /// Wider than the run's policy allows (403).
    #[error("network: {0}")]
    NotAllowed(String),
}

/// How runs with network access are limited and held (from `egress`).
#[derive(Debug, Clone)]
pub(crate) struct NetworkSettings {
    pub limits: NetLimits,
    /// How long a connection under an `approve` rule is listed for an operator.
    pub approval_timeout: Duration,
}

impl Default for NetworkSettings {
    fn default() -> Self {
        NetworkSettings {
            limits: NetLimits::from(&super::EgressLimits::default()),
            approval_timeout: Duration::from_secs(120),
        }
    }
}

/// A policy's `network_rules` in the egress proxy's vocabulary (port ranges spelt out).
pub(crate) fn rule_specs(policy: &scriptgate_policy::Policy) -> Vec<NetworkRuleSpec> {
    policy
        .network_rules
        .iter()
        .map(|r| NetworkRuleSpec {
            name: r.name.clone(),
            domains: r.domains.clone(),
            cidrs: r.cidrs.clone(),
            ports: r.ports.as_ref().map(|ports| {
                ports
                    .iter()
                    .flat_map(|p| match *p {
                        scriptgate_policy::PortSpec::One(p) => p..=p,
                        scriptgate_policy::PortSpec::Range(lo, hi) => lo..=hi,
                    })
                    .collect()
            }),
            decision: match r.decision {
                PolicyDecision::Allow => RuleDecision::Allow,
                PolicyDecision::Deny => RuleDecision::Deny,
                PolicyDecision::Approve => RuleDecision::Approve,
                PolicyDecision::Log => RuleDecision::Log,
            },
            message: r.message.clone(),
        })
        .collect()
}

/// Whether the rules give a run network access on their own: a non-deny rule naming domains.
pub(crate) fn opts_in(specs: &[NetworkRuleSpec]) -> bool {
    specs
        .iter()
        .any(|r| r.decision != RuleDecision::Deny && r.domains.is_some())
}

fn parse_patterns(key: &str, list: &[String]) -> Result<Vec<DomainPattern>, NetworkChoiceError> {
    if list.len() > MAX_ENTRIES {
        return Err(NetworkChoiceError::Invalid(format!(
            "{key}: at most {MAX_ENTRIES} names, got {}",
            list.len()
        )));
    }
    list.iter()
        .map(|d| {
            DomainPattern::parse(d).map_err(|e| NetworkChoiceError::Invalid(format!("{key}: {e}")))
        })
        .collect()
}

/// Whether a policy rule's pattern covers every name `wanted` matches.
fn pattern_covers(rule: &DomainPattern, wanted: &DomainPattern) -> bool {
    match (rule, wanted) {
        (DomainPattern::Any, _) => true,
        (DomainPattern::Below(outer), DomainPattern::Below(inner)) => {
            inner.ends_with(outer.as_str())
        }
        (_, DomainPattern::Exact(name)) => rule.matches(name),
        _ => false,
    }
}

/// Whether the policy lets the run reach what `wanted` names on `port`: an exact name as the
/// proxy would decide it, a wildcard when a non-deny rule covers all of it (deny rules before
/// it still apply at run time, where both must agree).
fn allowed_by(set: &RuleSet, specs: &[NetworkRuleSpec], wanted: &DomainPattern, port: u16) -> bool {
    if let DomainPattern::Exact(name) = wanted {
        return set.check_name(name, port) == NameCheck::Resolve;
    }
    specs.iter().any(|r| {
        r.decision != RuleDecision::Deny
            && r.cidrs.is_none()
            && r.ports.as_ref().is_none_or(|p| p.contains(&port))
            && match &r.domains {
                None => true,
                Some(domains) => domains
                    .iter()
                    .filter_map(|d| DomainPattern::parse(d).ok())
                    .any(|d| pattern_covers(&d, wanted)),
            }
    })
}

/// Checks a request's `network` against the rules of the policy `bound` (its name and rules).
pub(crate) fn check_grant(
    grant: &NetworkGrant,
    bound: &str,
    specs: &[NetworkRuleSpec],
) -> Result<(), NetworkChoiceError> {
    if grant.allowed_domains.is_empty() {
        return Err(NetworkChoiceError::Invalid(
            "allowed_domains: name at least one domain".into(),
        ));
    }
    let allowed = parse_patterns("allowed_domains", &grant.allowed_domains)?;
    parse_patterns("blocked_domains", &grant.blocked_domains)?;
    if grant.allowed_ports.len() > MAX_ENTRIES {
        return Err(NetworkChoiceError::Invalid(format!(
            "allowed_ports: at most {MAX_ENTRIES} ports"
        )));
    }
    if grant.allowed_ports.contains(&0) {
        return Err(NetworkChoiceError::Invalid(
            "allowed_ports: 0 is not a port".into(),
        ));
    }
    let set = RuleSet::compile(specs).map_err(|e| {
        NetworkChoiceError::NotAllowed(format!("the policy `{bound}` has unusable rules: {e}"))
    })?;
    let ports = if grant.allowed_ports.is_empty() {
        DEFAULT_PORTS.to_vec()
    } else {
        grant.allowed_ports.clone()
    };
    for wanted in &allowed {
        for &port in &ports {
            if !allowed_by(&set, specs, wanted, port) {
                return Err(NetworkChoiceError::NotAllowed(format!(
                    "`{wanted}` on port {port} is outside what the policy `{bound}` allows"
                )));
            }
        }
    }
    Ok(())
}

fn grant_of(g: &NetworkGrant) -> Grant {
    Grant {
        allowed_domains: g.allowed_domains.clone(),
        blocked_domains: g.blocked_domains.clone(),
        allowed_ports: g.allowed_ports.clone(),
        cidrs: Vec::new(),
    }
}

/// Decides connections held by `approve` rules through the held operations of `/v1/approvals`.
#[derive(Debug)]
struct HeldApprover {
    asks: mpsc::Sender<ApprovalAsk>,
    timeout: Duration,
}

impl NetworkApprover for HeldApprover {
    fn decide(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalAnswer> {
        let asks = self.asks.clone();
        let timeout_ms = u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX);
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            let ask = ApprovalAsk {
                request: crate::sandbox::ApprovalRequest {
                    id: 0,
                    operation: OperationType::NetConnect,
                    target: format!("{}:{}", request.domain, request.port),
                    command: None,
                    argv: None,
                    cwd: String::new(),
                    pid: 0,
                    rule: request.rule.clone(),
                    message: request.message.clone(),
                    recent_commands: Vec::new(),
                    timeout_ms,
                },
                answer: tx,
            };
            let denied = |reason: &str| ApprovalAnswer::Denied {
                by: None,
                reason: Some(reason.to_string()),
            };
            if asks.send(ask).await.is_err() {
                return denied("the run ended");
            }
            match rx.await {
                Ok(ApprovalVerdict::Approved) => ApprovalAnswer::Approved { by: None },
                Ok(_) => denied("an operator denied it"),
                Err(_) => denied("the run ended"),
            }
        })
    }
}

/// The policy that bounds a run's or session's network: its name and its rules.
#[derive(Debug, Clone)]
pub(crate) struct NetworkBound {
    name: String,
    specs: Vec<NetworkRuleSpec>,
}

impl NetworkBound {
    /// The network rules of the policy `name`.
    pub(crate) fn of(name: &str, policy: &scriptgate_policy::Policy) -> NetworkBound {
        NetworkBound {
            name: name.to_string(),
            specs: rule_specs(policy),
        }
    }

    /// Checks a request's `network` against the rules.
    pub(crate) fn check(&self, grant: &NetworkGrant) -> Result<(), NetworkChoiceError> {
        check_grant(grant, &self.name, &self.specs)
    }

    /// Whether the rules give network access without a request's `network`.
    pub(crate) fn opts_in(&self) -> bool {
        opts_in(&self.specs)
    }

    /// The network access within the rules (narrowed by `grant`), within `settings.limits`,
    /// its `approve` rules decided through `asks`; or why it cannot be given.
    pub(crate) fn access(
        &self,
        grant: Option<&NetworkGrant>,
        limits: NetLimits,
        approval_timeout: Duration,
        asks: mpsc::Sender<ApprovalAsk>,
    ) -> Result<NetworkAccess, String> {
        let name = &self.name;
        let set = RuleSet::compile(&self.specs)
            .map_err(|e| format!("the policy `{name}` has unusable network rules: {e}"))?;
        let mut egress: Arc<dyn EgressPolicy> = Arc::new(set);
        if let Some(g) = grant {
            // Checked at the edge, but the rules may have changed since (a restart).
            self.check(g).map_err(|e| e.to_string())?;
            let narrowed = grant_of(g).compile().map_err(|e| format!("network: {e}"))?;
            egress = Arc::new(AllOf(vec![egress, Arc::new(narrowed)]));
        }
        Ok(NetworkAccess {
            policy: egress,
            limits,
            approver: Some(Arc::new(HeldApprover {
                asks,
                timeout: approval_timeout,
            })),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, domains: Option<&[&str]>, decision: RuleDecision) -> NetworkRuleSpec {
        NetworkRuleSpec {
            name: name.into(),
            domains: domains.map(|d| d.iter().map(|s| s.to_string()).collect()),
            cidrs: None,
            ports: None,
            decision,
            message: None,
        }
    }

    fn grant(allowed: &[&str], ports: &[u16]) -> NetworkGrant {
        NetworkGrant {
            allowed_domains: allowed.iter().map(|s| s.to_string()).collect(),
            blocked_domains: Vec::new(),
            allowed_ports: ports.to_vec(),
        }
    }

    fn policy() -> Vec<NetworkRuleSpec> {
        vec![
            spec(
                "no-secret",
                Some(&["secret.example.com"]),
                RuleDecision::Deny,
            ),
            spec("example", Some(&["*.example.com"]), RuleDecision::Allow),
            spec("pypi", Some(&["pypi.org"]), RuleDecision::Log),
            spec("rest", None, RuleDecision::Deny),
        ]
    }

    #[test]
    fn a_grant_within_the_policy_passes_and_a_wider_one_is_refused() {
        let p = policy();
        for ok in [
            &["pypi.org"][..],
            &["a.example.com", "*.b.example.com"],
            &["*.example.com"],
        ] {
            check_grant(&grant(ok, &[]), "p", &p).expect("within");
        }
        for wide in [
            &["example.org"][..],
            &["*"],
            &["example.com"],
            &["secret.example.com"],
        ] {
            let err = check_grant(&grant(wide, &[]), "p", &p).expect_err("wider");
            assert!(
                matches!(err, NetworkChoiceError::NotAllowed(_)),
                "{wide:?}: {err}"
            );
        }
    }

    #[test]
    fn ports_are_checked_against_the_rules_ports() {
        let mut p = policy();
        p[2].ports = Some(vec![443]);
        check_grant(&grant(&["pypi.org"], &[443]), "p", &p).expect("443 allowed");
        let err = check_grant(&grant(&["pypi.org"], &[]), "p", &p).expect_err("80 is not");
        assert!(err.to_string().contains("port 80"), "{err}");
    }

    #[test]
    fn malformed_grants_are_invalid_not_forbidden() {
        let p = policy();
        let cases = [
            grant(&[], &[]),
            grant(&["exa mple.com"], &[]),
            grant(&["*.*.example.com"], &[]),
            grant(&["a.example.com"], &[0]),
        ];
        for g in cases {
            let err = check_grant(&g, "p", &p).expect_err("invalid");
            assert!(
                matches!(err, NetworkChoiceError::Invalid(_)),
                "{g:?}: {err}"
            );
        }
    }

    #[test]
    fn only_named_non_deny_rules_opt_a_run_in() {
        assert!(opts_in(&policy()));
        assert!(!opts_in(&[spec("anything", None, RuleDecision::Log)]));
        assert!(!opts_in(&[spec(
            "no",
            Some(&["a.test"]),
            RuleDecision::Deny
        )]));
    }
}
