//! The keyword prefilter of tree rules: every text their leaves need, in one automaton.

use unicode_normalization::UnicodeNormalization;

/// Every text the exact-word and regex leaves of a language's rules need, in one automaton: one
/// pass over a script tells which leaves can match anywhere in it (the keyword prefilter of the
/// tree rules, as secret rules have theirs).
#[derive(Debug)]
pub struct LiteralIndex {
    automaton: Option<aho_corasick::AhoCorasick>,
    patterns: usize,
    /// Per slot, the automaton's pattern ids of that leaf's texts.
    by_slot: Vec<Vec<usize>>,
}

impl LiteralIndex {
    pub fn new(
        slots: usize,
        leaves: &[(usize, Vec<String>)],
    ) -> Result<Self, aho_corasick::BuildError> {
        let mut texts: Vec<String> = Vec::new();
        let mut by_slot = vec![Vec::new(); slots];
        for (slot, words) in leaves {
            for w in words {
                let id = match texts.iter().position(|t| t == w) {
                    Some(id) => id,
                    None => {
                        texts.push(w.clone());
                        texts.len() - 1
                    }
                };
                if let Some(ids) = by_slot.get_mut(*slot) {
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
                    .build(&texts)?,
            )
        };
        Ok(LiteralIndex {
            automaton,
            patterns: texts.len(),
            by_slot,
        })
    }

    /// Which texts occur in a script (by pattern id), in one pass. Identifiers compare after NFKC,
    /// so a non-ASCII script is searched in its NFKC form.
    pub fn scan(&self, src: &str) -> Vec<bool> {
        let mut found = vec![false; self.patterns];
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
            found[m.pattern().as_usize()] = true;
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
