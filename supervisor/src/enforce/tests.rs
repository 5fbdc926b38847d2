//! The enforcement end to end on this machine's kernel: a child under the filter, the monitor in
//! this process, events collected by a test sink. (The container tests in `tests/it/` check the
//! same under the real runtime; these keep the mechanics quick to iterate on.)

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use scriptgate_policy::Decision;
use scriptgate_policy::events::Event;
use scriptgate_supervisor::enforcement::{
    ApprovalDecision, ApprovalRequest, ApprovalVerdict, Enforce, EventBatch,
};

use super::*;

/// Collects batches; answers approval requests with `answer` (if set).
#[derive(Default)]
struct TestSink {
    batches: Mutex<Vec<EventBatch>>,
    requests: Mutex<Vec<ApprovalRequest>>,
    decisions: Mutex<Option<Decisions>>,
    answer: Option<ApprovalVerdict>,
}

impl Sink for TestSink {
    fn events(&self, batch: &EventBatch) {
        self.batches.lock().expect("lock").push(batch.clone());
    }

    fn approval(&self, request: &ApprovalRequest) {
        self.requests.lock().expect("lock").push(request.clone());
        if let (Some(verdict), Some(d)) = (self.answer, &*self.decisions.lock().expect("lock")) {
            d.deliver(ApprovalDecision {
                id: request.id,
                verdict,
                message: None,
            });
        }
    }
}

impl TestSink {
    fn events(&self) -> Vec<Event> {
        self.batches
            .lock()
            .expect("lock")
            .iter()
            .flat_map(|b| b.events.clone())
            .collect()
    }
}

const POLICY: &str = r#"{
  "version": 1, "name": "t",
  "file_rules": [
    {"name": "secret", "paths": ["**/secret*"], "operations": ["*"], "decision": "deny"},
    {"name": "held", "paths": ["**/held*"], "operations": ["*"], "decision": "approve"},
    {"name": "flagged", "paths": ["**/flagged*"], "operations": ["*"], "decision": "log"},
    {"name": "everything", "paths": ["/**"], "operations": ["*"], "decision": "allow"}
  ],
  "command_rules": [
    {"name": "no-id", "commands": ["id"], "decision": "deny"},
    {"name": "any", "commands": ["*"], "decision": "allow"}
  ],
  "network_rules": [
    {"name": "loopback", "cidrs": ["127.0.0.0/8"], "decision": "allow"},
    {"name": "none", "decision": "deny"}
  ]
}"#;

fn enforce_request() -> Enforce {
    Enforce {
        policy: serde_json::from_str(POLICY).expect("json"),
        event_cap: 1000,
        approval_timeout_ms: 2000,
        approved_commands: Vec::new(),
    }
}

/// Runs `sh -c script` under the policy; (exit code, stdout).
fn run(script: &str, sink: &Arc<TestSink>) -> (i32, String) {
    if !available() {
        eprintln!("SKIPPED: no seccomp user notification here");
        return (0, String::new());
    }
    let rules = rules(&enforce_request()).expect("rules");
    let program = std::path::PathBuf::from("/bin/sh");
    let start = Start::Now {
        rules: Box::new(rules),
        program: program.clone(),
    };
    let dynsink: Arc<dyn Sink> = sink.clone();
    let (child, enforcement) = prepare(start, dynsink).expect("prepare");
    *sink.decisions.lock().expect("lock") = Some(enforcement.decisions());
    let mut command = Command::new(&program);
    command
        .arg("-c")
        .arg(script)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    // SAFETY: install is async-signal-safe.
    unsafe {
        command.pre_exec(move || child.install());
    }
    let out = command.output().expect("runs");
    drop(command);
    enforcement.finish();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn file_decision(events: &[Event], path_end: &str) -> Option<Decision> {
    events.iter().find_map(|e| match e {
        Event::File(f) if f.path.ends_with(path_end) => Some(f.decision),
        _ => None,
    })
}

#[test]
fn reads_writes_and_execs_are_decided_and_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().display();
    std::fs::write(dir.path().join("secret.txt"), "s3cret").expect("write");
    std::fs::write(dir.path().join("ok.txt"), "fine\n").expect("write");
    std::fs::write(dir.path().join("flagged.txt"), "flag\n").expect("write");
    let sink = Arc::new(TestSink::default());
    let script = format!(
        "cat {d}/ok.txt; cat {d}/secret.txt 2>/dev/null || echo denied-read; \
         echo x > {d}/secret2.txt 2>/dev/null || echo denied-create; \
         cat {d}/flagged.txt; echo new > {d}/made.txt && cat {d}/made.txt; \
         rm {d}/made.txt && echo removed; id >/dev/null 2>&1 || echo denied-exec"
    );
    let (code, out) = run(&script, &sink);
    if !available() {
        return;
    }
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out,
        "fine\ndenied-read\ndenied-create\nflag\nnew\nremoved\ndenied-exec\n"
    );
    assert!(!out.contains("s3cret"));
    let events = sink.events();
    assert_eq!(file_decision(&events, "/ok.txt"), Some(Decision::Allow));
    assert_eq!(file_decision(&events, "/secret.txt"), Some(Decision::Deny));
    assert_eq!(file_decision(&events, "/flagged.txt"), Some(Decision::Log));
    assert!(events.iter().any(|e| matches!(e, Event::Blocked(b)
        if b.target.ends_with("/secret.txt") && b.errno == Some(libc::EACCES))));
    assert!(events.iter().any(|e| matches!(e, Event::Process(p)
        if p.argv.first().map(String::as_str) == Some("id") && p.decision == Decision::Deny)));
    assert!(events.iter().any(|e| matches!(e, Event::Process(p)
        if p.argv.first().map(String::as_str) == Some("cat") && p.decision == Decision::Allow)));
    let summary = sink
        .batches
        .lock()
        .expect("lock")
        .iter()
        .find_map(|b| b.summary.clone())
        .expect("a summary");
    assert!(summary.decided > 5, "{summary:?}");
}

#[test]
fn held_operations_wait_for_the_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("held.txt"), "held-content").expect("write");
    let script = format!("cat {}/held.txt || echo refused", dir.path().display());
    for (verdict, expected) in [
        (Some(ApprovalVerdict::Approved), "held-content"),
        (Some(ApprovalVerdict::Denied), "refused\n"),
        (None, "refused\n"),
    ] {
        let sink = Arc::new(TestSink {
            answer: verdict,
            ..TestSink::default()
        });
        let (_, out) = run(&script, &sink);
        if !available() {
            return;
        }
        assert_eq!(out, expected, "{verdict:?}");
        let requests = sink.requests.lock().expect("lock");
        assert_eq!(requests.len(), 1, "{verdict:?}");
        assert!(requests[0].target.ends_with("/held.txt"));
        assert!(!requests[0].recent_commands.is_empty());
    }
}
