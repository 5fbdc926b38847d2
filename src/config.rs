//! Configuration: defaults < TOML file < `SCRIPTGATE_*` environment variables, checked once at start.
//!
//! Nested keys use `__` in the environment: `SCRIPTGATE_SANDBOX__POOL__SIZE=0` sets `sandbox.pool.size`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

use crate::artifacts::ArtifactSettings;
use crate::auth::{TokenSpec, token_list};
use crate::domain::record::ApprovalMode;
use crate::policy::PolicySettings;
use crate::sandbox::docker::DockerConfig;
use crate::sandbox::egress::EgressSettings;
use crate::validate::ValidationConfig;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address the HTTP API listens on.
    pub listen: SocketAddr,
    /// `text` for people, `json` for log collectors.
    pub log_format: LogFormat,
    /// Where the database (executions, approvals, audit log) lives; default `data/` next to the
    /// config file, else the user's data directory.
    pub data_dir: Option<PathBuf>,
    /// Agent tokens: `name:token,…` in `SCRIPTGATE_AGENT_TOKENS`, or `[[agent_tokens]]` tables
    /// with `name` and `token` or `sha256` in the file.
    #[serde(deserialize_with = "token_list")]
    pub agent_tokens: Vec<TokenSpec>,
    /// Operator tokens, same forms (`SCRIPTGATE_OPERATOR_TOKENS`).
    #[serde(deserialize_with = "token_list")]
    pub operator_tokens: Vec<TokenSpec>,
    /// Serve on a non-loopback address without any token (never in production).
    pub insecure_no_auth: bool,
    /// `never`, `always`, or `on_warn` (hold scripts whose validation produced warn findings).
    pub approval: ApprovalMode,
    /// Undecided approvals expire after this long.
    pub approval_timeout_secs: u64,
    pub validation: ValidationSettings,
    pub execution: ExecutionSettings,
    pub sandbox: DockerConfig,
    pub mcp: McpSettings,
    /// Files runs return (plots): retention and size caps.
    pub artifacts: ArtifactSettings,
    /// Run-time policies: `policies_dir`, the deployment default, and what each agent token may
    /// select (`[policy.agents.NAME]`).
    pub policy: PolicySettings,
    /// The egress proxy of sandboxes that opt in to network access.
    pub egress: EgressSettings,
    /// Persistent sessions (`/v1/sessions`): caps, timeouts and what each keeps.
    pub sessions: SessionSettings,
}

/// Persistent sessions: how many, how long, and what a session keeps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionSettings {
    /// Sessions one agent may hold at once (stopped ones do not count); 429 beyond.
    pub max_per_agent: usize,
    /// Sessions the service holds at once; 429 beyond.
    pub max_total: usize,
    /// Idle time after which a session stops, unless the request names its own.
    pub default_idle_timeout_secs: u64,
    /// The longest idle timeout a request may ask for.
    pub max_idle_timeout_secs: u64,
    /// A session's lifetime, unless the request names its own.
    pub default_max_duration_secs: u64,
    /// The longest lifetime a request may ask for.
    pub max_duration_secs: u64,
    /// The most commands a request may allow a session (and the default).
    pub max_commands: u64,
    /// Output kept per command and stream, for `…/output` (the rest is counted, not kept). Over
    /// its history a session keeps four commands' worth; older output goes first.
    pub output_keep_bytes: u64,
    /// Output a command's result carries per stream (the rest is paged with `…/output`).
    pub result_output_bytes: u64,
    /// Commands whose record (and output) a session keeps, newest first.
    pub history_commands: usize,
    /// How long a stopped session's record still answers `GET`.
    pub retention_secs: u64,
    /// A client that disconnects from `…/exec` or `…/exec/stream` kills its command (otherwise
    /// it runs to its end or timeout, its result kept in the history).
    pub kill_on_disconnect: bool,
    /// How often expiry (idle, lifetime) is checked.
    pub sweep_interval_secs: u64,
}

