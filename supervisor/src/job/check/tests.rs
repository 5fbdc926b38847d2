//! Cases for every rule, bad inputs of the protocol included.
use serde_json::{Value, json};
use time::OffsetDateTime;

use super::super::{ErrorType, StepStatus, parse_value};
use super::*;

fn job(constraints: Value, steps: Value) -> Job {
    parse_value(&json!({"protocol_version": "1.0", "constraints": constraints, "steps": steps}))
        .expect("well-formed")
}

fn refused(constraints: Value, steps: Value) -> Rejection {
    check(job(constraints, steps), &Maxima::default()).expect_err("refused")
}

fn step(t: &str, arguments: Value) -> Value {
    json!({"id": format!("s-{t}"), "type": t, "arguments": arguments})
}

#[test]
fn a_valid_job_resolves_paths_commands_and_diffs() {
    let checked = check(
        job(
            json!({"allowed_commands": ["python3", "git"]}),
            json!([
                step("write_file", json!({"path": "main.py", "content": "print(1)"})),
                step("run_command", json!({"command": "/usr/bin/python3", "args": ["main.py"]})),
                step("apply_unified_diff", json!({"diff": "--- a/main.py\n+++ b/main.py\n@@ -1 +1 @@\n-print(1)\n+print(2)\n"})),
            ]),
        ),
        &Maxima::default(),
    )
    .expect("passes");
    let plans: Vec<&CheckedAction> = checked.steps().iter().map(|s| &s.plan).collect();
    assert!(
        matches!(plans[0], CheckedAction::WriteFile { path } if path.to_string() == "/workspace/main.py")
    );
    assert!(
        matches!(plans[1], CheckedAction::RunCommand { command: CommandCheck::Path { .. }, working_dir, .. }
        if working_dir.to_string() == "/workspace")
    );
    assert!(
        matches!(plans[2], CheckedAction::ApplyUnifiedDiff { files } if files[0].0.to_string() == "/workspace/main.py")
    );
    // What the service sends to the agent parses and checks the same way.
    let again = check(
        parse_value(&checked.to_json()).expect("parses"),
        &Maxima::default(),
    )
    .expect("passes");
    assert_eq!(again.job_id(), checked.job_id());
}

#[test]
fn a_host_visible_violation_fails_its_step_and_skips_the_rest() {
    let r = refused(
        json!({"allowed_commands": ["python3"]}),
        json!([
            step("list_tree", json!({"path": "/workspace"})),
            {"id": "shell", "type": "run_command", "arguments": {"command": "sh", "args": ["-c", "id"]}},
            step("read_file", json!({"path": "/workspace/x"})),
        ]),
    );
    assert_eq!(r.step, Some(1));
    assert_eq!(r.error.kind, ErrorType::PolicyViolation);
    let result = r.result(OffsetDateTime::now_utc());
    let statuses: Vec<StepStatus> = result.steps.iter().map(|s| s.status).collect();
    assert_eq!(
        statuses,
        [
            StepStatus::Skipped,
            StepStatus::Failure,
            StepStatus::Skipped
        ]
    );
    assert!(
        result
            .error
            .expect("job error")
            .message
            .contains("`sh` is not in allowed_commands")
    );
}

#[test]
fn commands_are_matched_by_bare_name_from_the_image_path_only() {
    let allowed = vec!["python3".to_string(), "bash".to_string()];
    assert!(command_check("python3", &allowed, IMAGE_PATH).is_ok());
    assert!(command_check("/usr/bin/python3", &allowed, IMAGE_PATH).is_ok());
    for bad in [
        "./python3",
        "../../bin/sh",
        "/workspace/python3",
        "/usr/bin/../bin/python3",
        "/tmp/bash",
        "sh",
        "bash/",
        "/usr/bin/perl",
    ] {
        let e = command_check(bad, &allowed, IMAGE_PATH).expect_err(bad);
        assert_eq!(e.kind, ErrorType::PolicyViolation, "{bad}");
    }
}

#[test]
fn paths_outside_allowed_paths_and_dot_dot_are_policy_violations() {
    for path in [
        "../etc/passwd",
        "/etc/passwd",
        "/workspace/../etc/passwd",
        "/tmp/x",
    ] {
        let r = refused(json!({}), json!([step("read_file", json!({"path": path}))]));
        assert_eq!(
            (r.step, r.error.kind),
            (Some(0), ErrorType::PolicyViolation),
            "{path}"
        );
    }
    let r = refused(
        json!({"allowed_paths": ["/etc"]}),
        json!([step("list_tree", json!({"path": "/workspace"}))]),
    );
    assert_eq!((r.step, r.error.kind), (None, ErrorType::PolicyViolation));
    let r = refused(
        json!({"allowed_paths": ["/workspace/src"]}),
        json!([{"id": "r", "type": "run_command", "arguments": {"command": "ls", "working_dir": "/workspace"}}]),
    );
    assert_eq!(r.error.kind, ErrorType::PolicyViolation);
}

