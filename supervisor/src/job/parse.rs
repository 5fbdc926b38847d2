//! Reading a job: `protocol_version` first, then the typed fields. Whatever is refused here is a
//! `schema_error` (the service answers 4xx before any container exists).

use std::collections::HashSet;
use std::fmt;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use uuid::Uuid;

use super::types::{
    Action, ApplyDiff, Constraints, Job, ListTree, ProtocolVersion, ReadFile, RunCommand, Step,
    StepType, WriteFile,
};
use super::{ErrorType, JOB_PROTOCOL, JobError};

/// Longest step id, and longest `task_id`/`skill_id`/`profile`/`policy`.
const MAX_ID: usize = 128;
const MAX_LABEL: usize = 1024;

/// The job is not a well-formed job of a protocol version this code speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaError(String);

impl SchemaError {
    fn new(message: impl Into<String>) -> Self {
        SchemaError(message.into())
    }

    pub fn message(&self) -> &str {
        &self.0
    }

    /// As the protocol's error object (`schema_error`).
    pub fn to_job_error(&self) -> JobError {
        JobError::new(ErrorType::SchemaError, self.0.clone())
    }
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "schema_error: {}", self.0)
    }
}

impl std::error::Error for SchemaError {}

/// A job from its JSON text.
pub fn parse(bytes: &[u8]) -> Result<Job, SchemaError> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| SchemaError::new(format!("the job is not JSON: {e}")))?;
    parse_value(&value)
}

/// A job from parsed JSON.
pub fn parse_value(value: &Value) -> Result<Job, SchemaError> {
    let object = value
        .as_object()
        .ok_or_else(|| SchemaError::new("a job is a JSON object"))?;
    let version = version(object.get("protocol_version"))?;
    let mut ignored = Vec::new();
    let raw: RawJob = typed(value, "", &mut ignored)?;
    let steps = raw
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| step(i, s, &mut ignored))
        .collect::<Result<Vec<_>, _>>()?;
    // At exactly 1.0 every field is known; a newer 1.x may add fields this code ignores.
    if let (false, Some(field)) = (version > JOB_PROTOCOL, ignored.first()) {
        return Err(SchemaError::new(format!(
            "unknown field `{field}` (protocol {version} has no such field)"
        )));
    }
    let job = Job {
        protocol_version: version,
        job_id: raw.job_id,
        task_id: raw.task_id,
        skill_id: raw.skill_id,
        profile: raw.profile,
        policy: raw.policy,
        constraints: raw.constraints,
        steps,
        artifacts: raw.artifacts,
        warnings: ignored
            .iter()
            .map(|f| format!("unknown field `{f}` ignored (protocol {version}; this agent speaks {JOB_PROTOCOL})"))
            .collect(),
    };
    validate(&job)?;
    Ok(job)
}

fn version(field: Option<&Value>) -> Result<ProtocolVersion, SchemaError> {
    let version: ProtocolVersion = match field {
        None => return Err(SchemaError::new("protocol_version is missing")),
        Some(Value::String(s)) => s.parse().map_err(SchemaError::new)?,
        Some(other) => {
            return Err(SchemaError::new(format!(
                "protocol_version must be a string \"MAJOR.MINOR\", not {other}"
            )));
        }
    };
    if version.major != JOB_PROTOCOL.major {
        return Err(SchemaError::new(format!(
            "protocol version {version} is not supported (this agent speaks {}.x)",
            JOB_PROTOCOL.major
        )));
    }
    Ok(version)
}

/// The job's fields, with each step's arguments kept raw until its type is known.
#[derive(Deserialize)]
struct RawJob {
    #[allow(dead_code)] // read by `version` first; listed so it is not an unknown field
    protocol_version: Value,
    #[serde(default)]
    job_id: Option<Uuid>,
    #[serde(default)]
    task_id: Option<String>,
    #[serde(default)]
    skill_id: Option<String>,
    #[serde(default)]
    profile: Option<String>,
    #[serde(default)]
    policy: Option<String>,
    /// The service's network access for the job: the service reads and checks it from the
    /// document; the agent has no use for it (listed so it is not an unknown field).
    #[allow(dead_code)]
    #[serde(default)]
    network: Option<Value>,
    #[serde(default)]
    constraints: Constraints,
    steps: Vec<RawStep>,
    #[serde(default)]
    artifacts: Vec<String>,
}

