//! The long-running commands' process setup: `serve` (a bound or inherited listener) and `mcp`
//! on stdio, with tracing and the shutdown signal.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use scriptgate::config::{Config, LogFormat};

pub(crate) fn serve(
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

/// Points `config` at `data_dir`, or at a new temporary directory, which is removed when the
/// returned guard drops (commands that keep no data unless told where).
pub(crate) fn data_dir_or_temporary(
    config: &mut Config,
    data_dir: Option<PathBuf>,
) -> std::io::Result<Option<tempfile::TempDir>> {
    Ok(match data_dir {
        Some(dir) => {
            config.data_dir = Some(dir);
            None
        }
        None => {
            let dir = tempfile::tempdir()?;
            config.data_dir = Some(dir.path().to_path_buf());
            Some(dir)
        }
    })
}

pub(crate) fn mcp_stdio(
    file: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    agent: String,
) -> anyhow::Result<ExitCode> {
    let mut config = Config::load(file.as_deref())?;
    let temporary = data_dir_or_temporary(&mut config, data_dir)?;
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
