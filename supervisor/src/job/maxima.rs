//! The deployment's maxima: what any job may ask for at most. A request above one is refused with
//! the maximum named, never silently clamped.

use serde::{Deserialize, Serialize};

/// No protocol message (a job, a step result) is larger than this, whatever the configuration:
/// both ends refuse a larger one before buffering it.
pub const HARD_MAX_MESSAGE: u64 = 64 << 20;

/// Deployment maxima (`[sandbox.jobs]` in the service's configuration). The service sends them
/// with each job, and the agent checks the job against them again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Maxima {
    /// Steps per job.
    pub max_steps: usize,
    /// `constraints.max_runtime_seconds` at most.
    pub max_runtime_seconds: u64,
    /// `constraints.max_output_bytes` at most (per stream and step).
    pub max_output_bytes: u64,
    /// The whole job, as JSON.
    pub max_job_bytes: u64,
    /// One `write_file`'s content, decoded.
    pub max_write_bytes: u64,
    /// `read_file`'s `max_bytes` at most.
    pub max_read_bytes: u64,
    /// One `apply_unified_diff`'s diff text.
    pub max_diff_bytes: u64,
    /// One `run_command`'s `stdin`.
    pub max_stdin_bytes: u64,
    /// `list_tree`'s `max_depth` at most.
    pub max_list_depth: u32,
    /// `list_tree`'s `max_entries` at most (and its default).
    pub max_list_entries: u64,
    /// Artifact patterns per job, and files collected per job.
    pub max_artifacts: usize,
    /// One artifact file.
    pub max_artifact_bytes: u64,
    /// All artifact files of a job together.
    pub max_artifacts_total_bytes: u64,
    /// Directory entries one artifact glob may look at: a glob over a huge tree ends with an
    /// error instead of a long walk.
    pub max_glob_entries: u64,
    /// Whether any job may ask for `network_allowed` (runner containers have no network today).
    pub network_allowed: bool,
}

impl Default for Maxima {
    fn default() -> Self {
        Maxima {
            max_steps: 100,
            max_runtime_seconds: 600,
            max_output_bytes: 4 << 20,
            max_job_bytes: 32 << 20,
            max_write_bytes: 16 << 20,
            max_read_bytes: 1 << 20,
            max_diff_bytes: 4 << 20,
            max_stdin_bytes: 1 << 20,
            max_list_depth: 16,
            max_list_entries: 10_000,
            max_artifacts: 100,
            max_artifact_bytes: 64 << 20,
            max_artifacts_total_bytes: 128 << 20,
            max_glob_entries: 10_000,
            network_allowed: false,
        }
    }
}

impl Maxima {
    /// Maxima a deployment may configure: every result still fits in a protocol message (two
    /// output streams, JSON-escaped at worst six bytes per byte).
    pub fn validate(&self) -> Result<(), String> {
        let message = HARD_MAX_MESSAGE;
        let checks = [
            (self.max_steps >= 1, "max_steps >= 1"),
            (self.max_runtime_seconds >= 1, "max_runtime_seconds >= 1"),
            (
                self.max_output_bytes * 12 < message,
                "max_output_bytes < 5 MiB (a step's two streams must fit in one message)",
            ),
            (self.max_read_bytes * 2 < message, "max_read_bytes < 32 MiB"),
            (
                self.max_job_bytes < message,
                "max_job_bytes < 64 MiB (a job travels as one message)",
            ),
            (
                (1..=100_000).contains(&self.max_list_entries),
                "max_list_entries between 1 and 100000 (a listing travels as one message)",
            ),
            (self.max_glob_entries >= 1, "max_glob_entries >= 1"),
        ];
        match checks.iter().find(|(ok, _)| !ok) {
            Some((_, rule)) => Err(format!("job maxima: {rule}")),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_oversized_outputs_are_not() {
        assert_eq!(Maxima::default().validate(), Ok(()));
        let big = Maxima {
            max_output_bytes: 8 << 20,
            ..Maxima::default()
        };
        assert!(big.validate().is_err());
    }
}
