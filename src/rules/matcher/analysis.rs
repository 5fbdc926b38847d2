//! What a compiled matcher tells before any script: its cost, leaf slots, needed texts, names and
//! node kinds, which order conditions and index rules.

use super::{Leaf, Matcher, TextRegex};

impl Matcher {
    /// [`Matcher::possible`] from the script's text alone, before the walk: calls and commands are
    /// assumed to be there. `has(slot)` tells whether a leaf's texts are in the script.
    pub fn lexically_possible(&self, has: &dyn Fn(usize) -> bool) -> bool {
        match self {
            Matcher::Exact(w) => has(w.slot),
            Matcher::Resolves(_, slot) => has(*slot),
            Matcher::Regex(TextRegex {
                literals: Some(_),
                slot,
                ..
            }) => has(*slot),
            Matcher::All(ms) => ms.iter().all(|m| m.lexically_possible(has)),
            Matcher::Any(ms) => ms.iter().any(|m| m.lexically_possible(has)),
            Matcher::Has(rel) | Matcher::Inside(rel) => rel.inner.lexically_possible(has),
            _ => true,
        }
    }

    /// The texts this matcher's leaves need, by slot (see [`super::LiteralIndex`]).
    pub fn collect_literals(&self, out: &mut Vec<Leaf>) {
        match self {
            Matcher::Exact(w) => out.push(Leaf {
                slot: w.slot,
                texts: w.words.clone(),
                caseless: false,
            }),
            Matcher::Resolves(set, slot) => out.push(Leaf {
                slot: *slot,
                texts: set.texts(),
                caseless: false,
            }),
            Matcher::Regex(TextRegex {
                literals: Some(l),
                slot,
                ..
            }) => out.push(Leaf {
                slot: *slot,
                texts: l.texts.clone(),
                caseless: l.caseless,
            }),
            Matcher::Call(spec) => {
                if let Some(a) = &spec.arg {
                    a.inner.collect_literals(out);
                }
                if let Some(m) = spec.keyword.as_ref().and_then(|k| k.value.as_ref()) {
                    m.collect_literals(out);
                }
            }
            Matcher::Command(spec) => {
                if let Some(m) = &spec.arg {
                    m.collect_literals(out);
                }
                if let Some(m) = &spec.last_arg {
                    m.collect_literals(out);
                }
            }
            Matcher::Derived(m) => m.collect_literals(out),
            Matcher::Has(rel) | Matcher::Inside(rel) => rel.inner.collect_literals(out),
            Matcher::Not(m) | Matcher::After(m) => m.collect_literals(out),
            Matcher::All(ms) | Matcher::Any(ms) => ms.iter().for_each(|m| m.collect_literals(out)),
            _ => {}
        }
    }

    /// A rough evaluation cost, so that conjunctions try cheap conditions first and alternatives
    /// the cheap ones first (the order of `all` and `any` items does not change what they match).
    pub fn cost(&self) -> u8 {
        match self {
            Matcher::Kind(_) => 0,
            Matcher::Exact(_) => 1,
            Matcher::Regex(_) => 2,
            Matcher::Call(_) | Matcher::Command(_) => 3,
            Matcher::Folded(_)
            | Matcher::Dynamic(_)
            | Matcher::Plain(_)
            | Matcher::MayBe(_)
            | Matcher::Resolves(..)
            | Matcher::Prefix(_)
            | Matcher::Quoted(_) => 4,
            Matcher::Derived(m) => 8 + m.cost() / 4,
            // only exemptions use it, after what they exempt from: it follows every value of
            // every argument it is asked about
            Matcher::EveryPrefix(_) => 40,
            Matcher::Not(m) => m.cost(),
            Matcher::After(m) => 2 + m.cost(),
            Matcher::Has(rel) | Matcher::Inside(rel) if !rel.stop_by_end => {
                5 + rel.inner.cost() / 4
            }
            Matcher::Has(rel) | Matcher::Inside(rel) => 8 + rel.inner.cost() / 4,
            Matcher::All(ms) | Matcher::Any(ms) => ms.iter().map(Matcher::cost).max().unwrap_or(0),
            // A function whose body does not name it is decided from the text.
            Matcher::Recursive(_) => 6,
        }
    }

