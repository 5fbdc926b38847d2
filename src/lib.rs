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

pub mod config;
pub mod error;
pub mod gate;
pub mod http;
pub mod rules;
pub mod sandbox;
pub mod script;
pub mod validate;

use std::future::Future;
use std::sync::Arc;

use config::Config;
use gate::Gate;
use rules::RuleSet;
use sandbox::Runner;
use sandbox::docker::DockerSandbox;
use validate::Validator;

/// Compiles the rules (built-in, or from `validation.rules_dir`).
pub fn validator(config: &Config) -> Result<Validator, rules::RuleError> {
    let rules = match &config.validation.rules_dir {
        Some(dir) => RuleSet::from_dir(dir)?,
        None => RuleSet::embedded()?,
    };
    Ok(Validator::new(rules, config.validation.validation_config()))
}

/// A running service: its router and the sandbox behind it.
#[derive(Debug)]
pub struct App {
    pub router: axum::Router,
    pub gate: Arc<Gate>,
    pub runner: Arc<dyn Runner>,
}

impl App {
    /// Wires the service around a runner (the Docker sandbox, or a fake in router tests).
    pub fn with_runner(config: &Config, validator: Validator, runner: Arc<dyn Runner>) -> App {
        let gate = Arc::new(Gate::new(
            validator,
            runner.clone(),
            config.execution.clone(),
            config.sandbox.limits.memory_mb,
        ));
        let router = http::router(http::AppState { gate: gate.clone() });
        App {
            router,
            gate,
            runner,
        }
    }

    /// The service with the Docker sandbox.
    pub async fn start(config: &Config) -> anyhow::Result<App> {
        let validator = validator(config)?;
        let sandbox = DockerSandbox::start(config.sandbox.clone()).await?;
        Ok(App::with_runner(config, validator, Arc::new(sandbox)))
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
    tracing::info!(addr = %listener.local_addr()?, "scriptgate listening");
    let served = axum::serve(listener, app.router.clone())
        .with_graceful_shutdown(shutdown)
        .await;
    app.runner.shutdown().await;
    tracing::info!("scriptgate stopped");
    served.map_err(Into::into)
}
