//! Layer 3, language: the declared `script_type` must match the script.
//!
//! A shebang naming the other interpreter is a mismatch. Otherwise the content must be *clearly* the
//! other language: it parses cleanly as that language and shows that language's typical lines, while
//! showing none of the declared language's (or failing to parse as it). Ambiguous one-liners such as
//! `echo` vs `print` pass through to the syntax layer's verdict.

use super::verdict::{Finding, Layer, Severity};
use crate::rules::grammar::Grammar;
use crate::script::Language;

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
    // One typical line of the declared language settles it (the common case, so it is checked first).
    if signals(declared, text, 1) > 0 {
        return None;
    }
    let other = declared.other();
    if signals(other, text, 2) >= 2 && parses_cleanly(other, text) {
        return Some(looks_like(other, declared));
    }
    None
}

/// Explains a syntax failure as a mislabelled script when the text is clearly the other language.
pub fn mislabelled(declared: Language, text: &str) -> Option<Finding> {
    if let Some(f) = check(declared, text) {
        return Some(f);
    }
    let other = declared.other();
    let theirs = signals(other, text, usize::MAX);
    (theirs >= 1 && theirs > signals(declared, text, usize::MAX) && parses_cleanly(other, text))
        .then(|| looks_like(other, declared))
}

fn looks_like(actual: Language, declared: Language) -> Finding {
    mismatch(
        "language-mismatch",
        format!("this looks like a {actual} script, but script_type is {declared}"),
        1,
    )
}

fn parses_cleanly(language: Language, text: &str) -> bool {
    !Grammar::new(language).parse(text).root_node().has_error()
}

/// How many lines look typical of `language` (first 200 lines), counting no further than `enough`.
fn signals(language: Language, text: &str, enough: usize) -> usize {
    text.lines()
        .take(200)
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter(|l| match language {
            Language::Python => python_line(l),
            Language::Bash => bash_line(l),
        })
        .take(enough)
        .count()
}

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
}

fn bash_line(l: &str) -> bool {
    let first = l.split_whitespace().next().unwrap_or("");
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
    fn shebang_for_the_other_interpreter_is_a_mismatch() {
        let f = check(Language::Python, "#!/bin/bash\necho hi\n").expect("mismatch");
        assert_eq!(f.rule, "shebang-mismatch");
        assert!(check(Language::Bash, "#!/bin/bash\necho hi\n").is_none());
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
    fn ambiguous_scripts_are_not_mismatches() {
        assert!(check(Language::Bash, "ls -la\n").is_none());
        assert!(check(Language::Python, "x = 1\n").is_none());
    }
}
