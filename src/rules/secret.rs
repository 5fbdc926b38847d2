//! Secret rules: a regex per credential family behind one shared keyword automaton.
//!
//! The automaton runs once over the text; a rule's regex then runs only on the lines that hold one of
//! its keywords, so the cost is one linear scan plus a few short regex matches.
//!
//! Past 500 lines with its tests: loading, the keyword automaton and the candidate checks
//! (entropy, filler, allow-lists) are one pipeline.

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, AhoCorasickKind, MatchKind};
use regex::Regex;
use rustc_hash::FxHashMap;
use serde::Deserialize;

use super::{RuleError, RuleMeta};
use crate::domain::verdict::Severity;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSecretRule {
    id: String,
    message: String,
    #[serde(default)]
    severity: Option<Severity>,
    keywords: Vec<String>,
    regex: String,
    #[serde(default)]
    secret_group: Option<usize>,
    #[serde(default)]
    entropy: Option<f64>,
    #[serde(default)]
    min_length: Option<usize>,
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    allow_match: Vec<String>,
    #[serde(default)]
    note: Option<String>,
    #[serde(default)]
    specificity: Specificity,
    /// Lines after the keyword's that the regex also sees (a prompt on one line, the answer on
    /// the next).
    #[serde(default)]
    lines_after: usize,
}

/// How a rule recognises a secret. Where matches overlap, the most specific one is reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Specificity {
    /// By a variable name (`password = "…"`).
    Generic,
    /// By where it appears (a curl header, the userinfo of a URL).
    Context,
    /// By the token's own format (a `ghp_` prefix, a PEM header).
    #[default]
    Format,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGlobal {
    #[serde(default)]
    allow: Vec<String>,
}

#[derive(Debug)]
pub struct SecretRule {
    pub meta: RuleMeta,
    keywords: Vec<String>,
    regex: Regex,
    group: usize,
    entropy: Option<f64>,
    min_length: usize,
    allow: Vec<Regex>,
    /// Tried against the whole match (name, operator and value): a name that holds no secret.
    allow_match: Vec<Regex>,
    specificity: Specificity,
    lines_after: usize,
}

/// One secret found in a text: byte range of the secret itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretMatch {
    pub rule: usize,
    pub start: usize,
    pub end: usize,
}

/// All secret rules, compiled, with the shared keyword automaton.
#[derive(Debug)]
pub struct SecretRules {
    pub rules: Vec<SecretRule>,
    keywords: AhoCorasick,
    /// For each automaton pattern, the rules that listed that keyword.
    keyword_rules: Vec<Vec<usize>>,
    global_allow: Vec<Regex>,
}

/// Compiled secret regexes by pattern text: many rules share their `allow_match` lists, and a
/// `Regex` clone shares its automaton.
#[derive(Debug, Default)]
pub(super) struct RegexCache(FxHashMap<String, Regex>);

impl RegexCache {
    fn compile(&mut self, file: &str, what: &str, pattern: &str) -> Result<Regex, RuleError> {
        if let Some(re) = self.0.get(pattern) {
            return Ok(re.clone());
        }
        let re = Regex::new(&ascii_word_classes(pattern))
            .map_err(|e| RuleError::new(file, format!("{what}: {e}")))?;
        self.0.insert(pattern.to_string(), re.clone());
        Ok(re)
    }
}

/// The pattern with `\w`/`\W` as ASCII classes. Tokens and the names they are assigned to are
/// ASCII, and a Unicode `\w` under a counted repetition (`[\w.-]{0,30}`) compiles to about 1 MB
/// of automaton per rule: with ~300 rules that was 300 MB of resident memory and seconds of
/// start-up for no match a token can make.
fn ascii_word_classes(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut class_depth = 0usize;
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('w') if class_depth > 0 => out.push_str("[:word:]"),
                Some('w') => out.push_str("[[:word:]]"),
                Some('W') if class_depth > 0 => out.push_str("[:^word:]"),
                Some('W') => out.push_str("[^[:word:]]"),
                Some(n) => {
                    out.push('\\');
                    out.push(n);
                }
                None => out.push('\\'),
            },
            '[' => {
                class_depth += 1;
                out.push(c);
                // `[^]…]` and `[]…]`: a leading `]` is a literal
                if chars.peek() == Some(&'^') {
                    out.push('^');
                    chars.next();
                }
                if chars.peek() == Some(&']') {
                    out.push(']');
                    chars.next();
                }
            }
            ']' if class_depth > 0 => {
                class_depth -= 1;
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}

