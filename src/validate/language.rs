//! Layer 3, language: the declared `script_type` must match the script.
//!
//! A shebang naming the other interpreter is a mismatch. Otherwise the content must be *clearly* the
//! other language: it parses cleanly as that language and shows that language's typical lines, while
//! showing none of the declared language's (or failing to parse as it). Ambiguous one-liners such as
//! `echo` vs `print` pass through to the syntax layer's verdict. A script in a third language
//! (JavaScript, Ruby, Perl, …; see [`foreign`]) is reported here too, by name, rather than as a
//! syntax error of the language it was declared as.

mod foreign;

use super::verdict::{Finding, Layer, Severity};
use crate::domain::script::Language;
use crate::rules::grammar::Grammar;

fn mismatch(rule: &str, message: String, line: u32) -> Finding {
    Finding {
        layer: Layer::Language,
        rule: rule.to_string(),
        severity: Severity::Block,
        message,
        line,
        column: 1,
    }
}

/// Checks a script that parsed cleanly as its declared language.
pub fn check(declared: Language, text: &str) -> Option<Finding> {
    if let Some(named) = Language::from_shebang(text)
        && named != declared
    {
        return Some(mismatch(
            "shebang-mismatch",
            format!("the shebang names {named} but script_type is {declared}"),
            1,
        ));
    }
    // A shebang naming a third language's interpreter (`#!/usr/bin/env node`, `#!/usr/bin/perl
    // -w`) says what the script was written for, however much of it also parses as the declared
    // language (`fs = require("fs")` is valid Python).
    if let Some(name) = foreign::shebang(text) {
        return Some(unsupported(name, declared));
    }
    // A first line only a third language writes (`<?php`, `@echo off`, `package main`) settles it
    // whatever follows, even lines that look like the declared language's (`echo Hello %NAME%`).
    if let Some(name) = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .and_then(foreign::decisive)
    {
        return Some(unsupported(name, declared));
    }
    // Three typical lines of the declared language settle it (the common case, so it is checked
    // first). Fewer can be shared syntax: PowerShell writes `"$($x.Count) files"` as Bash does.
    let own = signals(declared, text, 3);
    if own >= 3 {
        return None;
    }
    // A script that parses as the declared language anyway (`console.log(x);` is valid Python)
    // must be mostly the third language's lines (when they are many, a third: string pieces and
    // the continuation lines of calls are neither language's), or name its interpreter; beside
    // typical lines of the declared language, four times as many.
    if let Some(f) = foreign::detect(text)
        && (f.lines >= 2 || f.decisive)
        && (f.lines * 2 >= content_lines(text)
            || f.lines >= 6 && f.lines * 3 >= content_lines(text))
        && (own == 0 || f.lines >= 4 * own)
    {
        return Some(unsupported(f.name, declared));
    }
    if own > 0 {
        return None;
    }
    let other = declared.other();
    // Two typical lines, or every line of a one-line script.
    let needed = 2.min(content_lines(text).max(1));
    if signals(other, text, 2) >= needed && parses_cleanly(other, text) {
        return Some(looks_like(other, declared));
    }
    None
}

fn content_lines(text: &str) -> usize {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .count()
}

/// Explains a syntax failure as a mislabelled script when the text is clearly the other language.
pub fn mislabelled(declared: Language, text: &str) -> Option<Finding> {
    if let Some(f) = check(declared, text) {
        return Some(f);
    }
    let other = declared.other();
    let theirs = signals(other, text, usize::MAX);
    let ours = signals(declared, text, usize::MAX);
    if let Some(f) = foreign::detect(text)
        && (f.decisive || f.lines > ours.max(theirs))
    {
        return Some(unsupported(f.name, declared));
    }
    (theirs >= 1 && theirs > ours && parses_cleanly(other, text))
        .then(|| looks_like(other, declared))
}

fn looks_like(actual: Language, declared: Language) -> Finding {
    mismatch(
        "language-mismatch",
        format!("this looks like a {actual} script, but script_type is {declared}"),
        1,
    )
}

fn unsupported(actual: &str, declared: Language) -> Finding {
    mismatch(
        "unsupported-language",
        format!(
            "this looks like a {actual} script, but script_type is {declared}; scriptgate runs python and bash only"
        ),
        1,
    )
}

fn parses_cleanly(language: Language, text: &str) -> bool {
    !Grammar::new(language).parse(text).root_node().has_error()
}

/// How strongly the first 200 lines look like `language`, counting no further than `enough`.
/// A here-document start counts three: nothing else writes `<<'EOF'`.
fn signals(language: Language, text: &str, enough: usize) -> usize {
    let mut score = 0;
    for l in text
        .lines()
        .take(200)
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        score += match language {
            Language::Python => usize::from(python_line(l)),
            Language::Bash if heredoc_start(l) => 3,
            Language::Bash => usize::from(bash_line(l)),
        };
        if score >= enough {
            break;
        }
    }
    score.min(enough)
}

