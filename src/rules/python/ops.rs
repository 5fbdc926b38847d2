//! Python's value operations the folder imitates, as plain functions: slices, `os.path.join`,
//! integer literals and `%`-formatting.

/// Python slice semantics on characters.
pub(super) fn py_slice(v: &[char], start: Option<i64>, stop: Option<i64>, step: i64) -> Vec<char> {
    let len = i64::try_from(v.len()).unwrap_or(i64::MAX);
    let clamp = |i: i64, lo: i64, hi: i64| i.max(lo).min(hi);
    let norm = |i: i64| if i < 0 { i + len } else { i };
    let mut out = Vec::new();
    if step > 0 {
        let mut i = clamp(start.map_or(0, norm), 0, len);
        let end = clamp(stop.map_or(len, norm), 0, len);
        while i < end {
            out.push(v[usize::try_from(i).unwrap_or(0)]);
            i += step;
        }
    } else {
        let mut i = clamp(start.map_or(len - 1, norm), -1, len - 1);
        let end = clamp(stop.map_or(-1, norm), -1, len - 1);
        while i > end {
            out.push(v[usize::try_from(i).unwrap_or(0)]);
            i += step;
        }
    }
    out
}

/// `os.path.join` semantics: an absolute part restarts the path.
pub(super) fn join_paths(parts: &[String]) -> String {
    let mut out = String::new();
    for part in parts {
        if part.starts_with('/') || out.is_empty() {
            out = part.clone();
        } else {
            if !out.ends_with('/') {
                out.push('/');
            }
            out.push_str(part);
        }
    }
    out
}

/// A path with `.` and `..` parts resolved and repeated or trailing slashes dropped, as the file
/// it names: `~/.cache/../` is `~`. A `..` above `/` stays at `/`; one above `~` or above a
/// relative path is kept (`~/..`).
pub(super) fn normalize_path(path: &str) -> String {
    let absolute = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => match parts.last() {
                Some(&last) if last != ".." && last != "~" => {
                    parts.pop();
                }
                None if absolute => {}
                _ => parts.push(".."),
            },
            part => parts.push(part),
        }
    }
    let joined = parts.join("/");
    match (absolute, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".into(),
        (false, false) => joined,
    }
}

/// A path with a `..` part resolved (`~/.cache/../` names `~`); any other value as it is.
pub(super) fn resolve_dots(path: String) -> String {
    if path.split('/').any(|p| p == "..") {
        normalize_path(&path)
    } else {
        path
    }
}

/// pathlib's `.parent`: the path without its last part (`.` parts and repeated or trailing
/// slashes dropped first, `..` kept as a part), its `..` then resolved: `~/.cache` is in `~`.
pub(super) fn parent_path(path: &str) -> String {
    let absolute = path.starts_with('/');
    let parts: Vec<&str> = path
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    let parent = match parts.split_last() {
        Some((&"~", [])) => "~/..".to_string(),
        Some((_, [])) | None => (if absolute { "/" } else { "." }).to_string(),
        Some((_, rest)) => format!("{}{}", if absolute { "/" } else { "" }, rest.join("/")),
    };
    resolve_dots(parent)
}

/// `os.path.dirname`: everything before the last `/` (a trailing slash ends the name, so
/// `/srv/app/` is in `/srv/app`), its `..` resolved.
pub(super) fn dirname(path: &str) -> String {
    let dir = match path.rfind('/') {
        Some(at) => {
            let head = path[..at].trim_end_matches('/');
            if head.is_empty() { "/" } else { head }
        }
        None => "",
    };
    resolve_dots(dir.to_string())
}

pub(super) fn parse_int(t: &str) -> Option<i64> {
    let t = t.replace('_', "").to_ascii_lowercase();
    let t = t.trim_end_matches('l');
    if let Some(h) = t.strip_prefix("0x") {
        i64::from_str_radix(h, 16).ok()
    } else if let Some(o) = t.strip_prefix("0o") {
        i64::from_str_radix(o, 8).ok()
    } else if let Some(b) = t.strip_prefix("0b") {
        i64::from_str_radix(b, 2).ok()
    } else {
        t.parse().ok()
    }
}

pub(super) fn percent_format(template: &str, values: &[String]) -> Option<String> {
    let mut out = String::new();
    let mut values = values.iter();
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            '%' => out.push('%'),
            's' | 'r' | 'd' => out.push_str(values.next()?),
            _ => return None,
        }
    }
    values.next().is_none().then_some(out)
}

