//! `POST /v1/execute`: validate and run a script within the request, answer with the result (or,
//! when an operator must approve it first, 202 with where to read it later).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::auth::Authenticated;
use super::error::{ApiError, ErrorBody};
use super::workspace::{FileIn, workspace};
use super::{AppState, Json};
use crate::auth::Caller;
use crate::auth::Role;
use crate::config::ExecutionSettings;
use crate::domain::record::{
    Approval, Artifact, ArtifactIssue, ExecutionError, ExecutionRecord, PolicyCheck, ResourceUsage,
    StageMs, Status,
};
use crate::domain::script::{Language, Script};
use crate::domain::verdict::Verdict;
use crate::domain::work::{ScriptRun, Work};
use crate::executions::{Executions, Submitted};
use crate::sandbox::job::Maxima;
use crate::sandbox::profiles::Profiles;

/// A script to validate and run. Unknown fields are rejected.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"script_content": "print('hello')", "script_type": "python", "timeout": 30}))]
pub(crate) struct ExecuteIn {
    /// The script source: not empty, no NUL characters. Longer than `validation.max_chars`
    /// characters (default 10000) is a validation failure of the size layer.
    #[schema(min_length = 1, pattern = "^[^\\x00]*$")]
    pub script_content: String,
    pub script_type: Language,
    /// Deadline in seconds, 1 to `execution.max_timeout_secs` (the maximum below); the script is
    /// killed when it passes. Defaults to `execution.default_timeout_secs` (60).
    #[serde(default, deserialize_with = "super::json::whole_number")]
    #[schema(minimum = 1, example = 30)]
    pub timeout: Option<u64>,
    /// Bytes fed to the script's standard input (at most `execution.max_stdin_bytes`).
    #[serde(default)]
    pub stdin: Option<String>,
    /// The runner profile (`GET /v1/profiles` lists them): `minimal` (the default) or `data`
    /// (numpy, pandas, matplotlib, …), or one the deployment configures. An unknown one is a
    /// `schema_error` naming the valid ones.
    #[serde(default)]
    #[schema(example = "data")]
    pub profile: Option<String>,
    /// Files written into `/workspace` (the script's working directory) before it runs: paths
    /// relative to `/workspace` or absolute under it, each once. Their contents are validated
    /// like the script: `.py`/`.sh` files (or files with a shebang) with every layer, every other
    /// file scanned for secrets. With files or artifacts the script runs in the job agent (with
    /// `python3` or `bash`, from `/workspace`), so Python imports the files it came with.
    #[serde(default)]
    pub files: Vec<FileIn>,
    /// Files to return after the run: absolute paths or globs under `/workspace` or `/tmp`
    /// (relative ones are relative to `/workspace`). Each file comes back in `artifacts` with its
    /// sha256; download it at `/v1/executions/{execution_id}/artifacts/{path}`.
    #[serde(default)]
    #[schema(example = json!(["/workspace/out/*.png", "report.json"]))]
    pub artifacts: Vec<String>,
    /// The run-time policy (`scriptgate policy list`): every exec, file operation and connect of
    /// the script is decided by it and reported in `events`. Without it, the token's default
    /// policy (`policy.agents.NAME.default`) applies and is enforced; else the deployment's
    /// `policy.default`, enforced only when `policy.enforce_default` is on. A policy the token may
    /// not select is 403 `policy_not_allowed`; an unknown one (without authentication) is a
    /// `schema_error` naming the valid ones. Before the run, every command validation finds in
    /// the script (nested ones too) is decided by the policy's `command_rules` and its findings
    /// by its `validation_rules` (see `policy_checks` in the result). A run under a policy cannot
    /// have `files` or `artifacts` yet (400, after a 403 `policy_violation` for a file its
    /// `file_rules` deny).
    #[serde(default)]
    #[schema(example = "strict")]
    pub policy: Option<String>,
    /// Network access through the egress proxy (default: none, the sandbox sees only loopback).
    /// Names the script may reach, within what the run's policy allows (the policy it is
    /// enforced under, else the deployment's default policy): a name or port outside it is 403
    /// `network_not_allowed`, a malformed one a `schema_error`. Proxy-aware clients (pip, curl,
    /// git, requests, urllib) use it through `HTTP_PROXY`/`HTTPS_PROXY`/`ALL_PROXY`; every lookup
    /// and connection is in the result's `network_operations` and `network_summary`.
    #[serde(default)]
    pub network: Option<crate::domain::network::NetworkGrant>,
}

