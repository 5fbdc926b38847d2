//! Globs over paths, program names and argument text: parsed and checked once, matched without
//! allocation.
//!
//! Hand-written rather than taken from a glob crate because the matcher runs inside the container's
//! PID 1 for every file operation: it must not allocate, must stay polynomial on hostile input (one
//! backtrack point per level, never recursion), and must refuse ambiguous syntax when the policy is
//! compiled (`**` inside a component, `.` components, an unclosed class) instead of guessing.
//!
//! Syntax: `*` (any run of characters; within one path component for paths and names), `**` (a
//! whole path component: any number of components, none included), `?` (one character), `[abc]`,
//! `[a-z]`, `[!a]` / `[^a]` (one character of a class), `{a,b}` (alternatives, expanded when
//! compiled, not nested), `\x` (the character `x` itself).

mod matching;

use crate::limits::{MAX_ALTERNATIVES, MAX_PATTERN_BYTES};
pub(crate) use matching::SplitPath;
use matching::{char_len, component_bit};

/// What a glob is matched against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// A normalised path: starts with `/` or `**`; `*` stays within a component.
    Path,
    /// One path component (a bare program name): no `/`, no `**`.
    Name,
    /// Free text (arguments joined by spaces): `*` matches anything.
    Text,
}

/// Why a glob does not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GlobError {
    #[error("empty pattern")]
    Empty,
    #[error("longer than {MAX_PATTERN_BYTES} bytes")]
    TooLong,
    #[error("unclosed `[`")]
    UnclosedClass,
    #[error("empty class `[]`")]
    EmptyClass,
    #[error("class range `{0}-{1}` runs backwards")]
    BadRange(char, char),
    #[error("unclosed `{{`")]
    UnclosedBrace,
    #[error("`}}` without `{{`")]
    UnmatchedBrace,
    #[error("`{{…}}` inside `{{…}}` is not supported")]
    NestedBrace,
    #[error("`{{…}}` expands to more than {MAX_ALTERNATIVES} alternatives")]
    TooManyAlternatives,
    #[error("`\\` at the end escapes nothing")]
    TrailingEscape,
    #[error("a path glob starts with `/` or `**`")]
    NotAbsolute,
    #[error("`**` must be a whole path component (`/a/**/b`)")]
    PartialGlobstar,
    #[error("empty path component (`//` or a trailing `/`)")]
    EmptyComponent,
    #[error("`.` and `..` components never match: paths are matched after normalisation")]
    DotComponent,
    #[error("a program name has no `/` (write a path glob, `/usr/bin/pip`, to match the path)")]
    SlashInName,
    #[error("`**` is for paths; in a program name `*` already matches any name")]
    GlobstarInName,
    #[error("`/` inside a class never matches within a path component")]
    SlashInClass,
}

/// A compiled glob: one or more alternatives (from `{a,b}`), any of which may match.
#[derive(Debug, Clone)]
pub(crate) struct Glob {
    alternatives: Box<[Alternative]>,
}

#[derive(Debug, Clone)]
enum Alternative {
    Path {
        absolute: bool,
        /// [`component_bit`]s of the literal components: a path lacking one cannot match.
        required: u64,
        comps: Box<[Comp]>,
    },
    Flat(Segment),
}

#[derive(Debug, Clone)]
enum Comp {
    Globstar,
    Seg(Segment),
}

#[derive(Debug, Clone)]
enum Segment {
    /// No wildcard: compared as bytes.
    Literal(Box<[u8]>),
    /// `lit*`.
    Prefix(Box<[u8]>),
    /// `*lit` (the common `*.pem`).
    Suffix(Box<[u8]>),
    Wild(Box<[Tok]>),
}

#[derive(Debug, Clone)]
enum Tok {
    Lit(Box<[u8]>),
    One,
    Star,
    Class(Class),
}

#[derive(Debug, Clone)]
struct Class {
    negated: bool,
    ranges: Box<[(char, char)]>,
}

impl Glob {
    pub(crate) fn compile(source: &str, flavor: Flavor) -> Result<Glob, GlobError> {
        if source.is_empty() {
            return Err(GlobError::Empty);
        }
        if source.len() > MAX_PATTERN_BYTES {
            return Err(GlobError::TooLong);
        }
        let alternatives = expand_braces(source)?
            .iter()
            .map(|alt| compile_alternative(alt, flavor))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Glob {
            alternatives: alternatives.into(),
        })
    }

    /// How many globs the braces expanded to (what the policy's size limit counts).
    pub(crate) fn alternatives(&self) -> usize {
        self.alternatives.len()
    }
}

