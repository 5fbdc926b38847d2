//! The documented shapes against the protocol's own parser and result types.

use serde_json::{Value, json};
use time::OffsetDateTime;

use super::*;
use crate::http::jobs::JobOut;
use crate::sandbox::job::{
    self, CommandOutput, DiffOutput, Encoding, JobEnd, JobStatus, ListedNode, NodeKind, ReadOutput,
    ResourceUsage, ResultBuilder, StepOutput, StepResult, StepStatus, StepType, TreeOutput,
    WriteOutput,
};

/// A job with every field and every argument of every step type set.
fn full_job() -> Value {
    json!({
        "protocol_version": "1.0",
        "job_id": "6f0b1a52-4f1b-4c55-9d3c-3e2a1b0c9d8e",
        "task_id": "t", "skill_id": "s", "profile": "minimal",
        "constraints": {"max_runtime_seconds": 30, "allowed_paths": ["/workspace"],
            "allowed_commands": ["python3"], "network_allowed": false,
            "max_output_bytes": 1024, "allow_overwrite": true},
        "steps": [
            {"id": "a", "type": "run_command", "continue_on_error": true, "arguments": {
                "command": "python3", "args": ["-V"], "working_dir": "/workspace",
                "env": {"A": "1"}, "stdin": "x", "timeout_seconds": 5}},
            {"id": "b", "type": "write_file", "arguments": {
                "path": "a.txt", "content": "aGk=", "encoding": "base64", "mode": "0600"}},
            {"id": "c", "type": "read_file", "arguments": {"path": "a.txt", "max_bytes": 10}},
            {"id": "d", "type": "apply_unified_diff", "arguments": {
                "diff": "--- /dev/null\n+++ b/n.txt\n@@ -0,0 +1 @@\n+n\n"}},
            {"id": "e", "type": "list_tree", "arguments": {"path": "/workspace", "max_depth": 2, "max_entries": 9}}
        ],
        "artifacts": ["/workspace/*.txt"]
    })
}

#[test]
fn the_documented_job_is_the_protocols_job() {
    for example in [full_job(), example_job()] {
        let parsed = job::parse_value(&example).expect("the protocol reads it");
        let doc: JobIn =
            serde_json::from_value(example.clone()).expect("the documented shape reads it");
        assert_eq!(serde_json::to_value(&doc).expect("json"), example);
        // Every field the protocol writes is one the documented shape has.
        let written = serde_json::to_value(&parsed).expect("json");
        let documented = serde_json::to_value(&doc).expect("json");
        let keys = |v: &Value| v.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>());
        for (w, d) in written["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .zip(documented["steps"].as_array().into_iter().flatten())
        {
            for key in keys(&w["arguments"]).unwrap_or_default() {
                assert!(
                    d["arguments"].get(&key).is_some() || example == example_job(),
                    "{key} of {w}"
                );
            }
        }
        for key in keys(&written).unwrap_or_default() {
            assert!(documented.get(&key).is_some(), "{key}");
        }
    }
}

fn every_output() -> Vec<StepOutput> {
    vec![
        StepOutput::RunCommand(CommandOutput {
            exit_code: Some(1),
            signal: Some(9),
            stdout: "o".into(),
            stderr: "e".into(),
            stdout_truncated: true,
            stderr_truncated: false,
            duration_ms: 3,
        }),
        StepOutput::WriteFile(WriteOutput {
            path: "/workspace/a".into(),
            size_bytes: 1,
            sha256: "ab".into(),
            created: true,
        }),
        StepOutput::ReadFile(ReadOutput {
            content: "x".into(),
            encoding: Encoding::Base64,
            size_bytes: 1,
            truncated: false,
            sha256: "ab".into(),
        }),
        StepOutput::ApplyUnifiedDiff(DiffOutput {
            files_modified: vec!["/workspace/a".into()],
            files_created: vec![],
            files_deleted: vec![],
        }),
        StepOutput::ListTree(TreeOutput {
            tree: ListedNode {
                name: "workspace".into(),
                kind: NodeKind::Directory,
                size: 0,
                mode: "0700".into(),
                children: Some(vec![ListedNode {
                    name: "a".into(),
                    kind: NodeKind::CharDevice,
                    size: 1,
                    mode: "0644".into(),
                    children: None,
                }]),
            },
            entries: 1,
            truncated: false,
        }),
    ]
}

/// Events of a command under a policy: one process, one left out.
fn a_command_event() -> scriptgate_policy::events::Events {
    use scriptgate_policy::events::{Event, Events, ProcessEvent};
    let mut events = Events::with_cap(1);
    for pid in [7, 8] {
        events.push(Event::Process(ProcessEvent {
            pid,
            argv: vec!["ls".into()],
            cwd: "/workspace".into(),
            decision: scriptgate_policy::Decision::Allow,
            rule: Some("any".into()),
        }));
    }
    events
}

#[test]
fn the_documented_result_is_the_protocols_result() {
    let types = [
        StepType::RunCommand,
        StepType::WriteFile,
        StepType::ReadFile,
        StepType::ApplyUnifiedDiff,
        StepType::ListTree,
    ];
    let ids = ["a", "b", "c", "d", "e"];
    let mut builder = ResultBuilder::new(
        uuid::Uuid::nil(),
        ids.iter().copied().zip(types),
        vec!["w".into()],
        OffsetDateTime::UNIX_EPOCH,
    );
    for (i, output) in every_output().into_iter().enumerate() {
        let mut step = StepResult::skipped(ids[i], types[i]);
        step.status = StepStatus::Success;
        step.result = Some(output);
        if types[i] == StepType::RunCommand {
            step.events = Some(a_command_event());
        }
        builder.record(i, step).expect("recorded");
    }
    let result = builder.finish(JobEnd {
        status: JobStatus::Failure,
        error: Some(job::JobError::policy("p")),
        started_at: OffsetDateTime::UNIX_EPOCH,
        finished_at: OffsetDateTime::UNIX_EPOCH,
        artifacts: vec![job::ArtifactEntry::failed(
            "/workspace/x",
            job::JobError::limit("l"),
        )],
        resource_usage: ResourceUsage::default(),
    });
    let without = JobOut {
        result,
        execution_id: uuid::Uuid::nil(),
        validation: Vec::new(),
        policy: Some("strict".into()),
        events: Some(a_command_event()),
        network_operations: None,
        network_summary: None,
    };
    let written = serde_json::to_value(&without).expect("json");
    assert_eq!(
        written["steps"][0]["events"]["processes"][0]["argv"][0],
        "ls"
    );
    assert!(written["steps"][1].get("events").is_none(), "{written}");
    let with_network = JobOut {
        network_operations: Some(vec![json!({"type": "dns_query", "domain": "pypi.org"})]),
        network_summary: Some(crate::domain::network::NetworkSummary {
            dns_queries: 1,
            ..Default::default()
        }),
        ..without.clone()
    };
    for out in [without, with_network] {
        let written = serde_json::to_value(&out).expect("json");
        let doc: JobOutDoc =
            serde_json::from_value(written.clone()).expect("the documented shape reads it");
        assert_eq!(
            serde_json::to_value(&doc).expect("json"),
            written,
            "no field is lost"
        );
    }
    let example: JobOutDoc = serde_json::from_value(example_result()).expect("the example reads");
    assert_eq!(
        serde_json::to_value(&example).expect("json"),
        example_result()
    );
}