#[test]
fn diffs_touching_etc_passwd_or_binary_are_refused() {
    let escape = "--- a/../etc/passwd\n+++ b/../etc/passwd\n@@ -1 +1 @@\n-root:x:0:0\n+root::0:0\n";
    let r = refused(
        json!({}),
        json!([step("apply_unified_diff", json!({"diff": escape}))]),
    );
    assert_eq!(r.error.kind, ErrorType::PolicyViolation);
    let absolute = "--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-root:x:0:0\n+root::0:0\n";
    let r = refused(
        json!({}),
        json!([step("apply_unified_diff", json!({"diff": absolute}))]),
    );
    assert_eq!(r.error.kind, ErrorType::PolicyViolation);
    let binary = "diff --git a/x.png b/x.png\nGIT binary patch\nliteral 1\nA\n";
    let r = refused(
        json!({}),
        json!([step("apply_unified_diff", json!({"diff": binary}))]),
    );
    assert_eq!(r.error.kind, ErrorType::PolicyViolation);
    let r = refused(
        json!({}),
        json!([step("apply_unified_diff", json!({"diff": "nonsense"}))]),
    );
    assert_eq!(r.error.kind, ErrorType::SchemaError);
}

#[test]
fn requests_above_a_maximum_are_refused_naming_it() {
    let many: Vec<Value> = (0..10_000)
        .map(|i| json!({"id": format!("s{i}"), "type": "list_tree", "arguments": {"path": "/workspace"}}))
        .collect();
    let r = refused(json!({}), Value::Array(many));
    assert_eq!(
        (r.step, r.error.kind),
        (None, ErrorType::ResourceLimitExceeded)
    );
    assert!(
        r.error.message.contains("maximum of 100"),
        "{}",
        r.error.message
    );
    let r = refused(
        json!({}),
        json!([step(
            "read_file",
            json!({"path": "x", "max_bytes": 1_000_000_000u64})
        )]),
    );
    assert_eq!(
        (r.step, r.error.kind),
        (Some(0), ErrorType::ResourceLimitExceeded)
    );
    assert!(r.error.message.contains("1048576"), "{}", r.error.message);
    let r = refused(
        json!({"max_runtime_seconds": 100000}),
        json!([step("list_tree", json!({"path": "x"}))]),
    );
    assert_eq!(r.error.kind, ErrorType::ResourceLimitExceeded);
    let r = refused(
        json!({"network_allowed": true}),
        json!([step("list_tree", json!({"path": "x"}))]),
    );
    assert_eq!(r.error.kind, ErrorType::PolicyViolation);
}

#[test]
fn a_200_mb_write_file_is_refused_by_size() {
    let big = "a".repeat(200 << 20);
    let r = refused(
        json!({}),
        json!([step(
            "write_file",
            json!({"path": "big.txt", "content": big})
        )]),
    );
    assert_eq!(r.error.kind, ErrorType::ResourceLimitExceeded);
}

#[test]
fn environment_rules_apply_before_anything_runs() {
    for (name, value) in [
        ("LD_PRELOAD", "/tmp/x.so"),
        ("PATH", "/workspace:/usr/bin"),
        ("BASH_ENV", "/workspace/x"),
    ] {
        let r = refused(
            json!({"allowed_commands": ["bash"]}),
            json!([{"id": "r", "type": "run_command", "arguments": {"command": "bash", "env": {name: value}}}]),
        );
        assert_eq!(r.error.kind, ErrorType::PolicyViolation, "{name}");
    }
}

#[test]
fn artifact_globs_stay_inside_the_allowed_paths() {
    let ok = check(
        parse_value(
            &json!({"protocol_version": "1.0", "artifacts": ["/workspace/out/*.png", "report.json"],
            "steps": [step("list_tree", json!({"path": "x"}))]}),
        )
        .expect("parses"),
        &Maxima::default(),
    )
    .expect("inside");
    assert_eq!(ok.artifacts()[1].components, ["report.json"]);
    for bad in ["/etc/*", "/*/passwd", "/workspace/../etc/x", "/tmp/*.log"] {
        let job = parse_value(&json!({"protocol_version": "1.0", "artifacts": [bad],
            "steps": [step("list_tree", json!({"path": "x"}))]}))
        .expect("parses");
        let r = check(job, &Maxima::default()).expect_err(bad);
        assert_eq!(
            (r.step, r.error.kind),
            (None, ErrorType::PolicyViolation),
            "{bad}"
        );
    }
    let narrow = parse_value(&json!({"protocol_version": "1.0", "constraints": {"allowed_paths": ["/workspace/out"]},
        "artifacts": ["/workspace/*/x.png"], "steps": [step("list_tree", json!({"path": "/workspace/out"}))]})).expect("parses");
    assert!(
        check(narrow, &Maxima::default()).is_err(),
        "a wildcard above the allowed path"
    );
}