/// Python's `str.format` for plain fields (`{}`, `{N}`, `{name}`, `{{`/`}}`); `None` for anything
/// it does not model (conversions, format specs, attributes).
pub(crate) fn str_format(
    template: &str,
    positional: &[String],
    named: &[(&str, String)],
) -> Option<String> {
    let mut out = String::with_capacity(template.len());
    let mut chars = template.chars().peekable();
    let mut next = 0;
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                out.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                out.push('}');
            }
            '{' => {
                let mut field = String::new();
                loop {
                    match chars.next()? {
                        '}' => break,
                        c => field.push(c),
                    }
                }
                let value = if field.is_empty() {
                    next += 1;
                    positional.get(next - 1)?
                } else if let Ok(i) = field.parse::<usize>() {
                    positional.get(i)?
                } else {
                    &named.iter().find(|(n, _)| *n == field)?.1
                };
                out.push_str(value);
            }
            '}' => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

/// Python's `repr` of a folded value: a string quoted as CPython quotes it (single quotes unless
/// the text holds one and no double quote); a number, which folds to its digits, as it is.
pub(super) fn py_repr(value: &str) -> String {
    let numeric = !value.is_empty()
        && value
            .trim_start_matches('-')
            .chars()
            .all(|c| c.is_ascii_digit() || c == '.');
    if numeric {
        return value.to_string();
    }
    let quote = if value.contains('\'') && !value.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(value.len() + 2);
    out.push(quote);
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_normalize_and_climb() {
        assert_eq!(normalize_path("~/.cache/../"), "~");
        assert_eq!(normalize_path("/etc/./ssh//"), "/etc/ssh");
        assert_eq!(normalize_path("/../etc"), "/etc");
        assert_eq!(normalize_path("~/../root"), "~/../root");
        assert_eq!(normalize_path("a/../.."), "..");
        assert_eq!(parent_path("~/.cache"), "~");
        assert_eq!(parent_path("~"), "~/..");
        assert_eq!(parent_path("/etc"), "/");
        assert_eq!(parent_path("/var/log/x.log"), "/var/log");
        assert_eq!(parent_path("data.csv"), ".");
        assert_eq!(parent_path("/a/b/.."), "/a/b");
        assert_eq!(parent_path("/srv/app/"), "/srv");
        assert_eq!(dirname("/srv/app/"), "/srv/app");
        assert_eq!(dirname("/etc/hosts"), "/etc");
        assert_eq!(dirname("~/.cache"), "~");
        assert_eq!(dirname("/etc"), "/");
    }

    #[test]
    fn str_format_follows_python() {
        let pos = ["a".to_string(), "b".to_string()];
        let named = [("x", "c".to_string())];
        assert_eq!(str_format("{}-{}", &pos, &named).as_deref(), Some("a-b"));
        assert_eq!(
            str_format("{1}{0}{x}", &pos, &named).as_deref(),
            Some("bac")
        );
        assert_eq!(str_format("{{}}{}", &pos, &named).as_deref(), Some("{}a"));
        assert_eq!(
            str_format("{:>8}", &pos, &named),
            None,
            "format specs are not modelled"
        );
        assert_eq!(str_format("{2}", &pos, &named), None, "missing argument");
        assert_eq!(str_format("{", &pos, &named), None, "unclosed field");
    }

    #[test]
    fn slices_follow_python_semantics() {
        let v: Vec<char> = "abcdef".chars().collect();
        let s = |a, b, c| py_slice(&v, a, b, c).into_iter().collect::<String>();
        assert_eq!(s(None, None, -1), "fedcba");
        assert_eq!(s(Some(1), Some(4), 1), "bcd");
        assert_eq!(s(None, None, 2), "ace");
        assert_eq!(s(Some(-2), None, 1), "ef");
    }

    #[test]
    fn percent_format_folds() {
        assert_eq!(
            percent_format("%s%s", &["ev".into(), "al".into()]).as_deref(),
            Some("eval")
        );
    }

    #[test]
    fn repr_quotes_strings_as_python_does() {
        assert_eq!(py_repr("ab"), "'ab'");
        assert_eq!(py_repr("it's"), "\"it's\"");
        assert_eq!(py_repr("a'\"b\\\n"), "'a\\'\"b\\\\\\n'");
        assert_eq!(py_repr("42"), "42");
    }
}
