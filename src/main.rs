//! The `scriptgate` command line: argument parsing and process setup only; the work is in the library.
//! Past 500 lines because every command's clap definition lives here, beside its few-line driver.

#![allow(clippy::print_stdout)] // a command line prints its results

/// Subcommands whose logic is longer than their clap definitions.
mod cli {
    pub(crate) mod client;
    pub(crate) mod job;
    pub(crate) mod policy;
}

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use scriptgate::config::{Config, LogFormat};
use scriptgate::domain::script::{Language, Script};
use scriptgate::domain::verdict::Verdict;
use scriptgate::rules::RuleSet;
use scriptgate::sandbox::docker::images;
use scriptgate::validate::{ValidationConfig, Validator};
use serde::Serialize;

#[derive(Debug, Parser)]
#[command(
    name = "scriptgate",
    version,
    about = "Validates Python and Bash scripts and runs them in one-use, hardened Docker containers."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
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
struct DataSource {
    /// Configuration file (its data directory is used unless --data-dir is given).
    #[arg(long, env = "SCRIPTGATE_CONFIG", global = true)]
    config: Option<PathBuf>,
    /// Data directory holding scriptgate.db.
    #[arg(long, global = true)]
    data_dir: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum AuditCommand {
    /// Check the hash chain; names the first broken record (exit 1 when broken).
    Verify,
    /// Print the most recent records as JSON lines.
    Tail {
        #[arg(short = 'n', long, default_value_t = 20)]
        lines: usize,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Print the effective configuration (defaults < file < environment) as TOML, tokens masked.
    Show,
}

#[derive(Debug, Subcommand)]
enum ImagesCommand {
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
enum LanguageArg {
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

#[derive(Debug, Serialize)]
struct FileVerdict<'a> {
    file: String,
    #[serde(flatten)]
    verdict: &'a Verdict,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        // `scriptgate rules | head`: the reader left, which is not an error.
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("scriptgate: {}", report(&e));
            ExitCode::from(2)
        }
    }
}

/// An error and its causes on one line; a cause its parent's message already ends with is not
/// repeated.
fn report(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let message = cause.to_string();
        if text.is_empty() {
            text = message;
        } else if !text.ends_with(&message) {
            text = format!("{text}: {message}");
        }
    }
    text
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Serve {
            listen,
            listen_fd,
            config,
            insecure_no_auth,
        } => serve(listen, listen_fd, config, insecure_no_auth),
        Command::Audit { command, source } => audit(command, source),
        Command::Mcp {
            config,
            data_dir,
            agent,
        } => mcp_stdio(config, data_dir, agent),
        Command::Config {
            command: ConfigCommand::Show,
            config,
        } => {
            let config = Config::load(config.as_deref())?;
            print!("{}", toml::to_string_pretty(&config.masked())?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Validate {
            language,
            rules,
            max_chars,
            files,
        } => validate_files(language.map(Language::from), rules, max_chars, &files),
        Command::Rules { rules } => list_rules(rules),
        Command::Policy { command, config } => cli::policy::run(command, config.as_deref()),
        Command::Job { command, config } => cli::job::run(command, config.as_deref()),
        Command::Session { command, target } => cli::client::session(command, target),
        Command::Exec {
            work,
            target,
            stream,
        } => cli::client::exec(work, target, stream),
        Command::Openapi => {
            std::io::stdout()
                .lock()
                .write_all(scriptgate::http::openapi::yaml().as_bytes())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Images {
            command:
                ImagesCommand::Build {
                    supervisor,
                    force,
                    mirror,
                    profile,
                    engine,
                },
        } => build_images(supervisor, force, mirror, profile, engine),
        Command::Healthcheck {
            url,
            config,
            timeout,
        } => Ok(healthcheck(url, config, timeout)),
    }
}

/// Exit 0 when the answer is 200; every failure is exit 1 (Docker reserves 2 in healthchecks).
fn healthcheck(url: Option<String>, config: Option<PathBuf>, timeout: u64) -> ExitCode {
    use scriptgate::http::healthcheck;
    let answer = || -> anyhow::Result<healthcheck::Answer> {
        let listen = match &url {
            Some(_) => std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            None => Config::load(config.as_deref())?.listen,
        };
        let (authority, path) = healthcheck::target(url.as_deref(), listen)?;
        let limit = std::time::Duration::from_secs(timeout.max(1));
        Ok(healthcheck::get(&authority, &path, limit)?)
    };
    match answer() {
        Ok(answer) => {
            println!("{}", answer.body.trim_end());
            if answer.ok() {
                ExitCode::SUCCESS
            } else {
                eprintln!("scriptgate: not ready: {}", answer.status_line);
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("scriptgate: not ready: {}", report(&e));
            ExitCode::from(1)
        }
    }
}

fn build_images(
    supervisor: Option<PathBuf>,
    force: bool,
    mirror: Option<String>,
    profile: Option<String>,
    engine: Option<String>,
) -> anyhow::Result<ExitCode> {
    let supervisor = supervisor
        .or_else(images::default_supervisor)
        .context("no scriptgate-supervisor next to this executable; build the workspace (`cargo build --release --workspace`) or pass --supervisor")?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let docker = scriptgate::sandbox::docker::connect(engine.as_deref()).await?;
        let options = images::BuildOptions {
            supervisor,
            force,
            mirror,
            profile,
        };
        let started = std::time::Instant::now();
        let built =
            images::build(&docker, &options, &mut |step| eprintln!("[images] {step}")).await?;
        eprintln!(
            "[images] {} ready in {:.1}s",
            built.join(", "),
            started.elapsed().as_secs_f64()
        );
        Ok(ExitCode::SUCCESS)
    })
}

fn audit(command: AuditCommand, source: DataSource) -> anyhow::Result<ExitCode> {
    let dir = match source.data_dir {
        Some(d) => d,
        None => Config::load(source.config.as_deref())?.data_dir(),
    };
    if !dir.join("scriptgate.db").is_file() {
        anyhow::bail!(
            "no database in {} (pass --data-dir or --config)",
            dir.display()
        );
    }
    let store = scriptgate::store::Store::open(&dir)?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        match command {
            AuditCommand::Verify => match store.audit_verify().await? {
                Ok(count) => {
                    println!(
                        "audit log {}: {count} records, chain intact",
                        store.path().display()
                    );
                    Ok(ExitCode::SUCCESS)
                }
                Err(b) => {
                    println!(
                        "audit log {}: broken at record {}: {}",
                        store.path().display(),
                        b.seq,
                        b.reason
                    );
                    Ok(ExitCode::from(1))
                }
            },
            AuditCommand::Tail { lines } => {
                let mut out = std::io::stdout().lock();
                for record in store.audit_tail(lines).await? {
                    serde_json::to_writer(&mut out, &record)?;
                    writeln!(out)?;
                }
                Ok(ExitCode::SUCCESS)
            }
        }
    })
}

