//! The `scriptgate` command line: argument parsing and process setup only; the work is in the library.

#![allow(clippy::print_stdout)] // a command line prints its results

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use scriptgate::rules::RuleSet;
use scriptgate::script::{Language, Script};
use scriptgate::validate::verdict::Verdict;
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
        Err(e) => {
            eprintln!("scriptgate: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Validate {
            language,
            rules,
            max_chars,
            files,
        } => validate_files(language.map(Language::from), rules, max_chars, &files),
    }
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
