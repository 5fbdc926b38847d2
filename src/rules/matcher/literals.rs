//! The keyword prefilter of tree rules: the texts a regex needs (extracted once, at load), and every
//! text all leaves need in one automaton.

use unicode_normalization::UnicodeNormalization;

use super::RequiredLiterals;

/// Every text the exact-word and regex leaves of a language's rules need, in one automaton: one
/// pass over a script tells which leaves can match anywhere in it (the keyword prefilter of the
/// tree rules, as secret rules have theirs).
///
/// The automaton ignores ASCII case, for the texts of case-insensitive regexes; a match of a
/// case-sensitive text is confirmed byte for byte.
#[derive(Debug)]
pub struct LiteralIndex {
    automaton: Option<aho_corasick::AhoCorasick>,
    /// The texts, by pattern id.
    texts: Vec<String>,
    /// Per pattern id: whether it matches without regard to case.
    caseless: Vec<bool>,
    /// Per slot, the automaton's pattern ids of that leaf's texts.
    by_slot: Vec<Vec<usize>>,
}

/// The texts a leaf (slot) of a matcher needs, one of which a script must hold for it to match.
#[derive(Debug, Clone)]
pub struct Leaf {
    pub slot: usize,
    pub texts: Vec<String>,
    /// The texts are in lower case and match in any ASCII case.
    pub caseless: bool,
}

impl LiteralIndex {
    pub fn new(slots: usize, leaves: &[Leaf]) -> Result<Self, aho_corasick::BuildError> {
        let mut texts: Vec<(String, bool)> = Vec::new();
        let mut by_slot = vec![Vec::new(); slots];
        for leaf in leaves {
            for w in &leaf.texts {
                let id = match texts
                    .iter()
                    .position(|(t, c)| t == w && *c == leaf.caseless)
                {
                    Some(id) => id,
                    None => {
                        texts.push((w.clone(), leaf.caseless));
                        texts.len() - 1
                    }
                };
                if let Some(ids) = by_slot.get_mut(leaf.slot) {
                    ids.push(id);
                }
            }
        }
        let automaton = if texts.is_empty() {
            None
        } else {
            Some(
                aho_corasick::AhoCorasickBuilder::new()
                    .kind(Some(aho_corasick::AhoCorasickKind::DFA))
                    .ascii_case_insensitive(true)
                    .build(texts.iter().map(|(t, _)| t))?,
            )
        };
        Ok(LiteralIndex {
            automaton,
            caseless: texts.iter().map(|(_, c)| *c).collect(),
            by_slot,
            texts: texts.into_iter().map(|(t, _)| t).collect(),
        })
    }

    /// Which texts occur in a script (by pattern id), in one pass. Identifiers compare after NFKC,
    /// so a non-ASCII script is searched in its NFKC form.
    pub fn scan(&self, src: &str) -> Vec<bool> {
        let mut found = vec![false; self.texts.len()];
        let Some(ac) = &self.automaton else {
            return found;
        };
        let normalized;
        let haystack = if src.is_ascii() {
            src
        } else {
            normalized = normalized_runs(src);
            normalized.as_str()
        };
        for m in ac.find_overlapping_iter(haystack) {
            let id = m.pattern().as_usize();
            if !found[id] && (self.caseless[id] || haystack[m.range()] == self.texts[id]) {
                found[id] = true;
            }
        }
        found
    }

    /// Whether the script (as [`LiteralIndex::scan`] found it) holds a text the leaf `slot` needs.
    pub fn slot_present(&self, present: &[bool], slot: usize) -> bool {
        self.by_slot
            .get(slot)
            .is_some_and(|ids| ids.iter().any(|&p| present.get(p).copied().unwrap_or(true)))
    }
}
/// NFKC of the non-ASCII runs only, ASCII copied as is: a superset of the ASCII words whole-text
/// NFKC produces (composition only ever turns ASCII into non-ASCII), at a fraction of the cost.
fn normalized_runs(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while !rest.is_empty() {
        let ascii = rest
            .bytes()
            .position(|b| !b.is_ascii())
            .unwrap_or(rest.len());
        out.push_str(&rest[..ascii]);
        rest = &rest[ascii..];
        let run = rest.find(|c: char| c.is_ascii()).unwrap_or(rest.len());
        out.extend(rest[..run].nfkc());
        rest = &rest[run..];
    }
    out
}

