//! What a session may ask for and how many may exist: a request checked against the
//! deployment's maxima and environment rules, then admitted within the per-agent and total caps.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use time::OffsetDateTime;
use uuid::Uuid;

use super::session::Live;
use super::{Session, SessionError, Sessions, State};
use crate::auth::Caller;
use crate::domain::record::ResourceUsage;
use crate::sandbox::Limits;
use crate::sandbox::sessions::ShellState;

/// A request for a session, as the edge received it.
#[derive(Debug, Clone, Default)]
pub(crate) struct NewSession {
    pub profile: Option<String>,
    /// The run-time policy asked for (the caller's default when absent).
    pub policy: Option<String>,
    pub environment: BTreeMap<String, String>,
    pub idle_timeout_secs: Option<u64>,
    pub max_duration_secs: Option<u64>,
    pub max_commands: Option<u64>,
    pub memory_mb: Option<u64>,
    pub cpus: Option<f64>,
    pub workspace_mb: Option<u64>,
    /// Network access for every command, within what the session's policy allows.
    pub network: Option<crate::domain::network::NetworkGrant>,
    /// MiB sent plus received through the egress proxy over the session's life.
    pub max_network_mb: Option<u64>,
}

impl Sessions {
    /// Checks a request against the deployment's maxima.
    pub(super) fn check(&self, new: NewSession) -> Result<Checked, SessionError> {
        let s = &self.settings;
        let bounded = |name: &str, value: Option<u64>, default: u64, max: u64| match value {
            None => Ok(default.min(max)),
            Some(v) if (1..=max).contains(&v) => Ok(v),
            Some(v) => Err(SessionError::Invalid(format!(
                "{name}: must be between 1 and {max}, got {v}"
            ))),
        };
        let idle = bounded(
            "idle_timeout_secs",
            new.idle_timeout_secs,
            s.default_idle_timeout_secs,
            s.max_idle_timeout_secs,
        )?;
        let duration = bounded(
            "max_duration_secs",
            new.max_duration_secs,
            s.default_max_duration_secs,
            s.max_duration_secs,
        )?;
        let max_commands = bounded(
            "max_commands",
            new.max_commands,
            s.max_commands,
            s.max_commands,
        )?;
        let mut limits = self.limits.clone();
        limits.memory_mb = bounded(
            "limits.memory_mb",
            new.memory_mb,
            limits.memory_mb,
            limits.memory_mb,
        )?;
        limits.workspace_mb = bounded(
            "limits.workspace_mb",
            new.workspace_mb,
            limits.workspace_mb,
            limits.workspace_mb,
        )?;
        if let Some(cpus) = new.cpus {
            if !(cpus > 0.0 && cpus <= self.limits.cpus) {
                return Err(SessionError::Invalid(format!(
                    "limits.cpus: must be above 0 and at most {}, got {cpus}",
                    self.limits.cpus
                )));
            }
            limits.cpus = cpus;
        }
        let profile = self
            .profiles
            .select(
                new.profile.as_deref(),
                crate::domain::script::Language::Bash,
            )
            .map_err(|e| SessionError::Invalid(e.to_string()))?
            .name
            .clone();
        self.check_environment(&new.environment)?;
        Ok(Checked {
            profile,
            environment: new.environment,
            idle: Duration::from_secs(idle),
            duration: Duration::from_secs(duration),
            max_commands,
            limits,
        })
    }

    /// Environment names as for jobs (none that loads code), values without secrets.
    pub(super) fn check_environment(
        &self,
        env: &BTreeMap<String, String>,
    ) -> Result<(), SessionError> {
        for (name, value) in env {
            if let Some(why) = env_refusal(name, value) {
                return Err(SessionError::Invalid(format!("environment: {why}")));
            }
            if let Some(f) = self.validator.scan_secrets(value).first() {
                return Err(SessionError::Invalid(format!(
                    "environment.{name}: the value holds a secret ({}: {})",
                    f.rule, f.message
                )));
            }
        }
        Ok(())
    }

    /// Registers a new session within the caps.
    pub(super) fn admit(
        &self,
        caller: &Caller,
        c: &Checked,
        policy: Option<String>,
        network: Option<super::SessionNetwork>,
    ) -> Result<Arc<Session>, SessionError> {
        let mut map = self.map.lock().expect("sessions lock");
        let active = |s: &&Arc<Session>| s.state() != State::Stopped;
        let total = map.values().filter(active).count();
        if total >= self.settings.max_total {
            return Err(SessionError::TooMany(format!(
                "the service holds its maximum of {} sessions; delete one or retry later",
                self.settings.max_total
            )));
        }
        let mine = map
            .values()
            .filter(active)
            .filter(|s| s.agent == caller.name)
            .count();
        if mine >= self.settings.max_per_agent {
            return Err(SessionError::TooMany(format!(
                "agent `{}` holds its maximum of {} sessions; delete one first",
                caller.name, self.settings.max_per_agent
            )));
        }
        let now = OffsetDateTime::now_utc();
        let session = Arc::new(Session {
            id: Uuid::new_v4(),
            agent: caller.name.clone(),
            profile: c.profile.clone(),
            node: self.node.clone(),
            created_at: now,
            expires_at: now + c.duration,
            max_commands: c.max_commands,
            limits: c.limits.clone(),
            policy,
            network,
            deadline: Instant::now() + c.duration,
            live: Mutex::new(Live {
                state: State::Creating,
                reason: None,
                idle_timeout: c.idle,
                shell: ShellState {
                    cwd: "/workspace".into(),
                    env: c.environment.clone(),
                    aliases: BTreeMap::new(),
                },
                last_activity_at: now,
                last_activity: Instant::now(),
                command_count: 0,
                current: None,
                history: VecDeque::new(),
                usage: ResourceUsage::default(),
                container_id: None,
                sandbox: None,
                stopped_at: None,
                events: None,
                approvals: None,
            }),
        });
        map.insert(session.id, session.clone());
        Ok(session)
    }
}

/// A request after its checks.
#[derive(Debug)]
pub(super) struct Checked {
    pub(super) profile: String,
    pub(super) environment: BTreeMap<String, String>,
    pub(super) idle: Duration,
    pub(super) duration: Duration,
    pub(super) max_commands: u64,
    pub(super) limits: Limits,
}

/// Why an environment variable may not be part of a session: the job protocol's list of names
/// that load code, and the prompts that run code in a shell.
pub(super) fn env_refusal(name: &str, value: &str) -> Option<String> {
    if ["PS0", "PS1", "PS2", "PS3", "PS4"].contains(&name) {
        return Some(format!("`{name}` is refused: a prompt runs code"));
    }
    scriptgate_supervisor::job::env::refusal(
        name,
        value,
        scriptgate_supervisor::job::env::IMAGE_PATH,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_load_code_are_refused() {
        assert!(env_refusal("LD_PRELOAD", "/x.so").is_some());
        assert!(env_refusal("BASH_ENV", "/x").is_some());
        assert!(env_refusal("PS1", "$(id)").is_some());
        assert!(env_refusal("PROJECT", "demo").is_none());
    }
}
