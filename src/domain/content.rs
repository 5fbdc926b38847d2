//! What validation said about the content a run carries beyond its script: a job's files,
//! inline programs, diffs and arguments, or the files a script run writes into its workspace.
//! Each piece has its own verdict; the record's one [`Verdict`] merges them.

use serde::{Deserialize, Serialize};

use crate::domain::script::Language;
use crate::domain::verdict::{Finding, Layer, Severity, Verdict};

/// The verdict on one piece of content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ContentVerdict {
    /// The id of the job step that carries it (absent for a script run's workspace files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub step: Option<String>,
    /// What was checked: a file's path, `python3 -c`, `bash -c`, `stdin`, `args`, `env`, `diff`.
    pub target: String,
    /// The language it was validated as, with every layer; absent when it is not a program and
    /// was scanned for secrets only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub language: Option<Language>,
    pub valid: bool,
    /// The layer that rejected it; null when it is valid.
    pub layer: Option<Layer>,
    pub findings: Vec<Finding>,
}

impl ContentVerdict {
    /// The verdict of a program validated as a script.
    pub fn program(step: Option<String>, target: String, verdict: Verdict) -> Self {
        ContentVerdict {
            step,
            target,
            language: Some(verdict.language),
            valid: verdict.valid,
            layer: verdict.layer,
            findings: verdict.findings,
        }
    }

    /// The verdict of text scanned for secrets only: any blocking finding rejects it.
    pub fn scanned(step: Option<String>, target: String, findings: Vec<Finding>) -> Self {
        let blocked = findings.iter().any(|f| f.severity == Severity::Block);
        ContentVerdict {
            step,
            target,
            language: None,
            valid: !blocked,
            layer: blocked.then_some(Layer::Secrets),
            findings,
        }
    }

    /// Valid, and no finding blocks (the same test a script's verdict passes).
    pub fn passed(&self) -> bool {
        self.valid
            && self.layer.is_none()
            && self.findings.iter().all(|f| f.severity != Severity::Block)
    }

    /// Where it is, for messages: "`/workspace/app.py` of step `write`".
    pub fn place(&self) -> String {
        match &self.step {
            Some(step) => format!("`{}` of step `{step}`", self.target),
            None => format!("`{}`", self.target),
        }
    }
}

/// The verdicts on everything a job carries, bound to the job they judged (its sha256), so they
/// clear that job and no other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobVerdict {
    /// The sha256 of the job document the contents were read from.
    pub job_sha256: String,
    pub contents: Vec<ContentVerdict>,
}

impl JobVerdict {
    pub fn passed(&self) -> bool {
        self.contents.iter().all(ContentVerdict::passed)
    }
}

/// One verdict for a record: `base`'s findings, then every content's (their messages name the
/// content); the first rejected piece (base first) decides `valid` and `layer`.
pub fn merged(base: Verdict, contents: &[ContentVerdict]) -> Verdict {
    let mut verdict = base;
    for content in contents {
        let place = content.place();
        verdict
            .findings
            .extend(content.findings.iter().map(|f| Finding {
                message: format!("{place}: {}", f.message),
                ..f.clone()
            }));
        if verdict.valid && !content.passed() {
            verdict.valid = false;
            verdict.layer = content.layer.or(Some(Layer::Secrets));
        }
    }
    verdict
}

/// The verdict a job's record starts from: nothing found yet, in the language of the container
/// jobs run in (a job holds programs of either language; each content names its own).
pub fn empty_verdict(language: Language) -> Verdict {
    Verdict {
        language,
        valid: true,
        layer: None,
        findings: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(layer: Layer, severity: Severity) -> Finding {
        Finding {
            layer,
            rule: "r".into(),
            severity,
            message: "m".into(),
            line: 2,
            column: 1,
        }
    }

    #[test]
    fn the_first_rejected_content_decides_and_every_finding_names_its_place() {
        let warned = ContentVerdict::program(
            Some("w".into()),
            "/workspace/a.py".into(),
            Verdict {
                language: Language::Python,
                valid: true,
                layer: None,
                findings: vec![finding(Layer::Dangerous, Severity::Warn)],
            },
        );
        let secret = ContentVerdict::scanned(
            None,
            "/workspace/c.json".into(),
            vec![finding(Layer::Secrets, Severity::Block)],
        );
        assert!(warned.passed() && !secret.passed());
        assert_eq!(secret.layer, Some(Layer::Secrets));
        let verdict = merged(empty_verdict(Language::Bash), &[warned, secret]);
        assert!(!verdict.valid);
        assert_eq!(verdict.layer, Some(Layer::Secrets));
        assert_eq!(verdict.findings.len(), 2);
        assert_eq!(
            verdict.findings[0].message,
            "`/workspace/a.py` of step `w`: m"
        );
        assert_eq!(verdict.findings[1].message, "`/workspace/c.json`: m");
        assert!(verdict.has_warnings());
    }
}
