//! Runner profiles: named runner images with the languages they serve, their warm pool and the
//! Python modules their warm interpreters import before a script arrives.
//!
//! Two are built in: `minimal` (the default: `sandbox.python_image` / `sandbox.bash_image`) and
//! `data` (numpy, pandas, matplotlib and friends, built by `scriptgate images build`). A
//! `[[sandbox.profiles]]` entry with the name of a built-in replaces it; any other name adds one.

use serde::{Deserialize, Serialize};

use crate::domain::script::Language;
/// The profile a request without `profile` runs in.
pub use crate::domain::work::DEFAULT_PROFILE;
/// The built-in scientific Python profile.
pub const DATA_PROFILE: &str = "data";

/// One `[[sandbox.profiles]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileConfig {
    /// What requests name in `profile`: letters, digits, `-` and `_`.
    pub name: String,
    /// The runner image (its entrypoint must be `scriptgate-supervisor`).
    pub image: String,
    /// Languages it runs (default: python and bash).
    #[serde(default = "all_languages")]
    pub languages: Vec<Language>,
    /// One line for people and models choosing a profile (the tool definitions show it).
    #[serde(default)]
    pub description: String,
    /// Warm containers kept per language (default: `sandbox.pool.size`).
    #[serde(default)]
    pub pool_size: Option<usize>,
    /// Python modules the warm interpreter imports before the script arrives (`pandas`,
    /// `matplotlib.pyplot`): the script's own `import` of them is then free.
    #[serde(default)]
    pub preimport: Vec<String>,
    /// Figures still open at the end (and every `plt.show()`) are returned as PNG images. Needs an
    /// image with the plot hook (`images/profile/scriptgate_plots.py`), as the `data` image has.
    #[serde(default)]
    pub plots: bool,
}

fn all_languages() -> Vec<Language> {
    Language::ALL.to_vec()
}

/// A profile ready for use: every field settled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Profile {
    pub name: String,
    /// Image per language (the `minimal` built-in honours `python_image` and `bash_image`).
    pub python_image: String,
    pub bash_image: String,
    pub languages: Vec<Language>,
    pub description: String,
    pub pool_size: usize,
    pub preimport: Vec<String>,
    pub plots: bool,
}

impl Profile {
    pub fn image(&self, language: Language) -> &str {
        match language {
            Language::Python => &self.python_image,
            Language::Bash => &self.bash_image,
        }
    }

    pub fn runs(&self, language: Language) -> bool {
        self.languages.contains(&language)
    }

    /// Images, each once.
    pub fn images(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.languages.iter().map(|l| self.image(*l)).collect();
        v.dedup();
        v
    }

    fn from_config(c: &ProfileConfig, default_pool: usize) -> Profile {
        Profile {
            name: c.name.clone(),
            python_image: c.image.clone(),
            bash_image: c.image.clone(),
            languages: c.languages.clone(),
            description: c.description.clone(),
            pool_size: c.pool_size.unwrap_or(default_pool),
            preimport: c.preimport.clone(),
            plots: c.plots,
        }
    }
}

/// The built-in `data` profile as a config entry (what an operator would write to change it).
pub fn builtin_data() -> ProfileConfig {
    ProfileConfig {
        name: DATA_PROFILE.into(),
        image: super::docker::images::DATA_IMAGE.into(),
        languages: all_languages(),
        description: "Python 3.11 with numpy, pandas, scipy, matplotlib (plots come back as PNG \
                      images), scikit-learn, statsmodels, sympy, networkx, Pillow, requests, \
                      beautifulsoup4, lxml, openpyxl, PyYAML, tabulate; sqlite3"
            .into(),
        pool_size: None,
        preimport: ["numpy", "pandas", "matplotlib", "matplotlib.pyplot"]
            .map(String::from)
            .to_vec(),
        plots: true,
    }
}

/// Every profile of a deployment, in a stable order (`minimal` first).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Profiles {
    list: Vec<Profile>,
}

/// The `[[sandbox.profiles]]` list cannot be resolved (a start-up error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProfileConfigError {
    #[error("sandbox.profiles[{index}] ({name}): {problem}")]
    Entry {
        index: usize,
        name: String,
        #[source]
        problem: EntryProblem,
    },
    #[error("sandbox.profiles: `{name}` is defined twice")]
    Duplicate { name: String },
}

/// What is wrong with one `[[sandbox.profiles]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryProblem {
    #[error("name must be 1-64 letters, digits, '-' or '_'")]
    Name,
    #[error("image must not be empty")]
    EmptyImage,
    #[error("languages must name at least one language")]
    NoLanguage,
    #[error("preimport: `{0}` is not a Python module name")]
    Module(String),
}

/// A request named a profile that does not exist (or that does not run its language).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    #[error("profile: unknown profile `{name}`; valid profiles: {valid}")]
    Unknown { name: String, valid: String },
    #[error("profile: `{name}` does not run {language}; it runs {runs}")]
    Language {
        name: String,
        language: Language,
        runs: String,
    },
}

