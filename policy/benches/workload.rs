//! The benchmark's policy and operations, shared with the no-allocation test: a 50-rule policy
//! and a mix of decisions like a Python or shell script's (most reads of the interpreter's own
//! files, some scratch writes, a few denied).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use scriptgate_policy::{CompiledPolicy, Operation};

pub const POLICY: &str = include_str!("fifty-rules.yml");

pub fn policy() -> CompiledPolicy {
    let policy = serde_norway::from_str(POLICY).expect("the benchmark policy parses");
    CompiledPolicy::compile(policy).expect("the benchmark policy compiles")
}

pub const FILES: &[(Operation, &str)] = &[
    (Operation::Read, "/usr/lib/python3.11/encodings/__init__.py"),
    (Operation::Stat, "/usr/lib/python3.11/json/__init__.py"),
    (
        Operation::Read,
        "/usr/lib/python3.11/lib-dynload/_json.cpython-311-x86_64-linux-gnu.so",
    ),
    (Operation::List, "/usr/lib/python3.11/collections"),
    (Operation::Read, "/usr/lib/x86_64-linux-gnu/libc.so.6"),
    (Operation::Read, "/etc/ld.so.cache"),
    (Operation::Read, "/etc/localtime"),
    (Operation::Stat, "/usr/local/lib/python3.11/dist-packages"),
    (Operation::Read, "/usr/share/zoneinfo/UTC"),
    (Operation::Read, "/proc/self/status"),
    (Operation::Read, "/sys/devices/system/cpu/online"),
    (Operation::Write, "/tmp/output/result.csv"),
    (Operation::Create, "/tmp/scratch/a/b/c.txt"),
    (Operation::Write, "/dev/null"),
    (Operation::Exec, "/usr/bin/python3.11"),
    (Operation::Read, "/home/user/.ssh/id_ed25519"),
    (Operation::Read, "/root/.aws/credentials"),
    (Operation::Write, "/etc/passwd"),
    (Operation::Delete, "/usr/bin/ls"),
    (Operation::Read, "/opt/data/input.parquet"),
];

pub const COMMANDS: &[(&str, &[&str])] = &[
    ("/usr/bin/python3", &["python3", "-c", "print(1)"]),
    ("/usr/bin/ls", &["ls", "-la", "/tmp"]),
    ("/usr/bin/grep", &["grep", "-r", "needle", "."]),
    ("/usr/bin/pip", &["pip", "install", "requests"]),
    (
        "/usr/bin/python3",
        &["python3", "-m", "pip", "install", "numpy"],
    ),
    ("/usr/bin/curl", &["curl", "-s", "https://example.com"]),
    ("/usr/bin/git", &["git", "status"]),
    ("/usr/bin/git", &["git", "push", "origin", "main"]),
    ("/usr/bin/rm", &["rm", "-rf", "/tmp/build"]),
    ("/usr/bin/ssh", &["ssh", "host"]),
    ("/usr/local/bin/custom", &["custom", "--flag"]),
    ("/opt/tool/bin/thing", &["thing"]),
];

pub const NETWORK: &[(Option<&str>, Option<IpAddr>, u16)] = &[
    (None, Some(IpAddr::V4(Ipv4Addr::LOCALHOST)), 8080),
    (
        Some("pypi.org"),
        Some(IpAddr::V4(Ipv4Addr::new(151, 101, 0, 223))),
        443,
    ),
    (Some("files.pythonhosted.org"), None, 443),
    (Some("api.github.com"), None, 443),
    (Some("raw.githubusercontent.com"), None, 443),
    (
        Some("example.com"),
        Some(IpAddr::V4(Ipv4Addr::new(93, 184, 216, 34))),
        443,
    ),
    (
        None,
        Some(IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254))),
        80,
    ),
    (None, Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 5))), 5432),
    (Some("git.corp.example"), None, 8443),
    (
        None,
        Some(IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1))),
        22,
    ),
];
