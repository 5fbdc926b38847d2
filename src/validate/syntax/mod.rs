//! Layer 2, syntax: tree-sitter ERROR and MISSING nodes, plus checks that close the grammars'
//! leniencies so the layer catches what `ast.parse` and `bash -n` catch.
//!
//! The checks run per node inside the one validation walk (`super::walk`).

pub mod bash;
pub mod python;

use tree_sitter::Node;

use super::verdict::{Finding, Layer, Positions, Severity};
use super::{Validator, walk};
use crate::domain::script::Script;
use crate::rules::grammar::text;

/// Trees deeper than this are rejected: CPython refuses ~200 nested brackets, and every later
/// algorithm may then rely on bounded depth.
pub const MAX_DEPTH: usize = 400;

/// At most this many syntax findings are reported; the first is what matters.
pub const MAX_FINDINGS: usize = 5;

/// Whether a script's text can hold what a check looks for (decided once per script, before the
/// walk).
pub(crate) type Trigger = fn(&[u8]) -> bool;

/// The syntax layer's verdict on its own: the findings that make a script fail to parse (empty
/// when it parses), without the size, language, secret or dangerous layers. This is what the
/// interpreter's own parser is compared with.
pub fn check(validator: &Validator, script: &Script) -> Vec<Finding> {
    let text = script.text.as_str();
    let language = script.language;
    let rules = validator.rules().tree(language);
    let (parsed, tree) = super::parse(&rules.grammar, text);
    let pos = Positions::new(text);
    walk::run(validator.kinds(), rules, &tree, &parsed, &pos).syntax
}

pub fn finding(positions: &Positions<'_>, at: usize, rule: &str, message: String) -> Finding {
    let (line, column) = positions.at(at);
    Finding {
        layer: Layer::Syntax,
        rule: rule.to_string(),
        severity: Severity::Block,
        message,
        line,
        column,
    }
}

/// A short, quoted excerpt of a node for messages (first line, at most 30 characters).
pub fn excerpt(node: Node<'_>, src: &str) -> String {
    let t = text(node, src).lines().next().unwrap_or("").trim();
    let mut short: String = t.chars().take(30).collect();
    if t.chars().count() > 30 {
        short.push('…');
    }
    short
}

/// The first anonymous token inside a node (the keyword or punctuation that opened an ERROR).
pub fn first_token<'t>(node: Node<'t>) -> Option<Node<'t>> {
    let mut current = node;
    loop {
        let child = current.child(0)?;
        if child.child_count() == 0 {
            return Some(child);
        }
        current = child;
    }
}

pub fn too_deep(positions: &Positions<'_>, node: Node<'_>) -> Finding {
    finding(
        positions,
        node.start_byte(),
        "nesting-too-deep",
        format!("nesting is deeper than {MAX_DEPTH} levels"),
    )
}

