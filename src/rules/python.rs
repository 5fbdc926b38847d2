//! Python semantics for rules: the grammar's kinds and the per-script handle ([`PySem`]) through
//! which rules see import aliases, constant folding and resolved callee names.
//!
//! Rules must see `sp.call` as `subprocess.call`, `getattr(__builtins__, 'ev' + 'al')` as `eval`, and
//! `ｅｘｅｃ` as `exec`. Facts are gathered in the one tree walk ([`PyFacts::observe`]) and are
//! flow-insensitive: a name bound twice keeps every binding, and a name assigned twice is not a constant.
//! Folding lives in `fold` (Python's value operations in `ops`), name resolution in `names`, a
//! call's arguments in `call`, the `call:` and `recursive:` keys in `matching`, values that flow
//! through names in `flow`, callables that schedulers run later in `deferred`.

use tree_sitter::Node;

pub use super::codec::decode_base64;

mod call;
mod deferred;
mod facts;
mod flow;
mod fold;
mod items;
mod loops;
mod matching;
mod names;
mod ops;
mod params;
mod scopes;

pub use facts::{Binding, PyFacts};
pub(crate) use ops::str_format;

use super::grammar::{Grammar, text};
use super::matcher::normalized;

/// Folding gives up on deeper expressions or longer values (both only occur in hostile input).
const MAX_FOLD_DEPTH: u8 = 40;
const MAX_FOLD_LEN: usize = 64 * 1024;
const MAX_NAMES: usize = 16;

/// Node-kind and field ids this module needs.
#[derive(Debug, Clone)]
pub struct PyKinds {
    pub call: u16,
    attribute: u16,
    pub(crate) identifier: u16,
    string: u16,
    concatenated_string: u16,
    binary_operator: u16,
    parenthesized_expression: u16,
    conditional_expression: u16,
    subscript: u16,
    slice: u16,
    integer: u16,
    unary_operator: u16,
    keyword_argument: u16,
    list: u16,
    tuple: u16,
    dictionary: u16,
    set: u16,
    pair: u16,
    pub(super) dictionary_splat: u16,
    pub(super) as_pattern: u16,
    string_content: u16,
    interpolation: u16,
    escape_interpolation: u16,
    import_statement: u16,
    import_from_statement: u16,
    aliased_import: u16,
    dotted_name: u16,
    wildcard_import: u16,
    assignment: u16,
    augmented_assignment: u16,
    for_statement: u16,
    comment: u16,
    generator_expression: u16,
    list_comprehension: u16,
    list_splat: u16,
    pub(crate) function_definition: u16,
    lambda: u16,
    class_definition: u16,
    f_parameters: u16,
    for_in_clause: u16,
    f_arguments: u16,
    f_argument: u16,
    f_object: u16,
    f_attribute: u16,
    f_name: u16,
    f_alias: u16,
    f_value: u16,
    f_key: u16,
    f_left: u16,
    f_right: u16,
    f_module_name: u16,
    f_subscript: u16,
    f_operator: u16,
    f_expression: u16,
    f_body: u16,
}