fn serve(
    listen: Option<std::net::SocketAddr>,
    listen_fd: Option<std::os::fd::RawFd>,
    file: Option<PathBuf>,
    insecure_no_auth: bool,
) -> anyhow::Result<ExitCode> {
    let mut config = Config::load(file.as_deref())?;
    if let Some(addr) = listen {
        config.listen = addr;
    }
    config.insecure_no_auth |= insecure_no_auth;
    init_tracing(config.log_format);
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let listener = match listen_fd {
            Some(fd) => {
                let listener = inherited_listener(fd)?;
                // What the loopback-only checks (e.g. serving without tokens) look at.
                config.listen = listener.local_addr()?;
                listener
            }
            None => tokio::net::TcpListener::bind(config.listen)
                .await
                .with_context(|| format!("cannot listen on {}", config.listen))?,
        };
        scriptgate::run(config, listener, shutdown_signal()).await?;
        Ok(ExitCode::SUCCESS)
    })
}

/// The listening socket a parent (a test, a supervisor) bound and handed over as descriptor `fd`.
fn inherited_listener(fd: std::os::fd::RawFd) -> anyhow::Result<tokio::net::TcpListener> {
    use std::os::fd::FromRawFd;
    // Owning a descriptor that is not open would abort the process on drop: check it first.
    anyhow::ensure!(
        fd > 2 && std::path::Path::new(&format!("/proc/self/fd/{fd}")).exists(),
        "--listen-fd {fd}: not an open descriptor above stderr"
    );
    // SAFETY: the descriptor is open (above) and `--listen-fd` hands it to this process to own;
    // nothing else here uses it.
    let listener = unsafe { std::net::TcpListener::from_raw_fd(fd) };
    listener
        .set_nonblocking(true)
        .and_then(|()| listener.local_addr())
        .with_context(|| format!("--listen-fd {fd} is not a listening TCP socket"))?;
    Ok(tokio::net::TcpListener::from_std(listener)?)
}

