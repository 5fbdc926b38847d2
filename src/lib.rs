//! scriptgate validates Python and Bash scripts from LLM agents and runs them in one-use, hardened
//! Docker containers.
//!
//! Data flow:
//! ```text
//! http/ (wire types, JSON) ──► gate.rs: checked request
//!   ──► validate/: size → syntax → language → secrets → dangerous   (rules compiled from patterns/)
//!   ──► admission (bounded concurrency + queue)
//!   ──► sandbox/: a fresh hardened container per run (warm or cold), killed at the deadline,
//!       always removed; the supervisor inside reports exit status and usage
//!   ──► typed result back to the agent
//! ```

pub mod artifacts;
pub mod auth;
pub mod config;
pub mod domain;
pub mod error;
pub mod executions;
pub mod gate;
pub mod http;
pub mod mcp;
pub mod metrics;
pub mod policy;
pub mod rules;
pub mod sandbox;
pub mod store;
pub mod tools;
pub mod validate;

use std::future::Future;
use std::sync::Arc;

use auth::Authenticator;
use config::Config;
use executions::{ApprovalMode, ApprovalPolicy, Executions};
use gate::Gate;
use rules::RuleSet;
use sandbox::Runner;
use sandbox::docker::DockerSandbox;
use store::Store;
use validate::Validator;

/// Compiles the rules (built-in, or from `validation.rules_dir`).
pub fn validator(config: &Config) -> Result<Validator, rules::RuleError> {
    let rules = match &config.validation.rules_dir {
        Some(dir) => RuleSet::from_dir(dir)?,
        None => RuleSet::embedded()?,
    };
    validate::disabled_rules(&rules, &config.validation.disabled_rules)
        .map_err(|e| rules::RuleError::new("configuration", e))?;
    Ok(Validator::new(rules, config.validation.validation_config()))
}

/// A running service: its router and what it owns.
#[derive(Debug)]
pub struct App {
    pub router: axum::Router,
    pub executions: Arc<Executions>,
    pub runner: Arc<dyn Runner>,
    /// The run-time policies, compiled at start-up.
    pub policies: Arc<policy::Policies>,
    /// Ends open MCP streams, so a graceful shutdown does not wait for them.
    pub mcp_shutdown: tokio_util::sync::CancellationToken,
}

impl App {
    /// Wires the service around a runner (the Docker sandbox, or a fake in router tests).
    pub async fn with_runner(
        config: &Config,
        validator: Validator,
        runner: Arc<dyn Runner>,
    ) -> anyhow::Result<App> {
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
        let policies = Arc::new(policy::Policies::start(
            &config.policy,
            &config.agent_tokens,
            validator.rules(),
        )?);
        // Installed before the first execution, so no count is lost.
        metrics::handle();
        let store = Store::open(&config.data_dir())?;
        let gate = Arc::new(Gate::new(
            validator,
            runner.clone(),
            config.execution.clone(),
            config.sandbox.limits.memory_mb,
        ));
        let policy = ApprovalPolicy {
            mode: config.approval,
            timeout: std::time::Duration::from_secs(config.approval_timeout_secs),
        };
        let artifacts =
            artifacts::ArtifactStore::open(&config.data_dir(), config.artifacts.clone())?;
        let mcp_shutdown = tokio_util::sync::CancellationToken::new();
        artifacts.clone().spawn_sweeper(mcp_shutdown.clone());
        let executions = Executions::start(gate, store, policy, artifacts).await?;
        let mcp = config.mcp.enabled.then(|| mcp::HttpSettings {
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
            auth: Arc::new(auth),
            tools: Arc::new(tools::Catalog::new(config)),
            profiles: Arc::new(
                config
                    .sandbox
                    .resolved_profiles()
                    .map_err(anyhow::Error::msg)?,
            ),
            mcp,
        });
        Ok(App {
            router,
            executions,
            runner,
            policies,
            mcp_shutdown,
        })
    }

    /// The service with the Docker sandbox.
    pub async fn start(config: &Config) -> anyhow::Result<App> {
        // Policies are checked before the rules compile and the engine is reached, so a malformed
        // one stops start-up at once (`with_runner` loads them again: a millisecond).
        let policies = policy::Policies::load(&config.policy)?;
        let validator = validator(config)?;
        policies.check(&config.agent_tokens, validator.rules())?;
        let sandbox = DockerSandbox::start(config.sandbox.clone()).await?;
        App::with_runner(config, validator, Arc::new(sandbox)).await
    }

    /// Stops background executions, then removes every container.
    pub async fn shutdown(&self) {
        self.mcp_shutdown.cancel();
        self.executions.shutdown().await;
        self.runner.shutdown().await;
    }
}

/// Serves the API on `listener` until `shutdown` resolves, then lets in-flight requests finish and
/// removes every container before returning.
pub async fn run(
    config: Config,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let app = App::start(&config).await?;
    tracing::info!(addr = %listener.local_addr()?, data = %config.data_dir().display(), "scriptgate listening");
    let streams = app.mcp_shutdown.clone();
    let served = axum::serve(listener, app.router.clone())
        .with_graceful_shutdown(async move {
            shutdown.await;
            streams.cancel();
        })
        .await;
    app.shutdown().await;
    tracing::info!("scriptgate stopped");
    served.map_err(Into::into)
}
