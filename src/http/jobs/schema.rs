//! The job protocol's shapes as the OpenAPI document (and the `run_job` tool) shows them. Jobs
//! are read by the protocol's own parser and results written by its own types
//! (`scriptgate_supervisor::job`); these types only describe them, and the tests below hold
//! them to the protocol's field names, and to its parser on the examples.
//!
//! Just past 500 lines: one schema per step type, kept beside each other so they stay in step with
//! the protocol.

// Described, never built outside the tests: the protocol's own types are what is read and written.
#![cfg_attr(not(test), allow(dead_code))]

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::domain::content::ContentVerdict;

mod limits;
pub(crate) use limits::{self_contained, with_maxima};

/// A job: typed steps run in order in one one-use container, under constraints, with the files
/// to return. At exactly `1.0` unknown fields are refused; at `1.x` (x > 0) they are ignored and
/// listed in the result's `warnings`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = JobIn)]
pub(crate) struct JobIn {
    /// `"MAJOR.MINOR"`; this service speaks `1.x`.
    #[schema(pattern = "^(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)$", example = "1.0")]
    pub protocol_version: String,
    /// Generated when absent; a `job_id` already used is refused (409).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub job_id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 1024, nullable = false)]
    pub task_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 1024, nullable = false)]
    pub skill_id: Option<String>,
    /// The runner profile (`GET /v1/profiles`); the default one when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub profile: Option<String>,
    /// The run-time policy (`scriptgate policy list`), chosen as for `/v1/execute`: this field,
    /// else the token's default, else the deployment's when `policy.enforce_default` is on. A
    /// policy the token may not select is 403 `policy_not_allowed`. Under a policy every file the
    /// job writes, reads, patches, lists or returns is decided by its `file_rules` first (a `deny`
    /// is 403 `policy_violation`); its `run_command` steps then run under the policy inside the
    /// container (each program, file operation and connection decided; `approve` holds the
    /// operation for `/v1/approvals`), each such step's result carrying its `events` and the
    /// job's execution all of them. A sandbox that cannot enforce a policy (gVisor) runs nothing:
    /// the job fails with an `internal_error` saying so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, example = "strict")]
    pub policy: Option<String>,
    /// Network access for the job's `run_command` steps through the egress proxy, as `network`
    /// of `POST /v1/execute`: within what the job's policy (else the deployment's default
    /// policy) allows, else 403 `network_not_allowed`; none when absent. Proxy-aware clients
    /// (pip, curl, git, requests, urllib) use it through `HTTP_PROXY`/`HTTPS_PROXY`/`ALL_PROXY`;
    /// the result lists every lookup and connection in `network_operations` and totals them in
    /// `network_summary`. `constraints.network_allowed` is a different, protocol-level switch
    /// for direct access, which this service never gives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub network: Option<crate::domain::network::NetworkGrant>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub constraints: Option<ConstraintsIn>,
    /// Run in order; the first failing step ends the job (unless it says `continue_on_error`)
    /// and the rest are `skipped`. At most `sandbox.jobs.max_steps`.
    #[schema(min_items = 1)]
    pub steps: Vec<StepIn>,
    /// Absolute paths or globs (`*`, `?`, `[…]`, `**`) of files to return, inside
    /// `allowed_paths`; collected for failed and timed-out jobs too.
    #[serde(default)]
    pub artifacts: Vec<String>,
}

/// What the job may do.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConstraintsIn {
    /// The job's deadline (default 300), at most `sandbox.jobs.max_runtime_seconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, nullable = false)]
    pub max_runtime_seconds: Option<u64>,
    /// Canonical directories inside `/workspace` or `/tmp` (default `["/workspace"]`); every path
    /// of the job lies inside one. Relative paths are relative to `/workspace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub allowed_paths: Option<Vec<String>>,
    /// Bare program names `run_command` may run, found in the image's PATH directories (default
    /// none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub allowed_commands: Option<Vec<String>>,
    /// Jobs run without a network: `true` is refused unless the deployment allows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub network_allowed: Option<bool>,
    /// Bytes of stdout and of stderr kept per `run_command` (default 1048576), at most
    /// `sandbox.jobs.max_output_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub max_output_bytes: Option<u64>,
    /// `write_file` may replace an existing file (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub allow_overwrite: Option<bool>,
}

