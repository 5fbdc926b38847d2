//! The command line's clap definitions: every command, its options and their help.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use scriptgate::domain::script::Language;
use scriptgate::validate::ValidationConfig;

use crate::cli;

#[derive(Debug, Parser)]
#[command(
    name = "scriptgate",
    version,
    about = "Validates Python and Bash scripts and runs them in one-use, hardened Docker containers."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the HTTP API (stops gracefully on SIGTERM or SIGINT: in-flight runs finish, every
    /// container is removed).
    Serve {
        /// Address to listen on (overrides `listen` in the config).
        #[arg(long)]
        listen: Option<std::net::SocketAddr>,
        /// Serve on this inherited, already listening TCP socket (e.g. 3) instead of binding one.
        #[arg(long, conflicts_with = "listen")]
        listen_fd: Option<std::os::fd::RawFd>,
        /// TOML configuration file; `SCRIPTGATE_*` variables override it.
        #[arg(long, env = "SCRIPTGATE_CONFIG")]
        config: Option<PathBuf>,
        /// Allow serving on a non-loopback address without any token.
        #[arg(long)]
        insecure_no_auth: bool,
    },
    /// Serve MCP on stdin/stdout, for clients that start their server themselves. Scripts run in
    /// this process's own sandbox; approvals need the HTTP service (use its /mcp endpoint).
    Mcp {
        /// TOML configuration file; `SCRIPTGATE_*` variables override it.
        #[arg(long, env = "SCRIPTGATE_CONFIG")]
        config: Option<PathBuf>,
        /// Keep executions and the audit log here (default: a temporary directory, removed at
        /// exit).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// The agent name recorded for this client's executions.
        #[arg(long, default_value = "mcp-stdio")]
        agent: String,
    },
    /// The tamper-evident audit log.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
        #[command(flatten)]
        source: DataSource,
    },
    /// The configuration.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
        #[arg(long, env = "SCRIPTGATE_CONFIG", global = true)]
        config: Option<PathBuf>,
    },
    /// Run-time policies: list, show, validate files, and test what a policy decides.
    Policy {
        #[command(subcommand)]
        command: cli::policy::PolicyCommand,
        /// TOML configuration file (its `policy` section); `SCRIPTGATE_*` variables override it.
        #[arg(long, env = "SCRIPTGATE_CONFIG", global = true)]
        config: Option<PathBuf>,
    },
    /// Persistent sessions of a running service: create, list, show, run commands in, destroy.
    Session {
        #[command(subcommand)]
        command: cli::client::SessionCommand,
        #[command(flatten)]
        target: cli::client::Target,
    },
    /// Run a script once on a running service (`POST /v1/execute`): a bash command line, or
    /// `--file`. Prints its output and exits with its exit code.
    Exec {
        /// Print output as it is produced: the script runs in a session of its own (created,
        /// streamed, destroyed), since `/v1/execute` answers only once the run has ended.
        #[arg(long)]
        stream: bool,
        #[command(flatten)]
        work: cli::client::Work,
        #[command(flatten)]
        target: cli::client::Target,
    },
    /// Jobs of the job protocol without a server: run one on the local engine, or check one.
    Job {
        #[command(subcommand)]
        command: cli::job::JobCommand,
        /// TOML configuration file; `SCRIPTGATE_*` variables override it.
        #[arg(long, env = "SCRIPTGATE_CONFIG", global = true)]
        config: Option<PathBuf>,
    },
    /// Validate script files; prints one JSON verdict per file. Exit 0 when all are valid, 1 when
    /// any is rejected, 2 on usage or read errors.
    Validate {
        /// Language of every file; otherwise taken from the extension (.py, .sh, .bash), then the shebang.
        #[arg(long, value_enum)]
        language: Option<LanguageArg>,
        /// Load rules from this directory (laid out like patterns/) instead of the built-in ones.
        #[arg(long)]
        rules: Option<PathBuf>,
        /// Maximum script length in characters.
        #[arg(long, default_value_t = ValidationConfig::default().max_chars)]
        max_chars: usize,
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Print the OpenAPI contract (YAML), as committed in openapi.yaml.
    Openapi,
    /// List the secret and dangerous-pattern rules (ids for `validation.disabled_rules`).
    Rules {
        /// Load rules from this directory (laid out like patterns/) instead of the built-in ones.
        #[arg(long)]
        rules: Option<PathBuf>,
    },
    /// Runner images (built without a registry).
    Images {
        #[command(subcommand)]
        command: ImagesCommand,
    },
    /// Exit 0 when the service's `/readyz` answers 200, else 1 (a container healthcheck: the
    /// images have no curl). Prints the answer's body.
    Healthcheck {
        /// What to check (`http://host:port/path`); default: `/readyz` at the configured `listen`
        /// address, through loopback when it is a wildcard address.
        #[arg(long)]
        url: Option<String>,
        /// TOML configuration file; `SCRIPTGATE_*` variables override it.
        #[arg(long, env = "SCRIPTGATE_CONFIG")]
        config: Option<PathBuf>,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 5)]
        timeout: u64,
    },
}

#[derive(Debug, clap::Args)]
pub(crate) struct DataSource {
    /// Configuration file (its data directory is used unless --data-dir is given).
    #[arg(long, env = "SCRIPTGATE_CONFIG", global = true)]
    pub(crate) config: Option<PathBuf>,
    /// Data directory holding scriptgate.db.
    #[arg(long, global = true)]
    pub(crate) data_dir: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum AuditCommand {
    /// Check the hash chain; names the first broken record (exit 1 when broken).
    Verify,
    /// Print the most recent records as JSON lines.
    Tail {
        #[arg(short = 'n', long, default_value_t = 20)]
        lines: usize,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum ConfigCommand {
    /// Print the effective configuration (defaults < file < environment) as TOML, tokens masked.
    Show,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ImagesCommand {
    /// Build the base image from Debian packages (mmdebstrap) and the runner image on it. Quick
    /// and idempotent when the images are current.
    Build {
        /// The supervisor binary to install (default: next to this executable).
        #[arg(long)]
        supervisor: Option<PathBuf>,
        /// Rebuild even when the images are current.
        #[arg(long)]
        force: bool,
        /// Debian mirror for mmdebstrap.
        #[arg(long)]
        mirror: Option<String>,
        /// Build only this built-in runner profile (`minimal` or `data`); default: all.
        #[arg(long)]
        profile: Option<String>,
        /// Docker engine address (default: DOCKER_HOST, then the local socket).
        #[arg(long, env = "DOCKER_HOST")]
        engine: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum LanguageArg {
    Python,
    Bash,
}

impl From<LanguageArg> for Language {
    fn from(l: LanguageArg) -> Self {
        match l {
            LanguageArg::Python => Language::Python,
            LanguageArg::Bash => Language::Bash,
        }
    }
}