impl ExecuteIn {
    /// The checked request of `caller`, with the run-time policy it is enforced under.
    pub(crate) fn into_run(
        self,
        executions: &Executions,
        profiles: &Profiles,
        caller: &Caller,
    ) -> Result<Work, ApiError> {
        let requested = self.policy.clone();
        let network = self.network.clone();
        let run = self.check(executions.settings(), profiles, executions.job_maxima())?;
        let policy = executions.choose_policy(caller, requested.as_deref())?;
        if let Some(grant) = &network {
            executions.check_network(policy.as_deref(), grant)?;
        }
        let work = Work::Script(run.with_policy(policy).with_network(network));
        check_policy_files(executions, &work)?;
        Ok(work)
    }

    /// The checked request (raw wire values become domain types only here).
    fn check(
        self,
        settings: &ExecutionSettings,
        profiles: &Profiles,
        maxima: &Maxima,
    ) -> Result<ScriptRun, ApiError> {
        check_script_text(&self.script_content)?;
        let profile = profiles
            .select(self.profile.as_deref(), self.script_type)
            .map_err(|e| ApiError::Schema(e.to_string()))?
            .name
            .clone();
        let timeout = self.timeout.unwrap_or(settings.default_timeout_secs);
        if !(1..=settings.max_timeout_secs).contains(&timeout) {
            return Err(ApiError::Schema(format!(
                "timeout: must be between 1 and {} seconds, got {timeout}",
                settings.max_timeout_secs
            )));
        }
        let stdin = self.stdin.unwrap_or_default();
        if stdin.len() > settings.max_stdin_bytes {
            return Err(ApiError::Schema(format!(
                "stdin: must be at most {} bytes, got {}",
                settings.max_stdin_bytes,
                stdin.len()
            )));
        }
        let (files, artifacts) = workspace(self.files, self.artifacts, maxima)?;
        let run = ScriptRun::new(
            Script::new(self.script_type, self.script_content),
            stdin,
            std::time::Duration::from_secs(timeout),
            profile,
        );
        Ok(run.with_workspace(files, artifacts))
    }
}

/// A run under a policy that moves files in or out (a script's `files`/`artifacts`, a job): its
/// files are decided by the policy's `file_rules` before anything is recorded (a `deny` is 403
/// `policy_violation`); its commands then run under the policy inside the container.
pub(crate) fn check_policy_files(executions: &Executions, work: &Work) -> Result<(), ApiError> {
    // The other decisions are taken again with the run's review (`approve` holds it, `log` is
    // audited with it).
    executions.policy_files(work)?;
    Ok(())
}

/// An empty script or one with NUL characters is not a script: a schema error, before any
/// validation layer (the size layer still rejects both for callers that skip this check).
pub(crate) fn check_script_text(text: &str) -> Result<(), ApiError> {
    if text.is_empty() {
        return Err(ApiError::Schema("script_content: must not be empty".into()));
    }
    if let Some(at) = text.find('\0') {
        return Err(ApiError::Schema(format!(
            "script_content: must not contain NUL characters (found one at byte {at})"
        )));
    }
    Ok(())
}

