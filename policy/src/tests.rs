//! Policies as a whole: every rule kind decides as documented, and every kind of bad input is
//! refused with its line (from YAML) or its key path (in code). One file on purpose: each case is
//! a policy text and its expectations, read top to bottom like a table.

use std::net::IpAddr;

use crate::limits::{MAX_PATTERNS, MAX_RULES};
use crate::{
    CompiledPolicy, Decision, FileRule, Operation, OperationSpec, Policy, PolicyError, Problem,
    WirePolicy,
};

fn parse(yaml: &str) -> Result<Policy, serde_norway::Error> {
    serde_norway::from_str(yaml)
}

fn compile(yaml: &str) -> CompiledPolicy {
    CompiledPolicy::compile(parse(yaml).expect("parses")).expect("compiles")
}

/// The error and its line, for a policy that must not parse.
fn refused(yaml: &str) -> (String, usize) {
    let err = parse(yaml).expect_err("refused");
    let line = err.location().map_or(0, |l| l.line());
    (err.to_string(), line)
}

const FILES: &str = r#"
version: 1
name: files
file_rules:
  - name: scratch
    paths: [/tmp/**, /dev/shm/**]
    operations: ["*"]
    decision: allow
  - name: credentials
    paths: ["**/.ssh/**", /etc/shadow]
    operations: ["*"]
    decision: deny
    message: "{operation} of {path} is refused"
  - name: read-system
    paths: [/**]
    operations: [read, list, stat, exec]
    decision: allow
  - name: watch-writes
    paths: [/var/log/**]
    operations: [write]
    decision: log
"#;

#[test]
fn file_rules_first_match_wins_by_operation_and_path() {
    let p = compile(FILES);
    let d = |op, path: &str| {
        let v = p.decide_file(op, path);
        (v.decision, v.rule())
    };
    assert_eq!(
        d(Operation::Write, "/tmp/x"),
        (Decision::Allow, Some("scratch"))
    );
    assert_eq!(
        d(Operation::Read, "/tmp/.ssh/id"),
        (Decision::Allow, Some("scratch")),
        "an earlier rule wins"
    );
    assert_eq!(
        d(Operation::Read, "/home/u/.ssh/id_rsa"),
        (Decision::Deny, Some("credentials"))
    );
    assert_eq!(
        d(Operation::Read, "/usr/lib/os.py"),
        (Decision::Allow, Some("read-system"))
    );
    assert_eq!(
        d(Operation::Write, "/var/log/x"),
        (Decision::Log, Some("watch-writes"))
    );
    assert_eq!(d(Operation::Write, "/etc/passwd"), (Decision::Deny, None));
    assert_eq!(
        d(Operation::Read, "/tmp/../etc/shadow"),
        (Decision::Deny, Some("credentials")),
        "`..` is folded before matching"
    );
    let v = p.decide_file(Operation::Stat, b"/etc/shadow".as_slice());
    assert_eq!(
        v.message().expect("has one").to_string(),
        "stat of /etc/shadow is refused"
    );
    let v = p.decide_file(Operation::Delete, "/usr/bin/ls");
    assert_eq!(
        v.message().expect("default").to_string(),
        "no file rule matches delete of /usr/bin/ls: denied by default"
    );
    assert!(p.decide_file(Operation::Read, "/tmp/x").message().is_none());
}

#[test]
fn an_empty_section_denies_and_a_catch_all_says_otherwise() {
    let p = compile("version: 1\nname: empty\n");
    assert_eq!(p.decide_file(Operation::Read, "/").decision, Decision::Deny);
    assert_eq!(p.decide_command("ls", &["ls"]).decision, Decision::Deny);
    assert_eq!(p.decide_network(None, None, 1).decision, Decision::Deny);
    let p = compile(
        "version: 1\nname: open\nfile_rules: [{name: all, paths: ['**'], operations: ['*'], decision: log}]\ncommand_rules: [{name: all-commands, commands: ['*'], decision: allow}]\nnetwork_rules: [{name: anywhere, decision: log}]\n",
    );
    assert_eq!(
        p.decide_file(Operation::Create, "relative/x").decision,
        Decision::Log
    );
    assert_eq!(
        p.decide_command("/opt/x", &["x", "y"]).decision,
        Decision::Allow
    );
    assert_eq!(p.decide_network(None, None, 9).decision, Decision::Log);
}

const COMMANDS: &str = r#"
version: 1
name: commands
command_rules:
  - name: pip-install
    commands: [pip, "pip3*"]
    args_pattern: ["install{, *}"]
    decision: approve
    message: "{command} {args} needs an operator"
  - name: python-pip
    commands: ["python3*", python]
    args_pattern: ["-m pip *"]
    decision: approve
  - name: no-curl-from-usr-local
    commands: [/usr/local/bin/*]
    decision: deny
  - name: no-network-tools
    commands: [curl, wget, nc]
    decision: deny
  - name: everything-else
    commands: ["*"]
    decision: allow
"#;

#[test]
fn command_rules_match_name_path_and_arguments() {
    let p = compile(COMMANDS);
    let d = |program: &str, argv: &[&str]| {
        let v = p.decide_command(program, argv);
        (v.decision, v.rule())
    };
    assert_eq!(
        d("pip", &["pip", "install", "requests"]),
        (Decision::Approve, Some("pip-install"))
    );
    assert_eq!(
        d("/usr/bin/pip3.11", &["pip3.11", "install"]),
        (Decision::Approve, Some("pip-install"))
    );
    assert_eq!(
        d("pip", &["pip", "list"]),
        (Decision::Allow, Some("everything-else"))
    );
    assert_eq!(
        d(
            "/usr/bin/python3",
            &["python3", "-m", "pip", "install", "x"]
        ),
        (Decision::Approve, Some("python-pip"))
    );
    assert_eq!(
        d("/usr/local/bin/tool", &["tool"]),
        (Decision::Deny, Some("no-curl-from-usr-local"))
    );
    assert_eq!(
        d("/usr/local/../local/bin/tool", &["tool"]),
        (Decision::Deny, Some("no-curl-from-usr-local"))
    );
    assert_eq!(
        d("tool", &["tool"]),
        (Decision::Allow, Some("everything-else")),
        "a bare name does not match path globs"
    );
    assert_eq!(
        d("/usr/bin/curl", &["curl", "x"]),
        (Decision::Deny, Some("no-network-tools"))
    );
    let argv = vec!["pip".to_string(), "install".into(), "requests".into()];
    let v = p.decide_command("pip", &argv);
    assert_eq!(
        v.message().expect("message").to_string(),
        "pip install requests needs an operator"
    );
    let long: Vec<String> = std::iter::once("pip".to_string())
        .chain(std::iter::once("install".into()))
        .chain((0..1000).map(|i| format!("package{i}")))
        .collect();
    assert_eq!(
        p.decide_command("pip", &long).decision,
        Decision::Approve,
        "arguments past the stack buffer still match"
    );
}

const PROGRAMS: &str = r#"
version: 1
name: programs
command_rules:
  - name: no-pip
    commands: ["pip*"]
    decision: deny
  - name: python-pip
    commands: ["python3*"]
    args_pattern: ["-m pip{, *}"]
    decision: deny
  - name: git-push
    commands: [git]
    args_pattern: ["push{, *}"]
    decision: approve
  - name: git-other
    commands: [git]
    decision: deny
  - name: listed
    commands: [ls, "python3*", "/opt/tools/*"]
    decision: allow
"#;

#[test]
fn a_program_may_run_when_some_arguments_reach_a_rule_that_does_not_deny() {
    let p = compile(PROGRAMS);
    assert!(p.program_may_run("/usr/bin/ls"));
    assert!(
        p.program_may_run("/usr/bin/python3.11"),
        "denied only with some arguments"
    );
    assert!(p.program_may_run("/usr/bin/git"), "approved with `push`");
    assert!(!p.program_may_run("/usr/bin/pip3"));
    assert!(p.program_may_run("/opt/tools/x"));
    assert!(!p.program_may_run("/usr/bin/curl"), "no rule: denied");
}

const NETWORK: &str = r#"
version: 1
name: network
network_rules:
  - name: loopback
    cidrs: [127.0.0.0/8, "::1"]
    decision: allow
  - name: pypi
    domains: [pypi.org, "*.pythonhosted.org"]
    ports: [443]
    decision: allow
  - name: internal
    domains: ["*.corp.example"]
    cidrs: [10.0.0.0/8]
    ports: ["8000-8099", 443]
    decision: approve
    message: "{domain}:{port} ({ip}) is internal"
  - name: books
    domains: [bücher.de]
    decision: log
  - name: no-network
    decision: deny
    message: "no network: {domain} port {port}"
"#;

#[test]
fn network_rules_match_names_blocks_and_ports() {
    let p = compile(NETWORK);
    let ip = |s: &str| Some(s.parse::<IpAddr>().expect("ip"));
    let d = |domain: Option<&str>, addr: Option<IpAddr>, port| {
        let v = p.decide_network(domain, addr, port);
        (v.decision, v.rule())
    };
    assert_eq!(
        d(None, ip("127.0.0.1"), 80),
        (Decision::Allow, Some("loopback"))
    );
    assert_eq!(
        d(None, ip("::ffff:127.0.0.1"), 80),
        (Decision::Allow, Some("loopback")),
        "IPv4-mapped addresses are unmapped"
    );
    assert_eq!(d(None, ip("::1"), 80), (Decision::Allow, Some("loopback")));
    assert_eq!(
        d(Some("PyPI.org."), None, 443),
        (Decision::Allow, Some("pypi"))
    );
    assert_eq!(
        d(Some("files.pythonhosted.org"), ip("151.101.0.223"), 443),
        (Decision::Allow, Some("pypi"))
    );
    assert_eq!(
        d(Some("pypi.org"), None, 80),
        (Decision::Deny, Some("no-network"))
    );
    assert_eq!(
        d(Some("git.corp.example"), None, 8080),
        (Decision::Approve, Some("internal"))
    );
    assert_eq!(
        d(None, ip("10.1.2.3"), 443),
        (Decision::Approve, Some("internal")),
        "a block matches without a name"
    );
    assert_eq!(
        d(None, ip("10.1.2.3"), 22),
        (Decision::Deny, Some("no-network"))
    );
    assert_eq!(
        d(Some("xn--bcher-kva.de"), None, 1),
        (Decision::Log, Some("books"))
    );
    assert_eq!(
        d(Some("BÜCHER.de"), None, 1),
        (Decision::Log, Some("books"))
    );
    let v = p.decide_network(Some("git.corp.example"), ip("10.0.0.9"), 8000);
    assert_eq!(
        v.message().expect("message").to_string(),
        "git.corp.example:8000 (10.0.0.9) is internal"
    );
    let v = p.decide_network(None, ip("93.184.216.34"), 443);
    assert_eq!(
        v.message().expect("message").to_string(),
        "no network: 93.184.216.34 port 443"
    );
    assert_eq!(
        p.policy().network_rules[3].domains.as_deref(),
        Some(&["xn--bcher-kva.de".to_string()][..]),
        "the compiled source keeps the canonical name"
    );
}

#[test]
fn validation_rules_raise_findings_by_id_or_prefix_strictest_first() {
    let p = compile(
        r#"
version: 1
name: raises
validation_rules:
  - name: hold-dynamic
    rules: [bash-dynamic-command, "python-fork*"]
    decision: approve
    message: "{rule} needs an operator"
  - name: refuse-forks
    rules: [python-fork-loop]
    decision: deny
"#,
    );
    let d = |id: &str| p.decide_finding(id).map(|v| (v.decision, v.rule()));
    assert_eq!(
        d("bash-dynamic-command"),
        Some((Decision::Approve, Some("hold-dynamic")))
    );
    assert_eq!(
        d("python-fork"),
        Some((Decision::Approve, Some("hold-dynamic")))
    );
    assert_eq!(
        d("python-fork-loop"),
        Some((Decision::Deny, Some("refuse-forks"))),
        "deny wins over an earlier approve"
    );
    assert_eq!(d("python-ctypes"), None);
    let v = p.decide_finding("python-fork").expect("raised");
    assert_eq!(
        v.message().expect("message").to_string(),
        "python-fork needs an operator"
    );
}

#[test]
fn a_bad_glob_is_refused_at_its_line() {
    let yaml = "version: 1\nname: p\nfile_rules:\n  - name: r\n    paths:\n      - /tmp/**\n      - /etc/[ab\n    operations: [read]\n    decision: allow\n";
    let (err, line) = refused(yaml);
    assert_eq!(line, 7, "{err}");
    assert!(err.contains("bad glob `/etc/[ab`: unclosed `[`"), "{err}");
    let (err, _) = refused(
        "version: 1\nname: p\ncommand_rules: [{name: r, commands: [bin/pip], decision: deny}]\n",
    );
    assert!(
        err.contains("bad glob `bin/pip`: a path glob starts with `/` or `**`"),
        "{err}"
    );
    let (err, _) = refused(
        "version: 1\nname: p\ncommand_rules: [{name: r, commands: [pip], args_pattern: ['{a'], decision: deny}]\n",
    );
    assert!(err.contains("unclosed `{`"), "{err}");
}

#[test]
fn an_unknown_operation_decision_or_key_is_refused_at_its_line() {
    let (err, line) = refused(
        "version: 1\nname: p\nfile_rules:\n  - name: r\n    paths: [/tmp/**]\n    operations: [read, raed]\n    decision: allow\n",
    );
    assert_eq!(line, 6, "{err}");
    assert!(err.contains("unknown variant `raed`"), "{err}");
    let (err, line) = refused(
        "version: 1\nname: p\nfile_rules:\n  - name: r\n    paths: [/tmp/**]\n    operations: [read]\n    decision: maybe\n",
    );
    assert_eq!(line, 7, "{err}");
    assert!(err.contains("unknown variant `maybe`"), "{err}");
    let (err, line) = refused("version: 1\nname: p\nfile_rulez: []\n");
    assert_eq!(line, 3, "{err}");
    assert!(err.contains("unknown field `file_rulez`"), "{err}");
    let (err, _) = refused("version: 2\nname: p\n");
    assert!(err.contains("version 2 is not supported"), "{err}");
    let (err, _) = refused(
        "version: 1\nname: p\nvalidation_rules: [{name: r, rules: [x], decision: allow}]\n",
    );
    assert!(
        err.contains("unknown variant `allow`"),
        "raises go up only: {err}"
    );
}

#[test]
fn a_duplicate_rule_name_is_refused_at_the_duplicate() {
    let yaml = "version: 1\nname: p\nfile_rules:\n  - name: same\n    paths: [/a]\n    operations: [read]\n    decision: allow\ncommand_rules:\n  - name: same\n    commands: [ls]\n    decision: allow\n";
    let (err, line) = refused(yaml);
    assert_eq!(line, 9, "{err}");
    assert!(err.contains("duplicate rule name `same`"), "{err}");
}

#[test]
fn empty_lists_are_refused() {
    for (yaml, key) in [
        (
            "file_rules: [{name: r, paths: [], operations: [read], decision: allow}]",
            "paths",
        ),
        (
            "file_rules: [{name: r, paths: [/a], operations: [], decision: allow}]",
            "operations",
        ),
        (
            "command_rules: [{name: r, commands: [], decision: allow}]",
            "commands",
        ),
        (
            "network_rules: [{name: r, domains: [], decision: allow}]",
            "domains",
        ),
        (
            "network_rules: [{name: r, ports: [], decision: allow}]",
            "ports",
        ),
    ] {
        let (err, line) = refused(&format!("version: 1\nname: p\n{yaml}\n"));
        assert_eq!(line, 3, "{key}: {err}");
        assert!(
            err.contains("an empty list matches nothing"),
            "{key}: {err}"
        );
    }
}

#[test]
fn values_that_are_not_what_their_key_holds_are_refused() {
    for (yaml, expected) in [
        (
            "network_rules: [{name: r, cidrs: [10.0.0.1/8], decision: deny}]",
            "bad CIDR `10.0.0.1/8`: host bits",
        ),
        (
            "network_rules: [{name: r, domains: ['ex*ample.com'], decision: deny}]",
            "bad domain",
        ),
        (
            "network_rules: [{name: r, ports: [70000], decision: deny}]",
            "bad port `70000`",
        ),
        (
            "network_rules: [{name: r, ports: ['90-80'], decision: deny}]",
            "bad port `90-80`",
        ),
        (
            "file_rules: [{name: r, paths: [/a], operations: [read], decision: deny, message: '{domain}'}]",
            "unknown placeholder `{domain}`",
        ),
        (
            "file_rules: [{name: 'has space', paths: [/a], operations: [read], decision: deny}]",
            "bad name `has space`",
        ),
        (
            "validation_rules: [{name: r, rules: [Not_An_Id], decision: deny}]",
            "bad rule id",
        ),
    ] {
        let (err, line) = refused(&format!("version: 1\nname: p\n{yaml}\n"));
        assert_eq!(line, 3, "{err}");
        assert!(err.contains(expected), "{expected}: {err}");
    }
}

#[test]
fn a_list_of_100000_rules_is_refused_without_reading_it_all() {
    let mut yaml = String::from("version: 1\nname: huge\nfile_rules:\n");
    for i in 0..100_000 {
        yaml.push_str(&format!(
            "  - {{name: r{i}, paths: [/d{i}], operations: [read], decision: allow}}\n"
        ));
    }
    let (err, line) = refused(&yaml);
    assert_eq!(line, 4, "the list's line: {err}");
    assert!(
        err.contains(&format!("more than {MAX_RULES} entries")),
        "{err}"
    );

    // The same in code: refused before any rule is compiled.
    let rule = FileRule {
        name: "r".into(),
        paths: vec!["/a".into()],
        operations: vec![OperationSpec::Read],
        decision: Decision::Allow,
        message: None,
    };
    let policy = Policy {
        file_rules: vec![rule; 100_000],
        ..minimal()
    };
    assert_eq!(
        CompiledPolicy::compile(policy).expect_err("too many"),
        PolicyError {
            at: "file_rules".into(),
            problem: Problem::TooMany { max: MAX_RULES }
        }
    );
}

#[test]
fn patterns_past_the_policy_limit_are_refused_at_the_one_that_crosses_it() {
    // 300 rules of 64 alternatives each: 19,200 globs.
    let mut yaml = String::from("version: 1\nname: wide\nfile_rules:\n");
    for i in 0..300 {
        yaml.push_str(&format!(
            "  - {{name: r{i}, paths: ['/{{a,b,c,d}}/{{a,b,c,d}}/{{a,b,c,d}}'], operations: [read], decision: allow}}\n"
        ));
    }
    let (err, line) = refused(&yaml);
    let crossing = MAX_PATTERNS / 64 + 1;
    assert_eq!(line, 3 + crossing, "{err}");
    assert!(
        err.contains(&format!("more than {MAX_PATTERNS} patterns")),
        "{err}"
    );
}

fn minimal() -> Policy {
    Policy {
        version: 1,
        name: "p".into(),
        description: String::new(),
        file_rules: vec![],
        network_rules: vec![],
        command_rules: vec![],
        validation_rules: vec![],
    }
}

#[test]
fn a_policy_built_in_code_is_checked_with_key_paths() {
    let rule = |name: &str, path: &str| FileRule {
        name: name.into(),
        paths: vec![path.into()],
        operations: vec![OperationSpec::All],
        decision: Decision::Deny,
        message: None,
    };
    let err = |p: Policy| CompiledPolicy::compile(p).expect_err("refused").to_string();
    assert_eq!(
        err(Policy {
            file_rules: vec![rule("a", "/x"), rule("b", "/y/[")],
            ..minimal()
        }),
        "file_rules[1] (b).paths[0]: bad glob `/y/[`: unclosed `[`"
    );
    assert_eq!(
        err(Policy {
            file_rules: vec![rule("a", "/x"), rule("a", "/y")],
            ..minimal()
        }),
        "file_rules[1] (a).name: duplicate rule name `a`: rule names are unique within a policy"
    );
    let mut empty = rule("a", "/x");
    empty.operations.clear();
    assert!(
        err(Policy {
            file_rules: vec![empty],
            ..minimal()
        })
        .starts_with("file_rules[0] (a).operations: an empty list")
    );
    assert!(
        err(Policy {
            version: 3,
            ..minimal()
        })
        .starts_with("version: version 3")
    );
}

#[test]
fn the_wire_form_round_trips_and_is_checked_again() {
    let p = compile(NETWORK);
    let json = p.wire().to_json().expect("serializes");
    assert!(json.contains("xn--bcher-kva.de"), "{json}");
    let again = WirePolicy::from_json(&json)
        .expect("reads")
        .compile()
        .expect("compiles");
    assert_eq!(again.policy(), p.policy());
    let tampered = json.replace("127.0.0.0/8", "127.0.0.1/8");
    let err = WirePolicy::from_json(&tampered).expect_err("checked");
    assert!(err.to_string().contains("host bits"), "{err}");
}

#[test]
fn serialized_policies_read_back_the_same() {
    for yaml in [FILES, COMMANDS, NETWORK] {
        let p = compile(yaml);
        let text = serde_norway::to_string(p.policy()).expect("serializes");
        assert_eq!(&parse(&text).expect("parses"), p.policy(), "{text}");
    }
}
