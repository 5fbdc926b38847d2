//! scriptgate validates Python and Bash scripts from LLM agents and runs them in one-use, hardened
//! Docker containers.
//!
//! Data flow (ARCHITECTURE.md has the layers and what each may import):
//! ```text
//! http/ (wire types, JSON; MCP) ──► executions/: a checked `ScriptRun`
//!   ──► validate/: size → syntax → language → secrets → dangerous   (rules compiled from patterns/)
//!   ──► approval (operators), admission (bounded concurrency + queue)
//!   ──► sandbox/: a fresh hardened container per run (warm or cold), killed at the deadline,
//!       always removed; the supervisor inside reports exit status and usage
//!   ──► the record (store/), and its views back to the agent
//! ```
//! This file is the composition root: it wires the layers into an [`App`] and serves it.

#![warn(unreachable_pub)]

pub(crate) mod artifacts;
pub mod auth;
pub mod config;
pub mod domain;
pub(crate) mod executions;
pub mod http;
pub(crate) mod metrics;
pub mod policy;
// The next three are still being narrowed to what the rest of the crate needs.
#[allow(unreachable_pub)]
pub mod rules;
#[allow(unreachable_pub)]
pub mod sandbox;
pub(crate) mod sessions;
pub mod store;
#[allow(unreachable_pub)]
pub mod validate;

use std::future::Future;
use std::sync::Arc;

use auth::{AuthConfigError, Authenticator, Caller};
use config::Config;
use executions::{ApprovalMode, ApprovalPolicy, Deps, Executions};
use http::catalog::Catalog;
use rules::{RuleError, RuleSet};
use sandbox::docker::{DockerConfig, DockerSandbox};
use sandbox::egress::EgressProxy;
use sandbox::{Runner, SandboxError};
use store::{Store, StoreError};
use validate::Validator;

