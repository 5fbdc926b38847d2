//! Run-time policies of scriptgate: which files a script may touch, which programs it may run,
//! where it may connect, decided per operation (`allow`, `deny`, `approve`, `log`).
//!
//! The crate has no I/O and few dependencies because both the service and the supervisor (PID 1
//! of every container, statically linked) link it; the supervisor decides thousands of operations
//! a second with it.
//!
//! - [`Policy`]: the policy file's model (`version: 1`, `name`, `description`, `file_rules`,
//!   `network_rules`, `command_rules`, `validation_rules`). Deserializing checks every value where
//!   it stands, so a bad file is reported with its line.
//! - [`CompiledPolicy::compile`]: checks a policy (bad glob, unknown operation, duplicate rule
//!   names, empty lists, sizes past [`limits`]) and compiles every pattern once.
//! - [`CompiledPolicy::decide_file`], [`CompiledPolicy::decide_command`],
//!   [`CompiledPolicy::decide_network`]: first matching rule of the section wins; none matching
//!   denies. They do not allocate (a path with `..` to fold, a Unicode domain name and arguments
//!   longer than 2 KiB are the exceptions); the [`Verdict`] renders its message only when read.
//!   [`CompiledPolicy::decide_finding`] raises a static validation finding by rule id.
//! - [`WirePolicy`]: what the host sends to the supervisor (JSON).
//! - [`events`]: the event records of a run and the capped lists that hold them.

mod check;
mod compiled;
mod de;
mod decide;
mod error;
pub mod events;
mod glob;
pub mod limits;
mod model;
mod net;
mod template;
mod wire;

pub use compiled::CompiledPolicy;
pub use decide::{CommandSubject, FileSubject, FindingSubject, Message, NetworkSubject, Verdict};
pub use error::{PolicyError, Problem};
pub use glob::GlobError;
pub use model::{
    CommandRule, Decision, FileRule, NetworkRule, Operation, OperationSpec, Policy, PortSpec,
    Raise, Section, ValidationRule,
};
pub use template::{Placeholder, Subject, TemplateError};
pub use wire::{WireError, WirePolicy};

#[cfg(test)]
mod tests;
