//! Operating a deployment from the command line: the audit log, the runner images and the
//! container healthcheck.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use scriptgate::config::Config;
use scriptgate::sandbox::docker::images;

use super::args::{AuditCommand, DataSource};
use crate::report;

/// Exit 0 when the answer is 200; every failure is exit 1 (Docker reserves 2 in healthchecks).
pub(crate) fn healthcheck(url: Option<String>, config: Option<PathBuf>, timeout: u64) -> ExitCode {
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

pub(crate) fn build_images(
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

pub(crate) fn audit(command: AuditCommand, source: DataSource) -> anyhow::Result<ExitCode> {
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
