//! Split secrets: string expressions assembled from literals (`"ghp_" + "…"`, adjacent literals,
//! f-strings, `%` and `.format` of constants, Bash `"$a$b"`) are folded to their value, which is then
//! scanned like any other text.
//!
//! The candidates come from the one tree walk; only the outermost expression that folds is scanned,
//! and a secret that also appears verbatim in the script is left to the plain-text scan.

use tree_sitter::Node;

use crate::rules::matcher::Sem;
use crate::rules::python::str_format;

/// Python node kinds that may assemble a string.
pub const PY_FOLD_KINDS: &[&str] = &[
    "binary_operator",
    "concatenated_string",
    "string",
    "call",
    "pair",
    "keyword_argument",
    "assignment",
];
/// Bash node kinds that may assemble a string.
pub const SH_FOLD_KINDS: &[&str] = &["string", "concatenation", "command_substitution"];

/// A folded expression: the text to scan and the node it came from.
#[derive(Debug)]
pub struct Folded<'t> {
    pub node: Node<'t>,
    /// The value, prefixed with `name = ` when the expression is assigned to a name, so that rules
    /// keyed on a variable name see it.
    pub text: String,
    /// Byte offset of the value within `text`.
    pub value_at: usize,
}

/// The outermost foldable expressions among `nodes` (in document order) and their values.
pub fn fold_all<'t>(nodes: &[Node<'t>], src: &str, sem: &Sem<'_>) -> Vec<Folded<'t>> {
    let mut out = Vec::new();
    let mut covered_until = 0;
    for &node in nodes {
        if let Some(slot) = credential_slot(node, src, sem) {
            out.push(slot);
            continue;
        }
        if let Some(pairs) = unpacked_credentials(node, src, sem) {
            out.extend(pairs);
            continue;
        }
        if node.start_byte() < covered_until || !assembles(node, src) || !sem.may_fold(node) {
            continue;
        }
        let format = || match sem {
            Sem::Python(_) => fold_format(node, src, sem),
            Sem::Bash(_) => None,
        };
        let Some(mut value) = sem.fold(node).or_else(format) else {
            continue;
        };
        // A key decoded to raw bytes (`bytes.fromhex("74808e…")`) is scanned as its encoded literal:
        // that is the secret's printable form.
        if value
            .chars()
            .any(|c| c.is_control() || c == char::REPLACEMENT_CHARACTER)
            && let Some(encoded) = decoded_literal(node, src, sem)
        {
            value = encoded;
        }
        covered_until = node.end_byte();
        if value.len() < 8 {
            continue;
        }
        let (text, value_at) = match assigned_name(node, src) {
            Some(name) => {
                let prefix = format!("{name} = \"");
                let at = prefix.len();
                (format!("{prefix}{value}\""), at)
            }
            None => (value, 0),
        };
        out.push(Folded {
            node,
            text,
            value_at,
        });
    }
    out
}

/// Whether a name reads as a credential's (`DST_PASS`, `api_key`, `authToken`).
fn credential_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    [
        "pass",
        "pwd",
        "secret",
        "token",
        "key",
        "auth",
        "credential",
    ]
    .iter()
    .any(|w| lower.contains(w))
        && name.len() <= 64
        && !name.contains('\n')
}

/// `HOST, USER, PASSWORD = "imap.example", "me", "…"`: one assignment unpacking literals into
/// names. Each credential-named target is scanned as `NAME = "value"`, so the rules keyed on the
/// name see the value it gets (the line itself puts the names far from their values).
fn unpacked_credentials<'t>(node: Node<'t>, src: &str, sem: &Sem<'_>) -> Option<Vec<Folded<'t>>> {
    // (asked of every assignment: the common `name = value` leaves at its first child)
    if node.kind() != "assignment" {
        return None;
    }
    let targets = node.child(0)?;
    if !matches!(targets.kind(), "pattern_list" | "tuple_pattern") {
        return None;
    }
    let values = node.child_by_field_name("right")?;
    if !matches!(values.kind(), "expression_list" | "tuple") {
        return None;
    }
    let named = |n: Node<'t>| {
        let mut cursor = n.walk();
        n.named_children(&mut cursor)
            .filter(|c| c.kind() != "comment")
            .collect::<Vec<_>>()
    };
    let (targets, values) = (named(targets), named(values));
    if targets.len() != values.len() {
        return None;
    }
    let out: Vec<Folded<'t>> = targets
        .iter()
        .zip(&values)
        .filter(|(t, _)| t.kind() == "identifier" && credential_name(&src[t.byte_range()]))
        .filter_map(|(t, v)| {
            let value = sem.fold(*v).filter(|v| v.len() >= 8)?;
            let prefix = format!("{} = \"", &src[t.byte_range()]);
            Some(Folded {
                node: *v,
                value_at: prefix.len(),
                text: format!("{prefix}{value}\""),
            })
        })
        .collect();
    Some(out)
}