impl Profiles {
    /// The built-ins, replaced or extended by `configured`; checked (names, modules, languages).
    pub fn resolve(
        python_image: &str,
        bash_image: &str,
        default_pool: usize,
        configured: &[ProfileConfig],
    ) -> Result<Profiles, ProfileConfigError> {
        let mut list = vec![
            Profile {
                name: DEFAULT_PROFILE.into(),
                python_image: python_image.into(),
                bash_image: bash_image.into(),
                languages: all_languages(),
                description: "Python 3 standard library and Bash with jq, gawk and bc".into(),
                pool_size: default_pool,
                preimport: Vec::new(),
                plots: false,
            },
            Profile::from_config(&builtin_data(), default_pool),
        ];
        for (i, c) in configured.iter().enumerate() {
            check(c).map_err(|problem| ProfileConfigError::Entry {
                index: i,
                name: c.name.clone(),
                problem,
            })?;
            if configured[..i].iter().any(|o| o.name == c.name) {
                return Err(ProfileConfigError::Duplicate {
                    name: c.name.clone(),
                });
            }
            let p = Profile::from_config(c, default_pool);
            match list.iter_mut().find(|b| b.name == c.name) {
                Some(slot) => *slot = p,
                None => list.push(p),
            }
        }
        Ok(Profiles { list })
    }

    pub fn all(&self) -> &[Profile] {
        &self.list
    }

    pub fn names(&self) -> Vec<&str> {
        self.list.iter().map(|p| p.name.as_str()).collect()
    }

    pub fn get(&self, name: &str) -> Option<&Profile> {
        self.list.iter().find(|p| p.name == name)
    }

    pub fn default_profile(&self) -> &Profile {
        self.get(DEFAULT_PROFILE).unwrap_or(&self.list[0])
    }

    /// The profile a request asked for (or the default), if it exists and runs `language`.
    pub fn select(&self, name: Option<&str>, language: Language) -> Result<&Profile, ProfileError> {
        let name = name.unwrap_or(DEFAULT_PROFILE);
        let profile = self.get(name).ok_or_else(|| ProfileError::Unknown {
            name: name.into(),
            valid: self.names().join(", "),
        })?;
        if !profile.runs(language) {
            return Err(ProfileError::Language {
                name: name.into(),
                language,
                runs: join(&profile.languages),
            });
        }
        Ok(profile)
    }
}

fn join(languages: &[Language]) -> String {
    languages
        .iter()
        .map(|l| l.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn is_name(s: &str, extra: &[char]) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || extra.contains(&c))
}

fn check(c: &ProfileConfig) -> Result<(), EntryProblem> {
    if !is_name(&c.name, &['-']) {
        return Err(EntryProblem::Name);
    }
    if c.image.trim().is_empty() {
        return Err(EntryProblem::EmptyImage);
    }
    if c.languages.is_empty() {
        return Err(EntryProblem::NoLanguage);
    }
    if let Some(m) = c
        .preimport
        .iter()
        .find(|m| !m.split('.').all(|part| is_name(part, &[])) || m.starts_with(char::is_numeric))
    {
        return Err(EntryProblem::Module(m.clone()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str) -> ProfileConfig {
        ProfileConfig {
            name: name.into(),
            image: "img:1".into(),
            languages: vec![Language::Python],
            description: String::new(),
            pool_size: Some(1),
            preimport: vec!["json".into()],
            plots: false,
        }
    }

    #[test]
    fn builtins_come_first_and_can_be_replaced_or_extended() {
        let p = Profiles::resolve("py", "sh", 2, &[]).expect("present");
        assert_eq!(p.names(), ["minimal", "data"]);
        assert_eq!(p.default_profile().image(Language::Bash), "sh");
        assert_eq!(p.get("data").expect("present").pool_size, 2);
        let p = Profiles::resolve("py", "sh", 2, &[entry("data"), entry("ml")]).expect("present");
        assert_eq!(p.names(), ["minimal", "data", "ml"]);
        assert_eq!(p.get("data").expect("present").python_image, "img:1");
    }

    #[test]
    fn unknown_profile_names_the_valid_ones() {
        let p = Profiles::resolve("py", "sh", 2, &[entry("ml")]).expect("present");
        let e = p
            .select(Some("gpu"), Language::Python)
            .expect_err("an error");
        assert_eq!(
            e.to_string(),
            "profile: unknown profile `gpu`; valid profiles: minimal, data, ml"
        );
        let e = p.select(Some("ml"), Language::Bash).expect_err("an error");
        assert!(e.to_string().contains("does not run bash"), "{e}");
        assert_eq!(
            p.select(None, Language::Bash).expect("present").name,
            "minimal"
        );
    }

    #[test]
    fn bad_entries_are_refused_with_their_index() {
        let mut bad = entry("x y");
        assert!(Profiles::resolve("py", "sh", 2, &[bad.clone()]).is_err());
        bad = entry("ok");
        bad.preimport = vec!["os; import sys".into()];
        let e = Profiles::resolve("py", "sh", 2, &[bad]).expect_err("an error");
        assert!(
            matches!(&e, ProfileConfigError::Entry { index: 0, problem: EntryProblem::Module(m), .. } if m == "os; import sys"),
            "{e}"
        );
        assert!(e.to_string().contains("sandbox.profiles[0] (ok)"), "{e}");
        let e = Profiles::resolve("py", "sh", 2, &[entry("a"), entry("a")]).expect_err("an error");
        assert_eq!(e, ProfileConfigError::Duplicate { name: "a".into() });
    }
}
