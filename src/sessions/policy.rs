//! The run-time policy of a session: chosen at creation as for `/v1/execute` (the request's
//! `policy`, the token's default, `policy.enforce_default`), enforced by the sandbox on every
//! command, and what is kept of what it decided: each command's events, their live stream, and an
//! audit record for every `deny`, `approve` and `log` decision.

use std::time::Duration;

use scriptgate_policy::Decision;
use scriptgate_policy::events::{Event, Events, FileOperationType, NetworkEvent};
use serde::Serialize;
use sha2::Digest;
use tokio::sync::broadcast;
use uuid::Uuid;

use super::{Session, SessionError, Sessions};
use crate::auth::Caller;
use crate::policy::{Chooser, PolicyChoiceError};
use crate::sandbox::Enforcement;
use crate::store::AuditEvent;

/// Events buffered per live subscriber before a slow one starts missing them.
const LIVE_BUFFER: usize = 1024;

/// The actor of the audit records the service writes itself.
const SERVICE: &str = "scriptgate";

impl Sessions {
    /// The policy every command of `caller`'s new session runs under (`None`: not enforced).
    pub(super) fn choose_policy(
        &self,
        caller: &Caller,
        requested: Option<&str>,
    ) -> Result<Option<String>, SessionError> {
        let chooser = if self.open_policies {
            Chooser::Anyone
        } else {
            Chooser::Agent(&caller.name)
        };
        Ok(self.policies.choose(chooser, requested)?)
    }

    /// What the sandbox enforces for the policy `name`, with the channel its events go out on.
    pub(super) fn enforcement(
        &self,
        name: &str,
    ) -> Result<(Enforcement, broadcast::Sender<Event>), SessionError> {
        let loaded = self.policies.get(name).ok_or_else(|| {
            SessionError::Policy(PolicyChoiceError::Unknown {
                requested: name.to_string(),
                known: self.policies.names().collect::<Vec<_>>().join(", "),
            })
        })?;
        let settings = self.policies.settings();
        let (live, _) = broadcast::channel(LIVE_BUFFER);
        let enforcement = Enforcement {
            policy: loaded.policy.wire(),
            event_cap: settings.event_cap,
            approval_timeout: Duration::from_secs(settings.approval_timeout_secs),
            approvals: None,
            live: Some(live.clone()),
            approved_commands: Vec::new(),
        };
        Ok((enforcement, live))
    }

    /// Appends an audit record for every decision of `events` that was not a plain `allow`
    /// (those beyond `policy.event_cap` are counted in the result, not audited one by one).
    pub(super) async fn audit_decisions(
        &self,
        session: &Session,
        command_id: Uuid,
        text: &str,
        events: &Events,
    ) {
        let Some(policy) = session.policy.as_deref() else {
            return;
        };
        let sha = hex::encode(sha2::Sha256::digest(text.as_bytes()));
        let records: Vec<AuditEvent> = decisions(events)
            .into_iter()
            .filter(|d| d.decision != Decision::Allow)
            .map(|d| {
                let outcome = PolicyDecision {
                    session_id: session.id,
                    agent: &session.agent,
                    policy,
                    operation: d.operation,
                    target: &d.target,
                    decision: d.decision,
                    rule: d.rule,
                };
                let outcome = serde_json::to_value(outcome).expect("audit entries serialise");
                AuditEvent::new(SERVICE, command_id, "policy_decision", &sha, outcome)
            })
            .collect();
        if records.is_empty() {
            return;
        }
        if let Err(e) = self.store.append_audit(records).await {
            tracing::error!(session_id = %session.id, %command_id, error = %e, "could not audit the command's policy decisions");
        }
    }
}

/// One decision of a command's policy, as its audit record names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Decided<'a> {
    pub operation: &'static str,
    pub target: String,
    pub decision: Decision,
    pub rule: Option<&'a str>,
}

#[derive(Serialize)]
struct PolicyDecision<'a> {
    session_id: Uuid,
    agent: &'a str,
    policy: &'a str,
    operation: &'static str,
    target: &'a str,
    decision: Decision,
    rule: Option<&'a str>,
}

/// Every decision `events` lists: programs, file operations, connections.
pub(super) fn decisions(events: &Events) -> Vec<Decided<'_>> {
    let mut out = Vec::new();
    for p in events.processes.items() {
        out.push(Decided {
            operation: "process",
            target: p.argv.join(" "),
            decision: p.decision,
            rule: p.rule.as_deref(),
        });
    }
    for f in events.file_operations.items() {
        out.push(Decided {
            operation: file_kind(f.kind),
            target: f.path.clone(),
            decision: f.decision,
            rule: f.rule.as_deref(),
        });
    }
    for n in events.network_operations.items() {
        out.push(match n {
            NetworkEvent::NetConnect {
                remote,
                port,
                decision,
                rule,
                ..
            } => Decided {
                operation: "net_connect",
                target: format!("{remote}:{port}"),
                decision: *decision,
                rule: rule.as_deref(),
            },
            NetworkEvent::DnsQuery {
                domain, decision, ..
            } => Decided {
                operation: "dns_query",
                target: domain.clone(),
                decision: *decision,
                rule: None,
            },
        });
    }
    out
}

/// The static name of a file operation's type.
fn file_kind(kind: FileOperationType) -> &'static str {
    match kind {
        FileOperationType::FileRead => "file_read",
        FileOperationType::FileWrite => "file_write",
        FileOperationType::FileCreate => "file_create",
        FileOperationType::FileDelete => "file_delete",
        FileOperationType::FileList => "file_list",
        FileOperationType::FileStat => "file_stat",
        FileOperationType::FileExec => "file_exec",
    }
}

#[cfg(test)]
mod tests {
    use scriptgate_policy::events::{FileEvent, ProcessEvent};

    use super::*;

    #[test]
    fn every_listed_decision_is_named_with_its_operation_and_target() {
        let mut events = Events::with_cap(10);
        events.push(Event::Process(ProcessEvent {
            pid: 7,
            argv: vec!["ls".into(), "-l".into()],
            cwd: "/workspace".into(),
            decision: Decision::Allow,
            rule: Some("any-program".into()),
        }));
        events.push(Event::File(FileEvent {
            kind: FileOperationType::FileWrite,
            path: "/etc/x".into(),
            bytes: None,
            decision: Decision::Deny,
            rule: Some("no-writes".into()),
        }));
        let d = decisions(&events);
        assert_eq!(d.len(), 2);
        assert_eq!((d[0].operation, d[0].target.as_str()), ("process", "ls -l"));
        assert_eq!(
            (d[1].operation, d[1].decision, d[1].rule),
            ("file_write", Decision::Deny, Some("no-writes"))
        );
    }
}
