//! Run-time policies of executions: which policy a run is enforced under (chosen for its caller at
//! intake) and the sandbox calls that enforce it (a script's, a job's).
//!
//! A run is enforced when its request names a policy, when its token has a default policy of its
//! own (`policy.agents.NAME.default`), or when `policy.enforce_default` is on; otherwise the
//! sandbox alone bounds it, as before run-time policies existed.

use std::sync::Arc;
use std::time::Duration;

use scriptgate_policy::events::Events;
use scriptgate_policy::{CompiledPolicy, Decision};

use tokio::sync::broadcast;
use tokio_util::task::AbortOnDropHandle;

use super::Executions;
use super::live::{self, LiveEvent};
use crate::auth::Caller;
use crate::domain::record::{Decision as OperatorDecision, ExecutionRecord, PolicyCheckKind};
pub(crate) use crate::policy::PolicyChoiceError;
use crate::policy::{Chooser, Policies};
use crate::sandbox::job::JobError;
use crate::sandbox::{Enforcement, JobOutcome, JobRun, Lease, RunOutcome, RunSpec};

/// The deployment's policies and how callers choose among them.
#[derive(Debug)]
pub(crate) struct RunPolicies {
    policies: Policies,
    /// Authentication is off: every caller is trusted and may select any policy.
    open: bool,
}

impl RunPolicies {
    pub(crate) fn new(policies: Policies, open: bool) -> RunPolicies {
        RunPolicies { policies, open }
    }

    /// The policy a run of `caller` is enforced under (`None`: not enforced).
    pub(crate) fn choose(
        &self,
        caller: &Caller,
        requested: Option<&str>,
    ) -> Result<Option<String>, PolicyChoiceError> {
        let chooser = if self.open {
            Chooser::Anyone
        } else {
            Chooser::Agent(&caller.name)
        };
        self.policies.choose(chooser, requested)
    }

    /// The compiled policy `name` (`None`: no such policy, after a restart with other policies).
    pub(crate) fn compiled(&self, name: &str) -> Option<Arc<CompiledPolicy>> {
        Some(self.policies.get(name)?.policy.clone())
    }

    /// The deployment's policies.
    pub(super) fn policies(&self) -> &Policies {
        &self.policies
    }

    /// What a run under the policy `name` carries to its sandbox (`None`: no such policy, after a
    /// restart with other policies).
    fn enforcement(&self, name: &str) -> Option<Enforcement> {
        let loaded = self.policies.get(name)?;
        let settings = self.policies.settings();
        Some(Enforcement {
            policy: loaded.policy.wire(),
            event_cap: settings.event_cap,
            approval_timeout: Duration::from_secs(settings.approval_timeout_secs),
            approvals: None,
            live: None,
            approved_commands: Vec::new(),
        })
    }
}

/// The command lines of `rec` an operator approved before the run: its `command` checks that
/// held it (`approve`) with an argument vector known before the run, once the run's approval
/// says `approve`. At run time their `execve` is not held again.
fn approved_commands(rec: &ExecutionRecord) -> Vec<Vec<String>> {
    let approved = rec
        .approval
        .as_ref()
        .is_some_and(|a| a.decision == OperatorDecision::Approve);
    if !approved {
        return Vec::new();
    }
    rec.policy_checks
        .iter()
        .filter(|c| c.kind == PolicyCheckKind::Command && c.decision == Decision::Approve)
        .filter_map(|c| c.argv.clone())
        .collect()
}

impl Executions {
    /// The policy a run of `caller` is enforced under (`None`: not enforced).
    pub(crate) fn choose_policy(
        &self,
        caller: &Caller,
        requested: Option<&str>,
    ) -> Result<Option<String>, PolicyChoiceError> {
        self.run_policies.choose(caller, requested)
    }

    /// What a run needs around its sandbox call: network access through the egress proxy when
    /// it opted in, and its policy's enforcement when it has one. Operations the policy or the
    /// proxy hold are listed for operators, and both publish their events live, while the
    /// returned guards live. `Err`: the proxy could not give the network, nothing may run.
    async fn prepare(
        &self,
        rec: &ExecutionRecord,
        lease: &mut Box<dyn Lease>,
    ) -> Result<Prepared, String> {
        let network = self.network_opted_in(rec);
        let policy = rec.run.policy();
        if policy.is_none() && !network {
            return Ok(Prepared::plain());
        }
        let (asks, listed) = self.held.channel(rec.id, &rec.agent);
        let (live, publishing) = self.live.publish(rec.id);
        let network_events = if network {
            let access = self.network_access(rec, asks.clone())?;
            let events = lease
                .open_network(access)
                .await
                .map_err(|e| e.to_string())?;
            Some(live::bridge(events, live.clone(), LiveEvent::Egress))
        } else {
            None
        };
        let mut policy_events = None;
        let enforcement = match policy {
            None => Ok(None),
            Some(name) => match self.run_policies.enforcement(name) {
                None => Err(format!("the run's policy `{name}` is no longer configured")),
                Some(mut enforcement) => {
                    enforcement.approvals = Some(asks);
                    enforcement.approved_commands = approved_commands(rec);
                    let (tx, _) = broadcast::channel(LIVE_BUFFER);
                    policy_events = Some(live::bridge(tx.subscribe(), live, LiveEvent::Policy));
                    enforcement.live = Some(tx);
                    Ok(Some(enforcement))
                }
            },
        };
        Ok(Prepared {
            enforcement,
            _guards: Some((listed, publishing, network_events, policy_events)),
        })
    }

