//! Tool definitions for agent frameworks: `execute_script`, `validate_script` and `run_job`, with
//! JSON Schema parameters that carry the configured limits and descriptions that tell the model
//! what is checked and how the work runs. One catalog feeds `GET /v1/tools` (OpenAI and Anthropic
//! shapes) and the MCP server, so every integration describes the same contract. `run_job`'s
//! schema is the OpenAPI document's `JobIn` with the deployment's maxima written in. Just past
//! 500 lines: every tool's description and schema stays in this one file, so one place states the
//! whole contract models are given.

use serde::Serialize;
use serde_json::{Value, json};

use crate::config::Config;
use crate::domain::record::ApprovalMode;
use crate::sandbox::profiles::Profiles;

pub(crate) const EXECUTE: &str = "execute_script";
pub(crate) const VALIDATE: &str = "validate_script";
pub(crate) const RUN_JOB: &str = "run_job";
pub(crate) const SESSION_CREATE: &str = "session_create";
pub(crate) const SESSION_EXEC: &str = "session_exec";
pub(crate) const SESSION_DESTROY: &str = "session_destroy";
pub(crate) const SESSION_UPLOAD: &str = "session_upload_file";
pub(crate) const SESSION_DOWNLOAD: &str = "session_download_file";

/// What every tool says about its risk, beside its definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub(crate) struct ToolMeta {
    /// `high` for running code, `low` for read-only checks.
    pub risk_level: &'static str,
    /// Every call waits for an operator's approval (`approval = "always"`).
    pub approval_required: bool,
    /// The configured approval mode: `never`, `always` or `on_warn` (held only when validation
    /// warns).
    pub approval_mode: &'static str,
    /// The call changes nothing (validation only).
    pub read_only: bool,
    /// The HTTP operation that performs the call.
    pub endpoint: &'static str,
}

/// One tool: name, description for the model, JSON Schema of its arguments.
#[derive(Debug, Clone)]
pub(crate) struct Tool {
    pub name: &'static str,
    pub title: &'static str,
    pub description: String,
    pub input_schema: Value,
    pub meta: ToolMeta,
}

/// The tools, built once from the configuration.
#[derive(Debug, Clone)]
pub(crate) struct Catalog {
    pub tools: Vec<Tool>,
    /// The runner profiles the tools offer.
    pub profiles: std::sync::Arc<Profiles>,
}