/// Why the service did not start (or stopped serving).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Rules(#[from] RuleError),
    #[error(transparent)]
    Policy(#[from] policy::PolicyLoadError),
    #[error(transparent)]
    Auth(#[from] AuthConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Artifacts(#[from] artifacts::ArtifactError),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error(transparent)]
    Egress(#[from] sandbox::egress::EgressError),
    /// The configured runner profiles do not resolve.
    #[error(transparent)]
    Profiles(#[from] crate::sandbox::profiles::ProfileConfigError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The stdio MCP server has no operator API, so it cannot hold work for approval.
    #[error(
        "approval is required by the configuration, and the stdio MCP server has no operator \
         API: connect the client to the HTTP service's /mcp endpoint instead"
    )]
    ApprovalWithoutOperators,
    #[error(transparent)]
    Mcp(#[from] http::mcp::StdioError),
}

/// Compiles the rules (built-in, or from `validation.rules_dir`).
pub fn validator(config: &Config) -> Result<Validator, RuleError> {
    let rules = match &config.validation.rules_dir {
        Some(dir) => RuleSet::from_dir(dir)?,
        None => RuleSet::embedded()?,
    };
    validate::disabled_rules(&rules, &config.validation.disabled_rules)
        .map_err(|e| RuleError::new("configuration", e))?;
    Ok(Validator::new(rules, config.validation.validation_config()))
}

/// A running service: its router and what it owns.
#[derive(Debug)]
pub struct App {
    pub router: axum::Router,
    executions: Arc<Executions>,
    sessions: Arc<sessions::Sessions>,
    runner: Arc<dyn Runner>,
    /// Ends open MCP streams, so a graceful shutdown does not wait for them.
    mcp_shutdown: tokio_util::sync::CancellationToken,
    /// The egress proxy the service runs in-process (`egress.enabled`); stopped, its sockets
    /// removed, after the last container.
    egress: Option<EgressProxy>,
}

impl App {
    /// Wires the service around a runner (the Docker sandbox, or a fake in contract tests).
    pub async fn with_runner(
        config: &Config,
        validator: Validator,
        runner: Arc<dyn Runner>,
    ) -> Result<App, StartError> {
        let auth = authenticator(config)?;
        // Policies compile at start-up, so a malformed one stops the service before it serves.
        let policies =
            policy::Policies::start(&config.policy, &config.agent_tokens, validator.rules())?;
        // Installed before the first execution, so no count is lost.
        metrics::handle();
        let data = config.data_dir();
        let artifacts = artifacts::ArtifactStore::open(&data, config.artifacts.clone())?;
        let mcp_shutdown = tokio_util::sync::CancellationToken::new();
        artifacts.clone().spawn_sweeper(mcp_shutdown.clone());
        let profiles = Arc::new(
            config
                .sandbox
                .resolved_profiles()
                .map_err(StartError::Profiles)?,
        );
        let store = Store::open(&data)?;
        let network = executions::NetworkSettings {
            limits: config.egress.default_limits(),
            approval_timeout: std::time::Duration::from_secs(config.egress.approval_timeout_secs),
        };
        let sessions = sessions::Sessions::start(sessions::SessionDeps {
            runner: runner.clone(),
            validator: validator.clone(),
            settings: config.sessions.clone(),
            execution: config.execution.clone(),
            limits: config.sandbox.limits.clone(),
            profiles: profiles.clone(),
            node: config.sandbox.instance.clone(),
            store: store.clone(),
            policies: policies.clone(),
            open_policies: !auth.enabled(),
            network: network.clone(),
        })
        .await?;
        let executions = Executions::start(Deps {
            validator,
            runner: runner.clone(),
            store,
            artifacts,
            policy: ApprovalPolicy {
                mode: config.approval,
                timeout: std::time::Duration::from_secs(config.approval_timeout_secs),
            },
            run_policies: executions::RunPolicies::new(policies, !auth.enabled()),
            settings: config.execution.clone(),
            memory_mb: config.sandbox.limits.memory_mb,
            job_maxima: config.sandbox.jobs.clone(),
            output_bytes: config.sandbox.limits.output_bytes,
            network,
        })
        .await?;
        let mcp = config.mcp.enabled.then(|| http::mcp::HttpSettings {
            allowed_hosts: config.mcp.allowed_hosts.clone().unwrap_or_else(|| {
                if auth.enabled() {
                    Vec::new()
                } else {
                    vec!["localhost".into(), "127.0.0.1".into(), "::1".into()]
                }
            }),
            shutdown: mcp_shutdown.clone(),
        });
        let router = http::router(http::AppState {
            executions: executions.clone(),
            sessions: sessions.clone(),
            auth: Arc::new(auth),
            tools: Arc::new(Catalog::new(config)),
            profiles,
            mcp,
        });
        Ok(App {
            router,
            executions,
            sessions,
            runner,
            mcp_shutdown,
            egress: None,
        })
    }

    /// The service with the Docker sandbox.
    pub async fn start(config: &Config) -> Result<App, StartError> {
        // Policies are checked before the rules compile and the engine is reached, so a malformed
        // one stops start-up at once (`with_runner` loads them again: a millisecond).
        let policies = policy::Policies::load(&config.policy)?;
        let validator = validator(config)?;
        policies.check(&config.agent_tokens, validator.rules())?;
        let egress = start_egress(config).await?;
        let sandbox = DockerSandbox::start_with_egress(
            config.sandbox.clone(),
            egress.clone(),
            config.egress.runtime_allows_host_sockets,
        )
        .await?;
        if let Some(proxy) = &egress {
            // The engine's own networks are denied like the built-in ranges (unless the
            // deployment opens them in `egress.allow_private_ranges`).
            proxy.set_engine_networks(&sandbox.engine_networks().await);
        }
        let mut app = App::with_runner(config, validator, Arc::new(sandbox)).await?;
        app.egress = egress;
        Ok(app)
    }

    /// Stops background executions, then removes every container.
    pub async fn shutdown(&self) {
        self.mcp_shutdown.cancel();
        self.executions.shutdown().await;
        self.sessions.shutdown().await;
        self.runner.shutdown().await;
        if let Some(proxy) = &self.egress {
            proxy.shutdown().await;
        }
    }
}

fn authenticator(config: &Config) -> Result<Authenticator, AuthConfigError> {
    let auth = Authenticator::new(
        &config.agent_tokens,
        &config.operator_tokens,
        config.listen.ip().is_loopback(),
        config.insecure_no_auth,
    )?;
    if !auth.enabled() {
        tracing::warn!("authentication is off (no tokens configured on a loopback address)");
    } else if config.operator_tokens.is_empty() && config.approval != ApprovalMode::Never {
        tracing::warn!(
            "approval is required but no operator token is configured: nothing can be approved"
        );
    }
    Ok(auth)
}

/// The egress proxy of `scriptgate serve` (`None` when `egress.enabled` is off), its sockets
/// under `egress.socket_dir` (default: `egress/` in the data directory).
async fn start_egress(config: &Config) -> Result<Option<EgressProxy>, StartError> {
    if !config.egress.enabled {
        return Ok(None);
    }
    let dir = config.egress.socket_dir(&config.data_dir());
    let proxy = EgressProxy::start(&config.egress, &dir).await?;
    tracing::info!(socket_dir = %dir.display(), "egress proxy started");
    Ok(Some(proxy))
}

/// Serves the API on `listener` until `shutdown` resolves, then lets in-flight requests finish and
/// removes every container before returning.
pub async fn run(
    config: Config,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    let app = App::start(&config).await?;
    tracing::info!(addr = %listener.local_addr()?, data = %config.data_dir().display(), "scriptgate listening");
    serve(app, listener, shutdown).await
}

/// Serves `app` on `listener` until `shutdown` resolves, then shuts it down.
pub async fn serve(
    app: App,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    let streams = app.mcp_shutdown.clone();
    let served = axum::serve(listener, app.router.clone())
        .with_graceful_shutdown(async move {
            shutdown.await;
            streams.cancel();
        })
        .await;
    app.shutdown().await;
    tracing::info!("scriptgate stopped");
    Ok(served?)
}

/// What `scriptgate job validate` says of a job: the checks the service makes before any
/// container (the same code as `POST /v1/jobs`), without an engine.
#[derive(Debug, serde::Serialize)]
pub struct JobCheck {
    pub job_id: uuid::Uuid,
    /// Nothing refused it: it would run (after approval, where the deployment requires it).
    pub valid: bool,
    /// What validation found in the job's content.
    pub validation: Vec<domain::content::ContentVerdict>,
    /// The complete result a refused job answers with (its offending step failed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<domain::record::JobResult>,
    /// Unknown fields a newer 1.x job carried, ignored.
    pub warnings: Vec<String>,
}

/// Why a job got no answer from the command line.
#[derive(Debug, thiserror::Error)]
pub enum JobCliError {
    /// Not a well-formed job (`schema_error`): nothing else was checked.
    #[error("schema_error: {0}")]
    Malformed(String),
    /// The engine, the image or the service could not run it.
    #[error("{0}")]
    NotRun(String),
    #[error(transparent)]
    Start(#[from] StartError),
}

/// `scriptgate job validate`: parse the job and make the service's checks.
pub fn check_job(config: &Config, bytes: &[u8]) -> Result<JobCheck, JobCliError> {
    let validator = validator(config).map_err(StartError::from)?;
    let profiles = config
        .sandbox
        .resolved_profiles()
        .map_err(StartError::Profiles)?;
    let work =
        http::jobs::intake(bytes, &profiles).map_err(|e| JobCliError::Malformed(e.to_string()))?;
    let deps = executions::check::CheckDeps {
        validator: &validator,
        maxima: &config.sandbox.jobs,
        output_bytes: config.sandbox.limits.output_bytes,
        policy: None,
    };
    let checked = executions::check::check(deps, &work);
    let job = work.job().expect("a job");
    let warnings = sandbox::job::parse_value(&job.job)
        .map(|j| j.warnings)
        .unwrap_or_default();
    let result = match checked.outcome {
        Ok(_) => None,
        Err(executions::check::Refusal::Refused { result, .. }) => result.map(|r| *r),
        Err(executions::check::Refusal::Invalid) => None,
    };
    Ok(JobCheck {
        job_id: job.job_id,
        valid: result.is_none() && checked.verdict.valid,
        validation: checked.contents,
        result,
        warnings,
    })
}

/// Instance labels of `scriptgate job run` processes start with this.
pub const JOB_CLI_INSTANCE_PREFIX: &str = "job-cli-";

/// `scriptgate job run`: the job through the service's whole lifecycle (checks, record, audit)
/// on the local engine, without HTTP; returns the answer `POST /v1/jobs` gives. The command line
/// is its own operator: approval is not asked for. Every container is removed before it returns.
pub async fn run_job_local(
    mut config: Config,
    bytes: &[u8],
) -> Result<serde_json::Value, JobCliError> {
    config.approval = ApprovalMode::Never;
    config.sandbox.pool.size = 0;
    if config.sandbox.instance == DockerConfig::default().instance {
        let id = uuid::Uuid::new_v4().simple().to_string();
        config.sandbox.instance = format!("{JOB_CLI_INSTANCE_PREFIX}{}", &id[..12]);
    }
    let validator = validator(&config).map_err(StartError::from)?;
    let profiles = config
        .sandbox
        .resolved_profiles()
        .map_err(StartError::Profiles)?;
    let work =
        http::jobs::intake(bytes, &profiles).map_err(|e| JobCliError::Malformed(e.to_string()))?;
    let sandbox = Arc::new(
        DockerSandbox::start(config.sandbox.clone())
            .await
            .map_err(StartError::from)?,
    );
    sandbox.reap_dead_owners(JOB_CLI_INSTANCE_PREFIX).await;
    let app = App::with_runner(&config, validator, sandbox).await?;
    let caller = Caller::local_agent("cli");
    let submitted = app.executions.submit(&caller, work, true).await;
    app.shutdown().await;
    let rec = match submitted {
        Ok(executions::Submitted::Finished(rec) | executions::Submitted::Accepted(rec)) => rec,
        Err(e) => return Err(JobCliError::NotRun(e.to_string())),
    };
    let out = http::jobs::JobOut::of(&rec)
        .ok_or_else(|| JobCliError::NotRun(format!("the job is {}", rec.status.as_str())))?;
    serde_json::to_value(&out).map_err(|e| JobCliError::NotRun(e.to_string()))
}

/// Instance labels of stdio MCP servers start with this.
pub const MCP_INSTANCE_PREFIX: &str = "mcp-";
/// How often a stdio MCP server looks for containers of stdio servers that are gone.
const DEAD_OWNER_SWEEP: std::time::Duration = std::time::Duration::from_secs(5);

/// `scriptgate mcp`: the service without HTTP, serving one MCP client on stdin/stdout (every call
/// as `agent`) until the client leaves or `shutdown` resolves; then every container is removed.
pub async fn serve_mcp_stdio(
    mut config: Config,
    agent: String,
    shutdown: impl Future<Output = ()>,
) -> Result<(), StartError> {
    if config.approval != ApprovalMode::Never {
        return Err(StartError::ApprovalWithoutOperators);
    }
    // One process per client session: its own container label, so sessions never reap each
    // other's containers (orphans of dead sessions are reaped below).
    if config.sandbox.instance == DockerConfig::default().instance {
        let id = uuid::Uuid::new_v4().simple().to_string();
        config.sandbox.instance = format!("{MCP_INSTANCE_PREFIX}{}", &id[..12]);
    }
    let validator = validator(&config)?;
    let sandbox = Arc::new(DockerSandbox::start(config.sandbox.clone()).await?);
    sandbox.reap_dead_owners(MCP_INSTANCE_PREFIX).await;
    // A server killed while the engine was still creating a container for it leaves that
    // container behind after this start-up sweep: keep sweeping while this server runs.
    let _sweeper = tokio_util::task::AbortOnDropHandle::new(tokio::spawn({
        let sandbox = sandbox.clone();
        async move {
            loop {
                tokio::time::sleep(DEAD_OWNER_SWEEP).await;
                sandbox.reap_dead_owners(MCP_INSTANCE_PREFIX).await;
            }
        }
    }));
    let app = App::with_runner(&config, validator, sandbox).await?;
    let catalog = Catalog::new(&config);
    let served = tokio::select! {
        r = http::mcp::serve_stdio(app.executions.clone(), app.sessions.clone(), &catalog, Caller::local_agent(agent)) => r,
        () = shutdown => Ok(()),
    };
    app.shutdown().await;
    Ok(served?)
}