pub(super) fn parse_rule(
    file: &str,
    text: &str,
    cache: &mut RegexCache,
) -> Result<SecretRule, RuleError> {
    let raw: RawSecretRule =
        serde_norway::from_str(text).map_err(|e| RuleError::new(file, e.to_string()))?;
    if raw.keywords.is_empty() || raw.keywords.iter().any(|k| k.trim().is_empty()) {
        return Err(RuleError::new(
            file,
            "`keywords` must list at least one non-empty keyword",
        ));
    }
    let regex = cache.compile(file, "regex", &raw.regex)?;
    let groups = regex.captures_len() - 1;
    let group = raw.secret_group.unwrap_or(usize::from(groups > 0));
    if group > groups {
        return Err(RuleError::new(
            file,
            format!("secret_group {group} but the regex has {groups} groups"),
        ));
    }
    let allow = raw
        .allow
        .iter()
        .map(|a| cache.compile(file, "allow", a))
        .collect::<Result<_, _>>()?;
    let allow_match = raw
        .allow_match
        .iter()
        .map(|a| cache.compile(file, "allow_match", a))
        .collect::<Result<_, _>>()?;
    Ok(SecretRule {
        meta: RuleMeta {
            id: raw.id,
            severity: raw.severity.unwrap_or(Severity::Block),
            message: raw.message,
            note: raw.note,
        },
        keywords: raw
            .keywords
            .iter()
            .map(|k| k.to_ascii_lowercase())
            .collect(),
        regex,
        group,
        entropy: raw.entropy,
        min_length: raw.min_length.unwrap_or(1),
        allow,
        allow_match,
        specificity: raw.specificity,
        lines_after: raw.lines_after.min(MAX_LINES_AFTER),
    })
}

pub(super) fn parse_global(
    file: &str,
    text: &str,
    cache: &mut RegexCache,
) -> Result<Vec<Regex>, RuleError> {
    let raw: RawGlobal =
        serde_norway::from_str(text).map_err(|e| RuleError::new(file, e.to_string()))?;
    raw.allow
        .iter()
        .map(|a| cache.compile(file, "allow", a))
        .collect()
}

