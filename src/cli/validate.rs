//! The validator without a server: `validate` (one JSON verdict per file) and `rules` (the rule
//! ids).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use scriptgate::domain::script::{Language, Script};
use scriptgate::domain::verdict::Verdict;
use scriptgate::rules::RuleSet;
use scriptgate::validate::{ValidationConfig, Validator};
use serde::Serialize;

#[derive(Debug, Serialize)]
struct FileVerdict<'a> {
    file: String,
    #[serde(flatten)]
    verdict: &'a Verdict,
}

pub(crate) fn list_rules(dir: Option<PathBuf>) -> anyhow::Result<ExitCode> {
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

pub(crate) fn validate_files(
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
