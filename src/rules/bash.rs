//! Bash semantics for rules: the grammar's kinds, and the per-script handle ([`BashSem`]) through
//! which rules see constant words and the effective commands of a command line.
//!
//! `'r''m' -rf /`, `\rm`, `/bin/rm`, `$'\x72m'`, `c=$(printf '\x72\x6d'); $c` and `sudo env X=1 rm`
//! all run `rm`; rules see them that way. Variables are constants only when assigned once to a
//! constant (flow-insensitive, like the Python side): [`BashFacts`] gathers them in the one walk,
//! `fold` computes words' values, `commands` (with the `wrappers` table) the programs a command
//! runs, `matching` the `command:` and `recursive:` keys, `flow` the values a word may take.

use tree_sitter::Node;

mod commands;
mod download;
mod facts;
mod flow;
mod fold;
mod matching;
mod output;
mod wrappers;
use super::embed::Interpreters;
use super::grammar::Grammar;
pub use commands::base_name;
pub use download::downloaded_then_run;
pub use facts::BashFacts;
use fold::{unescape_dquoted, unescape_word};

#[derive(Debug, Clone)]
pub struct BashKinds {
    pub command: u16,
    pub command_name: u16,
    word: u16,
    string: u16,
    raw_string: u16,
    ansi_c_string: u16,
    translated_string: u16,
    concatenation: u16,
    simple_expansion: u16,
    expansion: u16,
    command_substitution: u16,
    string_content: u16,
    number: u16,
    variable_assignment: u16,
    for_statement: u16,
    array: u16,
    subscript: u16,
    case_statement: u16,
    pub function_definition: u16,
    pub pipeline: u16,
    pub list: u16,
    pub redirected_statement: u16,
    pub heredoc_redirect: u16,
    pub heredoc_body: u16,
    pub herestring_redirect: u16,
    pub f_name: u16,
    pub f_argument: u16,
    f_value: u16,
    f_variable: u16,
    f_body: u16,
    f_index: u16,
    pub f_redirect: u16,
}

impl BashKinds {
    pub fn new(g: &Grammar) -> Self {
        let k = |n| g.known_kind(n);
        let f = |n| g.known_field(n);
        BashKinds {
            command: k("command"),
            command_name: k("command_name"),
            word: k("word"),
            string: k("string"),
            raw_string: k("raw_string"),
            ansi_c_string: k("ansi_c_string"),
            translated_string: k("translated_string"),
            concatenation: k("concatenation"),
            simple_expansion: k("simple_expansion"),
            expansion: k("expansion"),
            command_substitution: k("command_substitution"),
            string_content: k("string_content"),
            number: k("number"),
            variable_assignment: k("variable_assignment"),
            for_statement: k("for_statement"),
            array: k("array"),
            subscript: k("subscript"),
            case_statement: k("case_statement"),
            function_definition: k("function_definition"),
            pipeline: k("pipeline"),
            list: k("list"),
            redirected_statement: k("redirected_statement"),
            heredoc_redirect: k("heredoc_redirect"),
            heredoc_body: k("heredoc_body"),
            herestring_redirect: k("herestring_redirect"),
            f_name: f("name"),
            f_argument: f("argument"),
            f_value: f("value"),
            f_variable: f("variable"),
            f_body: f("body"),
            f_index: f("index"),
            f_redirect: f("redirect"),
        }
    }
}

/// One program a command line runs: `sudo env X=1 rm -rf /` runs `sudo`, `env` and `rm`.
#[derive(Debug, Clone)]
pub struct Invocation<'t> {
    /// The program's base name (`/bin/rm` → `rm`); empty when it is only known at run time.
    pub name: String,
    pub args: Vec<Node<'t>>,
}

#[derive(Debug, Clone, Copy)]
pub struct BashSem<'a> {
    pub k: &'a BashKinds,
    pub facts: &'a BashFacts,
    pub src: &'a str,
    pub interpreters: Option<&'a Interpreters>,
}
