//! The walk's dispatch table: for every node kind, what the one tree walk does with its nodes
//! ([`super::walk::interest`]), built once per language and narrowed per script.
//!
//! Per script, before the walk, one pass over the text decides what can be switched off: rule
//! parts whose texts are absent ([`crate::rules::matcher::LiteralIndex`]), syntax checks whose
//! trigger text is absent, and the children of nodes that cannot hold anything of interest
//! (a plain string literal, a dotted name, a short Python expression without any of the characters
//! the interesting kinds need).

use super::syntax::Trigger;
use super::syntax::bash::BashSyntax;
use super::syntax::python::PySyntax;
use super::walk::interest::{CANDIDATE, CHILDREN, EXIT, FACT, FOLD, SITE, STRING, SYNTAX};
use super::{Language, secrets};
use crate::rules::bash::BashKinds;
use crate::rules::grammar::Grammar;
use crate::rules::python::PyKinds;
use crate::rules::{RuleSet, TreeRules};

/// Python expressions at most this long are tested for [`ExprSkip`] (a longer text costs more to
/// scan than its children to visit).
const MAX_SKIP_TEXT: usize = 96;

/// Node-kind ids the checks use, resolved once.
#[derive(Debug)]
pub(crate) struct Kinds {
    pub(crate) py: PyKinds,
    pub(crate) sh: BashKinds,
    pub(crate) py_syntax: PySyntax,
    pub(crate) sh_syntax: BashSyntax,
    /// Per language (python, bash): what the walk does with each node kind.
    interest: [Vec<u8>; 2],
    /// Per language: kinds whose children hold only kinds listed with them, when the node's text
    /// passes a test (a string without interpolation, a plain dotted name).
    leafy: [Vec<(u16, Vec<u16>, Leafy)>; 2],
    /// Per language: syntax checks of a kind that can only fire when the script holds some text.
    lexical: [Vec<(u16, Trigger)>; 2],
    /// Python: the characters and words that the text of a node of each kind contains, for the
    /// kinds that can occur inside an expression (`None`: no such characters, the kind can be
    /// anywhere).
    py_triggers: Vec<Option<&'static [&'static str]>>,
    /// Python: kinds that only occur as statements (never inside an expression).
    py_statements: Vec<bool>,
}

/// One script's table: what the walk does with each kind, and when it may skip children.
#[derive(Debug)]
pub(crate) struct ScriptTable {
    pub(crate) flags: Vec<u8>,
    leafy: Vec<Option<Leafy>>,
    expr: Option<ExprSkip>,
    language: Language,
}

/// Python: a short expression whose text holds none of these can hold no node the walk needs.
#[derive(Debug)]
struct ExprSkip {
    bytes: [bool; 128],
    words: Vec<&'static str>,
    statements: Vec<bool>,
}

/// When a node's children are only the kinds listed with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leafy {
    /// A string literal without interpolation: no `f` prefix (Python), no `$` or backquote (Bash).
    PlainString,
    /// A dotted name of plain identifiers (`os.path.join`).
    DottedName,
    /// Always (`$x`).
    Always,
}

impl Leafy {
    fn holds(self, language: Language, text: &str) -> bool {
        match (self, language) {
            (Leafy::Always, _) => true,
            (Leafy::DottedName, _) => text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.'),
            (Leafy::PlainString, Language::Python) => {
                let prefix = &text[..text.find(['"', '\'']).unwrap_or(0)];
                !prefix.contains(['f', 'F', 't', 'T'])
            }
            (Leafy::PlainString, Language::Bash) => {
                text.starts_with('"') && !text.contains(['$', '`'])
            }
        }
    }
}

/// Python kinds that can sit inside an expression, with the text every node of the kind holds
/// (for the reason the walk looks at it).
const PY_TRIGGERS: &[(&str, &[&str])] = &[
    ("call", &["("]),
    ("argument_list", &["("]),
    ("parameters", &["("]),
    ("string", &["\"", "'"]),
    ("concatenated_string", &["\"", "'"]),
    ("interpolation", &["{"]),
    ("type_conversion", &["!"]),
    ("string_start", &["`"]),
    ("binary_operator", &["+", "%"]),
    ("lambda", &["lambda"]),
    ("lambda_parameters", &["lambda"]),
    ("yield", &["yield"]),
    ("identifier", &["async", "await"]),
    ("integer", &["0"]),
    ("comparison_operator", &["<>"]),
    ("as_pattern", &[" as "]),
];