/// Literals one of which every match of `pattern` contains (its prefixes, when they form a small
/// finite set of non-empty strings); `None` when there is no such set.
///
/// A case-insensitive pattern (`(?i)drop`) would list every spelling (`DROP`, `DROp`, …) and soon
/// exceed the limit: its letters are folded to lower case first, and the literals it yields are
/// then searched without regard to ASCII case ([`RequiredLiterals::caseless`]).
pub fn required_literals(pattern: &str) -> Option<RequiredLiterals> {
    use regex_syntax::hir::literal::Extractor;
    let hir = regex_syntax::Parser::new().parse(pattern).ok()?;
    let caseless = has_case_flag(pattern);
    let hir = if caseless { fold_case(&hir) } else { hir };
    let mut extractor = Extractor::new();
    extractor.limit_total(64);
    let seq = extractor.extract(&hir);
    let prefixes: Option<Vec<Vec<u8>>> = seq
        .literals()
        .filter(|ls| !ls.is_empty() && ls.iter().all(|l| !l.as_bytes().is_empty()))
        .map(|ls| ls.iter().map(|l| l.as_bytes().to_vec()).collect());
    // Prefixes, unless a literal inside the pattern is more telling (`^\s*-?\s*privileged:` has
    // no prefix but needs `privileged`).
    let literals = match (prefixes, required_factors(&hir)) {
        (Some(p), Some(f)) if shortest(&f) > shortest(&p) => f,
        (Some(p), _) => p,
        (None, f) => f?,
    };
    let mut texts: Vec<String> = literals
        .into_iter()
        .map(|l| String::from_utf8(l).ok())
        .collect::<Option<_>>()?;
    if caseless {
        texts.sort();
        texts.dedup();
    }
    Some(RequiredLiterals { texts, caseless })
}

/// Texts one of which every match of `hir` contains somewhere (not only at its start): a
/// literal's, each alternative's, and of a sequence the most telling of its parts'. At most 64.
fn required_factors(hir: &regex_syntax::hir::Hir) -> Option<Vec<Vec<u8>>> {
    use regex_syntax::hir::{HirKind, Literal};
    const MAX: usize = 64;
    match hir.kind() {
        HirKind::Literal(Literal(bytes)) => Some(vec![bytes.to_vec()]),
        HirKind::Capture(c) => required_factors(&c.sub),
        HirKind::Repetition(r) if r.min >= 1 => required_factors(&r.sub),
        HirKind::Alternation(subs) => {
            let mut out = Vec::new();
            for sub in subs {
                out.extend(required_factors(sub)?);
                if out.len() > MAX {
                    return None;
                }
            }
            out.sort();
            out.dedup();
            Some(out)
        }
        HirKind::Concat(subs) => subs
            .iter()
            .filter_map(required_factors)
            .max_by_key(|f| shortest(f)),
        _ => None,
    }
}

/// The length of the shortest text of a set (what a search for any of them can rule out).
fn shortest(texts: &[Vec<u8>]) -> usize {
    texts.iter().map(Vec::len).min().unwrap_or(0)
}

/// Whether a pattern turns case-insensitive matching on anywhere (`(?i)`, `(?si:…)`).
fn has_case_flag(pattern: &str) -> bool {
    pattern.match_indices("(?").any(|(at, _)| {
        pattern[at + 2..]
            .chars()
            .take_while(|c| c.is_ascii_alphabetic() || *c == '-')
            .take_while(|c| *c != '-')
            .any(|c| c == 'i')
    })
}

/// `hir` with every class that stands for one ASCII letter in either case (`[Dd]`, what `(?i)d`
/// compiles to) replaced by the lower-case letter, and literals in lower case: its literals,
/// compared without regard to ASCII case, are needed by every match of `hir`.
fn fold_case(hir: &regex_syntax::hir::Hir) -> regex_syntax::hir::Hir {
    use regex_syntax::hir::{Class, Hir, HirKind, Literal};
    match hir.kind() {
        HirKind::Literal(Literal(bytes)) => Hir::literal(bytes.to_ascii_lowercase()),
        HirKind::Class(class) => {
            let letter = match class {
                Class::Unicode(c) => {
                    case_pair(c.iter().map(|r| (u32::from(r.start()), u32::from(r.end()))))
                }
                Class::Bytes(c) => {
                    case_pair(c.iter().map(|r| (u32::from(r.start()), u32::from(r.end()))))
                }
            };
            match letter {
                Some(b) => Hir::literal([b]),
                None => hir.clone(),
            }
        }
        HirKind::Repetition(r) => {
            let mut r = r.clone();
            r.sub = Box::new(fold_case(&r.sub));
            Hir::repetition(r)
        }
        HirKind::Capture(c) => {
            let mut c = c.clone();
            c.sub = Box::new(fold_case(&c.sub));
            Hir::capture(c)
        }
        HirKind::Concat(subs) => Hir::concat(subs.iter().map(fold_case).collect()),
        HirKind::Alternation(subs) => Hir::alternation(subs.iter().map(fold_case).collect()),
        HirKind::Empty | HirKind::Look(_) => hir.clone(),
    }
}

