//! Policy files to compiled policies: the built-in ones, then `policies_dir`; a malformed file
//! stops start-up with its name and line.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use include_dir::{Dir, include_dir};
use scriptgate_policy::{CompiledPolicy, Policy, PolicyError};

use super::select::{Chooser, PolicySettings, SelectionError};
use crate::auth::TokenSpec;
use crate::rules::RuleSet;

static EMBEDDED: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/policies");

/// Largest policy file read: bounds parsing whatever the file holds.
pub const MAX_POLICY_FILE_BYTES: u64 = 1 << 20;
/// Most policy files `policies_dir` may hold.
pub const MAX_POLICY_FILES: usize = 256;

/// A policy that stops start-up: its file, the line when known, and what is wrong.
#[derive(Debug, thiserror::Error)]
pub struct PolicyLoadError {
    pub file: String,
    /// 1-based line and column.
    pub position: Option<(usize, usize)>,
    /// Boxed: the error travels through every start-up `Result`.
    #[source]
    pub kind: Box<LoadErrorKind>,
}

impl fmt::Display for PolicyLoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.position {
            Some((line, column)) => write!(f, "{}:{line}:{column}: {}", self.file, self.kind),
            None => write!(f, "{}: {}", self.file, self.kind),
        }
    }
}

/// What is wrong with a policy file.
#[derive(Debug, thiserror::Error)]
pub enum LoadErrorKind {
    #[error("cannot read: {0}")]
    Io(#[from] std::io::Error),
    /// The parser's message, without its position (shown in front).
    #[error("{0}")]
    Syntax(String),
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("{0}")]
    Invalid(String),
}

impl PolicyLoadError {
    fn new(file: impl Into<String>, kind: impl Into<LoadErrorKind>) -> Self {
        PolicyLoadError {
            file: file.into(),
            position: None,
            kind: Box::new(kind.into()),
        }
    }

    fn invalid(file: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(file, LoadErrorKind::Invalid(message.into()))
    }

    fn at(mut self, position: Option<(usize, usize)>) -> Self {
        self.position = position;
        self
    }
}

/// Where a policy came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    BuiltIn,
    File(PathBuf),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::BuiltIn => f.write_str("built-in"),
            Origin::File(p) => write!(f, "{}", p.display()),
        }
    }
}

#[derive(Debug, Clone)]
pub struct LoadedPolicy {
    pub policy: Arc<CompiledPolicy>,
    pub origin: Origin,
}

/// Every policy of the deployment, by name, and the settings that choose among them.
#[derive(Debug, Clone)]
pub struct Policies {
    by_name: BTreeMap<String, LoadedPolicy>,
    settings: PolicySettings,
}

/// Parses and compiles one policy file's text; `file` names it in errors.
pub fn parse_policy(file: &str, text: &str) -> Result<CompiledPolicy, PolicyLoadError> {
    let policy: Policy = serde_norway::from_str(text).map_err(|e| {
        let position = e.location().map(|l| (l.line(), l.column()));
        let mut message = e.to_string();
        if let Some((line, column)) = position {
            let suffix = format!(" at line {line} column {column}");
            if let Some(stripped) = message.strip_suffix(&suffix) {
                message = stripped.to_string();
            }
        }
        PolicyLoadError::new(file, LoadErrorKind::Syntax(message)).at(position)
    })?;
    CompiledPolicy::compile(policy).map_err(|e| PolicyLoadError::new(file, e))
}

/// The line of the top-level `name:` key, for errors about the name.
fn name_position(text: &str) -> Option<(usize, usize)> {
    text.lines()
        .position(|l| l.starts_with("name:"))
        .map(|i| (i + 1, 1))
}

/// A file's policy, whose name must be its file name without the extension.
pub fn parse_policy_file(
    file: &str,
    stem: &str,
    text: &str,
) -> Result<CompiledPolicy, PolicyLoadError> {
    let policy = parse_policy(file, text)?;
    if policy.name() != stem {
        return Err(PolicyLoadError::invalid(
            file,
            format!(
                "the policy is named `{}` but its file `{stem}`: a policy's file is named after it",
                policy.name()
            ),
        )
        .at(name_position(text)));
    }
    Ok(policy)
}

