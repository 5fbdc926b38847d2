//! The session's `file_rules` on the host's files API: an upload is a write and a creation, a
//! download a read, a delete a deletion, a listing a list, each decided on the path it names
//! before the container is asked. `deny` refuses it (403 `policy_violation`), `approve` too with
//! its own error (403 `approval_required`, the rendered message: the files API answers at once and
//! cannot hold a request for an operator; a command can), `log` lets it through; every decision that is not a
//! plain `allow` is an audit record.
//!
//! A delete of a directory is decided on the directory's path only: rules on paths inside it do
//! not apply to what it removes with it (a policy that protects a subtree should deny `delete` on
//! its parents too).

use scriptgate_policy::events::{Event, Events};
use scriptgate_policy::{Decision, Operation};
use serde::Serialize;

use super::{Session, SessionError, Sessions};
use crate::auth::Caller;
use crate::domain::record::{PolicyCheck, PolicyCheckKind};
use crate::store::AuditEvent;

#[derive(Serialize)]
struct FileApiDecision<'a> {
    session_id: uuid::Uuid,
    policy: &'a str,
    /// Where the operation came from: the files API (`files_api`) or a job's file steps (`job`),
    /// not a command.
    via: &'static str,
    operation: &'static str,
    target: &'a str,
    decision: Decision,
    rule: Option<&'a str>,
}

impl Sessions {
    /// Whether the session's policy lets `caller` perform `operations` on `path` (each must be
    /// allowed or logged); `Err` names the rule that refused and its message.
    pub(super) async fn file_rules(
        &self,
        caller: &Caller,
        session: &Session,
        operations: &[Operation],
        path: &str,
    ) -> Result<(), SessionError> {
        let Some(name) = session.policy.as_deref() else {
            return Ok(());
        };
        let Some(loaded) = self.policies.get(name) else {
            return Err(SessionError::Denied {
                rule: None,
                message: format!("the session's policy `{name}` is no longer configured"),
            });
        };
        let mut audit = Vec::new();
        let mut refused = None;
        for &op in operations {
            let verdict = loaded.policy.decide_file(op, path);
            if verdict.decision != Decision::Allow {
                audit.push(record(
                    caller,
                    session,
                    (name, "files_api"),
                    (op, path),
                    verdict.decision,
                    verdict.rule(),
                ));
            }
            let refusal = match verdict.decision {
                Decision::Deny => Some(SessionError::Denied {
                    rule: verdict.rule().map(str::to_string),
                    message: denial(op, path, verdict.rule(), verdict.message()),
                }),
                Decision::Approve => Some(SessionError::ApprovalRequired {
                    rule: verdict.rule().map(str::to_string),
                    message: held(op, path, verdict.rule(), verdict.message(), "the files API"),
                }),
                Decision::Allow | Decision::Log => None,
            };
            if let Some(refusal) = refusal {
                refused = Some(refusal);
                break;
            }
        }
        if !audit.is_empty()
            && let Err(e) = self.store.append_audit(audit).await
        {
            tracing::error!(session_id = %session.id, error = %e, "could not audit a files API decision");
        }
        refused.map_or(Ok(()), Err)
    }
}

impl Sessions {
    /// The `approve` and `log` decisions of the session's policy on the files of a job in the
    /// session (`checks`, from `Executions::policy_files`): each is audited under the session; an
    /// `approve` refuses the job (a session's job answers at once and is not held). The `log`
    /// decisions come back as the events of the job's result (`None` when there are none).
    pub(crate) async fn job_file_decisions(
        &self,
        caller: &Caller,
        session: &Session,
        checks: &[PolicyCheck],
    ) -> Result<Option<Events>, SessionError> {
        let Some(name) = session.policy.as_deref() else {
            return Ok(None);
        };
        let mut audit = Vec::new();
        let mut refused = None;
        for check in checks.iter().filter(|c| c.kind == PolicyCheckKind::File) {
            let Some((op, path)) = check
                .target
                .split_once(' ')
                .and_then(|(op, path)| Some((op.parse::<Operation>().ok()?, path)))
            else {
                continue;
            };
            let rule = check.rule.as_deref();
            audit.push(record(
                caller,
                session,
                (name, "job"),
                (op, path),
                check.decision,
                rule,
            ));
            if check.decision == Decision::Approve && refused.is_none() {
                refused = Some(SessionError::ApprovalRequired {
                    rule: check.rule.clone(),
                    message: held(op, path, rule, check.message.as_deref(), "a session's job"),
                });
            }
        }
        if !audit.is_empty()
            && let Err(e) = self.store.append_audit(audit).await
        {
            tracing::error!(session_id = %session.id, error = %e, "could not audit a job's file decision");
        }
        if let Some(refused) = refused {
            return Err(refused);
        }
        let logged: Vec<_> = checks.iter().filter_map(PolicyCheck::file_event).collect();
        if logged.is_empty() {
            return Ok(None);
        }
        let mut events = Events::with_cap(self.policies.settings().event_cap as usize);
        for event in logged {
            events.push(Event::File(event));
        }
        Ok(Some(events))
    }
}

/// Why a `deny` refused: the rule's message, else which rule (or none) refused.
fn denial(op: Operation, path: &str, rule: Option<&str>, message: Option<impl ToString>) -> String {
    if let Some(m) = message {
        return m.to_string();
    }
    match rule {
        Some(rule) => format!(
            "{} of {path} is refused by the session's policy (rule `{rule}`)",
            op.as_str()
        ),
        None => format!(
            "{} of {path} is refused: no rule of the session's policy allows it",
            op.as_str()
        ),
    }
}

/// Why an `approve` refused: the files API answers at once, so it says where an operator can
/// decide instead (a command, which the policy holds in `/v1/approvals`).
fn held(
    op: Operation,
    path: &str,
    rule: Option<&str>,
    message: Option<impl ToString>,
    what: &str,
) -> String {
    let mut text = format!(
        "{} of {path} needs an operator's approval (rule `{}`",
        op.as_str(),
        rule.unwrap_or("?")
    );
    if let Some(m) = message {
        text.push_str(": ");
        text.push_str(&m.to_string());
    }
    text.push_str(&format!(
        "); {what} does not wait for one: perform it with a command, which the session's policy \
         holds for an operator in /v1/approvals"
    ));
    text
}

/// The audit record of one decision: `(op, path)` decided `decision` by `rule`.
fn record(
    caller: &Caller,
    session: &Session,
    (policy, via): (&str, &'static str),
    (op, path): (Operation, &str),
    decision: Decision,
    rule: Option<&str>,
) -> AuditEvent {
    let outcome = FileApiDecision {
        session_id: session.id,
        policy,
        via,
        operation: file_operation(op),
        target: path,
        decision,
        rule,
    };
    AuditEvent {
        actor: caller.name.clone(),
        execution_id: Some(session.id),
        event: "policy_decision",
        script_sha256: None,
        outcome: serde_json::to_value(outcome).expect("audit entries serialise"),
    }
}

/// The operation as events name it.
fn file_operation(op: Operation) -> &'static str {
    match op {
        Operation::Read => "file_read",
        Operation::Write => "file_write",
        Operation::Create => "file_create",
        Operation::Delete => "file_delete",
        Operation::List => "file_list",
        Operation::Stat => "file_stat",
        Operation::Exec => "file_exec",
    }
}