/// One step: a unique `id`, its `type` and that type's `arguments`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum StepIn {
    /// One program, never through a shell.
    RunCommand {
        id: String,
        arguments: RunCommandArgs,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        continue_on_error: bool,
    },
    /// A new file (or, with `allow_overwrite`, a replaced one).
    WriteFile {
        id: String,
        arguments: WriteFileArgs,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        continue_on_error: bool,
    },
    /// At most `max_bytes` of a regular file, with its size and sha256.
    ReadFile {
        id: String,
        arguments: ReadFileArgs,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        continue_on_error: bool,
    },
    /// A unified diff applied relative to `/workspace`: all files or none.
    ApplyUnifiedDiff {
        id: String,
        arguments: ApplyDiffArgs,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        continue_on_error: bool,
    },
    /// A directory's tree, never following a symlink.
    ListTree {
        id: String,
        arguments: ListTreeArgs,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        continue_on_error: bool,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunCommandArgs {
    /// A bare name in `allowed_commands` (or an absolute path to one in the image's PATH
    /// directories).
    #[schema(example = "python3")]
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    /// Inside `allowed_paths`; default: the first allowed path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub working_dir: Option<String>,
    /// POSIX names; names that make a program load other code (`LD_*`, `PYTHONPATH`,
    /// `BASH_ENV`, …) are refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub stdin: Option<String>,
    /// Within the job's deadline in any case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, nullable = false)]
    pub timeout_seconds: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct WriteFileArgs {
    pub path: String,
    pub content: String,
    /// `utf8` (default) or `base64`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub encoding: Option<ContentEncoding>,
    /// Permission bits only, `"0000"`–`"0777"` (default `"0644"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^0?[0-7]{3}$", nullable = false)]
    pub mode: Option<String>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ContentEncoding {
    Utf8,
    Base64,
}

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadFileArgs {
    pub path: String,
    /// Default 65536, at most `sandbox.jobs.max_read_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub max_bytes: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApplyDiffArgs {
    /// `diff -u` or `git diff` text; no binary patches, renames or mode changes.
    pub diff: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListTreeArgs {
    pub path: String,
    /// Default 4, at most `sandbox.jobs.max_list_depth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub max_depth: Option<u32>,
    /// Default and maximum: `sandbox.jobs.max_list_entries`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub max_entries: Option<u64>,
}

/// A job's result: every step in order, the artifacts, the measured usage, the typed error.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = JobOut)]
pub(crate) struct JobOutDoc {
    #[schema(example = "1.0")]
    pub protocol_version: String,
    pub job_id: Uuid,
    pub status: JobStatusDoc,
    #[schema(format = DateTime)]
    pub started_at: String,
    #[schema(format = DateTime)]
    pub finished_at: String,
    pub steps: Vec<StepResultDoc>,
    pub artifacts: Vec<ArtifactEntryDoc>,
    pub resource_usage: JobUsageDoc,
    pub error: Option<JobErrorDoc>,
    /// Unknown fields a newer 1.x job carried, ignored.
    pub warnings: Vec<String>,
    /// The execution that ran the job (audit trail, approvals, `/v1/executions/{id}`).
    pub execution_id: Uuid,
    /// The verdict on each program, file, diff or argument of the job that validation checked.
    pub validation: Vec<ContentVerdict>,
    /// The run-time policy the job's commands ran under (absent without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub policy: Option<String>,
    /// Every `run_command` step's events together (and the file steps' and artifact globs'
    /// `log` and `approve` decisions), in the shape of `/v1/execute`'s `events`
    /// (absent without a policy; each step's own are in its result). Every `deny`, `approve` and
    /// `log` decision among them is an audit record of the job's execution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>, nullable = false)]
    pub events: Option<serde_json::Value>,
    /// Only for a job with network access: every lookup and connection of its steps through the
    /// egress proxy, in order, as `network_operations` of `POST /v1/execute` lists them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>, nullable = false)]
    pub network_operations: Option<Vec<serde_json::Value>>,
    /// Only for a job with network access: the totals of its network activity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub network_summary: Option<crate::domain::network::NetworkSummary>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = JobStatus)]
pub(crate) enum JobStatusDoc {
    Success,
    Failure,
    Timeout,
}

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = StepResult)]
pub(crate) struct StepResultDoc {
    pub id: String,
    #[serde(rename = "type")]
    pub step_type: StepTypeDoc,
    pub status: StepStatusDoc,
    pub duration_ms: u64,
    /// What the step produced, by its type (also for some failures: a command's exit code and
    /// output).
    pub result: Option<StepOutputDoc>,
    pub error: Option<JobErrorDoc>,
    /// A `run_command` step under a run-time policy: what its processes did, as the policy
    /// decided it (`processes`, `file_operations`, `network_operations`, `blocked_operations`,
    /// each capped at `policy.event_cap` with `omitted` counting the rest), as `/v1/execute`
    /// reports a script's. Absent without a policy and for file steps (their paths are decided
    /// before the job runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>, nullable = false)]
    pub events: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = StepType)]
pub(crate) enum StepTypeDoc {
    RunCommand,
    WriteFile,
    ReadFile,
    ApplyUnifiedDiff,
    ListTree,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = StepStatus)]
pub(crate) enum StepStatusDoc {
    Success,
    Failure,
    Skipped,
}

/// `{"type", "message"}` on a step, an artifact and the job.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = JobError)]
pub(crate) struct JobErrorDoc {
    #[serde(rename = "type")]
    pub kind: JobErrorTypeDoc,
    pub message: String,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = JobErrorType)]