impl Default for SessionSettings {
    fn default() -> Self {
        SessionSettings {
            max_per_agent: 4,
            max_total: 32,
            default_idle_timeout_secs: 1800,
            max_idle_timeout_secs: 86_400,
            default_max_duration_secs: 14_400,
            max_duration_secs: 86_400,
            max_commands: 100_000,
            output_keep_bytes: 16 << 20,
            result_output_bytes: 1 << 20,
            history_commands: 200,
            retention_secs: 3600,
            kill_on_disconnect: false,
            sweep_interval_secs: 1,
        }
    }
}

/// The MCP endpoint (`/mcp`) of the HTTP service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpSettings {
    pub enabled: bool,
    /// `Host` header values `/mcp` accepts (a DNS-rebinding guard for browsers on the same
    /// machine). Default: any host when tokens are configured (a rebinding page has no token),
    /// only localhost / 127.0.0.1 / ::1 when authentication is off.
    pub allowed_hosts: Option<Vec<String>>,
}

impl Default for McpSettings {
    fn default() -> Self {
        McpSettings {
            enabled: true,
            allowed_hosts: None,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            log_format: LogFormat::Text,
            data_dir: None,
            agent_tokens: Vec::new(),
            operator_tokens: Vec::new(),
            insecure_no_auth: false,
            approval: ApprovalMode::Never,
            approval_timeout_secs: 300,
            validation: ValidationSettings::default(),
            execution: ExecutionSettings::default(),
            sandbox: DockerConfig::default(),
            mcp: McpSettings::default(),
            artifacts: ArtifactSettings::default(),
            policy: PolicySettings::default(),
            egress: EgressSettings::default(),
            sessions: SessionSettings::default(),
        }
    }
}