impl SecretRules {
    pub(super) fn new(rules: Vec<SecretRule>, global_allow: Vec<Regex>) -> Result<Self, RuleError> {
        let mut patterns: Vec<String> = Vec::new();
        let mut keyword_rules: Vec<Vec<usize>> = Vec::new();
        for (idx, rule) in rules.iter().enumerate() {
            for kw in &rule.keywords {
                match patterns.iter().position(|p| p == kw) {
                    Some(at) => keyword_rules[at].push(idx),
                    None => {
                        patterns.push(kw.clone());
                        keyword_rules.push(vec![idx]);
                    }
                }
            }
        }
        // A DFA: overlapping search over every script, with ~150 short patterns, is its hot path.
        let keywords = AhoCorasickBuilder::new()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::Standard)
            .kind(Some(AhoCorasickKind::DFA))
            .build(&patterns)
            .map_err(|e| RuleError::new("patterns/secrets", e.to_string()))?;
        Ok(SecretRules {
            rules,
            keywords,
            keyword_rules,
            global_allow,
        })
    }

    /// Every secret in `text`, in order of position.
    pub fn scan(&self, text: &str) -> Vec<SecretMatch> {
        // Hits arrive in text order, so "already scanned this line" is the last line per rule.
        let mut last_line = vec![usize::MAX; self.rules.len()];
        let mut found = Vec::new();
        // The line of the last hit: hits arrive in text order, and a long line can hold a hit at
        // every byte (`aaaa…` against a keyword such as `aaa`), so its bounds are found once.
        let mut line = (0, 0);
        for hit in self.keywords.find_overlapping_iter(text) {
            if hit.start() >= line.1 || line == (0, 0) {
                line = line_bounds(text, hit.start());
            }
            let (line_start, line_end) = line;
            for &rule in &self.keyword_rules[hit.pattern().as_usize()] {
                if last_line[rule] != line_start {
                    last_line[rule] = line_start;
                    let end = lines_on(text, line_end, self.rules[rule].lines_after);
                    self.scan_line(rule, text, line_start, end, &mut found);
                }
            }
        }
        self.prefer_specific(found)
    }

    /// One finding per secret: where matches overlap, the most specific rule's is kept.
    fn prefer_specific(&self, mut found: Vec<SecretMatch>) -> Vec<SecretMatch> {
        found.sort_by_key(|m| {
            (
                std::cmp::Reverse(self.rules[m.rule].specificity),
                m.start,
                m.rule,
            )
        });
        let mut kept: Vec<SecretMatch> = Vec::with_capacity(found.len());
        for m in found {
            if !kept.iter().any(|k| k.start < m.end && m.start < k.end) {
                kept.push(m);
            }
        }
        kept.sort_by_key(|m| (m.start, m.rule));
        kept
    }

    fn scan_line(
        &self,
        idx: usize,
        text: &str,
        line_start: usize,
        line_end: usize,
        out: &mut Vec<SecretMatch>,
    ) {
        let rule = &self.rules[idx];
        let line = &text[line_start..line_end];
        // Most keyword lines hold no secret; a match test is much cheaper than a capture search.
        if !rule.regex.is_match(line) {
            return;
        }
        for caps in rule.regex.captures_iter(line) {
            let Some(secret) = caps.get(rule.group) else {
                continue;
            };
            let whole = caps.get(0).map_or("", |m| m.as_str());
            if self.is_real(rule, secret.as_str())
                && !rule.allow_match.iter().any(|a| a.is_match(whole))
            {
                out.push(SecretMatch {
                    rule: idx,
                    start: line_start + secret.start(),
                    end: line_start + secret.end(),
                });
            }
        }
    }

    fn is_real(&self, rule: &SecretRule, secret: &str) -> bool {
        if secret.chars().count() < rule.min_length {
            return false;
        }
        if let Some(min) = rule.entropy
            && shannon_entropy(secret) < min
        {
            return false;
        }
        if mostly_filler(secret) {
            return false;
        }
        !rule
            .allow
            .iter()
            .chain(&self.global_allow)
            .any(|a| a.is_match(secret))
    }
}

/// A placeholder built from keyboard or counting runs (`sk-1234567890abcdef`,
/// `ghp_0123456789abcdefghij…`, `qwerty123456`): it has runs of six or more consecutive
/// characters (`123456`, `abcdef`) or keyboard rows, and what is left outside them is under 12
/// characters or under half the secret. A real token that merely contains a run (a Telegram bot id `712345678:AA…` followed
/// by 35 random characters) is not filler.
pub fn mostly_filler(secret: &str) -> bool {
    let chars: Vec<char> = secret.chars().map(|c| c.to_ascii_lowercase()).collect();
    let mut filler = vec![false; chars.len()];
    let mut start = 0;
    for i in 1..=chars.len() {
        let continues = i < chars.len()
            && chars[i].is_ascii_alphanumeric()
            && chars[i - 1].is_ascii_alphanumeric()
            && chars[i] as u32 == chars[i - 1] as u32 + 1;
        if !continues {
            if i - start >= 6 {
                filler[start..i].iter_mut().for_each(|f| *f = true);
            }
            start = i;
        }
    }
    let lower: String = chars.iter().collect();
    for row in ["qwerty", "asdfgh", "zxcvbn"] {
        for (at, _) in lower.match_indices(row) {
            let first = lower[..at].chars().count();
            filler[first..first + row.len()]
                .iter_mut()
                .for_each(|f| *f = true);
        }
    }
    let left = filler.iter().filter(|f| !**f).count();
    left < chars.len() && (left < 12 || left * 2 < chars.len())
}