fn mcp_stdio(
    file: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    agent: String,
) -> anyhow::Result<ExitCode> {
    let mut config = Config::load(file.as_deref())?;
    let temporary = match data_dir {
        Some(dir) => {
            config.data_dir = Some(dir);
            None
        }
        None => {
            let dir = tempfile::tempdir()?;
            config.data_dir = Some(dir.path().to_path_buf());
            Some(dir)
        }
    };
    // stdout carries the protocol: logs go to stderr (as always).
    init_tracing(config.log_format);
    let runtime = tokio::runtime::Runtime::new()?;
    let result = runtime.block_on(scriptgate::serve_mcp_stdio(
        config,
        agent,
        shutdown_signal(),
    ));
    drop(temporary);
    result?;
    Ok(ExitCode::SUCCESS)
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,tower_http=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .init(),
        LogFormat::Text => builder.init(),
    }
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = interrupt => {}
        _ = terminate => {}
    }
    tracing::info!("shutting down: finishing in-flight executions");
}

fn list_rules(dir: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let rules = match dir {
        Some(dir) => RuleSet::from_dir(&dir)?,
        None => RuleSet::embedded()?,
    };
    let mut out = std::io::stdout().lock();
    let families = [
        (
            "secrets",
            rules
                .secrets
                .rules
                .iter()
                .map(|r| &r.meta)
                .collect::<Vec<_>>(),
        ),
        (
            "python",
            rules.python.rules.iter().map(|r| &r.meta).collect(),
        ),
        ("bash", rules.bash.rules.iter().map(|r| &r.meta).collect()),
    ];
    for (family, metas) in families {
        for meta in metas {
            writeln!(
                out,
                "{:<34} {:<8} {:<6} {}",
                meta.id,
                family,
                meta.severity.as_str(),
                meta.message
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn validate_files(
    language: Option<Language>,
    rules: Option<PathBuf>,
    max_chars: usize,
    files: &[PathBuf],
) -> anyhow::Result<ExitCode> {
    let rules = match rules {
        Some(dir) => RuleSet::from_dir(&dir)?,
        None => RuleSet::embedded()?,
    };
    let validator = Validator::new(
        rules,
        ValidationConfig {
            max_chars,
            ..ValidationConfig::default()
        },
    );
    // Read and classify every file first: a usage error must not leave half the verdicts printed.
    let mut scripts = Vec::with_capacity(files.len());
    for path in files {
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| anyhow::anyhow!("{} is not UTF-8 text", path.display()))?;
        let name = path.display().to_string();
        let lang = language
            .or_else(|| Language::detect(&name, &text))
            .with_context(|| {
                format!("cannot tell the language of {name}; pass --language python|bash")
            })?;
        scripts.push((name, Script::new(lang, text)));
    }
    let mut out = std::io::stdout().lock();
    let mut all_valid = true;
    for (file, script) in scripts {
        let verdict = validator.validate(&script);
        all_valid &= verdict.valid;
        serde_json::to_writer(
            &mut out,
            &FileVerdict {
                file,
                verdict: &verdict,
            },
        )?;
        writeln!(out)?;
    }
    Ok(if all_valid {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
