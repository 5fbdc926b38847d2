//! Which policy a run (a script, a job, every command of a session) is enforced under, for the
//! caller that asks.
//!
//! A run is enforced when its request names a policy, when its token has a default policy of its
//! own (`policy.agents.NAME.default`), or when `policy.enforce_default` is on; otherwise the
//! sandbox alone bounds it, as before run-time policies existed.

use super::{Chooser, Policies, SelectionError};

/// A `policy` a request may not have.
#[derive(Debug, thiserror::Error)]
pub enum PolicyChoiceError {
    /// The caller's token may not select it (403).
    #[error(transparent)]
    NotAllowed(#[from] SelectionError),
    /// No policy has that name (only a caller that may select anything learns this).
    #[error("policy: no policy `{requested}` (there are: {known})")]
    Unknown { requested: String, known: String },
}

impl Policies {
    /// The name of the policy a run of `chooser` is enforced under (`None`: not enforced).
    pub fn choose(
        &self,
        chooser: Chooser<'_>,
        requested: Option<&str>,
    ) -> Result<Option<String>, PolicyChoiceError> {
        let settings = self.settings();
        let name = settings.select(chooser, requested)?;
        if self.get(name).is_none() {
            return Err(PolicyChoiceError::Unknown {
                requested: name.to_string(),
                known: self.names().collect::<Vec<_>>().join(", "),
            });
        }
        let token_default = match chooser {
            Chooser::Agent(agent) => settings
                .agents
                .get(agent)
                .is_some_and(|a| a.default.is_some()),
            Chooser::Anyone => false,
        };
        let enforced = requested.is_some() || token_default || settings.enforce_default;
        Ok(enforced.then(|| name.to_string()))
    }
}