/// At most this many lines after the keyword's are searched (`lines_after`).
const MAX_LINES_AFTER: usize = 3;

/// The end of the `n`-th logical line after the one ending at `end`.
fn lines_on(text: &str, mut end: usize, n: usize) -> usize {
    for _ in 0..n {
        if end >= text.len() {
            break;
        }
        end = line_bounds(text, end + 1).1;
    }
    end
}

/// The logical line around `at`: physical lines joined by a backslash before the newline (a
/// command split over lines, `ldapsearch … \⏎ -w 'pw'`) are one.
fn line_bounds(text: &str, at: usize) -> (usize, usize) {
    let b = text.as_bytes();
    let mut start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    while start >= 2 && b[start - 2] == b'\\' {
        start = text[..start - 1].rfind('\n').map_or(0, |i| i + 1);
    }
    let mut end = text[at..].find('\n').map_or(text.len(), |i| at + i);
    while end < b.len() && end > 0 && b[end - 1] == b'\\' {
        end = text[end + 1..]
            .find('\n')
            .map_or(text.len(), |i| end + 1 + i);
    }
    (start, end)
}

/// Shannon entropy in bits per character.
pub fn shannon_entropy(s: &str) -> f64 {
    let mut counts: Vec<(char, u32)> = Vec::new();
    let mut total = 0u32;
    for c in s.chars() {
        total += 1;
        match counts.iter_mut().find(|(k, _)| *k == c) {
            Some((_, n)) => *n += 1,
            None => counts.push((c, 1)),
        }
    }
    if total == 0 {
        return 0.0;
    }
    let total = f64::from(total);
    counts
        .iter()
        .map(|&(_, n)| {
            let p = f64::from(n) / total;
            -p * p.log2()
        })
        .sum()
}

/// The form of a secret that may be shown: its first characters, then `***`.
pub fn redact(secret: &str) -> String {
    let keep = if secret.chars().count() >= 12 { 4 } else { 2 };
    let prefix: String = secret.chars().take(keep).collect();
    format!("{prefix}***")
}

#[cfg(test)]
mod tests {

    #[test]
    fn counting_runs_make_a_placeholder_only_when_they_are_most_of_it() {
        for filler in [
            "sk-1234567890abcdef",
            "ghp_0123456789abcdefghij0123456789abcd",
            "qwerty123456",
            "AKIA1234567890ABCDEF",
        ] {
            assert!(super::mostly_filler(filler), "{filler}");
        }
        for real in [
            "7312345678:AAHf3kQz9xLmN2pRtVwYb4cD8eGhJkLqPsU",
            "ghp_Xk9mPq2vL7wRt5yZsYh8NbVc4JuQe3Df6Gh1",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzKEY9",
        ] {
            assert!(!super::mostly_filler(real), "{real}");
        }
    }
    use super::*;

    #[test]
    fn entropy_of_uniform_and_repeated_strings() {
        assert!((shannon_entropy("abcd") - 2.0).abs() < 1e-9);
        assert_eq!(shannon_entropy("aaaa"), 0.0);
        assert_eq!(shannon_entropy(""), 0.0);
    }

    #[test]
    fn redaction_never_shows_more_than_four_characters() {
        assert_eq!(redact("ghp_abcdefghijklmnop"), "ghp_***");
        assert_eq!(redact("short"), "sh***");
    }

    fn rules(yaml: &str) -> SecretRules {
        let rule = parse_rule("t.yml", yaml, &mut RegexCache::default()).expect("rule compiles");
        SecretRules::new(vec![rule], vec![]).expect("automaton builds")
    }

    #[test]
    fn regex_runs_only_on_lines_with_a_keyword() {
        let r = rules("id: t\nmessage: m\nkeywords: [tok_]\nregex: '(tok_[a-z]{4})'\n");
        let text = "a = 1\nb = 'tok_abcd'\nTOK_ = 'zzzz'\n";
        let found = r.scan(text);
        assert_eq!(found.len(), 1);
        assert_eq!(&text[found[0].start..found[0].end], "tok_abcd");
    }