fn compile_alternative(source: &str, flavor: Flavor) -> Result<Alternative, GlobError> {
    match flavor {
        Flavor::Text => Ok(Alternative::Flat(parse_segment(source, flavor)?)),
        Flavor::Name => {
            if source.contains("**") {
                return Err(GlobError::GlobstarInName);
            }
            Ok(Alternative::Flat(parse_segment(source, flavor)?))
        }
        Flavor::Path => {
            let absolute = source.starts_with('/');
            if !(absolute || source == "**" || source.starts_with("**/")) {
                return Err(GlobError::NotAbsolute);
            }
            let body = source.strip_prefix('/').unwrap_or(source);
            let mut comps: Vec<Comp> = Vec::new();
            // `/` alone is the root: no component.
            if !body.is_empty() {
                for part in split_components(body) {
                    comps.push(compile_component(part)?);
                }
            }
            // `**/**` is `**`.
            comps.dedup_by(|a, b| matches!((a, b), (Comp::Globstar, Comp::Globstar)));
            let required = comps
                .iter()
                .filter_map(|c| match c {
                    Comp::Seg(Segment::Literal(l)) => Some(component_bit(l)),
                    _ => None,
                })
                .fold(0, |acc, bit| acc | bit);
            Ok(Alternative::Path {
                absolute,
                required,
                comps: comps.into(),
            })
        }
    }
}

/// Splits on `/` outside classes (a `/` inside one is refused later, with its own message).
fn split_components(body: &str) -> Vec<&str> {
    let bytes = body.as_bytes();
    let mut parts = Vec::new();
    let (mut start, mut i) = (0, 0);
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'[' => i = class_end(bytes, i).unwrap_or(bytes.len()),
            b'/' => {
                parts.push(&body[start..i]);
                i += 1;
                start = i;
            }
            _ => i += 1,
        }
    }
    parts.push(&body[start.min(body.len())..]);
    parts
}

fn compile_component(part: &str) -> Result<Comp, GlobError> {
    match part {
        "" => Err(GlobError::EmptyComponent),
        "." | ".." => Err(GlobError::DotComponent),
        "**" => Ok(Comp::Globstar),
        _ if part.contains("**") => Err(GlobError::PartialGlobstar),
        _ => Ok(Comp::Seg(parse_segment(part, Flavor::Path)?)),
    }
}

/// The index just past the `]` closing the class that opens at `open`.
fn class_end(bytes: &[u8], open: usize) -> Option<usize> {
    let mut i = open + 1;
    if matches!(bytes.get(i), Some(b'!' | b'^')) {
        i += 1;
    }
    // A `]` right after the opening is a member, not the end.
    if bytes.get(i) == Some(&b']') {
        i += 1;
    }
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b']' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// `{a,b}` groups expanded into whole alternatives (their product, bounded).
fn expand_braces(source: &str) -> Result<Vec<String>, GlobError> {
    let bytes = source.as_bytes();
    let mut parts: Vec<Vec<&str>> = Vec::new();
    let (mut start, mut i) = (0, 0);
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if i + 1 >= bytes.len() => return Err(GlobError::TrailingEscape),
            b'\\' => i += 2,
            b'[' => i = class_end(bytes, i).ok_or(GlobError::UnclosedClass)?,
            b'}' => return Err(GlobError::UnmatchedBrace),
            b'{' => {
                parts.push(vec![&source[start..i]]);
                let (options, end) = brace_group(source, i)?;
                parts.push(options);
                i = end;
                start = end;
            }
            _ => i += 1,
        }
    }
    parts.push(vec![&source[start..]]);
    let total = parts
        .iter()
        .try_fold(1usize, |n, p| n.checked_mul(p.len()))
        .filter(|&n| n <= MAX_ALTERNATIVES)
        .ok_or(GlobError::TooManyAlternatives)?;
    let mut out = vec![String::new(); total];
    let mut stride = total;
    for options in &parts {
        stride /= options.len();
        for (k, alt) in out.iter_mut().enumerate() {
            alt.push_str(options[(k / stride) % options.len()]);
        }
    }
    Ok(out)
}

