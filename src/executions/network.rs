//! Network access of executions and sessions: which policy bounds it (the one a run or session is
//! enforced under, else the deployment's default policy, `policy.default`), whether a run opts
//! in, and the audit entries of denials, approvals and limits. What the bound allows and how a
//! request's `network` field is checked against it is `sandbox::egress::bound`.

use serde::Serialize;
use tokio::sync::mpsc;

use super::{Executions, audit};
use crate::domain::network::NetworkGrant;
use crate::domain::record::ExecutionRecord;
use crate::policy::Policies;
use crate::sandbox::egress::bound::NetworkBound;
pub(crate) use crate::sandbox::egress::bound::{NetworkChoiceError, NetworkSettings};
use crate::sandbox::{ApprovalAsk, NetworkAccess};
use crate::store::AuditEvent;

/// The policy bounding a run's (or session's) network: the one it is enforced under, else the
/// deployment's default policy (`None`: that policy is not configured).
pub(crate) fn bound(policies: &Policies, policy: Option<&str>) -> Option<NetworkBound> {
    let name = policy.unwrap_or(&policies.settings().default);
    let loaded = policies.get(name)?;
    Some(NetworkBound::of(name, loaded.policy.policy()))
}

/// Checks a request's `network` for a run (or session) enforced under `policy` (`None`: not
/// enforced) against what bounds it.
pub(crate) fn check_network(
    policies: &Policies,
    policy: Option<&str>,
    grant: &NetworkGrant,
) -> Result<(), NetworkChoiceError> {
    bound(policies, policy)
        .ok_or_else(|| {
            NetworkChoiceError::NotAllowed("no policy bounds this run's network".into())
        })?
        .check(grant)
}

/// Whether a run (or session) under `policy` with the request's `grant` has network access
/// (see the module doc).
pub(crate) fn opted_in(
    policies: &Policies,
    policy: Option<&str>,
    grant: Option<&NetworkGrant>,
) -> bool {
    grant.is_some()
        || policy.is_some_and(|name| bound(policies, Some(name)).is_some_and(|b| b.opts_in()))
}

/// The network access of a run (or session) that opted in, within `settings`, its `approve`
/// rules decided through `asks`; or why it cannot have it.
pub(crate) fn access(
    policies: &Policies,
    policy: Option<&str>,
    grant: Option<&NetworkGrant>,
    settings: &NetworkSettings,
    asks: mpsc::Sender<ApprovalAsk>,
) -> Result<NetworkAccess, String> {
    bound(policies, policy)
        .ok_or("the run's policy is no longer configured")?
        .access(grant, settings.limits, settings.approval_timeout, asks)
}

impl Executions {
    /// Checks a request's `network` for a run enforced under `policy` (`None`: not enforced).
    pub(crate) fn check_network(
        &self,
        policy: Option<&str>,
        grant: &NetworkGrant,
    ) -> Result<(), NetworkChoiceError> {
        check_network(self.run_policies.policies(), policy, grant)
    }

    /// Whether a run has network access (see the module doc).
    pub(super) fn network_opted_in(&self, rec: &ExecutionRecord) -> bool {
        opted_in(
            self.run_policies.policies(),
            rec.run.policy(),
            rec.run.network(),
        )
    }

    /// The network access of a run that opted in, or why it cannot have it.
    pub(super) fn network_access(
        &self,
        rec: &ExecutionRecord,
        asks: mpsc::Sender<ApprovalAsk>,
    ) -> Result<NetworkAccess, String> {
        access(
            self.run_policies.policies(),
            rec.run.policy(),
            rec.run.network(),
            &self.network,
            asks,
        )
    }
}

#[derive(Serialize)]
struct NetworkDecision<'a> {
    #[serde(flatten)]
    event: &'a serde_json::Value,
}

/// Every denied, logged, approved or limited connection of a run with network access, from the
/// events its result keeps.
pub(super) fn network_decisions(rec: &ExecutionRecord) -> Vec<AuditEvent> {
    let Some(network) = rec.result.as_ref().and_then(|r| r.network.as_ref()) else {
        return Vec::new();
    };
    network
        .network_operations
        .iter()
        .filter(|e| needs_audit(e))
        .map(|event| {
            audit::entry(
                rec,
                "service",
                "network_decision",
                NetworkDecision { event },
            )
        })
        .collect()
}

/// The kept form of `NetworkEvent::needs_audit` (the proxy's events as the record keeps them).
fn needs_audit(event: &serde_json::Value) -> bool {
    match event["type"].as_str() {
        Some("net_connect") => {
            event["decision"] != "allow"
                || !event["approval"].is_null()
                || !event["limit"].is_null()
        }
        Some("net_limit") => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::egress::RuleSet;
    use crate::sandbox::egress::bound::{check_grant, opts_in, rule_specs};

    fn grant(allowed: &[&str], ports: &[u16]) -> NetworkGrant {
        NetworkGrant {
            allowed_domains: allowed.iter().map(|s| s.to_string()).collect(),
            blocked_domains: Vec::new(),
            allowed_ports: ports.to_vec(),
        }
    }

    #[test]
    fn the_built_in_policies_translate_and_allow_no_names() {
        let loaded = crate::policy::Policies::load(&crate::policy::PolicySettings::default())
            .expect("built-in policies");
        for (name, policy) in loaded.iter() {
            let specs = rule_specs(policy.policy.policy());
            RuleSet::compile(&specs).expect("compiles");
            assert!(!opts_in(&specs), "{name}");
        }
        let default = rule_specs(loaded.get("default").expect("default").policy.policy());
        assert!(check_grant(&grant(&["pypi.org"], &[]), "default", &default).is_err());
        let audit = rule_specs(loaded.get("audit").expect("audit").policy.policy());
        check_grant(&grant(&["pypi.org"], &[]), "audit", &audit).expect("audit logs anything");
    }
}