/// The lower-case letter a class of ranges stands for when it is exactly `[Xx]`, or that with the
/// one non-ASCII letter that folds to it (`ſ` for `s`, the Kelvin sign for `k`): the literal scan
/// searches the NFKC form of non-ASCII text, which turns those two into `s` and `K`.
fn case_pair(ranges: impl Iterator<Item = (u32, u32)>) -> Option<u8> {
    let ranges: Vec<(u32, u32)> = ranges
        .filter(|&r| r != (0x17F, 0x17F) && r != (0x212A, 0x212A))
        .collect();
    let [upper, lower] = ranges.as_slice() else {
        return None;
    };
    let single = |&(a, b): &(u32, u32)| (a == b).then_some(a).and_then(|c| u8::try_from(c).ok());
    let (u, l) = (single(upper)?, single(lower)?);
    (u.is_ascii_uppercase() && l == u.to_ascii_lowercase()).then_some(l)
}

#[cfg(test)]
mod tests {
    use super::{Leaf, LiteralIndex, required_literals};

    #[test]
    fn caseless_texts_match_any_case_and_others_only_their_own() {
        let leaves = [
            Leaf {
                slot: 0,
                texts: vec!["stratum+tcp".into()],
                caseless: true,
            },
            Leaf {
                slot: 1,
                texts: vec!["system".into()],
                caseless: false,
            },
        ];
        let index = LiteralIndex::new(2, &leaves).expect("index");
        let present = index.scan("URL = 'STRATUM+TCP://x'; System.exit()");
        assert!(index.slot_present(&present, 0));
        assert!(!index.slot_present(&present, 1));
        let present = index.scan("os.system('ls')");
        assert!(!index.slot_present(&present, 0));
        assert!(index.slot_present(&present, 1));
    }

    fn texts(pattern: &str) -> Option<(Vec<String>, bool)> {
        required_literals(pattern).map(|l| (l.texts, l.caseless))
    }

    #[test]
    fn case_insensitive_patterns_yield_lower_case_literals() {
        let (words, caseless) = texts(r"(?i)stratum\+(tcp|ssl)://").expect("literals");
        assert!(caseless);
        assert_eq!(words, ["stratum+ssl://", "stratum+tcp://"]);
        // a flag group turns it on for part of the pattern only: still folded (a superset)
        let (words, caseless) = texts(r"(?i:drop)\s+index").expect("literals");
        assert!(caseless);
        assert_eq!(words, ["index"]);
    }

    #[test]
    fn literals_inside_a_pattern_count_when_its_start_has_none() {
        let (words, caseless) =
            texts(r"(?i)(^|\n)\s*-?\s*(privileged|hostPID):\s*true").expect("literals");
        assert!(caseless);
        assert_eq!(words, ["hostpid", "privileged"]);
        // the longer of a prefix and an inner literal
        let (words, _) = texts(r"^\d*<[^<]+\.sock").expect("literals");
        assert_eq!(words, [".sock"]);
        // an optional part is not required
        assert_eq!(texts(r"^\s*(sudo)?\s*$"), None);
    }

    #[test]
    fn case_sensitive_patterns_keep_their_case() {
        let (words, caseless) = texts(r"AKIA[0-9A-Z]{16}").expect("literals");
        assert!(!caseless);
        assert_eq!(words, ["AKIA"]);
        assert!(!super::has_case_flag(r"(?s)a.b(?-i)c"));
        // classes that are not one letter in two cases are kept as classes
        let (words, _) = texts(r"(?i)[a-c]x").expect("literals");
        assert!(words.len() >= 3, "{words:?}");
    }
}