pub(crate) enum JobErrorTypeDoc {
    SchemaError,
    PolicyViolation,
    ExecutionFailure,
    Timeout,
    ResourceLimitExceeded,
    InternalError,
}

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
#[schema(as = StepOutput)]
pub(crate) enum StepOutputDoc {
    RunCommand(CommandOutputDoc),
    ReadFile(ReadOutputDoc),
    WriteFile(WriteOutputDoc),
    ApplyUnifiedDiff(DiffOutputDoc),
    ListTree(TreeOutputDoc),
}

/// `run_command`'s result.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = CommandOutput)]
pub(crate) struct CommandOutputDoc {
    /// Null when the command did not exit by itself (killed at its timeout).
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub duration_ms: u64,
}

/// `read_file`'s result.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = ReadOutput)]
pub(crate) struct ReadOutputDoc {
    /// At most `max_bytes` of the file: UTF-8 text when it is, else base64.
    pub content: String,
    pub encoding: ContentEncoding,
    /// The whole file's size.
    pub size_bytes: u64,
    pub truncated: bool,
    /// Of the whole file.
    pub sha256: String,
}

/// `write_file`'s result.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = WriteOutput)]
pub(crate) struct WriteOutputDoc {
    pub path: String,
    pub size_bytes: u64,
    pub sha256: String,
    /// False when an existing file was replaced.
    pub created: bool,
}

/// `apply_unified_diff`'s result.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = DiffOutput)]
pub(crate) struct DiffOutputDoc {
    pub files_modified: Vec<String>,
    pub files_created: Vec<String>,
    pub files_deleted: Vec<String>,
}

/// `list_tree`'s result.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = TreeOutput)]
pub(crate) struct TreeOutputDoc {
    pub tree: ListedNodeDoc,
    /// Entries listed (the root excluded).
    pub entries: u64,
    /// More entries exist than `max_entries` allowed.
    pub truncated: bool,
}

/// One entry of `list_tree`; symlinks are listed, never followed.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = ListedNode)]
pub(crate) struct ListedNodeDoc {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: NodeKindDoc,
    pub size: u64,
    /// Permission bits, e.g. `"0644"`.
    pub mode: String,
    /// A directory's entries; absent below `max_depth` and for anything but directories.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, no_recursion)]
    pub children: Option<Vec<ListedNodeDoc>>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = NodeKind)]
