//! Tokens tree-sitter-bash splits or places where bash's own tokenizer does not: a reserved word
//! glued to the next word (`{gzip`, `for x inA`, `do$line`: one word for bash), `;;` outside a
//! `case` item, operators bash's `[[ … ]]` does not know (`&`, `/`, `-foo`), an unbalanced quote in a here-document's
//! delimiter (`<<'EOF`), and more words after the file of a redirection that follows a compound
//! command (`done < in out`). Messages are bash's.

use std::num::NonZeroU16;

use tree_sitter::Node;

use crate::rules::grammar::{children, text};

/// Reserved words that open or close a compound command; bash takes them only as whole words.
const KEYWORDS: [&str; 16] = [
    "{", "}", "if", "then", "elif", "else", "fi", "for", "select", "while", "until", "do", "done",
    "case", "in", "esac",
];

/// What may follow a reserved word in the same token stream: a blank, a metacharacter, or the end.
fn ends_word(next: Option<u8>) -> bool {
    next.is_none_or(|b| {
        matches!(
            b,
            b' ' | b'\t' | b'\n' | b'\r' | b';' | b'&' | b'|' | b'(' | b')' | b'<' | b'>'
        )
    })
}

/// A reserved word of a compound command (`node`) followed by more characters of the same word;
/// returns the offset and bash's word.
pub(super) fn glued_keyword(node: Node<'_>, src: &str) -> Option<(usize, String)> {
    let b = src.as_bytes();
    for child in children(node).filter(|c| !c.is_named()) {
        let t = text(child, src);
        if !KEYWORDS.contains(&t) || ends_word(b.get(child.end_byte()).copied()) {
            continue;
        }
        let rest = &src[child.end_byte()..];
        let end = rest
            .find(|c: char| c.is_whitespace() || ";&|()<>".contains(c))
            .unwrap_or(rest.len());
        return Some((child.start_byte(), format!("{t}{}", &rest[..end])));
    }
    None
}

/// `;;`, `;&` or `;;&` anywhere but at the end of a `case` item (`a;;b`), found from the text:
/// each occurrence is looked up in the tree (a string or comment holding one is not a token).
pub(super) fn stray_case_terminator(root: Node<'_>, src: &str) -> Option<(usize, &'static str)> {
    let b = src.as_bytes();
    for at in memchr::memchr_iter(b';', b) {
        let token = match b.get(at + 1) {
            Some(b';') if b.get(at + 2) == Some(&b'&') => ";;&",
            Some(b';') => ";;",
            Some(b'&') => ";&",
            _ => continue,
        };
        if at > 0 && b[at - 1] == b';' {
            continue;
        }
        let Some(node) = root.descendant_for_byte_range(at, at + token.len()) else {
            continue;
        };
        if node.is_named() || text(node, src) != token {
            continue;
        }
        if node.parent().is_none_or(|p| p.kind() != "case_item") {
            return Some((at, token));
        }
    }
    None
}

/// Operators of bash's conditional expressions (`[[ … ]]`) between two operands.
const BINARY: [&str; 17] = [
    "&&", "||", "=", "==", "!=", "<", ">", "=~", "-eq", "-ne", "-lt", "-le", "-gt", "-ge", "-nt",
    "-ot", "-ef",
];

/// Operators of bash's conditional expressions before one operand.
const UNARY: [&str; 27] = [
    "!", "-a", "-b", "-c", "-d", "-e", "-f", "-g", "-h", "-k", "-p", "-r", "-s", "-t", "-u", "-w",
    "-x", "-G", "-L", "-N", "-O", "-S", "-o", "-v", "-R", "-z", "-n",
];

/// A binary or unary expression inside `[[ … ]]` whose operator bash's conditional parser does
/// not know. The grammar parses `[[ … ]]` like arithmetic, so `[[ \\d /tmp ]]` becomes `\\d / tmp`
/// and `[[ a & b ]]` an `&`: for bash these are two words where an operator was expected. An
/// operator glued to both operands (`[[ a+b ]]`) is one word and fine.
pub(super) fn conditional_operator(node: Node<'_>, src: &str) -> Option<(usize, String)> {
    let binary = node.kind() == "binary_expression";
    let (op, before, after) = if binary {
        (node.child(1)?, node.child(0), node.child(2))
    } else {
        (node.child(0)?, None, node.child(1))
    };
    let t = text(op, src);
    let known = if binary {
        BINARY.contains(&t)
    } else {
        UNARY.contains(&t)
    };
    if known || !in_double_brackets(node, src) {
        return None;
    }
    let metachar = matches!(t, "&" | "|");
    let glued = before.is_none_or(|b| b.end_byte() == op.start_byte())
        && after.is_some_and(|a| a.start_byte() == op.end_byte());
    if glued && !metachar {
        return None;
    }
    let message = if metachar {
        format!("syntax error in conditional expression: unexpected token `{t}`")
    } else {
        "conditional binary operator expected".to_string()
    };
    Some((op.start_byte(), message))
}