impl Catalog {
    pub(crate) fn new(config: &Config) -> Catalog {
        let max_chars = config.validation.max_chars;
        let e = &config.execution;
        let l = &config.sandbox.limits;
        // The configuration was checked at load; a bad profile list here means built-ins only.
        let profiles = config.sandbox.resolved_profiles().unwrap_or_else(|_| {
            Profiles::resolve(
                &config.sandbox.python_image,
                &config.sandbox.bash_image,
                config.sandbox.pool.size,
                &[],
            )
            .expect("built-in profiles are valid")
        });
        let mode = config.approval.as_str();
        let checks = format!(
            "Before anything runs the script is validated: at most {max_chars} characters; it must \
             parse as the declared language (Python 3 or Bash); it must not be the other language; it \
             must not contain hard-coded secrets (API keys, tokens, private keys, passwords, URLs with \
             credentials: read them from the environment instead); and it must not use dangerous \
             constructs (eval/exec/compile, os.system, subprocess with shell=True, dynamic imports, \
             ctypes, pickle loads, rm -rf of system paths, reverse shells, curl | sh, disk or \
             firewall changes). A rejected script does not run: the result lists each finding with \
             its rule and line, so fix the script and call again."
        );
        let sandbox = format!(
            "It runs in a fresh, one-use container: no network access, read-only filesystem except \
             /tmp ({tmpfs} MiB), an unprivileged user, {memory} MiB of memory, {cpus} CPU, at most \
             {pids} processes. It is killed after `timeout` seconds. stdout and stderr are returned (each \
             truncated after {output} bytes): print what you need to see.",
            tmpfs = l.tmpfs_mb,
            memory = l.memory_mb,
            cpus = l.cpus,
            pids = l.pids,
            output = l.output_bytes,
        );
        let profile_list: Vec<String> = profiles
            .all()
            .iter()
            .map(|p| format!("`{}` ({})", p.name, p.description))
            .collect();
        let sandbox = format!(
            "{sandbox} Pick the environment with `profile`: {}. The default is `{}`. In profiles \
             with matplotlib, figures are returned as PNG images (call plt.show() or leave them \
             open; do not save them to files yourself).",
            profile_list.join("; "),
            profiles.default_profile().name
        );
        let profile = json!({
            "type": "string",
            "enum": profiles.names(),
            "default": profiles.default_profile().name,
            "description": format!("The runner environment: {}.", profile_list.join("; "))
        });
        let approval = match config.approval {
            ApprovalMode::Never => String::new(),
            ApprovalMode::Always => " Every execution waits for a human operator's approval; \
                 until then the result has status `pending_approval` and no output."
                .into(),
            ApprovalMode::OnWarn => " Scripts that raise validation warnings wait for a human \
                 operator's approval; until then the result has status `pending_approval`."
                .into(),
        };
        let language = json!({
            "type": "string",
            "enum": ["python", "bash"],
            "description": "The script's language: `python` (Python 3) or `bash`."
        });
        let content = json!({
            "type": "string",
            "minLength": 1,
            "maxLength": max_chars,
            "description": format!("The complete script source, at most {max_chars} characters.")
        });
        let execute = Tool {
            name: EXECUTE,
            title: "Run a script in a sandbox",
            description: format!(
                "Run a Python or Bash script in an isolated sandbox and return its stdout, stderr \
                 and exit code. {checks} {sandbox}{approval}"
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "script_content": content,
                    "script_type": language,
                    "timeout": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": e.max_timeout_secs,
                        "default": e.default_timeout_secs,
                        "description": format!(
                            "Seconds before the script is killed (1 to {}; default {}).",
                            e.max_timeout_secs, e.default_timeout_secs
                        )
                    },
                    "stdin": {
                        "type": "string",
                        "maxLength": e.max_stdin_bytes,
                        "description": "Text fed to the script's standard input (optional)."
                    },
                    "profile": profile,
                    "files": {
                        "type": "array",
                        "maxItems": config.sandbox.jobs.max_steps.saturating_sub(2),
                        "description": "Files written into /workspace (the script's working directory) before the script runs; validated like the script (.py/.sh with every layer, everything else for secrets).",
                        "items": {
                            "type": "object",
                            "properties": {
                                "path": {"type": "string", "description": "Relative to /workspace (or absolute under it)."},
                                "content": {"type": "string"},
                                "encoding": {"type": "string", "enum": ["utf8", "base64"], "default": "utf8"}
                            },
                            "required": ["path", "content"],
                            "additionalProperties": false
                        }
                    },
                    "artifacts": {
                        "type": "array",
                        "maxItems": config.sandbox.jobs.max_artifacts.saturating_sub(1),
                        "items": {"type": "string"},
                        "description": "Paths or globs under /workspace or /tmp of files to return after the run (each with its sha256)."
                    },
                    "policy": {
                        "type": "string",
                        "description": format!(
                            "The run-time policy that decides every program, file and connection \
                             of the script (optional; the deployment default is `{}`). Denied \
                             operations fail (EACCES/EPERM) and are listed in the result's \
                             `events.blocked_operations`. Before the run, the commands the \
                             script runs are decided too: a denied one refuses the run \
                             (`policy_violation`), one that needs an operator holds it \
                             (`policy_checks` says which); so are the files the service moves in \
                             and out (`file_rules`: a denied one is 403 `policy_violation`).",
                            config.policy.default
                        )
                    }
                },
                "required": ["script_content", "script_type"],
                "additionalProperties": false
            }),
            meta: ToolMeta {
                risk_level: "high",
                approval_required: config.approval == ApprovalMode::Always,
                approval_mode: mode,
                read_only: false,
                endpoint: "POST /v1/execute",
            },
        };
        let run_job = run_job_tool(config, &profiles, &approval, mode);
        let validate = Tool {
            name: VALIDATE,
            title: "Check a script without running it",
            description: format!(
                "Check a Python or Bash script without running it and return the verdict: valid, \
                 the layer that rejected it (size, syntax, language, secrets or dangerous) and \
                 every finding with its rule, message, line and column. {checks}"
            ),
            input_schema: json!({
                "type": "object",
                "properties": {"script_content": content, "script_type": language},
                "required": ["script_content", "script_type"],
                "additionalProperties": false
            }),
            meta: ToolMeta {
                risk_level: "low",
                approval_required: false,
                approval_mode: mode,
                read_only: true,
                endpoint: "POST /v1/validate",
            },
        };
        let mut tools = vec![execute, validate, run_job];
        tools.extend(session_tools(config, &profile, mode));
        Catalog {
            tools,
            profiles: std::sync::Arc::new(profiles),
        }
    }

    /// OpenAI function calling: `{"type": "function", "function": {name, description, parameters}}`.
    pub(crate) fn openai(&self) -> Vec<Value> {
        self.tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.input_schema,
                    }
                })
            })
            .collect()
    }

    /// Anthropic tool use: `{name, description, input_schema}`.
    pub(crate) fn anthropic(&self) -> Vec<Value> {
        self.tools
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "description": t.description,
                    "input_schema": t.input_schema,
                })
            })
            .collect()
    }
}

