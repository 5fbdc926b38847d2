//! Paths as a job writes them, checked without touching a file system: canonical, under one of
//! the two writable roots (`/workspace`, `/tmp`), inside the job's `allowed_paths`.
//!
//! These are string rules only. What makes a path safe to open is the agent's resolution: one
//! component at a time beneath a handle of the root, refusing every symlink (`openat2` with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`). With `..` refused here, the two agree on what a path
//! names.

use std::fmt;

/// The writable roots a job's paths may lie under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Root {
    Workspace,
    Tmp,
}

impl Root {
    pub const ALL: [Root; 2] = [Root::Workspace, Root::Tmp];

    pub fn path(self) -> &'static str {
        match self {
            Root::Workspace => "/workspace",
            Root::Tmp => "/tmp",
        }
    }
}

/// Longest path and component the agent accepts (Linux's PATH_MAX and NAME_MAX).
const PATH_MAX: usize = 4096;
const NAME_MAX: usize = 255;

/// A canonical path under a root: no empty, `.` or `..` component, no NUL.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobPath {
    root: Root,
    rel: Vec<String>,
}

impl JobPath {
    /// `path` if absolute, else `path` relative to `/workspace`.
    pub fn resolve(path: &str) -> Result<JobPath, String> {
        if path.starts_with('/') {
            JobPath::parse(path)
        } else {
            JobPath::parse(&format!("{}/{path}", Root::Workspace.path()))
                .map_err(|e| e.replace(&format!("{}/", Root::Workspace.path()), ""))
        }
    }

    /// An absolute, canonical path under `/workspace` or `/tmp`.
    pub fn parse(path: &str) -> Result<JobPath, String> {
        if path.len() > PATH_MAX || path.contains('\0') {
            return Err(format!(
                "`{}` is not a usable path (NUL, or longer than {PATH_MAX} bytes)",
                shown(path)
            ));
        }
        let Some(rest) = path.strip_prefix('/') else {
            return Err(format!("`{path}` is not an absolute path"));
        };
        let parts: Vec<&str> = rest.split('/').collect();
        if let Some(bad) = parts
            .iter()
            .find(|p| p.is_empty() || **p == "." || **p == ".." || p.len() > NAME_MAX)
        {
            let what = match *bad {
                ".." => "a `..` component",
                "." => "a `.` component",
                "" => "an empty component (`//` or a trailing `/`)",
                _ => "a component longer than 255 bytes",
            };
            return Err(format!("`{path}` has {what}: paths must be canonical"));
        }
        let root = Root::ALL
            .into_iter()
            .find(|r| r.path()[1..] == *parts[0])
            .ok_or_else(|| format!("`{path}` is not under /workspace or /tmp"))?;
        Ok(JobPath {
            root,
            rel: parts[1..].iter().map(|p| p.to_string()).collect(),
        })
    }

    pub fn root(&self) -> Root {
        self.root
    }

    /// The components below the root.
    pub fn components(&self) -> &[String] {
        &self.rel
    }

    /// Whether `self` is `other` or lies below it.
    pub fn is_within(&self, other: &JobPath) -> bool {
        self.root == other.root && self.rel.starts_with(&other.rel)
    }

    /// The last component (`None` for a root itself).
    pub fn name(&self) -> Option<&str> {
        self.rel.last().map(String::as_str)
    }

    pub fn parent(&self) -> Option<JobPath> {
        let (_, parent) = self.rel.split_last()?;
        Some(JobPath {
            root: self.root,
            rel: parent.to_vec(),
        })
    }

    /// `self/name` for one canonical component.
    pub fn child(&self, name: &str) -> Option<JobPath> {
        let ok = !name.is_empty()
            && name != "."
            && name != ".."
            && name.len() <= NAME_MAX
            && !name.contains(['/', '\0']);
        ok.then(|| {
            let mut rel = self.rel.clone();
            rel.push(name.to_string());
            JobPath {
                root: self.root,
                rel,
            }
        })
    }

    /// The path below its root, `/`-joined (`""` for the root).
    pub fn relative(&self) -> String {
        self.rel.join("/")
    }
}

impl fmt::Display for JobPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.root.path())?;
        for part in &self.rel {
            write!(f, "/{part}")?;
        }
        Ok(())
    }
}