#[derive(Deserialize)]
struct RawStep {
    id: String,
    #[serde(rename = "type")]
    step_type: String,
    #[serde(default = "empty_object")]
    arguments: Value,
    #[serde(default)]
    continue_on_error: bool,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

fn step(index: usize, raw: &RawStep, ignored: &mut Vec<String>) -> Result<Step, SchemaError> {
    let Some(step_type) = StepType::from_name(&raw.step_type) else {
        let known: Vec<&str> = StepType::ALL.iter().map(|t| t.as_str()).collect();
        return Err(SchemaError::new(format!(
            "steps[{index}].type: unknown step type `{}` (known: {})",
            raw.step_type.escape_debug(),
            known.join(", ")
        )));
    };
    let at = format!("steps[{index}].arguments");
    let args = &raw.arguments;
    let action = match step_type {
        StepType::RunCommand => Action::RunCommand(typed::<RunCommand>(args, &at, ignored)?),
        StepType::WriteFile => Action::WriteFile(typed::<WriteFile>(args, &at, ignored)?),
        StepType::ReadFile => Action::ReadFile(typed::<ReadFile>(args, &at, ignored)?),
        StepType::ApplyUnifiedDiff => {
            Action::ApplyUnifiedDiff(typed::<ApplyDiff>(args, &at, ignored)?)
        }
        StepType::ListTree => Action::ListTree(typed::<ListTree>(args, &at, ignored)?),
    };
    Ok(Step {
        id: raw.id.clone(),
        continue_on_error: raw.continue_on_error,
        action,
    })
}

/// Deserializes `value`, naming the field of any error and collecting the fields it ignored.
fn typed<T: DeserializeOwned>(
    value: &Value,
    prefix: &str,
    ignored: &mut Vec<String>,
) -> Result<T, SchemaError> {
    let mut track = serde_path_to_error::Track::new();
    let tracked = serde_path_to_error::Deserializer::new(value, &mut track);
    let result = serde_ignored::deserialize(tracked, |path| {
        ignored.push(join(prefix, &ignored_path(&path)));
    });
    result.map_err(|e| {
        let path = track.path().to_string();
        let at = if path == "." { String::new() } else { path };
        let field = join(prefix, &at);
        if field.is_empty() {
            SchemaError::new(e.to_string())
        } else {
            SchemaError::new(format!("{field}: {e}"))
        }
    })
}

fn join(prefix: &str, path: &str) -> String {
    match (prefix.is_empty(), path.is_empty()) {
        (_, true) => prefix.to_string(),
        (true, false) => path.to_string(),
        (false, false) if path.starts_with('[') => format!("{prefix}{path}"),
        (false, false) => format!("{prefix}.{path}"),
    }
}

/// `steps[0].arguments.foo`-style text for a path serde_ignored reports.
fn ignored_path(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path as P;
    match path {
        P::Root => String::new(),
        P::Seq { parent, index } => format!("{}[{index}]", ignored_path(parent)),
        P::Map { parent, key } => join(&ignored_path(parent), key),
        P::Some { parent } | P::NewtypeStruct { parent } | P::NewtypeVariant { parent } => {
            ignored_path(parent)
        }
    }
}

/// What the types alone do not say.
fn validate(job: &Job) -> Result<(), SchemaError> {
    if job.steps.is_empty() {
        return Err(SchemaError::new("steps: a job has at least one step"));
    }
    for (field, value) in [
        ("task_id", &job.task_id),
        ("skill_id", &job.skill_id),
        ("profile", &job.profile),
        ("policy", &job.policy),
    ] {
        if value.as_ref().is_some_and(|v| v.len() > MAX_LABEL) {
            return Err(SchemaError::new(format!(
                "{field}: longer than {MAX_LABEL} bytes"
            )));
        }
    }
    if job.constraints.max_runtime_seconds == 0 {
        return Err(SchemaError::new(
            "constraints.max_runtime_seconds: must be at least 1",
        ));
    }
    let mut ids = HashSet::new();
    for (i, step) in job.steps.iter().enumerate() {
        step_fields(i, step)?;
        if !ids.insert(step.id.as_str()) {
            return Err(SchemaError::new(format!(
                "steps[{i}].id: `{}` is used by an earlier step",
                step.id
            )));
        }
    }
    for (i, pattern) in job.artifacts.iter().enumerate() {
        glob::Pattern::new(pattern)
            .map_err(|e| SchemaError::new(format!("artifacts[{i}]: not a valid glob: {e}")))?;
    }
    Ok(())
}

fn step_fields(i: usize, step: &Step) -> Result<(), SchemaError> {
    let bad = |field: &str, why: &str| Err(SchemaError::new(format!("steps[{i}].{field}: {why}")));
    let id_ok = !step.id.is_empty()
        && step.id.chars().count() <= MAX_ID
        && !step.id.chars().any(char::is_control);
    if !id_ok {
        return bad(
            "id",
            "1 to 128 characters, none of them a control character",
        );
    }
    match &step.action {
        Action::RunCommand(c) => {
            if c.command.is_empty() || c.command.contains('\0') {
                return bad("arguments.command", "a non-empty program name without NUL");
            }
            if c.args.iter().any(|a| a.contains('\0')) {
                return bad("arguments.args", "arguments cannot contain NUL");
            }
            if c.timeout_seconds == Some(0) {
                return bad("arguments.timeout_seconds", "must be at least 1");
            }
        }
        Action::WriteFile(w) => {
            if let Err(why) = w.bytes() {
                return bad("arguments.content", &why);
            }
        }
        Action::ReadFile(_) | Action::ApplyUnifiedDiff(_) | Action::ListTree(_) => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn job(steps: Value) -> Value {
        json!({"protocol_version": "1.0", "steps": steps})
    }

    fn error(value: Value) -> String {
        parse_value(&value)
            .expect_err("refused")
            .message()
            .to_string()
    }

    #[test]
    fn a_full_job_parses_with_its_defaults() {
        let parsed = parse(
            br#"{"protocol_version": "1.0", "job_id": "6f0b1a52-4f1b-4c55-9d3c-3e2a1b0c9d8e",
                "task_id": "t", "constraints": {"allowed_commands": ["python3"]},
                "steps": [
                  {"id": "w", "type": "write_file", "arguments": {"path": "/workspace/a.py", "content": "print(1)"}},
                  {"id": "r", "type": "run_command", "arguments": {"command": "python3", "args": ["a.py"]}},
                  {"id": "l", "type": "list_tree", "arguments": {"path": "/workspace"}, "continue_on_error": true}
                ],
                "artifacts": ["/workspace/*.json"]}"#,
        )
        .expect("valid job");
        assert_eq!(parsed.steps.len(), 3);
        assert_eq!(parsed.constraints.max_runtime_seconds, 300);
        assert_eq!(parsed.constraints.allowed_paths, ["/workspace"]);
        assert!(parsed.steps[2].continue_on_error);
        let Action::WriteFile(w) = &parsed.steps[0].action else {
            panic!("write_file")
        };
        assert_eq!(w.mode.bits(), 0o644);
        assert!(parsed.warnings.is_empty());
    }

    #[test]
    fn the_version_is_checked_first() {
        assert!(
            error(json!({"protocol_version": "2.0", "steps": "nonsense"}))
                .contains("2.0 is not supported")
        );
        assert!(error(json!({"protocol_version": 1.0, "steps": []})).contains("must be a string"));
        assert!(error(json!({"protocol_version": "1", "steps": []})).contains("MAJOR.MINOR"));
        assert!(error(json!({"protocol_version": "1.0.0", "steps": []})).contains("MAJOR.MINOR"));
        assert!(error(json!({"steps": []})).contains("missing"));
        assert!(
            parse(b"not json")
                .expect_err("not JSON")
                .message()
                .contains("not JSON")
        );
        assert!(error(json!([1])).contains("JSON object"));
    }

    #[test]
    fn unknown_fields_are_refused_at_1_0_and_listed_as_warnings_at_1_1() {
        let steps = json!([{"id": "a", "type": "list_tree", "arguments": {"path": "/workspace", "colour": "red"}}]);
        let mut value = job(steps);
        value["priority"] = json!(5);
        let message = error(value.clone());
        assert!(message.contains("unknown field `priority`"), "{message}");
        value["protocol_version"] = json!("1.1");
        let parsed = parse_value(&value).expect("accepted under 1.1");
        assert_eq!(parsed.warnings.len(), 2, "{:?}", parsed.warnings);
        assert!(
            parsed.warnings[0].contains("`priority`"),
            "{:?}",
            parsed.warnings
        );
        assert!(
            parsed.warnings[1].contains("`steps[0].arguments.colour`"),
            "{:?}",
            parsed.warnings
        );
    }

    #[test]
    fn an_unknown_step_type_is_refused_at_any_version() {
        for version in ["1.0", "1.7"] {
            let value = json!({"protocol_version": version,
                "steps": [{"id": "a", "type": "format_disk", "arguments": {}}]});
            assert!(error(value).contains("unknown step type `format_disk`"));
        }
    }

    #[test]
    fn missing_arguments_and_wrong_types_name_the_field() {
        let message = error(job(
            json!([{"id": "a", "type": "run_command", "arguments": {}}]),
        ));
        assert!(
            message.contains("steps[0].arguments") && message.contains("`command`"),
            "{message}"
        );
        let message = error(job(
            json!([{"id": "a", "type": "run_command", "arguments": {"command": "ls", "args": "-l"}}]),
        ));
        assert!(message.contains("steps[0].arguments.args"), "{message}");
        let message = error(
            json!({"protocol_version": "1.0", "constraints": {"max_runtime_seconds": "10"},
            "steps": [{"id": "a", "type": "list_tree", "arguments": {"path": "/workspace"}}]}),
        );
        assert!(
            message.contains("constraints.max_runtime_seconds"),
            "{message}"
        );
        let message = error(job(
            json!([{"id": "a", "type": "write_file", "arguments": {"path": "x", "content": "y", "mode": 420}}]),
        ));
        assert!(message.contains("mode"), "{message}");
        let message = error(job(
            json!([{"id": "a", "type": "write_file", "arguments": {"path": "x", "content": "y", "mode": "4755"}}]),
        ));
        assert!(message.contains("setuid"), "{message}");
        let message = error(job(
            json!([{"type": "list_tree", "arguments": {"path": "x"}}]),
        ));
        assert!(message.contains("`id`"), "{message}");
    }

    #[test]
    fn ids_are_unique_and_jobs_are_not_empty() {
        let step = json!({"id": "a", "type": "list_tree", "arguments": {"path": "/workspace"}});
        assert!(error(job(json!([step.clone(), step]))).contains("used by an earlier step"));
        assert!(error(job(json!([]))).contains("at least one step"));
        let bad_uuid = json!({"protocol_version": "1.0", "job_id": "42",
            "steps": [{"id": "a", "type": "list_tree", "arguments": {"path": "/workspace"}}]});
        assert!(error(bad_uuid).contains("job_id"));
    }

    #[test]
    fn content_and_argument_text_are_checked() {
        let message = error(job(json!([{"id": "a", "type": "write_file",
            "arguments": {"path": "x", "content": "***", "encoding": "base64"}}])));
        assert!(message.contains("base64"), "{message}");
        let message = error(job(json!([{"id": "a", "type": "write_file",
            "arguments": {"path": "x", "content": "y", "encoding": "latin1"}}])));
        assert!(message.contains("encoding"), "{message}");
        let message = error(job(json!([{"id": "a", "type": "run_command",
            "arguments": {"command": "ls", "args": ["a\u{0}b"]}}])));
        assert!(message.contains("NUL"), "{message}");
        let message = error(
            json!({"protocol_version": "1.0", "artifacts": ["/workspace/[a"],
            "steps": [{"id": "a", "type": "list_tree", "arguments": {"path": "/workspace"}}]}),
        );
        assert!(message.contains("glob"), "{message}");
    }
}
