//! Prints the syntax tree a script parses to, for rule authors:
//! `cargo run --example tree -- script.sh` (the language is taken as `validate` takes it).
use std::io::Write as _;

use scriptgate::domain::script::Language;
use scriptgate::rules::grammar::Grammar;

fn main() {
    let path = std::env::args().nth(1).expect("script path");
    let text = std::fs::read_to_string(&path).expect("readable script");
    let language = Language::detect(&path, &text).expect("known language");
    let tree = Grammar::new(language).parse(&text);
    writeln!(std::io::stdout(), "{}", tree.root_node().to_sexp()).expect("stdout");
}
