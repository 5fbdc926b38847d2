//! Sets of dotted callee/command names with `*` wildcards, and the texts a script naming one holds.

use regex::Regex;

/// Words of the Python constructs that compute a name from strings (see [`NameSet::texts`]).
const COMPUTED_NAMES: &[&str] = &[
    "getattr",
    "__import__",
    "import_module",
    "globals",
    "locals",
    "vars",
    "__dict__",
    "modules",
    "attrgetter",
    "methodcaller",
    "builtins",
];

/// A set of dotted names with `*` wildcards (`os.exec*`, `subprocess.*`), matched whole. Plain
/// names are a hash lookup, a pattern whose one `*` ends it a prefix test; only the others
/// (`scapy.*send`) need a regex.
#[derive(Debug)]
pub struct NameSet {
    exact: rustc_hash::FxHashSet<String>,
    /// The text before the `*` of every pattern whose only `*` ends it (`subprocess.*`).
    trailing: Vec<String>,
    /// The other wildcard patterns, as one regex.
    wildcard: Option<Regex>,
    patterns: Vec<String>,
    /// The last dotted segment of every plain name (`os.system` → `system`).
    last_segments: rustc_hash::FxHashSet<String>,
    /// The text before the first `*` of every wildcard pattern (`os.exec*` → `os.exec`).
    wild_prefixes: Vec<String>,
}

impl NameSet {
    pub fn new(names: &[String]) -> Result<Self, NameSetError> {
        if names.is_empty() {
            return Err(NameSetError::Empty);
        }
        let (wild, exact): (Vec<&String>, Vec<&String>) =
            names.iter().partition(|n| n.contains('*'));
        let trailing_only = |n: &str| n.ends_with('*') && n.matches('*').count() == 1;
        let alternatives: Vec<String> = wild
            .iter()
            .filter(|n| !trailing_only(n))
            .map(|n| regex::escape(n).replace(r"\*", r"[\w.\-]*"))
            .collect();
        let wildcard = if alternatives.is_empty() {
            None
        } else {
            Some(Regex::new(&format!("^(?:{})$", alternatives.join("|")))?)
        };
        Ok(NameSet {
            last_segments: exact
                .iter()
                .map(|n| n.rsplit('.').next().unwrap_or(n).to_string())
                .collect(),
            wild_prefixes: wild
                .iter()
                .map(|n| n.split('*').next().unwrap_or("").to_string())
                .collect(),
            trailing: wild
                .iter()
                .filter(|n| trailing_only(n))
                .map(|n| n.trim_end_matches('*').to_string())
                .collect(),
            exact: exact.into_iter().cloned().collect(),
            wildcard,
            patterns: names.to_vec(),
        })
    }

    /// Texts one of which a script naming a member of the set holds: each name's last segment
    /// (or the text before a wildcard), and the words of the ways Python computes a name
    /// (`getattr`, `__import__`, `globals`, …), which may hide it.
    pub fn texts(&self) -> Vec<String> {
        let mut out: Vec<String> = self.last_segments.iter().cloned().collect();
        for p in &self.wild_prefixes {
            let last = p.rsplit('.').next().unwrap_or(p);
            let piece = if last.is_empty() {
                p.trim_end_matches('.').rsplit('.').next().unwrap_or(p)
            } else {
                last
            };
            out.push(piece.to_string());
        }
        out.extend(COMPUTED_NAMES.iter().map(|s| s.to_string()));
        out.retain(|t| !t.is_empty());
        out.sort();
        out.dedup();
        out
    }

    /// A necessary condition for `full` (a dotted name whose last segment is `last`) to be in the
    /// set, without the regex: a plain name with that last segment, or a wildcard with that prefix.
    pub fn may_contain(&self, full: &str, last: &str) -> bool {
        self.last_segments.contains(last)
            || self
                .wild_prefixes
                .iter()
                .any(|p| full.starts_with(p.as_str()))
    }

    /// Whether any of `sorted` (sorted, without repeats) is in the set: the plain names are
    /// looked up from whichever side is smaller, the wildcard patterns tried on every name.
    pub fn any_of_sorted(&self, sorted: &[String]) -> bool {
        let plain = if self.exact.len() * 8 < sorted.len() {
            self.exact.iter().any(|e| sorted.binary_search(e).is_ok())
        } else {
            sorted.iter().any(|n| self.exact.contains(n))
        };
        plain
            || ((!self.trailing.is_empty() || self.wildcard.is_some())
                && sorted.iter().any(|n| self.contains(n)))
    }

    pub fn contains(&self, name: &str) -> bool {
        // (what `*` stands for: word characters, dots and dashes)
        let wild = |rest: &str| {
            rest.chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '_' | '.' | '-'))
        };
        self.exact.contains(name)
            || self
                .trailing
                .iter()
                .any(|p| name.strip_prefix(p.as_str()).is_some_and(wild))
            || (self.wildcard.is_some()
                && self
                    .wild_prefixes
                    .iter()
                    .any(|p| name.starts_with(p.as_str()))
                && self.wildcard.as_ref().is_some_and(|w| w.is_match(name)))
    }

    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }
}

/// Why a [`NameSet`] cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum NameSetError {
    #[error("needs at least one name")]
    Empty,
    #[error(transparent)]
    Regex(#[from] regex::Error),
}

#[cfg(test)]
mod tests {
    use super::NameSet;

    fn set(names: &[&str]) -> NameSet {
        NameSet::new(&names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).expect("valid names")
    }

    #[test]
    fn wildcards_match_whole_names_with_or_without_a_regex() {
        let s = set(&["os.system", "subprocess.*", "os.exec*", "scapy.*send"]);
        assert!(s.contains("os.system"));
        assert!(s.contains("subprocess.run"));
        assert!(s.contains("subprocess.Popen.communicate"));
        assert!(s.contains("os.execvp"));
        assert!(s.contains("os.exec"));
        assert!(s.contains("scapy.all.send"));
        assert!(!s.contains("os.systems"));
        assert!(!s.contains("subprocessx.run"));
        assert!(!s.contains("subprocess.run(x)"));
        assert!(!s.contains("scapy.all.sniff"));
        assert!(!set(&["requests.*"]).contains("requests"));
    }

    #[test]
    fn any_of_a_sorted_list_agrees_with_contains_from_either_side() {
        let names = |ns: &[&str]| {
            let mut v: Vec<String> = ns.iter().map(|n| n.to_string()).collect();
            v.sort();
            v
        };
        let few = set(&["os.system", "scapy.*send"]);
        let many: Vec<String> = (0..40).map(|i| format!("helper{i}")).collect();
        let mut with = many.clone();
        with.push("os.system".into());
        with.sort();
        // (few plain names against many: looked up by binary search)
        assert!(few.any_of_sorted(&with));
        assert!(!few.any_of_sorted(&many));
        assert!(few.any_of_sorted(&names(&["print", "scapy.all.send"])));
        assert!(!few.any_of_sorted(&names(&["print", "scapy.all.sniff"])));
        assert!(set(&["subprocess.*"]).any_of_sorted(&names(&["subprocess.run"])));
        assert!(!few.any_of_sorted(&[]));
    }
}