    /// The sandbox call: under the run's policy when it has one, with the events it yields, and
    /// with network access when it opted in (`Err`: the proxy could not give it, the script did
    /// not run). A policy no longer configured runs nothing.
    pub(super) async fn sandbox_call(
        &self,
        rec: &ExecutionRecord,
        mut lease: Box<dyn Lease>,
        spec: RunSpec,
    ) -> Result<(RunOutcome, Option<Events>), String> {
        let prepared = self.prepare(rec, &mut lease).await?;
        match prepared.enforcement {
            Ok(None) => Ok((lease.run(spec).await, None)),
            Ok(Some(enforcement)) => {
                let enforced = lease.run_enforced(spec, enforcement).await;
                Ok((enforced.outcome, enforced.events))
            }
            Err(reason) => Ok((RunOutcome::not_run(lease.execution_id(), reason), None)),
        }
    }

    /// The sandbox call of a job (or a script run with files), as [`Self::sandbox_call`]: its
    /// `run_command` steps under the run's policy, network access when it opted in.
    pub(super) async fn job_call(
        &self,
        rec: &ExecutionRecord,
        mut lease: Box<dyn Lease>,
        run: JobRun,
    ) -> Result<JobOutcome, String> {
        let prepared = self.prepare(rec, &mut lease).await?;
        match prepared.enforcement {
            Ok(None) => Ok(lease.run_job(run).await),
            Ok(Some(enforcement)) => Ok(lease.run_job(run.enforced(enforcement)).await),
            Err(reason) => {
                let id = lease.execution_id();
                Ok(JobOutcome::not_run(&run, id, JobError::internal(reason)))
            }
        }
    }
}

/// A run's enforcement (`Err`: its policy is no longer configured) and the guards that keep its
/// held operations listed and its events published while the run lasts.
struct Prepared {
    enforcement: Result<Option<Enforcement>, String>,
    _guards: Option<Guards>,
}

/// Held operations listed, events published, proxy and policy events bridged to the live stream.
type Guards = (
    super::held::Forwarder,
    super::live::Publishing,
    Option<AbortOnDropHandle<()>>,
    Option<AbortOnDropHandle<()>>,
);

impl Prepared {
    fn plain() -> Self {
        Prepared {
            enforcement: Ok(None),
            _guards: None,
        }
    }
}

/// Policy events buffered on their way to the live stream.
const LIVE_BUFFER: usize = 1024;

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::policy::{AgentPolicy, PolicySettings};

    fn policies(settings: PolicySettings) -> Policies {
        Policies::load(&settings).expect("built-in policies load")
    }

    fn settings() -> PolicySettings {
        PolicySettings {
            agents: BTreeMap::from([(
                "ci".to_string(),
                AgentPolicy {
                    default: Some("strict".into()),
                    selectable: vec![],
                },
            )]),
            ..PolicySettings::default()
        }
    }

    #[test]
    fn a_named_policy_or_a_token_default_is_enforced_the_deployment_default_only_when_asked() {
        let p = RunPolicies::new(policies(settings()), false);
        let bot = Caller::local_agent("bot");
        let ci = Caller::local_agent("ci");
        assert_eq!(p.choose(&bot, None).expect("allowed"), None);
        assert_eq!(
            p.choose(&bot, Some("default")).expect("allowed"),
            Some("default".into())
        );
        assert_eq!(p.choose(&ci, None).expect("allowed"), Some("strict".into()));
        let mut s = settings();
        s.enforce_default = true;
        let p = RunPolicies::new(policies(s), false);
        assert_eq!(
            p.choose(&bot, None).expect("allowed"),
            Some("default".into())
        );
    }

    #[test]
    fn a_token_cannot_select_outside_its_list_and_an_open_service_learns_unknown_names() {
        let closed = RunPolicies::new(policies(settings()), false);
        let bot = Caller::local_agent("bot");
        assert!(matches!(
            closed.choose(&bot, Some("audit")),
            Err(PolicyChoiceError::NotAllowed(_))
        ));
        let open = RunPolicies::new(policies(settings()), true);
        assert_eq!(
            open.choose(&bot, Some("audit")).expect("anyone"),
            Some("audit".into())
        );
        let err = open.choose(&bot, Some("nope")).expect_err("unknown");
        assert_eq!(
            err.to_string(),
            "policy: no policy `nope` (there are: audit, default, strict)"
        );
    }

    #[test]
    fn the_enforcement_carries_the_configured_cap_and_timeout() {
        let mut s = settings();
        s.event_cap = 7;
        s.approval_timeout_secs = 9;
        let p = RunPolicies::new(policies(s), false);
        let e = p.enforcement("strict").expect("exists");
        assert_eq!(e.event_cap, 7);
        assert_eq!(e.approval_timeout, Duration::from_secs(9));
        assert!(p.enforcement("nope").is_none());
    }
}
