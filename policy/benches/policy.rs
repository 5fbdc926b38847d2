//! Policy evaluation speed: file, command and network decisions per second on a realistic 50-rule
//! policy (`fifty-rules.yml`), against a goal of 1,000,000 decisions/s. Each round decides the
//! whole mix of `workload.rs` (most operations matched by a middle rule, some by the last, some
//! denied by default), so the figure is an average over the mix, not a best case.
//!
//! Run: `cargo bench -p scriptgate-policy --bench policy`. Criterion's `thrpt` is decisions/s;
//! the summary at the end prints the median of each kind and its ratio to the goal. Figures are
//! printed, never asserted: the machine is shared and noisy.

#![allow(clippy::print_stdout)] // printing the figures is what this file is for

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use scriptgate_policy::CompiledPolicy;

mod workload;

const GOAL: f64 = 1_000_000.0;

fn files(policy: &CompiledPolicy) -> usize {
    let mut n = 0;
    for (op, path) in workload::FILES {
        n += black_box(policy.decide_file(*op, black_box(*path))).decision as usize;
    }
    n
}

fn commands(policy: &CompiledPolicy) -> usize {
    let mut n = 0;
    for (program, argv) in workload::COMMANDS {
        n += black_box(policy.decide_command(black_box(program), argv)).decision as usize;
    }
    n
}

fn network(policy: &CompiledPolicy) -> usize {
    let mut n = 0;
    for (domain, ip, port) in workload::NETWORK {
        n += black_box(policy.decide_network(black_box(*domain), *ip, *port)).decision as usize;
    }
    n
}

type Kind = (&'static str, usize, fn(&CompiledPolicy) -> usize);

const KINDS: [Kind; 3] = [
    ("file", workload::FILES.len(), files),
    ("command", workload::COMMANDS.len(), commands),
    ("network", workload::NETWORK.len(), network),
];

/// Decisions per second: the median of 31 rounds of about 20 ms each.
fn rate(policy: &CompiledPolicy, per_round: usize, f: fn(&CompiledPolicy) -> usize) -> f64 {
    let mut rates = Vec::new();
    for _ in 0..31 {
        let start = Instant::now();
        let mut decisions = 0usize;
        while start.elapsed() < Duration::from_millis(20) {
            for _ in 0..64 {
                black_box(f(policy));
            }
            decisions += 64 * per_round;
        }
        rates.push(decisions as f64 / start.elapsed().as_secs_f64());
    }
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}

fn main() {
    let policy = workload::policy();
    let mut criterion = Criterion::default().configure_from_args();
    let mut group = criterion.benchmark_group("decisions");
    for (kind, per_round, f) in KINDS {
        group.throughput(Throughput::Elements(per_round as u64));
        group.bench_function(kind, |b| b.iter(|| f(&policy)));
    }
    group.finish();
    criterion.final_summary();

    println!("\n50-rule policy, median of 31 rounds (goal: {GOAL:.0} decisions/s):");
    for (kind, per_round, f) in KINDS {
        let r = rate(&policy, per_round, f);
        println!(
            "  {kind:<8} {:>12.0} decisions/s  ({:.1}x the goal, {:.0} ns each)",
            r,
            r / GOAL,
            1e9 / r
        );
    }
    let started = Instant::now();
    for _ in 0..100 {
        black_box(workload::policy());
    }
    println!(
        "  parse + compile: {:.0} µs per policy",
        started.elapsed().as_secs_f64() * 1e6 / 100.0
    );
}
