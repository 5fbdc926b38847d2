//! Run-time policies on the host: the built-in ones (`policies/`) and those of `policies_dir`,
//! compiled once at start-up, and which one a run gets.
//!
//! The engine (model, compiler, evaluators, event records) is the `scriptgate-policy` crate, which
//! the supervisor links too; this module loads files, checks them against the configuration and
//! the validation rules, and selects. Like `validate/`, it decides and does no I/O after start-up.

mod choice;
mod load;
mod select;

pub use choice::PolicyChoiceError;
pub use load::{
    LoadErrorKind, LoadedPolicy, MAX_POLICY_FILE_BYTES, MAX_POLICY_FILES, Origin, Policies,
    PolicyLoadError, check_rule_ids, parse_policy, parse_policy_file, read_bounded,
    read_policy_file,
};
pub use scriptgate_policy as engine;
pub use select::{AgentPolicy, Chooser, PolicySettings, SelectionError};