/// A path shown in a message, cut short and without control characters.
fn shown(path: &str) -> String {
    path.chars()
        .take(200)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// A job's `allowed_paths`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed(Vec<JobPath>);

impl Allowed {
    /// Every entry canonical and inside `/workspace` or `/tmp` (so `/`, `/proc`, `/dev`, `/etc`
    /// are refused).
    pub fn new(entries: &[String]) -> Result<Allowed, String> {
        entries
            .iter()
            .map(|e| JobPath::parse(e).map_err(|m| format!("allowed_paths: {m}")))
            .collect::<Result<Vec<_>, _>>()
            .map(Allowed)
    }

    pub fn contains(&self, path: &JobPath) -> bool {
        self.0.iter().any(|a| path.is_within(a))
    }

    /// `path` resolved (relative to `/workspace`) and inside an allowed path.
    pub fn check(&self, path: &str) -> Result<JobPath, String> {
        let resolved = JobPath::resolve(path)?;
        if self.contains(&resolved) {
            Ok(resolved)
        } else {
            Err(format!(
                "`{resolved}` is outside allowed_paths ({})",
                self.describe()
            ))
        }
    }

    /// The first allowed path (the default working directory).
    pub fn first(&self) -> Option<&JobPath> {
        self.0.first()
    }

    pub fn entries(&self) -> &[JobPath] {
        &self.0
    }

    fn describe(&self) -> String {
        if self.0.is_empty() {
            return "none".into();
        }
        self.0
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(entries: &[&str]) -> Allowed {
        Allowed::new(&entries.iter().map(|e| e.to_string()).collect::<Vec<_>>()).expect("allowed")
    }

    #[test]
    fn canonical_paths_under_a_root_parse() {
        let p = JobPath::parse("/workspace/src/main.py").expect("canonical");
        assert_eq!(p.root(), Root::Workspace);
        assert_eq!(p.components(), ["src", "main.py"]);
        assert_eq!(p.to_string(), "/workspace/src/main.py");
        assert_eq!(
            JobPath::resolve("src/a.py").expect("relative").to_string(),
            "/workspace/src/a.py"
        );
        assert_eq!(JobPath::parse("/tmp").expect("root").relative(), "");
    }

    #[test]
    fn dot_dot_and_other_non_canonical_paths_are_refused() {
        for bad in [
            "/workspace/../etc/passwd",
            "../etc/passwd",
            "/workspace/a/../b",
            "/workspace/./a",
            "/workspace//a",
            "/workspace/a/",
            "/workspace/a\0b",
            "workspace/..",
            "",
        ] {
            assert!(JobPath::resolve(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn only_the_two_roots_are_reachable() {
        for bad in [
            "/",
            "/etc/passwd",
            "/proc/1/mem",
            "/dev/null",
            "/workspaces",
            "/tmpfoo/x",
        ] {
            assert!(JobPath::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Allowed::new(&["/etc".into()]).is_err());
        assert!(Allowed::new(&["/".into()]).is_err());
        assert!(Allowed::new(&["/proc".into()]).is_err());
        assert!(Allowed::new(&["/dev".into()]).is_err());
        assert!(Allowed::new(&["/tmp/x".into(), "/workspace".into()]).is_ok());
    }

    #[test]
    fn containment_is_by_component_not_by_prefix() {
        let a = allowed(&["/workspace/src"]);
        assert!(a.check("/workspace/src").is_ok());
        assert!(a.check("/workspace/src/deep/x").is_ok());
        assert!(a.check("/workspace/srcx/y").is_err());
        assert!(a.check("/workspace/other").is_err());
        assert!(a.check("/tmp/src").is_err());
        assert!(a.check("src/x").is_ok(), "relative to /workspace");
        let message = a.check("/workspace/b").expect_err("outside");
        assert!(
            message.contains("outside allowed_paths (/workspace/src)"),
            "{message}"
        );
    }

    #[test]
    fn children_are_single_canonical_components() {
        let root = JobPath::parse("/workspace").expect("root");
        assert_eq!(
            root.child("a").map(|p| p.to_string()).as_deref(),
            Some("/workspace/a")
        );
        for bad in ["", ".", "..", "a/b", "a\0"] {
            assert!(root.child(bad).is_none(), "{bad:?}");
        }
        let p = JobPath::parse("/workspace/a/b").expect("path");
        assert_eq!(
            p.parent().map(|p| p.to_string()).as_deref(),
            Some("/workspace/a")
        );
        assert_eq!(p.name(), Some("b"));
        assert!(root.parent().is_none());
    }
}
