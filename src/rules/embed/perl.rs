//! Perl programs that only substitute text: `perl -pi -e "s/\Q$old\E/$new/g"` is a run of
//! substitutions (`s///` without the `e` flag, `tr///`, `y///`) whose run-time parts are the
//! pattern and the replacement, data rather than code. Such a program is checked with those parts
//! standing as one word instead of being refused as code only known at run time.

/// Whether `code` is only substitutions and transliterations, none of which evaluates its
/// replacement as code (the `e` flag), separated by `;`.
pub(super) fn substitutions_only(code: &str) -> bool {
    let mut rest = code.trim_start();
    let mut any = false;
    while !rest.is_empty() {
        let Some(after) = substitution(rest) else {
            return false;
        };
        any = true;
        rest = after.trim_start();
        if let Some(next) = rest.strip_prefix(';') {
            rest = next.trim_start();
        } else if !rest.is_empty() {
            return false;
        }
    }
    any
}

/// The text after one `s/…/…/flags`, `tr/…/…/flags` or `y/…/…/flags` at the start of `s`.
fn substitution(s: &str) -> Option<&str> {
    let (op, rest) = if let Some(r) = s.strip_prefix("tr") {
        ("tr", r)
    } else if let Some(r) = s.strip_prefix('s') {
        ("s", r)
    } else {
        ("y", s.strip_prefix('y')?)
    };
    let open = rest.chars().next()?;
    if open.is_alphanumeric() || open.is_whitespace() || open == '_' {
        return None;
    }
    let rest = &rest[open.len_utf8()..];
    let rest = match closing(open) {
        // `s{…}{…}`: the second part has its own brackets, maybe after blanks
        Some(close) => {
            let rest = delimited(rest, close)?.trim_start();
            delimited(rest.strip_prefix(open)?, close)?
        }
        None => delimited(delimited(rest, open)?, open)?,
    };
    let flags_len = rest
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(rest.len());
    let flags = &rest[..flags_len];
    let evaluates = op == "s" && flags.contains('e');
    (!evaluates).then_some(&rest[flags_len..])
}

fn closing(open: char) -> Option<char> {
    match open {
        '{' => Some('}'),
        '(' => Some(')'),
        '[' => Some(']'),
        '<' => Some('>'),
        _ => None,
    }
}

/// The text after the unescaped `end` that closes a part starting at `s`.
fn delimited(s: &str, end: char) -> Option<&str> {
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            c if c == end => return Some(&s[i + c.len_utf8()..]),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::substitutions_only;

    #[test]
    fn only_substitutions_without_evaluation() {
        for ok in [
            r#"s/(version\s*=\s*")[^"]+(")/${1}X${2}/"#,
            r"s/\bold\b/new/g",
            r#"s/^__version__ = .*/__version__ = "1.2"/"#,
            "s{a}{b}g; tr/a-z/A-Z/",
            "s{a} {b}gi;",
            "y/abc/xyz/",
        ] {
            assert!(substitutions_only(ok), "{ok}");
        }
        for code in [
            "s/a/b/e",
            "s/a/system('id')/ee",
            "print 1",
            "s/a/b/; system('id')",
            "",
            "s/a/b",
            "system('x')",
        ] {
            assert!(!substitutions_only(code), "{code}");
        }
    }
}