/// The messages the syntax layer gives a Python script (empty when it passes), for the checks'
/// unit tests.
#[cfg(test)]
pub(crate) fn python_problems(src: &str) -> Vec<String> {
    use crate::domain::script::{Language, Script};
    use crate::rules::RuleSet;
    use crate::validate::ValidationConfig;
    static VALIDATOR: std::sync::LazyLock<Validator> = std::sync::LazyLock::new(|| {
        Validator::new(
            RuleSet::embedded().expect("rules compile"),
            ValidationConfig::default(),
        )
    });
    check(&VALIDATOR, &Script::new(Language::Python, src))
        .into_iter()
        .map(|f| f.message)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::check;
    use crate::domain::script::{Language, Script};
    use crate::rules::RuleSet;
    use crate::validate::{ValidationConfig, Validator};

    /// (script, the rule of the first syntax finding, or None when the interpreter accepts it).
    /// Each row is a category the differential test found or the issue named; the interpreter's
    /// verdict was checked with CPython 3.11 `compile()` and bash 5.2 `bash -n`.
    const PYTHON: &[(&str, Option<&str>)] = &[
        ("def f(*, **kw): pass\n", Some("invalid-syntax")),
        // an annotation is any expression: a subscript of a generic type too
        ("x: list[int]  [1]\nx: dict[str, int][0] = 1\n", None),
        ("x: list[int] []\n", Some("invalid-syntax")),
        ("f = lambda *, **k: 0\n", Some("invalid-syntax")),
        ("def f(*, a, **kw): pass\n", None),
        ("f\"{x!z}\"\n", Some("invalid-syntax")),
        ("f\"{x!r:>10} {y=}\"\n", None),
        ("del f()\n", Some("invalid-syntax")),
        // an assignment expression stands unparenthesized only where CPython's grammar takes a
        // named expression: conditions, arguments, subscripts, displays, comprehension elements
        ("s = {d for d in y if z := f(d)}\n", Some("invalid-syntax")),
        ("s = [d for d in y := z]\n", Some("invalid-syntax")),
        ("f(a=x := 1)\n", Some("invalid-syntax")),
        ("y = x := 1\n", Some("invalid-syntax")),
        ("g = lambda: x := 1\n", Some("invalid-syntax")),
        ("x = y if z := 1 else 2\n", Some("invalid-syntax")),
        (
            "if x := f():\n    print(y := 2, a[i := 0], [j := 1, 2], [k := v for v in x])\nwhile (n := g()) > 0: pass\nmatch (m := h()):\n    case [a] if b := a: pass\n",
            None,
        ),
        ("del x + 1\n", Some("invalid-syntax")),
        ("del (a, b), [c], d.e, f[0]\n", None),
        ("f\"{\"a\"}\"\n", Some("newer-python")),
        ("f'{\"a\"}'\nf'''{'a'}'''\n", None),
        ("f\"{x\\n}\"\n", Some("newer-python")),
        ("f'{x:\\n}'\n", None),
        ("type X = int\n", Some("newer-python")),
        ("def f[T](x: T): pass\n", Some("newer-python")),
        ("class C[T]: pass\n", Some("newer-python")),
        ("def f(x: list[int]) -> dict[str, int]: pass\n", None),
        ("try:\n    pass\nexcept* ValueError:\n    pass\n", None),
        (
            "try:\n    pass\nexcept*:\n    pass\n",
            Some("invalid-syntax"),
        ),
        (
            "try:\n    pass\nexcept* ValueError:\n    pass\nexcept TypeError:\n    pass\n",
            Some("invalid-syntax"),
        ),
        (
            "try:\n    pass\nexcept* ValueError:\n    pass\nexcept* (TypeError, KeyError) as e:\n    pass\n",
            None,
        ),
        ("import \nshutil\n", Some("invalid-syntax")),
        ("x = a +\n    b\n", Some("invalid-syntax")),
        ("if a +\n    b:\n    pass\n", Some("invalid-syntax")),
        ("a = 1  b = 2\n", Some("invalid-syntax")),
        ("x = f(1)y = 2\n", Some("invalid-syntax")),
        ("x = 1; y = 2\n", None),
        ("from __future__ import lines\n", Some("invalid-syntax")),
        ("from __future__ import braces\n", Some("invalid-syntax")),
        ("from __future__ import annotations, division as d\n", None),
        (
            "try:\n    pass\nexcept:\n    pass\nexcept E:\n    pass\n",
            Some("invalid-syntax"),
        ),
        (
            "try:\n    pass\nexcept E:\n    pass\nexcept:\n    pass\nelse:\n    pass\n",
            None,
        ),
        ("a = [1] \\\nb = 2\n", Some("invalid-syntax")),
        ("a = [1] + \\\n    [2]\n", None),
        (
            "try:\n    pass\nexcept* ValueError \n :\n    raise\n",
            Some("missing-token"),
        ),
        (
            "if a:\n    pass\nelif b\n:\n    pass\n",
            Some("missing-token"),
        ),
        ("if a:\n    pass\nelif (b\n):\n    pass\n", None),
        ("r = [async for i in b]\n", Some("invalid-syntax")),
        ("p = await .x\n", Some("invalid-syntax")),
        (
            "async def g():\n    return [i async for i in await b()]\n",
            None,
        ),
        ("x = {\"\n\": 1}\n", Some("unterminated-string")),
        ("s = 'a\\\nb'\n", None),
        (
            "@dec\ndef f(\n    a,\n) -> int:\n    return (1 +\n        2)\n\n\nif a and \\\n        b:\n    pass\n",
            None,
        ),
        (
            "match x:\n    case [\"a\", y]:\n        pass\n    case _:\n        pass\n",
            None,
        ),
        ("break\n", Some("break-outside-loop")),
        ("if x:\n    continue\n", Some("continue-outside-loop")),
        (
            "for i in x:\n    pass\nelse:\n    break\n",
            Some("break-outside-loop"),
        ),
        (
            "while x:\n    def f():\n        continue\n",
            Some("continue-outside-loop"),
        ),
        (
            "for i in x:\n    class C:\n        break\n",
            Some("break-outside-loop"),
        ),
        (
            "for i in x:\n    if i:\n        break\n    continue\n",
            None,
        ),
        (
            "while a:\n    for i in x:\n        pass\n    else:\n        break\n",
            None,
        ),
        (
            "for i in x:\n    try:\n        pass\n    finally:\n        continue\n",
            None,
        ),
        (
            "def f():\n    while 1:\n        with a:\n            break\n",
            None,
        ),
        ("nonlocal x\n", Some("nonlocal-outside-function")),
        ("from m import a,\n", Some("invalid-syntax")),
        ("from m import (a,)\n", None),
        (
            "class C:\n    nonlocal x\n",
            Some("nonlocal-outside-function"),
        ),
        (
            "def f():\n    x = 1\n    def g():\n        nonlocal x\n",
            None,
        ),
    ];

    const BASH: &[(&str, Option<&str>)] = &[
        // A `{` glued to a word is part of the word, a lone `$` a literal dollar.
        ("{echo \"x\"\nls | {amount, b}\n", None),
        ("{echo;}\n", Some("unexpected-token")),
        ("printf '%s' $ x\n[[ -n $a && $ =~ ^x ]]\n", None),
        // `${#x-}` and `${@[a]}` fail only when expanded; `$(` + newline + `)` is empty.
        ("echo ${#x-} ${@[a]}\nmake -j\"$(\n)\"n\n", None),
        // The grammar ends a body with an expansion at a line that is not the delimiter.
        ("cat <<EOFX\n$x\nEOF\n", Some("unterminated-heredoc")),
        ("cat <<EOFX\n$x\nEOFX\n", None),
        ("f() { }\n", Some("unexpected-token")),
        ("{ }\n", Some("unexpected-token")),
        (
            "if true; then\n  # only a comment\nfi\n",
            Some("unexpected-token"),
        ),
        (
            "if true; then :; else\n  # c\nfi\n",
            Some("unexpected-token"),
        ),
        ("if a; then b; elif c; then\nfi\n", Some("unexpected-token")),
        ("while true; do\n  # c\ndone\n", Some("unexpected-token")),
        ("for x in a; do done\n", Some("unexpected-token")),
        ("if a; then b; elif c; then d; else e; fi\n", None),
        ("case x in a) ;; esac\n", None),
        ("exec 3<>file\necho \"$(date)\"\n", None),
        ("exec 3<>file\necho hi\n", None),
        // a coprocess, named before a compound command; a here-string on descriptor 3
        (
            "coproc CALC { bc -l; }\ncoproc { a; }\ncoproc C2 ( b )\ncoproc bc -l\n",
            None,
        ),
        (
            "coproc W while true; do :; done\necho \"${CALC[1]}\"\n",
            None,
        ),
        ("gpg --passphrase-fd 3 -c f 3<<<\"$P\"\ncat 10<<<x\n", None),
        // a here-string after file redirections, on a command and on a compound command
        (
            "if b=$(f) && jq -e . >/dev/null <<<\"$b\"; then :; fi\nwhile read -r l; do :; done 2>&1 <<< \"$x\"\n",
            None,
        ),
        ("coproc C { }\n", Some("unexpected-token")),
        (
            "coproc while true; do :; done\ncoproc for ((i=0;i<3;i++)); do :; done\n",
            None,
        ),
        ("x=$( )\ny=``\necho \"a$()b\"\n", None),
        ("AZ# x\nexport K#=1\na=1 b#c\n", None),
        ("echo $((16#ff)) ${x#p} ${#x} $#\n", None),
        ("echo a$|| echo b\n", None),
        // a delimiter line with anything after the word does not end the here-document
        (
            "for h in a b; do\n  ssh \"$h\" bash <<X\nuptime\nX \ndone\n",
            Some("unterminated-heredoc"),
        ),
        (
            "if true; then\n  cat <<'END'\nq\nEND # end\nfi\n",
            Some("unterminated-heredoc"),
        ),
        ("while read -r l; do\n  cat <<X\n$l\nX\ndone < f\n", None),
    ];

    fn first_rule(v: &Validator, language: Language, text: &str) -> Option<String> {
        check(v, &Script::new(language, text))
            .first()
            .map(|f| f.rule.clone())
    }

    #[test]
    fn categories_match_the_interpreters() {
        let v = Validator::new(
            RuleSet::embedded().expect("rules"),
            ValidationConfig::default(),
        );
        for (language, table) in [(Language::Python, PYTHON), (Language::Bash, BASH)] {
            for (text, want) in table {
                let got = first_rule(&v, language, text);
                assert_eq!(got.as_deref(), *want, "{language:?}: {text:?}");
            }
        }
    }

    #[test]
    fn newer_syntax_names_both_versions() {
        let v = Validator::new(
            RuleSet::embedded().expect("rules"),
            ValidationConfig::default(),
        );
        let found = check(&v, &Script::new(Language::Python, "type X = int\n"));
        let message = &found.first().expect("a finding").message;
        assert!(
            message.contains("requires Python 3.12; the runner has 3.11")
                || message.contains("require Python 3.12; the runner has 3.11"),
            "{message}"
        );
    }
}
