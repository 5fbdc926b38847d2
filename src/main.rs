//! The `scriptgate` command line: argument parsing and process setup only; the work is in the library.

#![allow(clippy::print_stdout)] // a command line prints its results

/// The command line: its clap definitions (`args`) and the drivers of its commands.
mod cli {
    pub(crate) mod admin;
    pub(crate) mod args;
    pub(crate) mod client;
    pub(crate) mod job;
    pub(crate) mod policy;
    pub(crate) mod serve;
    pub(crate) mod validate;
}

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser;
use cli::args::{Cli, Command, ConfigCommand, ImagesCommand};
use scriptgate::config::Config;
use scriptgate::domain::script::Language;

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
pub(crate) fn report(e: &anyhow::Error) -> String {
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
        } => cli::serve::serve(listen, listen_fd, config, insecure_no_auth),
        Command::Audit { command, source } => cli::admin::audit(command, source),
        Command::Mcp {
            config,
            data_dir,
            agent,
        } => cli::serve::mcp_stdio(config, data_dir, agent),
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
        } => cli::validate::validate_files(language.map(Language::from), rules, max_chars, &files),
        Command::Rules { rules } => cli::validate::list_rules(rules),
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
        } => cli::admin::build_images(supervisor, force, mirror, profile, engine),
        Command::Healthcheck {
            url,
            config,
            timeout,
        } => Ok(cli::admin::healthcheck(url, config, timeout)),
    }
}