    /// Numbers the leaves whose "possible" answer is decided per script (exact words, regexes with
    /// literals, calls, commands), from `*next` on.
    pub fn assign_slots(&mut self, next: &mut usize) {
        let mut take = |slot: &mut usize| {
            *slot = *next;
            *next += 1;
        };
        match self {
            Matcher::Exact(w) => take(&mut w.slot),
            Matcher::Regex(r) => take(&mut r.slot),
            Matcher::Resolves(_, slot) => take(slot),
            Matcher::Call(spec) => {
                take(&mut spec.slot);
                if let Some(a) = &mut spec.arg {
                    a.inner.assign_slots(next);
                }
                if let Some(m) = spec.keyword.as_mut().and_then(|k| k.value.as_mut()) {
                    m.assign_slots(next);
                }
            }
            Matcher::Command(spec) => {
                take(&mut spec.slot);
                if let Some(m) = &mut spec.arg {
                    m.assign_slots(next);
                }
                if let Some(m) = &mut spec.last_arg {
                    m.assign_slots(next);
                }
            }
            Matcher::Derived(m) => m.assign_slots(next),
            Matcher::Has(rel) | Matcher::Inside(rel) => rel.inner.assign_slots(next),
            Matcher::Not(m) | Matcher::After(m) => m.assign_slots(next),
            Matcher::All(ms) | Matcher::Any(ms) => ms.iter_mut().for_each(|m| m.assign_slots(next)),
            _ => {}
        }
    }

    /// Adds every callee/command name pattern this matcher tests to `out`.
    pub fn collect_names(&self, out: &mut Vec<String>) {
        match self {
            Matcher::Call(spec) => {
                out.extend_from_slice(spec.callee.patterns());
                if let Some(a) = &spec.arg {
                    a.inner.collect_names(out);
                }
                if let Some(m) = spec.keyword.as_ref().and_then(|k| k.value.as_ref()) {
                    m.collect_names(out);
                }
            }
            Matcher::Command(spec) => {
                out.extend_from_slice(spec.name.patterns());
                if let Some(m) = &spec.arg {
                    m.collect_names(out);
                }
                if let Some(m) = &spec.last_arg {
                    m.collect_names(out);
                }
            }
            Matcher::Derived(m) => m.collect_names(out),
            Matcher::Has(rel) | Matcher::Inside(rel) => rel.inner.collect_names(out),
            Matcher::Not(m) | Matcher::After(m) => m.collect_names(out),
            Matcher::All(ms) | Matcher::Any(ms) => ms.iter().for_each(|m| m.collect_names(out)),
            _ => {}
        }
    }

    /// When every match requires a call/command with one of these names, the names (patterns);
    /// such rules are indexed by name instead of node kind.
    pub fn name_keys(&self) -> Option<Vec<String>> {
        match self {
            Matcher::Call(spec) => Some(spec.callee.patterns().to_vec()),
            Matcher::Command(spec) => Some(spec.name.patterns().to_vec()),
            Matcher::All(ms) => ms.iter().find_map(Matcher::name_keys),
            Matcher::Any(ms) => {
                let mut all = Vec::new();
                for m in ms {
                    all.extend(m.name_keys()?);
                }
                Some(all)
            }
            _ => None,
        }
    }

    /// The node kinds this matcher can match at all, when that is a finite set (used for indexing).
    pub fn root_kinds(&self) -> Option<Vec<u16>> {
        match self {
            Matcher::Kind(k) => Some(k.clone()),
            Matcher::All(ms) => ms
                .iter()
                .filter_map(Matcher::root_kinds)
                .min_by_key(Vec::len),
            Matcher::Any(ms) => {
                let mut all = Vec::new();
                for m in ms {
                    all.extend(m.root_kinds()?);
                }
                all.sort_unstable();
                all.dedup();
                Some(all)
            }
            _ => None,
        }
    }
}