pub(crate) enum NodeKindDoc {
    File,
    Directory,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

/// A returned file (download it at `/v1/jobs/{job_id}/artifacts/{path without its leading
/// slash}`), or why a file or a glob could not be returned (`error`).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = ArtifactEntry)]
pub(crate) struct ArtifactEntryDoc {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub size_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub mime_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub error: Option<JobErrorDoc>,
}

/// Measured in the container.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = JobResourceUsage)]
pub(crate) struct JobUsageDoc {
    pub cpu_time_ms: u64,
    pub max_rss_bytes: u64,
}

const EXAMPLE_JOB_ID: &str = "6f0b1a52-4f1b-4c55-9d3c-3e2a1b0c9d8e";
const EXAMPLE_EXECUTION_ID: &str = "0b6f1f7e-2d4c-4a8e-9c3e-5f1d2a7b9c01";

/// The job README's walkthrough sends.
pub(crate) fn example_job() -> Value {
    let diff = "--- a/app.py\n+++ b/app.py\n@@ -1,3 +1,3 @@\n import json\n-print('hello')\n+print('hello, world')\n json.dump({'ok': True}, open('report.json', 'w'))\n";
    json!({
        "protocol_version": "1.0",
        "job_id": EXAMPLE_JOB_ID,
        "constraints": {"max_runtime_seconds": 60, "allowed_paths": ["/workspace"],
                        "allowed_commands": ["python3"], "max_output_bytes": 65536},
        "steps": [
            {"id": "write", "type": "write_file", "arguments": {"path": "/workspace/app.py",
                "content": "import json\nprint('hello')\njson.dump({'ok': True}, open('report.json', 'w'))\n"}},
            {"id": "run", "type": "run_command", "arguments": {"command": "python3", "args": ["app.py"]}},
            {"id": "patch", "type": "apply_unified_diff", "arguments": {"diff": diff}},
            {"id": "read", "type": "read_file", "arguments": {"path": "/workspace/app.py", "max_bytes": 4096}},
            {"id": "list", "type": "list_tree", "arguments": {"path": "/workspace", "max_depth": 2}}
        ],
        "artifacts": ["/workspace/report.json"]
    })
}

/// A finished job, as the examples show it.
pub(crate) fn example_result() -> Value {
    json!({
        "protocol_version": "1.0",
        "job_id": EXAMPLE_JOB_ID,
        "status": "success",
        "started_at": "2026-11-24T13:25:15.247Z",
        "finished_at": "2026-11-24T13:25:15.352Z",
        "steps": [
            {"id": "write", "type": "write_file", "status": "success", "duration_ms": 1,
             "result": {"path": "/workspace/app.py", "size_bytes": 81, "sha256": "20f4c3c4e6c2f1e7c9b2a1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0", "created": true},
             "error": null},
            {"id": "run", "type": "run_command", "status": "success", "duration_ms": 38,
             "result": {"exit_code": 0, "stdout": "hello\n", "stderr": "", "stdout_truncated": false,
                        "stderr_truncated": false, "duration_ms": 38},
             "error": null}
        ],
        "artifacts": [{"path": "/workspace/report.json", "sha256": "805e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e",
                       "size_bytes": 12, "mime_type": "application/json"}],
        "resource_usage": {"cpu_time_ms": 25, "max_rss_bytes": 13_242_368},
        "error": null,
        "warnings": [],
        "execution_id": EXAMPLE_EXECUTION_ID,
        "validation": [{"step": "write", "target": "/workspace/app.py", "language": "python",
                        "valid": true, "layer": null, "findings": []}]
    })
}

/// A job held for approval.
pub(crate) fn example_submission() -> Value {
    json!({
        "job_id": EXAMPLE_JOB_ID,
        "execution_id": EXAMPLE_EXECUTION_ID,
        "status": "pending_approval",
        "links": {
            "self": format!("/v1/jobs/{EXAMPLE_JOB_ID}"),
            "approval": format!("/v1/approvals/{EXAMPLE_EXECUTION_ID}")
        }
    })
}

#[cfg(test)]
mod tests;
