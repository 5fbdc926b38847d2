//! Runs validation of one fixture in a loop, for profilers: `cargo run --release --example profile_validate -- benches/fixtures/agent_10k.py`.
use scriptgate::domain::script::{Language, Script};
use scriptgate::rules::RuleSet;
use scriptgate::validate::{ValidationConfig, Validator};

fn main() {
    let path = std::env::args().nth(1).expect("fixture path");
    let iterations: usize = std::env::args()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    let text = std::fs::read_to_string(&path).expect("readable fixture");
    let language = Language::detect(&path, &text).expect("known language");
    let validator = Validator::new(
        RuleSet::embedded().expect("rules"),
        ValidationConfig::default(),
    );
    let script = Script::new(language, text);
    for _ in 0..iterations {
        std::hint::black_box(validator.validate(&script));
    }
}