/// The result of an execution (the same object for `/v1/execute` and `/v1/executions/{id}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub(crate) struct ExecuteOut {
    pub execution_id: Uuid,
    pub status: Status,
    /// The script ran to completion with exit code 0.
    pub success: bool,
    /// The script's exit code; null when it did not run or was killed.
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// Output beyond `sandbox.limits.output_bytes` per stream was dropped.
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    /// The script was killed at its deadline.
    pub timeout: bool,
    /// Milliseconds from the start of processing to the result: from the request for a run that
    /// waits for its result, from a worker picking it up for a queued or approved run (time held
    /// for approval is not counted). Includes validation (synchronous runs), queueing and the run.
    pub duration_ms: u64,
    /// Validation rejected the script, so no container was started.
    pub validation_failed: bool,
    pub validation: Verdict,
    /// Why the execution did not succeed (`validation_failed`, `policy_violation` when the
    /// run's policy denied a command or a finding before the run, `timeout`,
    /// `resource_limit_exceeded`, `execution_failure` for a non-zero exit or a crash, `denied`,
    /// `approval_timeout`, `internal_error`); null on success and while it is not finished.
    pub error: Option<ExecutionError>,
    pub resource_usage: ResourceUsage,
    pub timings_ms: StageMs,
    /// Served by a container started before the request.
    pub warm: bool,
    /// The operator's decision, when the execution needed approval.
    pub approval: Option<Approval>,
    /// The name of the agent token that submitted it.
    pub agent: String,
    /// The runner profile it ran (or will run) in.
    pub profile: String,
    /// Files the run returned: in profiles with plots, every `plt.show()` and every figure still
    /// open at the end, as PNG. Download each at
    /// `/v1/executions/{execution_id}/artifacts/{path without its leading slash}`.
    pub artifacts: Vec<Artifact>,
    /// Files left out by the caps (`sandbox.limits.max_images`, `max_image_bytes`,
    /// `artifacts.max_run_bytes`; for a run with a workspace, the jobs maxima), and artifact
    /// globs or files that could not be returned.
    pub artifacts_dropped: u32,
    /// Why each artifact glob or file of `artifacts_dropped` was not returned (runs with a
    /// workspace): a symlink, a directory, a missing file, a maximum.
    pub artifact_errors: Vec<ArtifactIssue>,
    /// The job this execution runs (absent for scripts): its result is at `/v1/jobs/{job_id}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub job_id: Option<Uuid>,
    /// The image's content id the script ran in (`sha256:…`), for an exact replay.
    pub image_digest: Option<String>,
    /// The version of the supervisor that ran it.
    pub supervisor_version: Option<String>,
    /// The run-time policy the run was enforced under; null when it was not enforced.
    pub policy: Option<String>,
    /// What the run's policy decided before the run other than `allow`: each command the script
    /// runs (`command_rules`, nested ones included) and each finding raised by its
    /// `validation_rules`, with the rule and its rendered message. A `deny` refused the run
    /// (`policy_violation`); an `approve` held it for an operator; a `log` let it run.
    #[serde(default)]
    pub policy_checks: Vec<PolicyCheck>,
    /// What the script's processes did, as the policy decided it (null without a policy):
    /// `processes` `[{pid, argv, cwd, decision, rule}]`, `file_operations` `[{type, path, bytes,
    /// decision, rule}]`, `network_operations` (`net_connect`, `dns_query`), `blocked_operations`
    /// `[{type, pid, target, decision, rule, message, errno}]`; each list keeps at most
    /// `policy.event_cap` items and `omitted` counts the rest per list.
    #[schema(value_type = Option<Object>)]
    pub events: Option<scriptgate_policy::events::Events>,
    /// Secrets of the known families were replaced by their redacted form in `stdout` or
    /// `stderr` (`execution.redact_output_secrets`).
    pub redacted: bool,
    /// Every lookup and connection through the egress proxy, in order (null without network
    /// access): `dns_query` `{domain, answers, decision}`, `net_connect` `{domain, remote, port,
    /// bytes_sent, bytes_received, duration_ms, decision, rule}` (with `protocol`, `status`,
    /// `cause`, `ended`, `limit` where they apply), `net_limit` `{limit, domain, port, reason}`;
    /// each with `type`, `sandbox`, `seq` and `at`.
    #[schema(value_type = Option<Vec<Object>>)]
    pub network_operations: Option<Vec<serde_json::Value>>,
    /// Totals of the run's network activity (null without network access).
    pub network_summary: Option<crate::domain::network::NetworkSummary>,
}

