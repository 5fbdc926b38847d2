//! Which policy a run gets: the request's `policy` field if the caller may select it, else the
//! caller's token default, else the deployment default. A pure function of the settings.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The `[policy]` section of the configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicySettings {
    /// Policy files (`*.yml`, `*.yaml`, each named after its policy) added to the built-in ones;
    /// a file named like a built-in replaces it.
    pub policies_dir: Option<PathBuf>,
    /// The policy of runs whose request and token name none.
    pub default: String,
    /// Policies every agent may select in a request, besides its own default.
    pub selectable: Vec<String>,
    /// Per agent token (by its name in `agent_tokens`).
    pub agents: BTreeMap<String, AgentPolicy>,
    /// Whether runs that neither name a policy nor have a token default are enforced at run time
    /// under `default`. Off by default: every decided operation is a round trip to the supervisor
    /// (about 35 µs for an open; an open loop ran 9.6x slower, a Python start with imports 1.15x),
    /// and a sandbox that cannot enforce (gVisor) refuses enforced runs. A run that names a policy, or whose token
    /// has its own default, is always enforced.
    pub enforce_default: bool,
    /// Events kept per list (`processes`, `file_operations`, …) in a result; the rest are counted.
    pub event_cap: u32,
    /// How long an operation the policy holds for approval waits before it fails.
    pub approval_timeout_secs: u64,
}

impl Default for PolicySettings {
    fn default() -> Self {
        PolicySettings {
            policies_dir: None,
            default: "default".into(),
            selectable: Vec::new(),
            agents: BTreeMap::new(),
            enforce_default: false,
            event_cap: 1000,
            approval_timeout_secs: 300,
        }
    }
}

/// One agent token's policies.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentPolicy {
    /// Its runs' policy when the request names none (else the deployment default).
    pub default: Option<String>,
    /// Policies it may select besides its default and the deployment-wide `selectable` ones.
    pub selectable: Vec<String>,
}

/// Who selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chooser<'a> {
    /// Authentication is off: every caller is trusted, any policy may be selected.
    Anyone,
    /// The agent token of this name.
    Agent(&'a str),
}

/// A request for a policy the caller may not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    /// The answer is 403: the policy exists or not, the caller may not select it either way.
    #[error("policy `{requested}` is not one this token may select (it may select: {allowed})")]
    NotAllowed { requested: String, allowed: String },
}

impl PolicySettings {
    /// The name of the policy a run gets. Whether that policy exists is the caller's lookup: the
    /// names in the settings are checked at start-up, so only an `Anyone` request can name one
    /// that does not.
    pub fn select<'a>(
        &'a self,
        chooser: Chooser<'_>,
        requested: Option<&'a str>,
    ) -> Result<&'a str, SelectionError> {
        let agent = match chooser {
            Chooser::Agent(name) => self.agents.get(name),
            Chooser::Anyone => None,
        };
        let default = agent
            .and_then(|a| a.default.as_deref())
            .unwrap_or(&self.default);
        let Some(requested) = requested else {
            return Ok(default);
        };
        let allowed = chooser == Chooser::Anyone
            || requested == default
            || self.selectable.iter().any(|s| s == requested)
            || agent.is_some_and(|a| a.selectable.iter().any(|s| s == requested));
        if allowed {
            return Ok(requested);
        }
        let mut names: Vec<&str> = std::iter::once(default)
            .chain(self.selectable.iter().map(String::as_str))
            .chain(
                agent
                    .iter()
                    .flat_map(|a| a.selectable.iter().map(String::as_str)),
            )
            .collect();
        names.sort_unstable();
        names.dedup();
        Err(SelectionError::NotAllowed {
            requested: requested.to_string(),
            allowed: names.join(", "),
        })
    }

    /// Every policy name the settings mention, with where (for the start-up check).
    pub(crate) fn named_policies(&self) -> Vec<(String, &str)> {
        let mut out = vec![("policy.default".to_string(), self.default.as_str())];
        out.extend(
            self.selectable
                .iter()
                .map(|s| ("policy.selectable".to_string(), s.as_str())),
        );
        for (agent, p) in &self.agents {
            let key = format!("policy.agents.{agent}");
            out.extend(
                p.default
                    .iter()
                    .map(|d| (format!("{key}.default"), d.as_str())),
            );
            out.extend(
                p.selectable
                    .iter()
                    .map(|s| (format!("{key}.selectable"), s.as_str())),
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> PolicySettings {
        PolicySettings {
            selectable: vec!["strict".into()],
            agents: BTreeMap::from([
                (
                    "ci-bot".to_string(),
                    AgentPolicy {
                        default: Some("strict".into()),
                        selectable: vec!["audit".into()],
                    },
                ),
                (
                    "helper".to_string(),
                    AgentPolicy {
                        default: None,
                        selectable: vec!["audit".into()],
                    },
                ),
            ]),
            ..PolicySettings::default()
        }
    }

    #[test]
    fn without_a_request_the_token_default_then_the_deployment_default_applies() {
        let s = settings();
        assert_eq!(s.select(Chooser::Agent("ci-bot"), None), Ok("strict"));
        assert_eq!(s.select(Chooser::Agent("helper"), None), Ok("default"));
        assert_eq!(s.select(Chooser::Agent("unlisted"), None), Ok("default"));
        assert_eq!(s.select(Chooser::Anyone, None), Ok("default"));
    }

    #[test]
    fn a_request_may_name_the_default_the_shared_list_or_the_token_list() {
        let s = settings();
        assert_eq!(
            s.select(Chooser::Agent("ci-bot"), Some("audit")),
            Ok("audit")
        );
        assert_eq!(
            s.select(Chooser::Agent("unlisted"), Some("strict")),
            Ok("strict")
        );
        assert_eq!(
            s.select(Chooser::Agent("unlisted"), Some("default")),
            Ok("default")
        );
        assert_eq!(
            s.select(Chooser::Agent("helper"), Some("audit")),
            Ok("audit")
        );
    }

    #[test]
    fn anything_else_is_refused_with_what_the_token_may_select() {
        let s = settings();
        assert_eq!(
            s.select(Chooser::Agent("unlisted"), Some("audit")),
            Err(SelectionError::NotAllowed {
                requested: "audit".into(),
                allowed: "default, strict".into(),
            })
        );
        let err = s
            .select(Chooser::Agent("ci-bot"), Some("default"))
            .expect_err("not its default and not listed");
        assert_eq!(
            err.to_string(),
            "policy `default` is not one this token may select (it may select: audit, strict)"
        );
        assert!(
            s.select(Chooser::Agent("ci-bot"), Some("no-such-policy"))
                .is_err(),
            "unknown names are refused the same way: no probing"
        );
    }

    #[test]
    fn without_authentication_any_policy_may_be_selected() {
        assert_eq!(
            settings().select(Chooser::Anyone, Some("audit")),
            Ok("audit")
        );
    }
}
