//! Job protocol 1.0: the one definition of a job, its checks and its result, shared by the
//! service (which checks a job before any container exists) and the agent in the container (which
//! checks it again and runs it).
//!
//! A job is a versioned JSON document of typed steps (`run_command`, `write_file`, `read_file`,
//! `apply_unified_diff`, `list_tree`) under constraints (paths, commands, runtime, output), plus
//! artifact globs. The pipeline is the same on both sides:
//!
//! ```text
//! bytes ──parse──► Job ──check(maxima)──► CheckedJob ──(agent runs it)──► JobResult
//!          │                 │
//!          └ SchemaError     └ Rejection: a complete JobResult with the offending step failed
//!            (HTTP 4xx)        and the others skipped (HTTP 200, nothing run)
//! ```
//!
//! - [`parse()`] reads `protocol_version` first (`"MAJOR.MINOR"`; an unknown major is refused; at
//!   exactly 1.0 unknown fields are refused, at 1.x with x > 0 they are ignored and named in
//!   `warnings`), then the typed fields. Everything it refuses is a [`SchemaError`].
//! - [`check()`] applies the constraints anyone can see without running anything: the deployment's
//!   [`Maxima`], paths canonical and inside `allowed_paths`, commands in `allowed_commands`,
//!   environment names ([`env`](mod@env)), diffs that parse and stay inside the allowed paths ([`diff`]).
//! - [`ResultBuilder`] assembles a [`JobResult`] from step results as they arrive, and completes
//!   it whatever happens (steps never reported become `skipped`), so a result is never partial.

mod check;
mod checked;
pub mod diff;
pub mod env;
mod maxima;
mod mime;
mod parse;
pub mod paths;
mod result;
mod types;

pub use check::{check, check_with, command_check};
pub use checked::{
    ArtifactPattern, CheckedAction, CheckedJob, CheckedStep, CommandCheck, Rejection,
};
pub use maxima::{HARD_MAX_MESSAGE, Maxima};
pub use mime::mime_type;
pub use parse::{SchemaError, parse, parse_value};
pub use result::{
    ArtifactEntry, CommandOutput, DiffOutput, JobEnd, JobResult, JobStatus, ListedNode, NodeKind,
    ReadOutput, ResourceUsage, ResultBuilder, StepOutput, StepResult, StepStatus, TreeOutput,
    WriteOutput,
};
pub use types::{
    Action, ApplyDiff, Constraints, Encoding, ErrorType, Job, JobError, ListTree, Mode,
    ProtocolVersion, ReadFile, RunCommand, Step, StepType, WriteFile,
};

/// The protocol version this code speaks (and writes in every result).
pub const JOB_PROTOCOL: ProtocolVersion = ProtocolVersion { major: 1, minor: 0 };
