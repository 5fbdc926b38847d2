//! The network access of a session: its `network` field and `max_network_mb` checked when it is
//! created (within what its policy allows, as for a one-shot run), and the access every command
//! of it gets through the egress proxy, with the byte budget counted over the session's life.

use serde::Serialize;
use sha2::Digest;
use tokio::sync::mpsc;
use uuid::Uuid;

use super::{Session, SessionError, Sessions};
use crate::domain::network::NetworkGrant;
use crate::sandbox::egress::bound::{NetworkBound, NetworkChoiceError};
use crate::sandbox::egress::{NetLimits, NetworkEvent, NetworkReport};
use crate::sandbox::{ApprovalAsk, NetworkAccess};
use crate::store::AuditEvent;

const MB: u64 = 1 << 20;

/// What a session that opted in to network access gets: the request's narrowing and its limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SessionNetwork {
    pub grant: Option<NetworkGrant>,
    /// MiB sent plus received over the session's life (0: no limit).
    pub max_network_mb: u64,
    limits: NetLimits,
}

impl Sessions {
    /// The policy bounding a session's network: its own, else the deployment's default.
    fn network_bound(&self, policy: Option<&str>) -> Option<NetworkBound> {
        let name = policy.unwrap_or(&self.policies.settings().default);
        let loaded = self.policies.get(name)?;
        Some(NetworkBound::of(name, loaded.policy.policy()))
    }

    /// Checks a new session's `network` and `max_network_mb` under `policy`: `None` when it has
    /// no network access (neither field, and a policy that gives none by itself).
    pub(super) fn check_network(
        &self,
        policy: Option<&str>,
        grant: Option<NetworkGrant>,
        max_network_mb: Option<u64>,
    ) -> Result<Option<SessionNetwork>, SessionError> {
        let bound = self.network_bound(policy);
        let opted_in = grant.is_some()
            || (policy.is_some() && bound.as_ref().is_some_and(NetworkBound::opts_in));
        if !opted_in {
            return match max_network_mb {
                None => Ok(None),
                Some(_) => Err(SessionError::Invalid(
                    "max_network_mb: the session has no network access (send `network`)".into(),
                )),
            };
        }
        if let Some(g) = &grant {
            bound
                .ok_or_else(|| {
                    NetworkChoiceError::NotAllowed("no policy bounds this session's network".into())
                })?
                .check(g)?;
        }
        let mut limits = self.network.limits;
        let deployment_mb = limits.session_bytes / MB;
        let mb = match max_network_mb {
            None => deployment_mb,
            Some(mb) if mb >= 1 && (deployment_mb == 0 || mb <= deployment_mb) => mb,
            Some(mb) => {
                let max = if deployment_mb == 0 {
                    String::from("no limit")
                } else {
                    deployment_mb.to_string()
                };
                return Err(SessionError::Invalid(format!(
                    "max_network_mb: must be at least 1 and at most {max} (egress.max_network_mb), got {mb}"
                )));
            }
        };
        limits.session_bytes = mb.saturating_mul(MB);
        Ok(Some(SessionNetwork {
            grant,
            max_network_mb: mb,
            limits,
        }))
    }

    /// The access a session's sandbox opens with, its `approve` rules decided through `asks`.
    pub(super) fn network_access(
        &self,
        policy: Option<&str>,
        network: &SessionNetwork,
        asks: mpsc::Sender<ApprovalAsk>,
    ) -> Result<NetworkAccess, SessionError> {
        let refused = |reason: String| {
            SessionError::Sandbox(crate::sandbox::SandboxError::NetworkUnavailable(reason))
        };
        self.network_bound(policy)
            .ok_or_else(|| refused("the session's policy is no longer configured".into()))?
            .access(
                network.grant.as_ref(),
                network.limits,
                self.network.approval_timeout,
                asks,
            )
            .map_err(refused)
    }

    /// Audits the command's denied, logged, approved and limited connections (`network_decision`,
    /// as for executions), before its result is visible.
    pub(super) async fn audit_network(
        &self,
        session: &Session,
        command_id: Uuid,
        text: &str,
        report: &NetworkReport,
    ) {
        let sha = hex::encode(sha2::Sha256::digest(text.as_bytes()));
        let records: Vec<AuditEvent> = report
            .network_operations
            .iter()
            .filter(|e| e.needs_audit())
            .filter_map(|event| {
                let outcome = NetworkDecision {
                    session_id: session.id,
                    agent: &session.agent,
                    event,
                };
                let outcome = serde_json::to_value(outcome).ok()?;
                Some(AuditEvent::new(
                    "service",
                    command_id,
                    "network_decision",
                    &sha,
                    outcome,
                ))
            })
            .collect();
        if records.is_empty() {
            return;
        }
        if let Err(e) = self.store.append_audit(records).await {
            tracing::error!(session_id = %session.id, %command_id, error = %e, "could not audit the command's network decisions");
        }
    }
}

/// A network decision of a session's command, as its audit record keeps it.
#[derive(Serialize)]
struct NetworkDecision<'a> {
    session_id: Uuid,
    agent: &'a str,
    #[serde(flatten)]
    event: &'a NetworkEvent,
}