/// `{"DD-API-KEY": k}`, `f(api_key=k)`, `TOKEN = k`: a credential-named slot given a name whose
/// value is a constant (`k = base64.b64decode("…").decode()` earlier). The value is scanned under
/// the slot's name, so rules keyed on the name see it; a slot holding an expression is folded as
/// that expression, and any other name's value is scanned where it is written.
fn credential_slot<'t>(node: Node<'t>, src: &str, sem: &Sem<'_>) -> Option<Folded<'t>> {
    let Sem::Python(py) = sem else {
        return None;
    };
    let (name, value) = py.slot_given_a_name(node)?;
    let name = src[name.byte_range()].trim_matches(['"', '\'']);
    if !credential_name(name) {
        return None;
    }
    let value_text = sem.fold(value).filter(|v| v.len() >= 8)?;
    let prefix = format!("{name} = \"");
    Some(Folded {
        node: value,
        value_at: prefix.len(),
        text: format!("{prefix}{value_text}\""),
    })
}

/// Whether `node` builds a string out of parts (a lone literal is scanned as plain text already).
fn assembles(node: Node<'_>, src: &str) -> bool {
    let raw = &src[node.byte_range()];
    match node.kind() {
        "concatenated_string" => true,
        // `binary_operator: left operator right`
        "binary_operator" => node
            .child(1)
            .is_some_and(|op| matches!(&src[op.byte_range()], "+" | "%")),
        // `call: function arguments`
        "call" => node.child(0).is_some_and(|f| {
            let name = &src[f.byte_range()];
            name.ends_with(".format") || name.ends_with(".join") || decodes(name)
        }),
        // Python f-string with an interpolation, or a Bash double-quoted string with an expansion.
        "string" => {
            let quote = raw.find(['"', '\'']).unwrap_or(0);
            let prefix = &raw[..quote];
            if prefix.is_empty() && raw.starts_with('"') && raw.contains('$') {
                return true;
            }
            prefix.contains(['f', 'F']) && raw.contains('{')
        }
        // `$(echo … | base64 -d)`: a constant decoded by the shell
        "command_substitution" => true,
        // `"$a$b"`, and literals glued together (`"ghp_""…"`, `'a'"b"`)
        "concatenation" => {
            raw.contains('$')
                || crate::rules::grammar::children(node)
                    .filter(|c| c.is_named())
                    .count()
                    > 1
        }
        _ => false,
    }
}

/// Functions and methods that decode an encoded literal (`bytes.fromhex`, `base64.b64decode`,
/// `binascii.unhexlify`, `.decode()` of their result).
fn decodes(callee: &str) -> bool {
    const DECODERS: &[&str] = &[
        ".decode",
        "fromhex",
        "b64decode",
        "b32decode",
        "b16decode",
        "unhexlify",
        "a2b_hex",
        "a2b_base64",
        "decodebytes",
    ];
    DECODERS.iter().any(|d| callee.ends_with(d))
}

/// The constant first argument of the innermost decoder call in `node` (`bytes.fromhex(<this>)`
/// inside `bytes.fromhex(…).decode()`).
fn decoded_literal(node: Node<'_>, src: &str, sem: &Sem<'_>) -> Option<String> {
    let mut call = node;
    loop {
        let func = call.child(0)?;
        let args = call.child(1)?;
        let first = args.named_child(0);
        if func.kind() == "attribute"
            && src[func.byte_range()].ends_with(".decode")
            && let Some(inner) = func.child(0).filter(|o| o.kind() == "call")
        {
            call = inner;
            continue;
        }
        return first.and_then(|a| sem.fold(a)).filter(|v| v.len() >= 16);
    }
}

/// `"…".format(…)` with constant arguments: `{}`, `{0}` and `{name}` fields without a format spec.
fn fold_format(node: Node<'_>, src: &str, sem: &Sem<'_>) -> Option<String> {
    // `call: function arguments`, `attribute: object . attribute`
    let func = node.child(0)?;
    if func.kind() != "attribute" || !src[func.byte_range()].ends_with(".format") {
        return None;
    }
    let template = sem.fold(func.child(0)?)?;
    let args = node.child(1)?;
    let Sem::Python(py) = sem else {
        return None;
    };
    let mut positional = Vec::new();
    let mut named = Vec::new();
    for arg in crate::rules::grammar::children(args).filter(|c| c.is_named()) {
        if arg.kind() == "keyword_argument" {
            let name = &src[arg.child_by_field_name("name")?.byte_range()];
            named.push((name, sem.fold(arg.child_by_field_name("value")?)?));
        } else if arg.kind() != "comment" {
            positional.push(arg);
        }
    }
    str_format(&template, &py.fold_args(&positional, 1)?, &named)
}

/// The name an expression is assigned or passed to: `tok = …`, `f(token=…)`, `{"token": …}`,
/// Bash `tok="$a$b"`.
fn assigned_name(node: Node<'_>, src: &str) -> Option<String> {
    let parent = node.parent()?;
    let name = match parent.kind() {
        "assignment" => parent.child_by_field_name("left")?,
        "keyword_argument" | "variable_assignment" => parent.child_by_field_name("name")?,
        "pair" => parent.child_by_field_name("key")?,
        _ => return None,
    };
    // The value must be this node, not the left-hand side.
    if name.byte_range() == node.byte_range() {
        return None;
    }
    let name = src[name.byte_range()].trim_matches(['"', '\'']);
    (name.len() <= 64 && !name.contains('\n')).then(|| name.to_string())
}