/// The options of the group opening at `open`, and the index past its `}`.
fn brace_group(source: &str, open: usize) -> Result<(Vec<&str>, usize), GlobError> {
    let bytes = source.as_bytes();
    let mut options = Vec::new();
    let (mut start, mut i) = (open + 1, open + 1);
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if i + 1 >= bytes.len() => return Err(GlobError::TrailingEscape),
            b'\\' => i += 2,
            b'[' => i = class_end(bytes, i).ok_or(GlobError::UnclosedClass)?,
            b'{' => return Err(GlobError::NestedBrace),
            b',' => {
                options.push(&source[start..i]);
                i += 1;
                start = i;
            }
            b'}' => {
                options.push(&source[start..i]);
                return Ok((options, i + 1));
            }
            _ => i += 1,
        }
    }
    Err(GlobError::UnclosedBrace)
}

fn parse_segment(source: &str, flavor: Flavor) -> Result<Segment, GlobError> {
    let bytes = source.as_bytes();
    let mut toks: Vec<Tok> = Vec::new();
    let mut lit: Vec<u8> = Vec::new();
    let flush = |lit: &mut Vec<u8>, toks: &mut Vec<Tok>| {
        if !lit.is_empty() {
            toks.push(Tok::Lit(std::mem::take(lit).into()));
        }
    };
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => {
                let n = char_len(&bytes[i + 1..]);
                lit.extend_from_slice(&bytes[i + 1..i + 1 + n]);
                i += 1 + n;
            }
            b'*' => {
                flush(&mut lit, &mut toks);
                if !matches!(toks.last(), Some(Tok::Star)) {
                    toks.push(Tok::Star);
                }
                i += 1;
            }
            b'?' => {
                flush(&mut lit, &mut toks);
                toks.push(Tok::One);
                i += 1;
            }
            b'[' => {
                flush(&mut lit, &mut toks);
                let end = class_end(bytes, i).ok_or(GlobError::UnclosedClass)?;
                toks.push(Tok::Class(parse_class(&source[i + 1..end - 1], flavor)?));
                i = end;
            }
            b'/' if flavor == Flavor::Name => return Err(GlobError::SlashInName),
            b => {
                lit.push(b);
                i += 1;
            }
        }
    }
    flush(&mut lit, &mut toks);
    Ok(match toks.as_slice() {
        [] => Segment::Literal(Box::default()),
        [Tok::Lit(l)] => Segment::Literal(l.clone()),
        [Tok::Lit(l), Tok::Star] => Segment::Prefix(l.clone()),
        [Tok::Star, Tok::Lit(l)] => Segment::Suffix(l.clone()),
        _ => Segment::Wild(toks.into()),
    })
}

/// The inside of `[…]` (between the brackets).
fn parse_class(inner: &str, flavor: Flavor) -> Result<Class, GlobError> {
    let (negated, body) = match inner.strip_prefix(['!', '^']) {
        Some(rest) => (true, rest),
        None => (false, inner),
    };
    let mut chars = body.chars();
    let member = |chars: &mut std::str::Chars<'_>| -> Result<Option<char>, GlobError> {
        match chars.next() {
            Some('\\') => chars.next().ok_or(GlobError::TrailingEscape).map(Some),
            other => Ok(other),
        }
    };
    let mut ranges = Vec::new();
    while let Some(lo) = member(&mut chars)? {
        // `-` is a range between two members, and itself at either end of the class.
        let hi = if chars.as_str().len() > 1 && chars.as_str().starts_with('-') {
            chars.next();
            member(&mut chars)?.unwrap_or(lo)
        } else {
            lo
        };
        if lo > hi {
            return Err(GlobError::BadRange(lo, hi));
        }
        ranges.push((lo, hi));
    }
    if ranges.is_empty() {
        return Err(GlobError::EmptyClass);
    }
    if flavor != Flavor::Text && ranges.iter().any(|&(lo, hi)| lo <= '/' && '/' <= hi) {
        return Err(GlobError::SlashInClass);
    }
    Ok(Class {
        negated,
        ranges: ranges.into(),
    })
}

#[cfg(test)]
mod tests;