    #[test]
    fn lines_after_the_keywords_are_seen_only_when_asked_for() {
        let rule = "id: t\nmessage: m\nkeywords: [ask]\nregex: 'ask\\n(\\w+)'\n";
        let two = rules(&format!("{rule}lines_after: 1\n"));
        assert_eq!(
            two.scan("x\nask\nQv7mLz2pR9\nz").len(),
            1,
            "the next line is seen"
        );
        assert!(rules(rule).scan("ask\nQv7mLz2pR9").is_empty());
    }

    #[test]
    fn entropy_length_and_allow_filter_candidates() {
        let r = rules(
            "id: t\nmessage: m\nkeywords: [k=]\nregex: 'k=(\\w+)'\nentropy: 2.5\nmin_length: 6\nallow: ['^example']\n",
        );
        assert!(r.scan("k=aaaaaaaa").is_empty(), "low entropy");
        assert!(r.scan("k=abc").is_empty(), "too short");
        assert!(r.scan("k=exampleXyz9").is_empty(), "allowed");
        assert_eq!(r.scan("k=q8Zr2LmX").len(), 1);
    }

    #[test]
    fn allow_match_drops_matches_by_their_whole_text() {
        let r = rules(
            "id: t\nmessage: m\nkeywords: [key]\nregex: '(\\w*key) = (\\w+)'\nsecret_group: 2\nallow_match: ['^public_key']\n",
        );
        assert!(r.scan("public_key = q8Zr2LmX").is_empty());
        assert_eq!(r.scan("signing_key = q8Zr2LmX").len(), 1);
    }

    #[test]
    fn more_specific_rules_win_where_matches_overlap() {
        let specific = parse_rule(
            "a.yml",
            "id: gh\nmessage: m\nkeywords: [ghp_]\nregex: '(ghp_\\w{8})'\n",
            &mut RegexCache::default(),
        )
        .expect("rule");
        let generic = parse_rule("b.yml", "id: generic\nmessage: m\nkeywords: [token]\nregex: 'token = \"(\\w+)\"'\nspecificity: generic\n", &mut RegexCache::default()).expect("rule");
        let rules = SecretRules::new(vec![generic, specific], vec![]).expect("automaton");
        let found = rules.scan("token = \"ghp_Xk9mPq2v\"\ntoken = \"zq8Xk2Lm\"\n");
        let ids: Vec<&str> = found
            .iter()
            .map(|m| rules.rules[m.rule].meta.id.as_str())
            .collect();
        assert_eq!(ids, ["gh", "generic"]);
    }

    #[test]
    fn bad_rules_name_their_problem() {
        let err = parse_rule(
            "bad.yml",
            "id: t\nmessage: m\nkeywords: []\nregex: 'x'\n",
            &mut RegexCache::default(),
        )
        .expect_err("empty keywords");
        assert!(err.to_string().contains("bad.yml"));
        let err = parse_rule(
            "bad.yml",
            "id: t\nmessage: m\nkeywords: [x]\nregex: '(?=x)'\n",
            &mut RegexCache::default(),
        )
        .expect_err("look-around is not RE2");
        assert!(err.to_string().contains("regex"));
    }

    #[test]
    fn word_classes_become_ascii_inside_and_outside_brackets() {
        assert_eq!(ascii_word_classes(r"\w+"), "[[:word:]]+");
        assert_eq!(ascii_word_classes(r"[\w.-]{0,30}"), "[[:word:].-]{0,30}");
        assert_eq!(ascii_word_classes(r"[^\W\d]"), "[^[:^word:]\\d]");
        assert_eq!(ascii_word_classes(r"[]\w]\\w"), "[][:word:]]\\\\w");
        let re = Regex::new(&ascii_word_classes(r"(?i)key[\w.-]{0,3}=(\w+)")).expect("compiles");
        assert_eq!(&re.captures("API_KEY.x=abc_9").expect("match")[1], "abc_9");
        assert!(!re.is_match("keyé=abc"), "ASCII names only");
    }
}
