//! The job's schema for one deployment: its maxima and profiles written in, and a component as a
//! self-contained JSON Schema (what the `run_job` tool's input schema is).

use serde_json::{Value, json};

use crate::sandbox::job::Maxima;

/// Text without control characters (what Rust's `char::is_control` calls one).
pub(crate) const NO_CONTROL_CHARACTERS: &str = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$";

/// One canonical path component: not empty, not `.` or `..`.
const COMPONENT: &str = r"(?:[^/.]|\.[^/.]|\.\.[^/])[^/]*";

/// A path (or glob) the workspace of a script run accepts for `files[].path` and `artifacts`.
fn workspace_patterns() -> (String, String) {
    let c = COMPONENT;
    (
        format!("^(?:/workspace/)?{c}(?:/{c})*$"),
        format!("^(?:/(?:workspace|tmp)(?:/{c})*|{c}(?:/{c})*)$"),
    )
}

/// The deployment's maxima and profiles, written into the job's schema (`components`, as JSON):
/// what a client generated from the document or a model reading the tool knows of the limits.
pub(crate) fn with_maxima(components: &mut Value, maxima: &Maxima, profiles: &[String]) {
    let schemas = &mut components["schemas"];
    // Sets (or adds) the keyword at the end of `pointer` in a schema that exists.
    let mut set = |pointer: &str, value: Value| {
        let Some((parent, key)) = pointer.rsplit_once('/') else {
            return;
        };
        if let Some(Value::Object(schema)) = schemas.pointer_mut(parent) {
            schema.insert(key.to_string(), value);
        }
    };
    set("/JobIn/properties/steps/maxItems", json!(maxima.max_steps));
    set(
        "/JobIn/properties/artifacts/maxItems",
        json!(maxima.max_artifacts),
    );
    set("/JobIn/properties/profile/enum", json!(profiles));
    let constraints = "/ConstraintsIn/properties";
    set(
        &format!("{constraints}/max_runtime_seconds/maximum"),
        json!(maxima.max_runtime_seconds),
    );
    set(
        &format!("{constraints}/max_output_bytes/maximum"),
        json!(maxima.max_output_bytes),
    );
    if !maxima.network_allowed {
        set(
            &format!("{constraints}/network_allowed/enum"),
            json!([false]),
        );
    }
    set(
        "/ReadFileArgs/properties/max_bytes/maximum",
        json!(maxima.max_read_bytes),
    );
    set(
        "/ListTreeArgs/properties/max_depth/maximum",
        json!(maxima.max_list_depth),
    );
    set(
        "/ListTreeArgs/properties/max_entries/maximum",
        json!(maxima.max_list_entries),
    );
    let (file, artifact) = workspace_patterns();
    set("/FileIn/properties/path/pattern", json!(file));
    if let Some(Value::Object(items)) = schemas.pointer_mut("/ExecuteIn/properties/artifacts/items")
    {
        items.insert("pattern".into(), json!(artifact));
    }
    // What the protocol's parser checks of a step id, so a client knows it before sending.
    if let Some(Value::Array(steps)) = schemas.pointer_mut("/StepIn/oneOf") {
        for step in steps {
            if let Some(Value::Object(id)) = step.pointer_mut("/properties/id") {
                id.insert("minLength".into(), json!(1));
                id.insert("maxLength".into(), json!(128));
                id.insert("pattern".into(), json!(NO_CONTROL_CHARACTERS));
            }
        }
    }
}

/// The component `name` as a self-contained JSON Schema (2020-12): itself, with every component
/// it reaches under `$defs`.
pub(crate) fn self_contained(components: &Value, name: &str) -> Value {
    let schemas = &components["schemas"];
    let mut defs = serde_json::Map::new();
    let mut todo = vec![name.to_string()];
    while let Some(next) = todo.pop() {
        if defs.contains_key(&next) {
            continue;
        }
        let schema = schemas.get(&next).cloned().unwrap_or(json!({}));
        let text = schema.to_string();
        for (at, _) in text.match_indices("#/components/schemas/") {
            let rest = &text[at + "#/components/schemas/".len()..];
            todo.push(rest.split('"').next().unwrap_or("").to_string());
        }
        defs.insert(next, schema);
    }
    let text = Value::Object(defs)
        .to_string()
        .replace("#/components/schemas/", "#/$defs/");
    let mut defs: Value = serde_json::from_str(&text).unwrap_or(json!({}));
    let mut root = defs
        .as_object_mut()
        .and_then(|d| d.remove(name))
        .unwrap_or(json!({"type": "object"}));
    if let Value::Object(root) = &mut root {
        root.insert(
            "$schema".into(),
            json!("https://json-schema.org/draft/2020-12/schema"),
        );
        if defs.as_object().is_some_and(|d| !d.is_empty()) {
            root.insert("$defs".into(), defs);
        }
    }
    root
}
