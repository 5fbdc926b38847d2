//! Prints the syntax tree a script parses to, for rule authors:
//! `cargo run --example tree -- script.sh` (the language is taken as `validate` takes it). The
//! tree is that of the text the rules see: after the rewrites that close the grammars' gaps
//! (`syntax::bash::normalize`, `syntax::python::brackets::normalize`).
use std::io::Write as _;

use scriptgate::domain::script::Language;
use scriptgate::rules::grammar::Grammar;
use scriptgate::validate::syntax;

fn main() {
    let path = std::env::args().nth(1).expect("script path");
    let text = std::fs::read_to_string(&path).expect("readable script");
    let language = Language::detect(&path, &text).expect("known language");
    let parsed = match language {
        Language::Bash => syntax::bash::normalize(&text),
        Language::Python => syntax::python::brackets::normalize(&text),
    };
    let tree = Grammar::new(language).parse(&parsed);
    writeln!(std::io::stdout(), "{}", tree.root_node().to_sexp()).expect("stdout");
}