/// `run_job`: a job of the job protocol, its schema with this deployment's maxima.
fn run_job_tool(config: &Config, profiles: &Profiles, approval: &str, mode: &'static str) -> Tool {
    use utoipa::OpenApi as _;
    let m = &config.sandbox.jobs;
    let l = &config.sandbox.limits;
    let mut components =
        serde_json::to_value(super::openapi::ApiDoc::openapi().components).unwrap_or(Value::Null);
    let names: Vec<String> = profiles.names().into_iter().map(String::from).collect();
    super::jobs::schema::with_maxima(&mut components, m, &names);
    let mut input_schema = super::jobs::schema::self_contained(&components, "JobIn");
    if let Value::Object(o) = &mut input_schema {
        // Tool schemas are plain objects (OpenAI and Anthropic read no `$schema`).
        o.remove("$schema");
    }
    let description = format!(
        "Run a structured job (Job protocol {protocol}) in a fresh, one-use sandbox and return \
         its complete result. A job is typed steps run in order in one container with a writable \
         /workspace ({workspace} MiB): `write_file` (utf8 or base64 content), `run_command` (one \
         program from `constraints.allowed_commands`, never a shell: put `python3` or `bash` in \
         allowed_commands and pass a script file or `-c`), `apply_unified_diff` (all files or \
         none), `read_file` and `list_tree`. Paths lie inside `constraints.allowed_paths` (default \
         /workspace; relative paths are relative to it), canonical, never through a symlink. The \
         first failing step ends the job (a non-zero exit is `execution_failure`) unless it says \
         `continue_on_error`; the rest are `skipped`. `artifacts` lists paths or globs of files \
         to return (with sha256, size and type). Before anything runs, the job is checked: at \
         most {steps} steps and {runtime} s, and the content it carries is validated like a \
         script (no hard-coded secrets anywhere; .py/.sh files and `python3 -c`/`bash -c` \
         programs pass every validation layer); a job refused by a check fails its offending \
         step with a typed error (`policy_violation`, `resource_limit_exceeded`) and runs \
         nothing. No network, {memory} MiB of memory, an unprivileged user.{approval}",
        protocol = crate::sandbox::job::JOB_PROTOCOL,
        workspace = l.workspace_mb,
        steps = m.max_steps,
        runtime = m.max_runtime_seconds,
        memory = l.memory_mb,
    );
    Tool {
        name: RUN_JOB,
        title: "Run a structured job in a sandbox",
        description,
        input_schema,
        meta: ToolMeta {
            risk_level: "high",
            approval_required: config.approval == ApprovalMode::Always,
            approval_mode: mode,
            read_only: false,
            endpoint: "POST /v1/jobs",
        },
    }
}

