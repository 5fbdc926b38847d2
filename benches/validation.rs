//! Validation cost against the bare tree-sitter parse of the same text.
//!
//! Target: full validation (size, syntax, language, secrets, dangerous) costs at most 1.25× the bare
//! parse, for realistic 10,000- and ~1,000-character scripts. Rounds of parse and validate alternate so
//! both see the same machine noise; medians over rounds are reported, with the ratio. The reference
//! design (CPython `ast.parse`, `bash -n` in a subprocess) is timed in the same run for orientation.
//!
//! Run: `cargo bench --bench validation`

#![allow(clippy::print_stdout)] // printing the figures is what this file is for

use std::hint::black_box;
use std::process::Command;
use std::time::{Duration, Instant};

use scriptgate::domain::script::{Language, Script};
use scriptgate::rules::RuleSet;
use scriptgate::rules::grammar::Grammar;
use scriptgate::validate::{ValidationConfig, Validator};

const ROUNDS: usize = 41;
const ROUND_TARGET: Duration = Duration::from_millis(25);

fn per_iteration(iterations: u32, mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..iterations {
        f();
    }
    start.elapsed().as_secs_f64() / f64::from(iterations)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn reference(language: Language, path: &str) -> Option<f64> {
    let out = match language {
        Language::Python => Command::new("python3")
            .args([
                "-c",
                "import ast,sys,time,re\nsrc=open(sys.argv[1]).read()\npats=[re.compile(p) for p in [r'\\beval\\(',r'\\bexec\\(',r'os\\.system',r'subprocess',r'AKIA[0-9A-Z]{16}',r'ghp_[A-Za-z0-9]{36}']]\nts=[]\nfor _ in range(41):\n t=time.perf_counter();ast.parse(src);[p.search(src) for p in pats];ts.append(time.perf_counter()-t)\nts.sort();print(ts[20])",
                path,
            ])
            .output()
            .ok()?,
        Language::Bash => {
            let mut times = Vec::new();
            for _ in 0..21 {
                let t = Instant::now();
                let status = Command::new("bash").args(["-n", path]).status().ok()?;
                if !status.success() {
                    return None;
                }
                times.push(t.elapsed().as_secs_f64());
            }
            return Some(median(times));
        }
    };
    String::from_utf8(out.stdout).ok()?.trim().parse().ok()
}

fn main() {
    let validator = Validator::new(
        RuleSet::embedded().expect("rules compile"),
        ValidationConfig::default(),
    );
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/fixtures");
    let fixtures = [
        ("agent_10k.py", Language::Python),
        ("agent_10k.sh", Language::Bash),
        ("agent_1k.py", Language::Python),
        ("agent_1k.sh", Language::Bash),
    ];
    println!("| script | chars | parse (median) | validate (median) | ratio | reference design |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, language) in fixtures {
        let path = format!("{dir}/{name}");
        let text = std::fs::read_to_string(&path).expect("fixture");
        let script = Script::new(language, text.clone());
        let verdict = validator.validate(&script);
        assert!(
            verdict.valid,
            "{name} must be valid: {:?}",
            verdict.findings
        );
        let grammar = Grammar::new(language);
        let parse = || {
            black_box(grammar.parse(black_box(&text)));
        };
        let validate = || {
            black_box(validator.validate(black_box(&script)));
        };
        // Size a round so it lasts about ROUND_TARGET.
        let once = per_iteration(3, validate);
        let iterations = ((ROUND_TARGET.as_secs_f64() / once) as u32).max(1);
        let (mut parses, mut validations) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            parses.push(per_iteration(iterations, parse));
            validations.push(per_iteration(iterations, validate));
        }
        let (p, v) = (median(parses), median(validations));
        let reference =
            reference(language, &path).map_or("n/a".to_string(), |r| format!("{:.3} ms", r * 1e3));
        println!(
            "| {name} | {} | {:.3} ms | {:.3} ms | {:.2}× | {reference} |",
            text.chars().count(),
            p * 1e3,
            v * 1e3,
            v / p
        );
    }
}
