//! The script an agent submits, in its checked form: what every layer below the HTTP edge receives.

use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The interpreters scriptgate runs.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
    strum::IntoStaticStr,
    strum::Display,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Language {
    Python,
    Bash,
}

impl Language {
    pub const ALL: [Language; 2] = [Language::Python, Language::Bash];

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The other supported language (used to tell a mislabelled script).
    pub fn other(self) -> Language {
        match self {
            Language::Python => Language::Bash,
            Language::Bash => Language::Python,
        }
    }

    /// Guesses the language of a file from its extension, then its shebang line.
    pub fn detect(path: &str, text: &str) -> Option<Language> {
        let lower = path.to_ascii_lowercase();
        if lower.ends_with(".py") {
            return Some(Language::Python);
        }
        if lower.ends_with(".sh") || lower.ends_with(".bash") {
            return Some(Language::Bash);
        }
        Self::from_shebang(text)
    }

    /// The language a `#!` first line names, if any.
    pub fn from_shebang(text: &str) -> Option<Language> {
        let first = text.lines().next()?.strip_prefix("#!")?;
        let mut words = first.split_whitespace();
        let mut prog = words.next()?.rsplit('/').next()?;
        if prog == "env" {
            prog = words.find(|w| !w.starts_with('-'))?;
        }
        if prog.starts_with("python") {
            Some(Language::Python)
        } else if matches!(prog, "sh" | "bash" | "dash" | "zsh" | "ksh" | "ash") {
            Some(Language::Bash)
        } else {
            None
        }
    }
}

impl FromStr for Language {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "python" => Ok(Language::Python),
            "bash" => Ok(Language::Bash),
            other => Err(format!(
                "unknown language `{other}`; expected `python` or `bash`"
            )),
        }
    }
}

/// A script with its declared language. Content checks (size, syntax, rules) are the validator's job;
/// this type only guarantees the pairing. Stored as `{"language", "script"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Script {
    pub language: Language,
    #[serde(rename = "script")]
    pub text: String,
}

impl Script {
    pub fn new(language: Language, text: impl Into<String>) -> Self {
        Script {
            language,
            text: text.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shebangs_name_the_interpreter() {
        assert_eq!(
            Language::from_shebang("#!/usr/bin/env python3\n"),
            Some(Language::Python)
        );
        assert_eq!(
            Language::from_shebang("#!/bin/bash -e\n"),
            Some(Language::Bash)
        );
        assert_eq!(
            Language::from_shebang("#!/usr/bin/env -S bash -x\n"),
            Some(Language::Bash)
        );
        assert_eq!(Language::from_shebang("#!/usr/bin/perl\n"), None);
        assert_eq!(Language::from_shebang("print(1)\n"), None);
    }

    #[test]
    fn extension_wins_over_shebang() {
        assert_eq!(
            Language::detect("x.py", "#!/bin/bash\n"),
            Some(Language::Python)
        );
        assert_eq!(Language::detect("x.bash", ""), Some(Language::Bash));
        assert_eq!(Language::detect("x", "#!/bin/sh\n"), Some(Language::Bash));
        assert_eq!(Language::detect("x.txt", "echo hi\n"), None);
    }
}