impl Kinds {
    pub(crate) fn new(rules: &RuleSet) -> Self {
        let py = Grammar::new(Language::Python);
        let sh = Grammar::new(Language::Bash);
        let py_kinds = PyKinds::new(&py);
        let sh_kinds = BashKinds::new(&sh);
        let py_syntax = PySyntax::new(&py);
        let sh_syntax = BashSyntax::new(&sh);
        let table = |g: &Grammar, groups: &[(u8, Vec<u16>)]| {
            let mut t = vec![0u8; g.kind_count()];
            let tree = rules.tree(g.language);
            for (kind, flags) in t.iter_mut().enumerate() {
                if tree.indexes_kind(kind) {
                    *flags |= CANDIDATE;
                }
            }
            for (flag, kinds) in groups {
                for &k in kinds {
                    t[usize::from(k)] |= flag;
                }
            }
            t
        };
        let kind = |g: &Grammar, names: &[&str]| {
            names.iter().map(|n| g.known_kind(n)).collect::<Vec<u16>>()
        };
        let py_facts = [
            "import_statement",
            "import_from_statement",
            "assignment",
            "augmented_assignment",
            "for_statement",
            // a comprehension's `for` clause binds its variable like a loop
            "for_in_clause",
            "as_pattern",
            // `opts.update(shell=True)` adds to a dict a later `**opts` passes
            "call",
            // parameters, bound to what the calls pass (`prune("/etc")`, `map(wipe, paths)`)
            "function_definition",
            "lambda",
            // classes: their calls bind `__init__`'s parameters
            "class_definition",
        ];
        let py_table = table(
            &py,
            &[
                (FACT, kind(&py, &py_facts)),
                (SYNTAX, py_syntax.kinds()),
                (CHILDREN, py_syntax.children_kinds()),
                (EXIT, py_syntax.exit_kinds()),
                (SITE, vec![py_kinds.call]),
                (STRING, kind(&py, &["string"])),
                (FOLD, kind(&py, secrets::PY_FOLD_KINDS)),
            ],
        );
        let sh_table = table(
            &sh,
            &[
                (
                    FACT,
                    kind(
                        &sh,
                        &[
                            "variable_assignment",
                            "for_statement",
                            "command",
                            "function_definition",
                            "case_statement",
                        ],
                    ),
                ),
                (SYNTAX, sh_syntax.kinds()),
                (SITE, vec![sh_kinds.command]),
                (
                    STRING,
                    kind(&sh, &["string", "raw_string", "ansi_c_string", "word"]),
                ),
                (FOLD, kind(&sh, secrets::SH_FOLD_KINDS)),
            ],
        );
        let mut py_triggers = vec![None; py.kind_count()];
        for (name, triggers) in PY_TRIGGERS {
            py_triggers[usize::from(py.known_kind(name))] = Some(*triggers);
        }
        Kinds {
            leafy: leafy_kinds(&py, &sh),
            lexical: [py_syntax.lexical_kinds(), Vec::new()],
            py_statements: statement_kinds(&py),
            py_triggers,
            py: py_kinds,
            sh: sh_kinds,
            py_syntax,
            sh_syntax,
            interest: [py_table, sh_table],
        }
    }

    /// The table for one script: the language's table with what cannot fire in it switched off.
    /// `present` says which texts the rules need the script holds.
    pub(crate) fn script_table(
        &self,
        language: Language,
        src: &str,
        rules: &TreeRules,
        present: &[bool],
    ) -> ScriptTable {
        let l = usize::from(language == Language::Bash);
        let mut flags = self.interest[l].clone();
        for (kind, f) in flags.iter_mut().enumerate() {
            if *f & CANDIDATE != 0 && !rules.kind_possible(kind, present) {
                *f &= !CANDIDATE;
            }
        }
        for &(kind, present) in &self.lexical[l] {
            if !present(src.as_bytes()) {
                flags[usize::from(kind)] &= !SYNTAX;
            }
        }
        let mut leafy = vec![None; flags.len()];
        for (kind, parts, test) in &self.leafy[l] {
            let k = usize::from(*kind);
            let idle = parts
                .iter()
                .all(|p| flags.get(usize::from(*p)).copied().unwrap_or(0) == 0);
            if idle && flags[k] & (CHILDREN | EXIT) == 0 {
                leafy[k] = Some(*test);
            }
        }
        let expr = match language {
            Language::Python => self.expr_skip(&flags),
            Language::Bash => None,
        };
        ScriptTable {
            flags,
            leafy,
            expr,
            language,
        }
    }

