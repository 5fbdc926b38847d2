//! Matching compiled globs: one backtrack point per level, no allocation, paths split once.

use super::{Alternative, Class, Comp, Glob, Segment, Tok};

impl Glob {
    /// Whether `input` matches; paths must already be normalised (no `.`, `..` or `//`).
    pub(crate) fn matches(&self, input: &[u8]) -> bool {
        match self.alternatives.first() {
            Some(Alternative::Path { .. }) => self.matches_path(&SplitPath::new(input)),
            _ => self.alternatives.iter().any(|alt| match alt {
                Alternative::Flat(seg) => seg.matches(input),
                Alternative::Path { .. } => false,
            }),
        }
    }

    /// Whether a normalised path, split once for all the globs it is matched against, matches.
    pub(crate) fn matches_path(&self, path: &SplitPath<'_>) -> bool {
        self.alternatives.iter().any(|alt| match alt {
            Alternative::Path {
                absolute,
                required,
                comps,
            } => {
                (!absolute || path.path.first() == Some(&b'/'))
                    && required & !path.components == 0
                    && match path.indexed() {
                        Some(cursor) => match_path(comps, cursor),
                        None => match_path(comps, Components { rest: path.path }),
                    }
            }
            Alternative::Flat(seg) => seg.matches(path.path),
        })
    }
}

/// Components one path holds at most to be split up front; deeper paths are scanned per glob.
const MAX_SPLIT: usize = 40;

/// A path with the bounds of its components found once, on the stack.
#[derive(Debug)]
pub(crate) struct SplitPath<'a> {
    path: &'a [u8],
    bounds: [(u16, u16); MAX_SPLIT],
    /// `None` when the path is too long or too deep to split.
    len: Option<usize>,
    /// The [`component_bit`]s of its components (all bits when not split).
    components: u64,
}

impl<'a> SplitPath<'a> {
    pub(crate) fn new(path: &'a [u8]) -> SplitPath<'a> {
        let mut split = SplitPath {
            path,
            bounds: [(0, 0); MAX_SPLIT],
            len: None,
            components: u64::MAX,
        };
        if path.len() > usize::from(u16::MAX) {
            return split;
        }
        let mut n = 0;
        let mut start = 0;
        let mut components = 0;
        for end in (0..=path.len()).filter(|&i| i == path.len() || path[i] == b'/') {
            if end > start {
                if n == MAX_SPLIT {
                    return split;
                }
                // Both fit: the path is at most u16::MAX bytes long.
                split.bounds[n] = (start as u16, end as u16);
                components |= component_bit(&path[start..end]);
                n += 1;
            }
            start = end + 1;
        }
        split.len = Some(n);
        split.components = components;
        split
    }

    pub(super) fn indexed(&self) -> Option<Indexed<'_, 'a>> {
        self.len.map(|len| Indexed {
            split: self,
            at: 0,
            len,
        })
    }
}

/// One of 64 bits for a path component (FNV-1a): a cheap test that a path cannot hold a literal
/// component (`.ssh` of `**/.ssh/**`), which spares most globs a walk over the path.
pub(super) fn component_bit(component: &[u8]) -> u64 {
    let hash = component.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    1 << (hash % 64)
}

/// Where matching stands in a path's components.
trait Cursor<'a>: Copy {
    fn next(&mut self) -> Option<&'a [u8]>;
    fn is_empty(&self) -> bool;
}

#[derive(Clone, Copy)]
pub(super) struct Indexed<'s, 'a> {
    split: &'s SplitPath<'a>,
    at: usize,
    len: usize,
}

impl<'a> Cursor<'a> for Indexed<'_, 'a> {
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.at == self.len {
            return None;
        }
        let (start, end) = self.split.bounds[self.at];
        self.at += 1;
        self.split.path.get(usize::from(start)..usize::from(end))
    }

    fn is_empty(&self) -> bool {
        self.at == self.len
    }
}

impl Class {
    fn matches(&self, c: char) -> bool {
        self.ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != self.negated
    }
}