/// Whether a conditional node is part of a `[[ … ]]` expression (not of `$(( ))` or `(( ))`).
fn in_double_brackets(node: Node<'_>, src: &str) -> bool {
    let mut at = node.parent();
    while let Some(n) = at {
        match n.kind() {
            "binary_expression" | "unary_expression" | "parenthesized_expression" => {
                at = n.parent();
            }
            "test_command" => return text(n, src).starts_with("[["),
            _ => return false,
        }
    }
    false
}

/// `<<'EOF` without the closing quote: bash reads to the end of the script looking for it.
pub(super) fn unbalanced_delimiter(start: Node<'_>, src: &str) -> Option<char> {
    let mut open: Option<char> = None;
    let mut escaped = false;
    for c in text(start, src).chars() {
        match (open, c) {
            (_, _) if escaped => escaped = false,
            (None | Some('"'), '\\') => escaped = true,
            (None, '\'' | '"') => open = Some(c),
            (Some(q), c) if c == q => open = None,
            _ => {}
        }
    }
    open
}

/// `while …; done < in out`: after a compound command a redirection takes one word; bash stops
/// at the next (after a simple command it is one more argument).
pub(super) fn extra_redirect_word<'t>(redirect: Node<'t>, destination: u16) -> Option<Node<'t>> {
    let statement = redirect.parent()?;
    if statement.kind() != "redirected_statement"
        || statement.child_by_field_name("body").is_none_or(|b| {
            !matches!(
                b.kind(),
                "while_statement"
                    | "for_statement"
                    | "c_style_for_statement"
                    | "if_statement"
                    | "case_statement"
                    | "compound_statement"
                    | "subshell"
            )
        })
    {
        return None;
    }
    let mut cursor = redirect.walk();
    let mut words = redirect.children_by_field_id(NonZeroU16::new(destination)?, &mut cursor);
    let mut end = words.next()?.end_byte();
    // Pieces glued together (`f<(cmd)`) are one word for bash.
    for word in words {
        if word.start_byte() > end {
            return Some(word);
        }
        end = word.end_byte();
    }
    None
}

#[cfg(test)]
mod tests {
    use crate::domain::script::{Language, Script};
    use crate::rules::RuleSet;
    use crate::validate::{ValidationConfig, Validator};

    /// (script, whether `bash -n` (5.2) rejects it); every row was checked.
    const CASES: &[(&str, bool)] = &[
        ("compress() {gzip -k \"$1\"; }\n", true),
        ("f() {}\n", true),
        ("for p in4444 80; do :; done\n", true),
        ("for e in\"${!c[@]}\"; do :; done\n", true),
        ("while read l; do$l; done\n", true),
        ("if a; then b; fi; { c; }x\n", true),
        (
            "f() { g; }\n:(){ :|:& };:\nfor x in a;do :;done\nif a;then b;fi\n",
            false,
        ),
        ("case $x in(a) y ;; esac\n{ a; } >f\nx=$( { a; })\n", false),
        ("aws sts get-caller;;-identity\n", true),
        ("a ;& b\n", true),
        (
            "case x in\n a) echo \";;\" ;;\n b) : ;&\n c) : ;;\nesac # ;;\n",
            false,
        ),
        ("case x in\n c) : ;;&\n d) : ;;\nesac\n", false),
        ("[[ -n $a & $b ]] || x\n", true),
        ("[[ -z $l | $l == x ]] && c\n", true),
        ("[[ \\d /tmp && ! -L /tmp ]]\n", true),
        ("[[ - $a && $b =~ ^x ]]\n", true),
        ("[[ -n $a && $b =AK ^x ]]\n", true),
        ("[[ $x -foo $y ]]\n", true),
        (
            "[[ a+b ]] && [[ -n $a && ! -L /t || $b =~ ^(a|b)$ ]] && [[ ( -z $c ) ]]\n",
            false,
        ),
        (
            "[[ $a == *.txt && $a != a/b && $n -ge 3 && a < b ]]\n",
            false,
        ),
        (
            "echo $(( a & b | c )); (( x | y ))\n[[ $(( a & 1 )) -eq 1 ]]\n",
            false,
        ),
        ("cat > f <<'KEY\nabc\nKEY\n", true),
        ("cat <<\"EOF\nabc\nEOF\n", true),
        ("cat <<'EOF'\nabc\nEOF\ncat <<E\\'OF\nabc\nE'OF\n", false),
        ("while a; do :\ndone < /tmp x.txt\n", true),
        ("{ a; } < in out\n", true),
        ("cat < a b\nwhile a; do :; done < in > out\n", false),
        (
            "! ss -ltn 2>/dev/ null | awk '{print $1}'\necho a | tr a b 2>&1 sort\n",
            false,
        ),
        ("if ! command -v node >/dev/null yaml; then :; fi\n", false),
        ("while read -r e; do :; done < x<(find .)\n", false),
    ];

    #[test]
    fn tokens_bash_splits_differently_match_bash_n() {
        let v = Validator::new(
            RuleSet::embedded().expect("rules compile"),
            ValidationConfig::default(),
        );
        for (src, rejected) in CASES {
            let found = crate::validate::syntax::check(&v, &Script::new(Language::Bash, *src));
            assert_eq!(!found.is_empty(), *rejected, "{src:?}: {found:?}");
        }
    }
}
