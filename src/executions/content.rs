//! The content checks a run gets before any container, beyond its script: every file a job (or a
//! script's workspace) writes, every diff, argument, environment value and standard input is
//! scanned for secrets (a run carries no credentials); programs get every layer of script
//! validation: files named `.py`/`.sh` (or with a shebang), inline programs (`python3 -c`,
//! `bash -c`, `sh -c`), programs on standard input, and the script file an interpreter is told to
//! run when the job wrote it. Diffs are applied in memory to the files the job wrote, so a patched
//! program is validated as it will be.
//!
//! Limits, said plainly: a diff to a file a command made (not one the job wrote) cannot be applied
//! here, so only its text is scanned; what a validated program writes at run time is the
//! container's to contain. The agent checks paths and commands again inside.

use std::collections::{HashMap, HashSet};

use crate::domain::content::ContentVerdict;
use crate::domain::script::{Language, Script};
use crate::domain::verdict::{Finding, Layer, Positions};
use crate::domain::work::WorkspaceFile;
use crate::sandbox::job::diff::{self, Change};
use crate::sandbox::job::paths::JobPath;
use crate::sandbox::job::{Action, CheckedAction, CheckedJob, Encoding, RunCommand};
use crate::validate::Validator;

use super::programs::{self, Program};

/// Runs the checks with one validator's rules (and its disabled rules).
pub(super) struct ContentChecker<'a> {
    validator: &'a Validator,
    disabled: HashSet<String>,
}

/// What the job has written so far, as far as the service can know: a file's bytes, and the
/// language it was validated as.
type Known = HashMap<JobPath, (Vec<u8>, Option<Language>)>;

impl<'a> ContentChecker<'a> {
    pub(super) fn new(validator: &'a Validator) -> Self {
        let disabled =
            crate::validate::disabled_rules(validator.rules(), &validator.config().disabled_rules)
                .unwrap_or_default();
        ContentChecker {
            validator,
            disabled,
        }
    }

    /// Every checked piece of a job, in step order: programs always, other text only when it
    /// has findings.
    pub(super) fn job(&self, job: &CheckedJob) -> Vec<ContentVerdict> {
        let mut out = Vec::new();
        let mut known = Known::new();
        for checked in job.steps() {
            let id = Some(checked.step.id.clone());
            match (&checked.step.action, &checked.plan) {
                (Action::WriteFile(w), CheckedAction::WriteFile { path }) => {
                    let bytes = w.bytes().unwrap_or_default();
                    let language = self.file(&id, path, &bytes, &mut out);
                    known.insert(path.clone(), (bytes, language));
                }
                (Action::ApplyUnifiedDiff(d), CheckedAction::ApplyUnifiedDiff { files }) => {
                    self.scan(&id, "diff", &d.diff, &mut out);
                    for (path, patch) in files {
                        self.patched(&id, path, patch, &mut known, &mut out);
                    }
                }
                (Action::RunCommand(c), CheckedAction::RunCommand { working_dir, .. }) => {
                    self.command(&id, c, working_dir, &known, &mut out);
                    // The command may change any file: what the job wrote is no longer known.
                    known.clear();
                }
                _ => {}
            }
        }
        out
    }

    /// A script run's workspace files.
    pub(super) fn files(&self, files: &[WorkspaceFile]) -> Vec<ContentVerdict> {
        let mut out = Vec::new();
        for f in files {
            let bytes = decoded(f);
            match JobPath::parse(&f.path) {
                Ok(path) => {
                    self.file(&None, &path, &bytes, &mut out);
                }
                Err(_) => self.scan(&None, &f.path, &String::from_utf8_lossy(&bytes), &mut out),
            }
        }
        out
    }

    /// A file's content: validated as a program when its name or shebang says it is one, else
    /// scanned; returns the language it was validated as.
    fn file(
        &self,
        step: &Option<String>,
        path: &JobPath,
        bytes: &[u8],
        out: &mut Vec<ContentVerdict>,
    ) -> Option<Language> {
        let text = String::from_utf8_lossy(bytes);
        let target = path.to_string();
        match Language::detect(&target, &text) {
            Some(language) => {
                out.push(self.program(step, target, language, &text));
                Some(language)
            }
            None => {
                self.scan(step, &target, &text, out);
                None
            }
        }
    }

    /// One file of a diff, applied to what the job wrote when the service knows it.
    fn patched(
        &self,
        step: &Option<String>,
        path: &JobPath,
        patch: &diff::FilePatch,
        known: &mut Known,
        out: &mut Vec<ContentVerdict>,
    ) {
        let base = match patch.change {
            Change::Create => None,
            Change::Modify | Change::Delete => match known.remove(path) {
                Some((bytes, _)) => Some(bytes),
                // Made by a command: its text was scanned with the diff, nothing more is known.
                None => return,
            },
        };
        if let Ok(Some(after)) = diff::apply(patch, base.as_deref()) {
            let language = self.file(step, path, &after, out);
            known.insert(path.clone(), (after, language));
        }
    }