fn default_data_dir() -> PathBuf {
    dirs::data_dir().map_or_else(|| PathBuf::from("data"), |d| d.join("scriptgate"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ValidationSettings {
    /// Scripts longer than this many characters are rejected by the size layer.
    pub max_chars: usize,
    /// Treat `warn` findings as blocking.
    pub block_on_warn: bool,
    /// Load rules from this directory (laid out like `patterns/`) instead of the built-in ones.
    pub rules_dir: Option<PathBuf>,
    /// Secret / dangerous-pattern rules to switch off: ids, or prefixes ending in `*`.
    pub disabled_rules: Vec<String>,
}

impl Default for ValidationSettings {
    fn default() -> Self {
        let v = ValidationConfig::default();
        ValidationSettings {
            max_chars: v.max_chars,
            block_on_warn: v.block_on_warn,
            rules_dir: None,
            disabled_rules: v.disabled_rules,
        }
    }
}

impl ValidationSettings {
    pub fn validation_config(&self) -> ValidationConfig {
        ValidationConfig {
            max_chars: self.max_chars,
            block_on_warn: self.block_on_warn,
            disabled_rules: self.disabled_rules.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExecutionSettings {
    pub default_timeout_secs: u64,
    pub max_timeout_secs: u64,
    pub max_stdin_bytes: usize,
    /// Runs at once; more wait in a queue.
    pub max_concurrent: usize,
    /// Requests that may wait for a slot; beyond that the answer is 429 with Retry-After.
    pub max_queue: usize,
    /// How long a queued request waits for a slot before giving up with 429.
    pub queue_timeout_secs: u64,
    /// Largest request body accepted (413 beyond).
    pub max_body_bytes: usize,
    /// Secrets of the known families in stdout/stderr are replaced by their redacted form before
    /// they leave the service (the result says `redacted: true`).
    pub redact_output_secrets: bool,
}

impl Default for ExecutionSettings {
    fn default() -> Self {
        ExecutionSettings {
            default_timeout_secs: 60,
            max_timeout_secs: 300,
            max_stdin_bytes: 64 * 1024,
            max_concurrent: 8,
            max_queue: 32,
            queue_timeout_secs: 30,
            max_body_bytes: 1 << 20,
            redact_output_secrets: true,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration: {0}")]
    Load(Box<figment::Error>),
    #[error("configuration: {0}")]
    Invalid(String),
}

impl Config {
    /// Defaults, then `file` (when given), then `SCRIPTGATE_*` variables.
    pub fn load(file: Option<&Path>) -> Result<Config, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(path) = file {
            if !path.is_file() {
                return Err(ConfigError::Invalid(format!(
                    "config file {} not found",
                    path.display()
                )));
            }
            figment = figment.merge(Toml::file_exact(path));
        }
        let mut config: Config = figment
            .merge(Env::prefixed("SCRIPTGATE_").split("__").ignore(&["config"]))
            .extract()
            .map_err(|e| ConfigError::Load(Box::new(e)))?;
        if config.data_dir.is_none() {
            config.data_dir = Some(match file.and_then(Path::parent) {
                Some(dir) => dir.join("data"),
                None => default_data_dir(),
            });
        }
        config.check()?;
        Ok(config)
    }

    /// The data directory (the configured one, or the default).
    pub fn data_dir(&self) -> PathBuf {
        self.data_dir.clone().unwrap_or_else(default_data_dir)
    }

    /// The effective configuration with every token masked.
    pub fn masked(&self) -> Config {
        let mut c = self.clone();
        c.agent_tokens = c.agent_tokens.iter().map(TokenSpec::masked).collect();
        c.operator_tokens = c.operator_tokens.iter().map(TokenSpec::masked).collect();
        c
    }

    pub fn check(&self) -> Result<(), ConfigError> {
        let e = &self.execution;
        let bad = |m: &str| Err(ConfigError::Invalid(m.to_string()));
        if self.approval_timeout_secs == 0 {
            return bad("approval_timeout_secs must be at least 1");
        }
        if e.default_timeout_secs == 0 || e.default_timeout_secs > e.max_timeout_secs {
            return bad(
                "execution.default_timeout_secs must be between 1 and execution.max_timeout_secs",
            );
        }
        if e.max_concurrent == 0 {
            return bad("execution.max_concurrent must be at least 1");
        }
        if e.max_body_bytes < 1024 {
            return bad("execution.max_body_bytes must be at least 1024");
        }
        if self.validation.max_chars == 0 {
            return bad("validation.max_chars must be at least 1");
        }
        let l = &self.sandbox.limits;
        if l.memory_mb < 16
            || l.cpus <= 0.0
            || l.pids < 8
            || l.tmpfs_mb == 0
            || l.workspace_mb == 0
            || l.nofile < 16
        {
            return bad(
                "sandbox.limits: memory_mb >= 16, cpus > 0, pids >= 8, tmpfs_mb >= 1, workspace_mb >= 1, nofile >= 16",
            );
        }
        self.sandbox
            .jobs
            .validate()
            .map_err(|e| ConfigError::Invalid(format!("sandbox.jobs: {e}")))?;
        self.sandbox
            .resolved_profiles()
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        self.egress
            .check()
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        if self.sandbox.instance.is_empty()
            || !self
                .sandbox
                .instance
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return bad(
                "sandbox.instance must be a non-empty name of letters, digits, '-', '_' or '.'",
            );
        }
        Ok(())
    }
}

#[cfg(test)]
// figment's Jail API returns its own large error type; nothing to shrink on our side.
#[allow(clippy::result_large_err)]
mod tests {
    use super::*;

    #[test]
    fn file_then_environment_override_defaults() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "sg.toml",
                "listen = \"0.0.0.0:9000\"\n[sandbox.pool]\nsize = 5\n",
            )?;
            jail.set_env("SCRIPTGATE_SANDBOX__POOL__SIZE", "0");
            jail.set_env("SCRIPTGATE_EXECUTION__MAX_CONCURRENT", "3");
            let c = Config::load(Some(Path::new("sg.toml"))).expect("loads");
            assert_eq!(c.listen.port(), 9000);
            assert_eq!(c.sandbox.pool.size, 0);
            assert_eq!(c.execution.max_concurrent, 3);
            assert_eq!(c.sandbox.limits.memory_mb, 512);
            Ok(())
        });
    }

    #[test]
    fn unknown_keys_and_bad_values_are_rejected() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("bad.toml", "listn = \"x\"\n")?;
            let err = Config::load(Some(Path::new("bad.toml"))).expect_err("unknown key");
            assert!(err.to_string().contains("listn"), "{err}");
            jail.create_file("bad2.toml", "[execution]\nmax_concurrent = 0\n")?;
            let err = Config::load(Some(Path::new("bad2.toml"))).expect_err("invalid");
            assert!(err.to_string().contains("max_concurrent"), "{err}");
            Ok(())
        });
    }
}