impl Policies {
    /// The built-in policies, then those of `settings.policies_dir` (replacing built-ins of the
    /// same name). Names in the settings are not checked here: see [`Policies::check`].
    pub fn load(settings: &PolicySettings) -> Result<Policies, PolicyLoadError> {
        let mut by_name = BTreeMap::new();
        for file in EMBEDDED.files() {
            let path = file.path().to_string_lossy();
            let Some(stem) = path.strip_suffix(".yml") else {
                continue;
            };
            let shown = format!("policies/{path}");
            let text = file
                .contents_utf8()
                .ok_or_else(|| PolicyLoadError::invalid(&shown, "not UTF-8"))?;
            let policy = parse_policy_file(&shown, stem, text)?;
            by_name.insert(
                stem.to_string(),
                LoadedPolicy {
                    policy: Arc::new(policy),
                    origin: Origin::BuiltIn,
                },
            );
        }
        if let Some(dir) = &settings.policies_dir {
            for (stem, path) in policy_files(dir)? {
                let policy = read_policy_file(&path, &stem)?;
                by_name.insert(
                    stem,
                    LoadedPolicy {
                        policy: Arc::new(policy),
                        origin: Origin::File(path),
                    },
                );
            }
        }
        Ok(Policies {
            by_name,
            settings: settings.clone(),
        })
    }