fn heredoc_start(l: &str) -> bool {
    l.split_once("<<")
        .map(|(_, rest)| {
            rest.trim_start_matches('-')
                .trim()
                .trim_matches(['\'', '"'])
        })
        .is_some_and(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
}

/// Commands an agent's shell script typically starts a line with.
const SHELL_COMMANDS: &[&str] = &[
    "ls", "cd", "cat", "grep", "egrep", "mkdir", "rm", "rmdir", "cp", "mv", "find", "awk", "sed",
    "chmod", "chown", "curl", "wget", "tar", "zip", "unzip", "git", "docker", "pip", "pip3", "npm",
    "apt-get", "apt", "make", "touch", "head", "tail", "sort", "uniq", "wc", "cut", "xargs", "ps",
    "kill", "df", "du", "tee", "ln", "pwd", "whoami", "which", "date", "sleep", "jq", "printf",
    "test", "exit", "source", "cargo",
];

fn python_line(l: &str) -> bool {
    (l.starts_with("import ") && !l.contains(['-', '$']))
        || (l.starts_with("from ") && l.contains(" import "))
        || (l.starts_with("def ") && l.ends_with(':'))
        || (l.starts_with("class ") && l.ends_with(':'))
        || l.starts_with("print(")
        || l.starts_with("if __name__")
        || ((l.starts_with("elif ") || l == "else:" || l == "try:") && l.ends_with(':'))
        || l.starts_with("except")
        || (l.starts_with("for ") && l.contains(" in ") && l.ends_with(':'))
        || (l.starts_with("with ") && l.ends_with(':'))
        || l.starts_with("\"\"\"")
        || l.starts_with("'''")
        || spaced_assignment(l)
}

/// `DEBUG = False`: a name, ` = `, a value, no `;` (in Bash a command named DEBUG; other languages
/// declare with a keyword or end with `;`, and PHP's and PowerShell's names start with `$`).
fn spaced_assignment(l: &str) -> bool {
    l.split_once(" = ").is_some_and(|(name, value)| {
        name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !value.is_empty()
            && !value.ends_with(';')
            // (`host = Sys.getenv("H"),`: a named argument of a call spread over lines)
            && !value.ends_with(',')
    })
}

fn bash_line(l: &str) -> bool {
    let mut words = l.split_whitespace();
    let first = words.next().unwrap_or("");
    // `ls -la /tmp`, `cd /tmp && …`: a shell command with options, paths or shell operators.
    let shell_args = words
        .clone()
        .next()
        .is_none_or(|w| w.starts_with('-') || w.starts_with(['/', '~', '.', '$']))
        || l.contains(" && ")
        || l.contains(" | ");
    if SHELL_COMMANDS.contains(&first) && shell_args && !l.contains('(') {
        return true;
    }
    matches!(
        first,
        "fi" | "done"
            | "esac"
            | "then"
            | "do"
            | "echo"
            | "export"
            | "local"
            | "readonly"
            | "set"
            | "source"
            | "unset"
            | "shift"
    ) || l.ends_with("; then")
        || l.ends_with("; do")
        || l.starts_with("[[ ")
        || l.starts_with("[ ")
        || (l.starts_with("for ") && l.contains(" in ") && !l.ends_with(':'))
        || (l.starts_with("function ") && l.ends_with('{'))
        || l.contains("$(")
        || l.contains("${")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_of_shared_syntax_does_not_hide_a_third_language() {
        // `$(…)` in the last line is Bash's syntax too
        let ps = "$root = $env:TEMP\n$old = Get-ChildItem -Path $root -Recurse -File\n\
                  $old | Remove-Item -Force\n$stats = $old | Measure-Object -Property Length -Sum\n\
                  Write-Host \"Removed $($stats.Count) files\"\n";
        let f = check(Language::Bash, ps).expect("PowerShell");
        assert!(f.message.contains("PowerShell"), "{}", f.message);
        // R whose named arguments and call continuations fill most lines
        let r = "suppressPackageStartupMessages(library(DBI))\nsuppressPackageStartupMessages(library(ggplot2))\n\
                 con <- dbConnect(\n  Postgres(),\n  host = Sys.getenv(\"PGHOST\"),\n  dbname = \"analytics\",\n\
                 password = Sys.getenv(\"PGPASSWORD\")\n)\nchurn <- dbGetQuery(con, paste(\n  \"SELECT month, plan\",\n\
                 \"FROM billing.subscriptions\"\n))\nactive <- dbGetQuery(con, \"SELECT 1\")\ndbDisconnect(con)\n\
                 df <- merge(churn, active, by = c(\"month\", \"plan\"))\ndf <- df[order(df[[\"month\"]]), ]\n\
                 n <- nrow(df)\nrate <- df$churned / df$active\nprint(head(df, 12))\nwrite.csv(df, \"out.csv\")\n";
        let f = check(Language::Python, r).expect("R");
        assert!(f.message.contains(" R"), "{}", f.message);
        // a Bash script with one PowerShell-looking line stays Bash
        let sh = "set -e\nWrite-Host() { echo \"$@\"; }\nWrite-Host \"$(date)\"\n";
        assert!(check(Language::Bash, sh).is_none());
    }

    #[test]
    fn shebang_for_the_other_interpreter_is_a_mismatch() {
        let f = check(Language::Python, "#!/bin/bash\necho hi\n").expect("mismatch");
        assert_eq!(f.rule, "shebang-mismatch");
        assert!(check(Language::Bash, "#!/bin/bash\necho hi\n").is_none());
    }

    #[test]
    fn a_third_languages_shebang_settles_it_even_when_the_rest_parses() {
        // valid Python line by line, but written for node
        let js = "#!/usr/bin/env node\nfs = require(\"fs\")\nreport = {}\nprint(report)\n";
        let f = check(Language::Python, js).expect("JavaScript");
        assert_eq!(f.rule, "unsupported-language");
        assert!(f.message.contains("JavaScript"), "{}", f.message);
        // valid Bash, but written for perl
        let pl = "#!/usr/bin/perl -w\nuse strict;\nprint \"ok\\n\";\n";
        assert!(check(Language::Bash, pl).is_some());
        // the declared interpreter's own shebang is fine
        assert!(check(Language::Python, "#!/usr/bin/env python3\nprint(1)\n").is_none());
    }

    #[test]
    fn clear_bash_submitted_as_python() {
        let script = "for f in *.txt; do\n  echo \"$f\"\ndone\n";
        assert_eq!(
            mislabelled(Language::Python, script).map(|f| f.rule),
            Some("language-mismatch".into())
        );
    }

    #[test]
    fn clear_python_submitted_as_bash() {
        let script = "import os\nimport sys\n\ndef main():\n    print(os.getcwd())\n";
        assert_eq!(
            mislabelled(Language::Bash, script).map(|f| f.rule),
            Some("language-mismatch".into())
        );
    }

    #[test]
    fn shell_commands_and_heredocs_count_for_bash() {
        assert_eq!(
            check(Language::Python, "ls -la /tmp\n").map(|f| f.rule),
            Some("language-mismatch".into())
        );
        let wrapper = "python3 - <<'EOF'\nimport platform\nprint(platform.python_version())\nEOF\necho done\n";
        assert_eq!(
            mislabelled(Language::Python, wrapper).map(|f| f.rule),
            Some("language-mismatch".into())
        );
    }

    #[test]
    fn third_languages_are_named() {
        let js = "const fs = require('fs');\nfs.readdirSync('.').forEach((f) => {\n  console.log(f);\n});\n";
        let f = mislabelled(Language::Python, js).expect("javascript");
        assert_eq!(f.rule, "unsupported-language");
        assert!(f.message.contains("JavaScript"), "{}", f.message);
        // Valid Python, yet nothing but JavaScript lines.
        let f = check(Language::Python, "console.log('a');\nconsole.log('b');\n").expect("js");
        assert_eq!(f.rule, "unsupported-language");
        let perl = "use strict;\nmy $x = 1;\nprint \"$x\\n\";\n";
        assert!(mislabelled(Language::Bash, perl).is_some_and(|f| f.message.contains("Perl")));
    }

    #[test]
    fn python_settings_submitted_as_bash() {
        let settings = "\"\"\"Project settings.\"\"\"\nimport os\nDEBUG = False\nALLOWED_HOSTS = []\nTIME_ZONE = \"UTC\"\n";
        assert_eq!(
            check(Language::Bash, settings).map(|f| f.rule),
            Some("language-mismatch".into())
        );
    }

    #[test]
    fn javascript_r_and_batch_that_parse_as_the_declared_language() {
        for (declared, script, name) in [
            (
                Language::Python,
                "console.log(\"starting\");\nprocess.exit(0);\n",
                "JavaScript",
            ),
            (Language::Python, "x <- c(1, 2, 3)\ny <- x * 2\n", "R"),
            (
                Language::Bash,
                "@echo off\nset NAME=world\necho Hello %NAME%\n",
                "Batch",
            ),
        ] {
            let f = check(declared, script).expect(name);
            assert!(f.message.contains(name), "{}", f.message);
        }
        // A stray `;` in Python is not another language.
        let py = "import os\nos.makedirs('out', exist_ok=True);\nprint('done')\n";
        assert!(check(Language::Python, py).is_none());
    }

    #[test]
    fn python_writing_other_languages_is_still_python() {
        let generator = "src = \"\"\"\n#include <stdio.h>\nint main() { return 0; }\n\"\"\"\nopen('a.c', 'w').write(src)\n";
        assert!(check(Language::Python, generator).is_none());
    }

    #[test]
    fn ambiguous_scripts_are_not_mismatches() {
        assert!(check(Language::Bash, "ls -la\n").is_none());
        assert!(check(Language::Python, "x = 1\n").is_none());
    }
}
