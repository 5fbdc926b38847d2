//! Deciding does not allocate: a counting allocator around the whole benchmark workload.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

#[path = "../benches/workload.rs"]
mod workload;

struct Counting;

thread_local! {
    // Per thread: the test harness runs other tests (which allocate) at the same time.
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: the caller upholds `alloc`'s contract, which `System` shares.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above, i.e. from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn file_command_and_network_decisions_do_not_allocate() {
    let policy = workload::policy();
    let before = ALLOCATIONS.with(Cell::get);
    let mut decided = 0usize;
    for _ in 0..100 {
        for (op, path) in workload::FILES {
            decided += policy.decide_file(*op, *path).rule().map_or(0, str::len);
        }
        for (program, argv) in workload::COMMANDS {
            decided += policy
                .decide_command(program, argv)
                .rule()
                .map_or(0, str::len);
        }
        for (domain, ip, port) in workload::NETWORK {
            decided += policy
                .decide_network(*domain, *ip, *port)
                .rule()
                .map_or(0, str::len);
        }
    }
    let after = ALLOCATIONS.with(Cell::get);
    assert!(decided > 0);
    assert_eq!(after - before, 0, "allocations while deciding");
}

#[test]
fn the_workload_decides_as_the_policy_says() {
    let policy = workload::policy();
    let file = |i: usize| {
        let (op, path) = workload::FILES[i];
        let v = policy.decide_file(op, path);
        (v.decision.as_str(), v.rule())
    };
    assert_eq!(file(0), ("allow", Some("python-stdlib")));
    assert_eq!(file(11), ("allow", Some("scratch")));
    assert_eq!(file(15), ("deny", Some("ssh-keys")));
    assert_eq!(file(17), ("deny", Some("no-other-writes")));
    assert_eq!(file(19), ("log", Some("read-anything-else")));
    let command = |i: usize| {
        let (program, argv) = workload::COMMANDS[i];
        let v = policy.decide_command(program, argv);
        (v.decision.as_str(), v.rule())
    };
    assert_eq!(command(3), ("approve", Some("pip-install")));
    assert_eq!(command(4), ("approve", Some("python-pip")));
    assert_eq!(command(7), ("approve", Some("git-push")));
    assert_eq!(command(11), ("deny", Some("unknown-programs")));
    let network = |i: usize| {
        let (domain, ip, port) = workload::NETWORK[i];
        let v = policy.decide_network(domain, ip, port);
        (v.decision.as_str(), v.rule())
    };
    assert_eq!(network(0), ("allow", Some("loopback")));
    assert_eq!(network(4), ("allow", Some("github")));
    assert_eq!(network(6), ("deny", Some("metadata")));
    assert_eq!(network(9), ("deny", Some("no-network")));
}