    /// Start-up checks across the configuration: every policy the settings name exists, every
    /// `policy.agents` entry names an agent token, and every `validation_rules` id names a rule.
    pub fn check(
        &self,
        agent_tokens: &[TokenSpec],
        rules: &RuleSet,
    ) -> Result<(), PolicyLoadError> {
        for (key, name) in self.settings.named_policies() {
            if !self.by_name.contains_key(name) {
                return Err(PolicyLoadError::invalid(
                    "configuration",
                    format!(
                        "{key}: no policy `{name}` (there are: {})",
                        self.names().collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
        }
        for agent in self.settings.agents.keys() {
            if !agent_tokens.iter().any(|t| &t.name == agent) {
                return Err(PolicyLoadError::invalid(
                    "configuration",
                    format!("policy.agents.{agent}: no agent token is named `{agent}`"),
                ));
            }
        }
        for loaded in self.by_name.values() {
            check_rule_ids(&loaded.policy, &loaded.origin.to_string(), rules)?;
        }
        Ok(())
    }

    /// Loads and checks: what the service does at start-up.
    pub fn start(
        settings: &PolicySettings,
        agent_tokens: &[TokenSpec],
        rules: &RuleSet,
    ) -> Result<Policies, PolicyLoadError> {
        let policies = Policies::load(settings)?;
        policies.check(agent_tokens, rules)?;
        Ok(policies)
    }

    pub fn get(&self, name: &str) -> Option<&LoadedPolicy> {
        self.by_name.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &LoadedPolicy)> {
        self.by_name.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn settings(&self) -> &PolicySettings {
        &self.settings
    }

    /// The policy a run gets (see [`PolicySettings::select`]); `None` inside the `Ok` only when an
    /// unauthenticated request names a policy that does not exist.
    pub fn select(
        &self,
        chooser: Chooser<'_>,
        requested: Option<&str>,
    ) -> Result<Option<&LoadedPolicy>, SelectionError> {
        let name = self.settings.select(chooser, requested)?;
        Ok(self.by_name.get(name))
    }
}

/// Every `validation_rules` id or prefix of `policy` (from `file`) names a rule of `rules`.
pub fn check_rule_ids(
    policy: &CompiledPolicy,
    file: &str,
    rules: &RuleSet,
) -> Result<(), PolicyLoadError> {
    let policy = policy.policy();
    for rule in &policy.validation_rules {
        for id in &rule.rules {
            let matches = |rule_id: &str| match id.strip_suffix('*') {
                Some(prefix) => rule_id.starts_with(prefix),
                None => rule_id == id,
            };
            if !rules.all_meta().any(|m| matches(&m.id)) {
                return Err(PolicyLoadError::invalid(
                    file,
                    format!(
                        "policy `{}`, validation rule `{}`: `{id}` names no rule (`scriptgate rules` lists them)",
                        policy.name, rule.name
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The `*.yml` and `*.yaml` files of `dir`, by policy name, bounded in number.
fn policy_files(dir: &Path) -> Result<Vec<(String, PathBuf)>, PolicyLoadError> {
    let shown = dir.display().to_string();
    let entries = std::fs::read_dir(dir).map_err(|e| PolicyLoadError::new(&shown, e))?;
    let mut files: BTreeMap<String, PathBuf> = BTreeMap::new();
    for entry in entries {
        let path = entry.map_err(|e| PolicyLoadError::new(&shown, e))?.path();
        let is_policy = path.extension().is_some_and(|e| e == "yml" || e == "yaml");
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if !is_policy || !path.is_file() {
            continue;
        }
        if let Some(other) = files.insert(stem.to_string(), path.clone()) {
            return Err(PolicyLoadError::invalid(
                path.display().to_string(),
                format!("{} defines the same policy", other.display()),
            ));
        }
        if files.len() > MAX_POLICY_FILES {
            return Err(PolicyLoadError::invalid(
                shown,
                format!("more than {MAX_POLICY_FILES} policy files"),
            ));
        }
    }
    Ok(files.into_iter().collect())
}

/// Reads a policy file (bounded) and parses it; its policy must be named after the file.
pub fn read_policy_file(path: &Path, stem: &str) -> Result<CompiledPolicy, PolicyLoadError> {
    let shown = path.display().to_string();
    let text = read_bounded(path).map_err(|e| PolicyLoadError::new(&shown, e))?;
    parse_policy_file(&shown, stem, &text)
}

/// The file's text, refused past [`MAX_POLICY_FILE_BYTES`] before reading it whole.
pub fn read_bounded(path: &Path) -> std::io::Result<String> {
    use std::io::Read as _;
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(MAX_POLICY_FILE_BYTES + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > MAX_POLICY_FILE_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {MAX_POLICY_FILE_BYTES} bytes"),
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        path
    }

    fn settings(dir: &Path) -> PolicySettings {
        PolicySettings {
            policies_dir: Some(dir.to_path_buf()),
            ..PolicySettings::default()
        }
    }

    #[test]
    fn the_built_in_policies_load_and_pass_the_start_up_checks() {
        let rules = RuleSet::embedded().expect("rules");
        let policies =
            Policies::start(&PolicySettings::default(), &[], &rules).expect("built-ins load");
        let names: Vec<&str> = policies.names().collect();
        assert_eq!(names, ["audit", "default", "strict"]);
        assert_eq!(
            policies.get("default").map(|p| &p.origin),
            Some(&Origin::BuiltIn)
        );
    }

    #[test]
    fn a_malformed_file_names_its_file_and_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(
            dir.path(),
            "broken.yml",
            "version: 1\nname: broken\nfile_rules:\n  - name: r\n    paths:\n      - /tmp/**\n      - /etc/{a,b\n    operations: [read]\n    decision: allow\n",
        );
        let err = Policies::load(&settings(dir.path())).expect_err("refused");
        let shown = err.to_string();
        assert_eq!(err.position, Some((7, 9)), "{shown}");
        assert!(
            shown.starts_with(&format!(
                "{}:7:9: ",
                dir.path().join("broken.yml").display()
            )),
            "{shown}"
        );
        assert!(
            shown.contains("bad glob `/etc/{a,b`: unclosed `{`"),
            "{shown}"
        );
        assert!(
            !shown.contains("at line"),
            "the position is shown once: {shown}"
        );
    }

    #[test]
    fn a_file_replaces_the_built_in_of_its_name_and_must_be_named_after_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(
            dir.path(),
            "default.yaml",
            "version: 1\nname: default\nnetwork_rules: [{name: all, decision: allow}]\n",
        );
        let policies = Policies::load(&settings(dir.path())).expect("loads");
        let loaded = policies.get("default").expect("present");
        assert_eq!(loaded.origin, Origin::File(path));
        assert!(loaded.policy.policy().file_rules.is_empty());

        write(dir.path(), "other.yml", "# x\nversion: 1\nname: mismatch\n");
        let err = Policies::load(&settings(dir.path())).expect_err("misnamed");
        assert_eq!(err.position, Some((3, 1)));
        assert!(
            err.to_string()
                .contains("named `mismatch` but its file `other`")
        );
    }

    #[test]
    fn oversized_files_are_refused_before_parsing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let big = format!("version: 1\nname: big\n#{}\n", "x".repeat(2 << 20));
        write(dir.path(), "big.yml", &big);
        let err = Policies::load(&settings(dir.path())).expect_err("too big");
        assert!(
            err.to_string().contains("larger than 1048576 bytes"),
            "{err}"
        );
    }

    #[test]
    fn settings_naming_missing_policies_tokens_or_rules_stop_start_up() {
        let rules = RuleSet::embedded().expect("rules");
        let bad_default = PolicySettings {
            default: "nope".into(),
            ..PolicySettings::default()
        };
        let err = Policies::start(&bad_default, &[], &rules).expect_err("missing");
        assert!(
            err.to_string().contains("policy.default: no policy `nope`"),
            "{err}"
        );

        let mut agents = PolicySettings::default();
        agents.agents.insert("ghost".into(), Default::default());
        let err = Policies::start(&agents, &[], &rules).expect_err("no such token");
        assert!(
            err.to_string().contains("no agent token is named `ghost`"),
            "{err}"
        );

        let dir = tempfile::tempdir().expect("tempdir");
        write(
            dir.path(),
            "typo.yml",
            "version: 1\nname: typo\nvalidation_rules: [{name: r, rules: [python-ctype], decision: deny}]\n",
        );
        let err = Policies::start(&settings(dir.path()), &[], &rules).expect_err("unknown id");
        assert!(
            err.to_string().contains("`python-ctype` names no rule"),
            "{err}"
        );
    }
}