impl PyKinds {
    pub fn new(g: &Grammar) -> Self {
        let k = |n| g.known_kind(n);
        let f = |n| g.known_field(n);
        PyKinds {
            call: k("call"),
            attribute: k("attribute"),
            identifier: k("identifier"),
            string: k("string"),
            concatenated_string: k("concatenated_string"),
            binary_operator: k("binary_operator"),
            parenthesized_expression: k("parenthesized_expression"),
            conditional_expression: k("conditional_expression"),
            subscript: k("subscript"),
            slice: k("slice"),
            integer: k("integer"),
            unary_operator: k("unary_operator"),
            keyword_argument: k("keyword_argument"),
            list: k("list"),
            tuple: k("tuple"),
            dictionary: k("dictionary"),
            set: k("set"),
            pair: k("pair"),
            dictionary_splat: k("dictionary_splat"),
            as_pattern: k("as_pattern"),
            string_content: k("string_content"),
            interpolation: k("interpolation"),
            escape_interpolation: k("escape_interpolation"),
            import_statement: k("import_statement"),
            import_from_statement: k("import_from_statement"),
            aliased_import: k("aliased_import"),
            dotted_name: k("dotted_name"),
            wildcard_import: k("wildcard_import"),
            assignment: k("assignment"),
            augmented_assignment: k("augmented_assignment"),
            for_statement: k("for_statement"),
            comment: k("comment"),
            generator_expression: k("generator_expression"),
            list_comprehension: k("list_comprehension"),
            list_splat: k("list_splat"),
            function_definition: k("function_definition"),
            lambda: k("lambda"),
            class_definition: k("class_definition"),
            f_parameters: f("parameters"),
            for_in_clause: k("for_in_clause"),
            f_arguments: f("arguments"),
            f_argument: f("argument"),
            f_object: f("object"),
            f_attribute: f("attribute"),
            f_name: f("name"),
            f_alias: f("alias"),
            f_value: f("value"),
            f_key: f("key"),
            f_left: f("left"),
            f_right: f("right"),
            f_module_name: f("module_name"),
            f_subscript: f("subscript"),
            f_operator: f("operator"),
            f_expression: f("expression"),
            f_body: f("body"),
        }
    }
}

/// A call's callee: always its first child (`call: function arguments`), which is cheaper to
/// reach than by field.
pub(crate) fn function_of(call: Node<'_>) -> Option<Node<'_>> {
    call.child(0).filter(|c| c.is_named())
}

/// The object and the method name of a method call (`paths.append(p)`: `paths`, `append`).
pub(crate) fn method_call<'t>(k: &PyKinds, call: Node<'t>) -> Option<(Node<'t>, Node<'t>)> {
    let func = function_of(call)?;
    Some((
        func.child_by_field_id(k.f_object)?,
        func.child_by_field_id(k.f_attribute)?,
    ))
}

pub(super) fn is_name_expr(k: &PyKinds, node: Node<'_>) -> bool {
    let kind = node.kind_id();
    kind == k.identifier
        || kind == k.attribute
        || kind == k.call
        || kind == k.subscript
        || kind == k.conditional_expression
}

/// The name a positional parameter binds: `p`, `p: Path`, `p=1`, `p: int = 1` (not `*args`,
/// `**kw`, `self` excepted by the caller).
pub(super) fn parameter_name<'t>(k: &PyKinds, param: Node<'t>) -> Option<Node<'t>> {
    let name = match param.kind() {
        "identifier" => Some(param),
        "typed_parameter" => param.named_child(0),
        "default_parameter" | "typed_default_parameter" => param.child_by_field_name("name"),
        _ => None,
    };
    name.filter(|n| n.kind_id() == k.identifier)
}

pub(super) fn ident(node: Node<'_>, src: &str) -> String {
    normalized(text(node, src)).into_owned()
}

/// `a . b` (with any spacing) as `a.b`, NFKC-normalised.
pub(super) fn dotted(node: Node<'_>, src: &str) -> String {
    normalized(text(node, src))
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect()
}

/// Python semantics over one script's facts, as rules evaluate them.
#[derive(Debug, Clone, Copy)]
pub struct PySem<'a> {
    pub k: &'a PyKinds,
    pub facts: &'a PyFacts<'a>,
    pub src: &'a str,
    /// Fold `shlex.quote(x)` to a quoted placeholder (see [`PySem::fold_shell`]).
    pub(super) quoting: bool,
    /// While enumerating a loop's values (see [`PySem::possible_values`]): the loop variable and
    /// the constant item it stands for, and names bound once fold through their value.
    pub(super) bound: Option<(Node<'a>, Node<'a>)>,
}

impl<'a> PySem<'a> {
    pub fn new(k: &'a PyKinds, facts: &'a PyFacts<'a>, src: &'a str) -> Self {
        PySem {
            k,
            facts,
            src,
            quoting: false,
            bound: None,
        }
    }
}