impl Segment {
    fn matches(&self, s: &[u8]) -> bool {
        match self {
            Segment::Literal(l) => **l == *s,
            Segment::Prefix(l) => s.starts_with(l),
            Segment::Suffix(l) => s.ends_with(l),
            Segment::Wild(toks) => match_tokens(toks, s),
        }
    }
}

/// The classic one-backtrack-point wildcard match: linear for usual globs, O(pattern × input) at
/// worst (a later star subsumes every earlier one, so only the last needs retrying).
fn match_tokens(toks: &[Tok], s: &[u8]) -> bool {
    let (mut t, mut i) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    loop {
        if let Some(tok) = toks.get(t) {
            match tok {
                Tok::Star if t + 1 == toks.len() => return true,
                Tok::Star => {
                    star = Some((t + 1, i));
                    t += 1;
                    continue;
                }
                Tok::Lit(l) if s[i..].starts_with(l) => {
                    i += l.len();
                    t += 1;
                    continue;
                }
                Tok::One if i < s.len() => {
                    i += char_len(&s[i..]);
                    t += 1;
                    continue;
                }
                Tok::Class(class) if i < s.len() => {
                    let (c, n) = next_char(&s[i..]);
                    if class.matches(c) {
                        i += n;
                        t += 1;
                        continue;
                    }
                }
                _ => {}
            }
        } else if i == s.len() {
            return true;
        }
        match star {
            Some((resume, from)) if from < s.len() => {
                let from = from + char_len(&s[from..]);
                star = Some((resume, from));
                t = resume;
                i = from;
            }
            _ => return false,
        }
    }
}

/// The same algorithm one level up: components are the symbols and `**` is the star.
fn match_path<'a, C: Cursor<'a>>(comps: &[Comp], mut it: C) -> bool {
    let mut c = 0usize;
    let mut star: Option<(usize, C)> = None;
    loop {
        match comps.get(c) {
            Some(Comp::Globstar) if c + 1 == comps.len() => return true,
            Some(Comp::Globstar) => {
                star = Some((c + 1, it));
                c += 1;
                continue;
            }
            Some(Comp::Seg(seg)) => {
                let mut probe = it;
                if probe.next().is_some_and(|part| seg.matches(part)) {
                    it = probe;
                    c += 1;
                    continue;
                }
            }
            None if it.is_empty() => return true,
            None => {}
        }
        let Some((resume, from)) = &mut star else {
            return false;
        };
        if from.next().is_none() {
            return false;
        }
        c = *resume;
        it = *from;
    }
}

/// The components of a path, empty ones skipped.
#[derive(Debug, Clone, Copy)]
struct Components<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> for Components<'a> {
    fn is_empty(&self) -> bool {
        self.rest.iter().all(|&b| b == b'/')
    }

    fn next(&mut self) -> Option<&'a [u8]> {
        loop {
            if self.rest.is_empty() {
                return None;
            }
            let end = self
                .rest
                .iter()
                .position(|&b| b == b'/')
                .unwrap_or(self.rest.len());
            let (part, rest) = self.rest.split_at(end);
            self.rest = rest.get(1..).unwrap_or_default();
            if !part.is_empty() {
                return Some(part);
            }
        }
    }
}

/// Bytes in the UTF-8 character starting `s` (1 for a stray byte, so matching always advances).
pub(super) fn char_len(s: &[u8]) -> usize {
    let n = match s.first() {
        None => 0,
        Some(&b) if b < 0xC0 => 1,
        Some(&b) if b < 0xE0 => 2,
        Some(&b) if b < 0xF0 => 3,
        Some(_) => 4,
    };
    if n > 1 && std::str::from_utf8(&s[..n.min(s.len())]).is_err() {
        1
    } else {
        n.min(s.len())
    }
}

fn next_char(s: &[u8]) -> (char, usize) {
    let n = char_len(s);
    let c = std::str::from_utf8(&s[..n])
        .ok()
        .and_then(|t| t.chars().next())
        .unwrap_or(char::REPLACEMENT_CHARACTER);
    (c, n)
}
