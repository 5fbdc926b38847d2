//! Validation cost against the bare tree-sitter parse of the same text.
//!
//! Target: full validation (size, syntax, language, secrets, dangerous) costs at most 1.25× the bare
//! parse, for realistic 10,000- and ~1,000-character scripts. Rounds of parse and validate alternate so
//! both see the same machine noise; medians over rounds are reported, with the ratio. The reference
//! design (CPython `ast.parse`, `bash -n` in a subprocess) is timed in the same run for orientation.
//!
//! Run: `cargo bench --bench validation`. Two more modes help find where the time goes:
//!
//! - `-- --phases`: the mean time of each step of validation per fixture, beside a bare cursor walk
//!   of the tree (the floor any check on the tree pays) and the number of nodes;
//! - `-- --commands`: what a run under a policy adds before the run, listing the script's command
//!   invocations (`Validator::commands`, a second walk) beside validation, per fixture;
//! - `-- --rules`: the mean time each tree rule part (`rule#n[kinds]`: its n-th `any`
//!   branch in cost order, and the kinds it is tried on) takes per
//!   fixture, the twelve most costly, beside all of them together;
//! - `-- --patterns <dir>` (with any mode): the rules of a directory instead of the embedded ones;
//! - `-- --profile <fixture> <seconds> [--count N] [--parse]`: validate (or only parse) one fixture in
//!   a loop, for a profiler. With `--count`, a fixed number of runs, so an instruction-counting
//!   profiler gives comparable figures: `valgrind --tool=callgrind
//!   --toggle-collect='*Validator*validate*' <bench binary> --profile agent_1k.py 0 --count 150`.

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

/// A cursor walk over every node, reading each kind: the floor of any check on the tree.
#[inline(never)]
fn bare_walk(tree: &tree_sitter::Tree) -> usize {
    let mut cursor = tree.walk();
    let mut kinds = 0usize;
    let mut count = 0;
    'nodes: loop {
        kinds += usize::from(cursor.node().kind_id());
        count += 1;
        if cursor.goto_first_child() {
            continue;
        }
        loop {
            if cursor.goto_next_sibling() {
                continue 'nodes;
            }
            if !cursor.goto_parent() {
                break 'nodes;
            }
        }
    }
    black_box(kinds);
    count
}

fn language_of(name: &str) -> Language {
    if name.ends_with(".py") {
        Language::Python
    } else {
        Language::Bash
    }
}

fn fixture(name: &str) -> Script {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/fixtures");
    let text = std::fs::read_to_string(format!("{dir}/{name}")).expect("fixture");
    Script::new(language_of(name), text)
}

/// The value after `flag` on the command line.
fn arg_after(flag: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == flag)?;
    args.get(at + 1).cloned()
}

/// `--phases`: each step's mean time per fixture.
fn phases(validator: &Validator) {
    const RUNS: u32 = 300;
    for name in FIXTURES {
        let script = fixture(name);
        let mut times = validator.phase_times(&script, RUNS);
        let tree = Grammar::new(script.language).parse(&script.text);
        let start = Instant::now();
        let mut nodes = 0usize;
        for _ in 0..RUNS {
            nodes = bare_walk(&tree);
        }
        times.push((
            "bare walk",
            start.elapsed().as_secs_f64() / f64::from(RUNS) * 1e6,
        ));
        let steps: Vec<String> = times
            .iter()
            .map(|(n, t)| format!("{n} {t:.1} µs"))
            .collect();
        println!("{name} ({nodes} nodes): {}", steps.join(" | "));
    }
}

/// `--rules`: the twelve most costly tree rule parts per fixture.
fn rule_costs(validator: &Validator) {
    const RUNS: u32 = 200;
    for name in FIXTURES {
        let script = fixture(name);
        let costs = validator.rule_costs(&script, RUNS);
        let total: f64 = costs.iter().map(|(_, t)| t).sum();
        let top: Vec<String> = costs
            .iter()
            .take(12)
            .map(|(id, t)| format!("{id} {t:.1}"))
            .collect();
        println!("{name}: all rules {total:.1} µs | {}", top.join(" | "));
    }
}

/// `--commands`: the cost of listing the command invocations beside validation (medians).
fn commands(validator: &Validator) {
    println!("| script | commands | validate (median) | commands (median) | ratio |");
    println!("|---|---:|---:|---:|---:|");
    for name in FIXTURES {
        let script = fixture(name);
        let found = validator.commands(&script).len();
        let iterations = 50;
        let (mut v, mut c) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            v.push(per_iteration(iterations, || {
                black_box(validator.validate(black_box(&script)));
            }));
            c.push(per_iteration(iterations, || {
                black_box(validator.commands(black_box(&script)));
            }));
        }
        let (v, c) = (median(v), median(c));
        println!(
            "| {name} | {found} | {:.1} µs | {:.1} µs | {:.2}× |",
            v * 1e6,
            c * 1e6,
            c / v
        );
    }
}

/// `--profile <fixture> <seconds> [--count N] [--parse]`: one fixture in a loop.
fn profile(validator: &Validator, name: &str) {
    let script = fixture(name);
    let seconds: f64 = std::env::args()
        .skip_while(|a| a != "--profile")
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10.0);
    let count: Option<u64> = arg_after("--count").and_then(|c| c.parse().ok());
    let parse_only = std::env::args().any(|a| a == "--parse");
    let grammar = Grammar::new(script.language);
    let start = Instant::now();
    let mut n = 0u64;
    loop {
        match count {
            Some(c) if n >= c => break,
            None if start.elapsed().as_secs_f64() >= seconds => break,
            _ => {}
        }
        if parse_only {
            black_box(grammar.parse(black_box(&script.text)));
        } else {
            black_box(validator.validate(black_box(&script)));
        }
        n += 1;
    }
    println!("{name}: {n} runs");
}

const FIXTURES: [&str; 4] = ["agent_10k.py", "agent_10k.sh", "agent_1k.py", "agent_1k.sh"];

fn main() {
    // `--patterns <dir>`: rules read from a directory instead of the embedded ones, to measure a
    // rule change without rebuilding.
    let rules = match arg_after("--patterns") {
        Some(dir) => RuleSet::from_dir(std::path::Path::new(&dir)),
        None => RuleSet::embedded(),
    };
    let validator = Validator::new(rules.expect("rules compile"), ValidationConfig::default());
    if std::env::args().any(|a| a == "--phases") {
        return phases(&validator);
    }
    if std::env::args().any(|a| a == "--commands") {
        return commands(&validator);
    }
    if std::env::args().any(|a| a == "--rules") {
        return rule_costs(&validator);
    }
    if let Some(name) = arg_after("--profile") {
        return profile(&validator, &name);
    }
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/fixtures");
    println!("| script | chars | parse (median) | validate (median) | ratio | reference design |");
    println!("|---|---:|---:|---:|---:|---:|");
    for name in FIXTURES {
        let language = language_of(name);
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
