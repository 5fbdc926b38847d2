//! The keyword prefilter of tree rules: every text their leaves need, in one automaton.

use unicode_normalization::UnicodeNormalization;

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

#[cfg(test)]
mod tests {
    use super::{Leaf, LiteralIndex};

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
}