    /// A command: its program (inline, on stdin, or a file the job wrote), then its arguments,
    /// environment and standard input as text.
    fn command(
        &self,
        step: &Option<String>,
        c: &RunCommand,
        working_dir: &JobPath,
        known: &Known,
        out: &mut Vec<ContentVerdict>,
    ) {
        let name = c.command.rsplit('/').next().unwrap_or(&c.command);
        let mut inline_arg = None;
        let mut stdin_is_program = false;
        if let Some(language) = programs::interpreter(name) {
            match programs::program(language, &c.args) {
                Program::Inline { code, arg } => {
                    inline_arg = Some(arg);
                    let target = format!("{name} -c");
                    out.push(self.program(step, target, language, code));
                }
                Program::Stdin => {
                    if let Some(stdin) = c.stdin.as_deref().filter(|s| !s.is_empty()) {
                        stdin_is_program = true;
                        out.push(self.program(step, "stdin".into(), language, stdin));
                    }
                }
                Program::File(file) => {
                    self.script_file(step, file, working_dir, language, known, out);
                }
                Program::Unseen => {}
            }
        }
        let args: Vec<&str> = (c.args.iter().enumerate())
            .filter(|(i, _)| Some(*i) != inline_arg)
            .map(|(_, a)| a.as_str())
            .collect();
        self.scan(step, "args", &args.join("\n"), out);
        let env: Vec<String> = c.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        self.scan(step, "env", &env.join("\n"), out);
        if !stdin_is_program {
            self.scan(step, "stdin", c.stdin.as_deref().unwrap_or(""), out);
        }
    }

    /// The script an interpreter runs, when the job wrote it and it was not already validated as
    /// that language.
    fn script_file(
        &self,
        step: &Option<String>,
        file: &str,
        working_dir: &JobPath,
        language: Language,
        known: &Known,
        out: &mut Vec<ContentVerdict>,
    ) {
        let path = if file.starts_with('/') {
            JobPath::parse(file).ok()
        } else {
            file.split('/')
                .try_fold(working_dir.clone(), |dir, part| dir.child(part))
        };
        let Some((path, (bytes, validated))) = path.and_then(|p| known.get_key_value(&p)) else {
            return;
        };
        if *validated != Some(language) {
            let text = String::from_utf8_lossy(bytes);
            out.push(self.program(step, path.to_string(), language, &text));
        }
    }

    /// Every layer of script validation.
    fn program(
        &self,
        step: &Option<String>,
        target: String,
        language: Language,
        text: &str,
    ) -> ContentVerdict {
        let verdict = self.validator.validate(&Script::new(language, text));
        crate::metrics::validated(&verdict);
        ContentVerdict::program(step.clone(), target, verdict)
    }

    /// The secret rules over text that is not a program (kept only when something is found).
    fn scan(&self, step: &Option<String>, target: &str, text: &str, out: &mut Vec<ContentVerdict>) {
        if text.is_empty() {
            return;
        }
        let secrets = &self.validator.rules().secrets;
        let positions = Positions::new(text);
        let findings: Vec<Finding> = secrets
            .scan(text)
            .into_iter()
            .filter(|m| !self.disabled.contains(&secrets.rules[m.rule].meta.id))
            .map(|m| {
                let meta = &secrets.rules[m.rule].meta;
                let (line, column) = positions.at(m.start);
                Finding {
                    layer: Layer::Secrets,
                    rule: meta.id.clone(),
                    severity: meta.severity,
                    message: format!("{}: {}", meta.message, redacted(&text[m.start..m.end])),
                    line,
                    column,
                }
            })
            .collect();
        if !findings.is_empty() {
            out.push(ContentVerdict::scanned(
                step.clone(),
                target.to_string(),
                findings,
            ));
        }
    }
}

/// A secret as findings show it: its first characters, then `***` (the form the validation
/// layers use, so a redacted finding never carries the secret).
fn redacted(secret: &str) -> String {
    let keep = if secret.chars().count() >= 12 { 4 } else { 2 };
    let prefix: String = secret.chars().take(keep).collect();
    format!("{prefix}***")
}

/// A workspace file's bytes (its content was checked at the edge; a bad one is empty here).
pub(super) fn decoded(f: &WorkspaceFile) -> Vec<u8> {
    if f.base64 {
        data_encoding::BASE64
            .decode(f.content.as_bytes())
            .unwrap_or_default()
    } else {
        f.content.clone().into_bytes()
    }
}

/// The protocol's encoding of a workspace file.
pub(super) fn encoding(f: &WorkspaceFile) -> Encoding {
    if f.base64 {
        Encoding::Base64
    } else {
        Encoding::Utf8
    }
}
