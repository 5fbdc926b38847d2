//! `scriptgate job …`: run a job of the job protocol on the local engine, or only check it, without
//! a server. Both answer with what `POST /v1/jobs` answers (the same checks, the same lifecycle),
//! as JSON on stdout.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use scriptgate::config::Config;
use scriptgate::{JobCliError, check_job, run_job_local};

#[derive(Debug, clap::Subcommand)]
pub enum JobCommand {
    /// Run a job (a JSON file, `-` for stdin) in a one-use container on the local engine and
    /// print its result. Exit 0 when it succeeded, 1 when it failed or timed out, 2 when it is not
    /// a well-formed job or could not run.
    Run {
        file: PathBuf,
        /// Keep the execution record and the artifacts here (default: a temporary directory,
        /// removed at exit).
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// Check a job as the service does before any container: the protocol, the deployment's
    /// maxima, paths and commands, and the content it carries (secrets, programs). Exit 0 when
    /// it would run, 1 when it is refused, 2 when it is not a well-formed job.
    Validate { file: PathBuf },
}

/// Runs a `job` subcommand with the configuration at `config`.
pub fn run(command: JobCommand, config: Option<&Path>) -> anyhow::Result<ExitCode> {
    let mut config = Config::load(config)?;
    match command {
        JobCommand::Validate { file } => {
            let bytes = read(&file)?;
            match check_job(&config, &bytes) {
                Ok(check) => {
                    print_json(&check)?;
                    Ok(exit(check.valid))
                }
                Err(e) => failed(&e),
            }
        }
        JobCommand::Run { file, data_dir } => {
            let bytes = read(&file)?;
            let temporary = super::serve::data_dir_or_temporary(&mut config, data_dir)?;
            let runtime = tokio::runtime::Runtime::new()?;
            let answer = runtime.block_on(run_job_local(config, &bytes));
            drop(temporary);
            match answer {
                Ok(result) => {
                    print_json(&result)?;
                    Ok(exit(result["status"] == "success"))
                }
                Err(e) => failed(&e),
            }
        }
    }
}

fn read(file: &Path) -> anyhow::Result<Vec<u8>> {
    if file == Path::new("-") {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut bytes)?;
        return Ok(bytes);
    }
    std::fs::read(file).with_context(|| format!("reading {}", file.display()))
}

fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

fn exit(success: bool) -> ExitCode {
    if success {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// A job that got no answer: the typed error on stdout (as the API's error body), exit 2.
fn failed(e: &JobCliError) -> anyhow::Result<ExitCode> {
    let kind = match e {
        JobCliError::Malformed(_) => "schema_error",
        JobCliError::NotRun(_) | JobCliError::Start(_) => "internal_error",
    };
    let message = match e {
        JobCliError::Malformed(m) => m.clone(),
        other => other.to_string(),
    };
    print_json(&serde_json::json!({"error": {"type": kind, "message": message}}))?;
    Ok(ExitCode::from(2))
}