impl From<&ExecutionRecord> for ExecuteOut {
    fn from(r: &ExecutionRecord) -> Self {
        let o = r.result.as_ref();
        let network = o.and_then(|o| o.network.as_ref());
        ExecuteOut {
            execution_id: r.id,
            status: r.status,
            success: r.success(),
            exit_code: o.and_then(|o| o.exit_code),
            stdout: o.map(|o| o.stdout.clone()).unwrap_or_default(),
            stderr: o.map(|o| o.stderr.clone()).unwrap_or_default(),
            stdout_truncated: o.is_some_and(|o| o.stdout_truncated),
            stderr_truncated: o.is_some_and(|o| o.stderr_truncated),
            timeout: o.is_some_and(|o| o.timed_out),
            duration_ms: r.duration_ms,
            validation_failed: !r.verdict.valid,
            validation: r.verdict.clone(),
            error: r.error.clone(),
            resource_usage: o.map(|o| o.usage).unwrap_or_default(),
            timings_ms: r.timings,
            warm: o.is_some_and(|o| o.warm),
            approval: r.approval.clone(),
            agent: r.agent.clone(),
            profile: r.run.profile().to_string(),
            artifacts: o.map(|o| o.artifacts.clone()).unwrap_or_default(),
            artifacts_dropped: o.map_or(0, |o| o.artifacts_dropped),
            artifact_errors: o.map(|o| o.artifact_errors.clone()).unwrap_or_default(),
            job_id: r.job_id(),
            image_digest: o.and_then(|o| o.provenance.image_digest.clone()),
            supervisor_version: o.and_then(|o| o.provenance.supervisor_version.clone()),
            policy: r.run.policy().map(str::to_string),
            policy_checks: r.policy_checks.clone(),
            events: o.and_then(|o| o.events.clone()),
            redacted: o.is_some_and(|o| o.redacted),
            network_operations: network.map(|n| n.network_operations.clone()),
            network_summary: network.map(|n| n.network_summary.clone()),
        }
    }
}

/// Where to read an accepted execution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub(crate) struct Links {
    /// `GET` it for the result (`?wait=N` long-polls up to N seconds).
    #[serde(rename = "self")]
    pub this: String,
    /// Where an operator approves or denies it (only while it is pending approval).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub approval: Option<String>,
}

/// 202 body: accepted, not finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub(super) struct SubmissionOut {
    pub execution_id: Uuid,
    pub status: Status,
    pub links: Links,
}

impl From<&ExecutionRecord> for SubmissionOut {
    fn from(r: &ExecutionRecord) -> Self {
        SubmissionOut {
            execution_id: r.id,
            status: r.status,
            links: Links {
                this: format!("/v1/executions/{}", r.id),
                approval: (r.status == Status::PendingApproval)
                    .then(|| format!("/v1/approvals/{}", r.id)),
            },
        }
    }
}

/// Validate a script and run it in a one-use container, answering with the result.
#[utoipa::path(
    post,
    path = "/v1/execute",
    tag = "execute",
    operation_id = "execute_script",
    request_body = ExecuteIn,
    responses(
        (status = 200, description = "The script was validated and, if valid, ran. A non-zero exit, a timeout or an OOM kill is still 200: read `success`, `exit_code`, `timeout` and `error`. A script rejected by validation is 200 with `validation_failed` true and `error.type` `validation_failed`.",
            body = ExecuteOut, example = json!(crate::http::openapi::example_result())),
        (status = 202, description = "Held for operator approval (`approval` is `always`, or `on_warn` and validation warned): read the result at `links.self`.",
            body = SubmissionOut, example = json!(crate::http::openapi::example_submission())),
        (status = 400, description = "The body does not match the schema; the message names the field.", body = ErrorBody,
            example = json!({"error": {"type": "schema_error", "message": "script_type: unknown variant `ruby`, expected `python` or `bash`"}})),
        (status = 403, description = "The token may not select the `policy` the request names (`policy_not_allowed`), the run's policy denies one of its `files` (create, write) or `artifacts` (read) by its `file_rules` (`policy_violation`), or `network` asks for more than the run's policy allows (`network_not_allowed`).", body = ErrorBody,
            example = json!({"error": {"type": "policy_not_allowed", "message": "policy `audit` is not one this token may select (it may select: default)"}})),
        crate::http::openapi::AdmissionResponses,
    ),
    security(("agent_token" = []))
)]
pub(super) async fn execute(
    State(state): State<AppState>,
    caller: Authenticated,
    Json(body): Json<ExecuteIn>,
) -> Result<Response, ApiError> {
    let caller = caller.require(Role::Agent)?;
    let request = body.into_run(&state.executions, &state.profiles, caller)?;
    Ok(
        match state.executions.submit(caller, request, true).await? {
            Submitted::Finished(rec) => axum::Json(ExecuteOut::from(&rec)).into_response(),
            Submitted::Accepted(rec) => {
                (StatusCode::ACCEPTED, axum::Json(SubmissionOut::from(&rec))).into_response()
            }
        },
    )
}