    /// The characters an interesting Python expression holds, when every kind with something to
    /// do is either a statement or has triggers.
    fn expr_skip(&self, flags: &[u8]) -> Option<ExprSkip> {
        let mut bytes = [false; 128];
        let mut words = Vec::new();
        for (kind, &f) in flags.iter().enumerate() {
            if f == 0 || self.py_statements[kind] {
                continue;
            }
            for t in self.py_triggers[kind]? {
                match t.as_bytes() {
                    [b] => bytes[usize::from(*b)] = true,
                    _ => words.push(*t),
                }
            }
        }
        Some(ExprSkip {
            bytes,
            words,
            statements: self.py_statements.clone(),
        })
    }
}

impl ScriptTable {
    /// Whether the walk can skip the children of `node` (whose text is `text`).
    pub(crate) fn skip_children(&self, node: tree_sitter::Node<'_>, src: &str) -> bool {
        let kind = usize::from(node.kind_id());
        if let Some(Some(test)) = self.leafy.get(kind) {
            return test.holds(self.language, &src[node.byte_range()]);
        }
        let Some(expr) = &self.expr else {
            return false;
        };
        let range = node.byte_range();
        if range.len() > MAX_SKIP_TEXT {
            return false;
        }
        let text = &src[range];
        self.flags
            .get(kind)
            .is_some_and(|f| f & (CHILDREN | EXIT) == 0)
            && !expr.statements.get(kind).copied().unwrap_or(true)
            && node.is_named()
            && !text
                .bytes()
                .any(|b| expr.bytes.get(usize::from(b)).copied().unwrap_or(true))
            && !expr.words.iter().any(|w| text.contains(w))
    }
}

/// Python kinds that are statements or parts of one (never inside an expression).
fn statement_kinds(py: &Grammar) -> Vec<bool> {
    let mut out = vec![false; py.kind_count()];
    for (id, slot) in out.iter_mut().enumerate() {
        let Ok(id) = u16::try_from(id) else { continue };
        let Some(name) = py.ts().node_kind_for_id(id) else {
            continue;
        };
        *slot = py.ts().node_kind_is_named(id)
            && (name.ends_with("_statement")
                || name.ends_with("_clause")
                || matches!(
                    name,
                    "module"
                        | "block"
                        | "assignment"
                        | "augmented_assignment"
                        | "function_definition"
                        | "class_definition"
                        | "decorated_definition"
                        | "decorator"
                ));
    }
    out
}

fn leafy_kinds(py: &Grammar, sh: &Grammar) -> [Vec<(u16, Vec<u16>, Leafy)>; 2] {
    // Named kinds by name, anonymous ones (punctuation) too.
    let ids = |g: &Grammar, names: &[&str]| -> Vec<u16> {
        names
            .iter()
            .filter_map(|n| {
                g.kind(n).or_else(|| {
                    let id = g.ts().id_for_node_kind(n, false);
                    (id != 0).then_some(id)
                })
            })
            .collect()
    };
    let string_parts = ids(
        py,
        &[
            "string_start",
            "string_content",
            "escape_sequence",
            "string_end",
        ],
    );
    let dotted_parts = ids(py, &["identifier", "attribute", "dotted_name", "."]);
    [
        vec![
            (py.known_kind("string"), string_parts, Leafy::PlainString),
            (
                py.known_kind("attribute"),
                dotted_parts.clone(),
                Leafy::DottedName,
            ),
            (
                py.known_kind("dotted_name"),
                dotted_parts,
                Leafy::DottedName,
            ),
        ],
        vec![
            (
                sh.known_kind("string"),
                ids(sh, &["string_content", "\""]),
                Leafy::PlainString,
            ),
            (
                sh.known_kind("simple_expansion"),
                ids(sh, &["$", "variable_name", "special_variable_name"]),
                Leafy::Always,
            ),
        ],
    ]
}