/// A session tool's metadata: what it costs and which operation performs it.
fn session_meta(
    config: &Config,
    mode: &'static str,
    runs: bool,
    endpoint: &'static str,
) -> ToolMeta {
    ToolMeta {
        risk_level: if runs { "high" } else { "low" },
        approval_required: runs && config.approval == ApprovalMode::Always,
        approval_mode: mode,
        read_only: false,
        endpoint,
    }
}

/// The `session_id` argument every session tool but `session_create` takes.
fn session_id_arg() -> Value {
    json!({
        "type": "string",
        "format": "uuid",
        "description": "The session (from session_create). Leave it out to use this \
            connection's own session, created on first use and destroyed when the connection ends."
    })
}

/// The persistent-session tools: create, run a command in, destroy, and move files in and out.
fn session_tools(config: &Config, profile: &Value, mode: &'static str) -> Vec<Tool> {
    let s = &config.sessions;
    let e = &config.execution;
    let create = Tool {
        name: SESSION_CREATE,
        title: "Start a persistent sandbox session",
        description: format!(
            "Start a persistent sandbox session and return its `session_id`. Unlike \
             execute_script, a session keeps its /workspace files, working directory, exported \
             variables and aliases across commands (session_exec), like an interactive shell; \
             nothing a command starts outlives it. It has no network and the same hardening as a \
             one-use run. It stops after `idle_timeout_secs` without a command (default {idle}) \
             or `max_duration_secs` (default {life}); stop it with session_destroy when done. \
             Tools called without a `session_id` use an implicit session of this connection \
             instead, so creating one is only needed for several sessions at once.",
            idle = s.default_idle_timeout_secs,
            life = s.default_max_duration_secs,
        ),
        input_schema: json!({
            "type": "object",
            "properties": {
                "profile": profile,
                "environment": {
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                    "description": "Variables exported to every command (no secrets: values are scanned; names that load code such as LD_* are refused)."
                },
                "idle_timeout_secs": {"type": "integer", "minimum": 1, "maximum": s.max_idle_timeout_secs},
                "max_duration_secs": {"type": "integer", "minimum": 1, "maximum": s.max_duration_secs},
                "max_commands": {"type": "integer", "minimum": 1, "maximum": s.max_commands},
                "policy": {
                    "type": "string",
                    "description": format!(
                        "The run-time policy that decides every program, file and connection of \
                         every command of the session, and the session's file uploads and \
                         downloads (optional; the deployment default is `{}`). Denied operations \
                         fail (EACCES/EPERM) and are listed in each result's \
                         `events.blocked_operations`.",
                        config.policy.default
                    )
                }
            },
            "additionalProperties": false
        }),
        meta: session_meta(config, mode, false, "POST /v1/sessions"),
    };
    let exec = Tool {
        name: SESSION_EXEC,
        title: "Run a command in a sandbox session",
        description: format!(
            "Run one command in a persistent sandbox session and return its stdout, stderr, exit \
             code and the working directory after it. Give exactly one of `command` (a bash \
             command line: `cd`, `export`, `unset` and `alias` in it carry into later commands), \
             `argv` (a program and its arguments, no shell) or `script_content` with \
             `script_type`. Every command is validated first like execute_script (no hard-coded \
             secrets, no dangerous constructs); a rejected one does not run and the session stays \
             usable. It is killed after `timeout` seconds (default {default}, at most {max}); the \
             session stays usable. One command runs at a time per session.",
            default = e.default_timeout_secs,
            max = e.max_timeout_secs,
        ),
        input_schema: json!({
            "type": "object",
            "properties": {
                "session_id": session_id_arg(),
                "command": {"type": "string", "minLength": 1, "description": "A bash command line, e.g. `cd src && python3 main.py`."},
                "argv": {"type": "array", "minItems": 1, "items": {"type": "string"}, "description": "A program and its arguments, run without a shell."},
                "script_content": {"type": "string", "minLength": 1, "maxLength": config.validation.max_chars, "description": "A whole script, run by the interpreter of `script_type`."},
                "script_type": {"type": "string", "enum": ["python", "bash"]},
                "timeout": {"type": "integer", "minimum": 1, "maximum": e.max_timeout_secs},
                "stdin": {"type": "string", "maxLength": e.max_stdin_bytes}
            },
            "additionalProperties": false
        }),
        meta: session_meta(config, mode, true, "POST /v1/sessions/{id}/exec"),
    };
    let destroy = Tool {
        name: SESSION_DESTROY,
        title: "Stop a sandbox session",
        description: "Stop a sandbox session: kill a running command and remove the sandbox with \
            its files. Without `session_id`, the connection's implicit session."
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {"session_id": session_id_arg()},
            "additionalProperties": false
        }),
        meta: session_meta(config, mode, false, "DELETE /v1/sessions/{id}"),
    };
    let upload = Tool {
        name: SESSION_UPLOAD,
        title: "Write a file into a sandbox session",
        description: "Write a file into a session's /workspace, replacing it whole (or not at all \
            when it does not fit). Text is scanned for secrets. Returns its size and sha256."
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "session_id": session_id_arg(),
                "path": {"type": "string", "minLength": 1, "description": "Relative to /workspace, e.g. `src/main.py`."},
                "content": {"type": "string"},
                "encoding": {"type": "string", "enum": ["utf8", "base64"], "default": "utf8"}
            },
            "required": ["path", "content"],
            "additionalProperties": false
        }),
        meta: session_meta(config, mode, false, "PUT /v1/sessions/{id}/files/{path}"),
    };
    let download = Tool {
        name: SESSION_DOWNLOAD,
        title: "Read a file from a sandbox session",
        description: "Read a file from a session's /workspace: its content (utf8 text, or base64 \
            for binary files), size and sha256."
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "session_id": session_id_arg(),
                "path": {"type": "string", "minLength": 1, "description": "Relative to /workspace."}
            },
            "required": ["path"],
            "additionalProperties": false
        }),
        meta: ToolMeta {
            read_only: true,
            ..session_meta(config, mode, false, "GET /v1/sessions/{id}/files/{path}")
        },
    };
    vec![create, exec, destroy, upload, download]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_carry_the_configured_limits() {
        let mut config = Config::default();
        config.validation.max_chars = 5000;
        config.execution.max_timeout_secs = 120;
        config.approval = ApprovalMode::Always;
        let catalog = Catalog::new(&config);
        let execute = &catalog.openai()[0]["function"];
        assert_eq!(execute["name"], EXECUTE);
        let params = &execute["parameters"];
        assert_eq!(params["properties"]["script_content"]["maxLength"], 5000);
        assert_eq!(params["properties"]["timeout"]["maximum"], 120);
        assert_eq!(
            params["properties"]["script_type"]["enum"],
            json!(["python", "bash"])
        );
        assert!(
            execute["description"]
                .as_str()
                .is_some_and(|d| d.contains("5000 characters") && d.contains("approval"))
        );
        let meta = &catalog.tools[0].meta;
        assert_eq!((meta.risk_level, meta.approval_required), ("high", true));
        let job = &catalog.openai()[2]["function"];
        assert_eq!(job["name"], RUN_JOB);
        assert_eq!(job["parameters"]["properties"]["steps"]["maxItems"], 100);
        assert_eq!(
            job["parameters"]["$defs"]["ConstraintsIn"]["properties"]["max_runtime_seconds"]["maximum"],
            600
        );
        assert!(job["parameters"]["$defs"]["RunCommandArgs"].is_object());
        assert!(job["parameters"].get("$schema").is_none());
        let anthropic = catalog.anthropic();
        assert_eq!(anthropic[1]["name"], VALIDATE);
        assert_eq!(
            anthropic[1]["input_schema"]["required"],
            json!(["script_content", "script_type"])
        );
    }
}
