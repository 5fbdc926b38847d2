//! The shapes of a job as the protocol writes them: the job, its constraints, its steps and their
//! typed arguments, and the typed errors.
//!
//! One file (past 500 lines): the protocol's shapes are read together as its schema; the last
//! 70 lines are their tests.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

/// `"MAJOR.MINOR"`, both plain decimal numbers (`"1"`, `"1.0.0"`, `"01.0"` and JSON numbers are
/// not versions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProtocolVersion {
    pub major: u32,
    pub minor: u32,
}

impl FromStr for ProtocolVersion {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let number = |part: &str| -> Option<u32> {
            let plain = !part.is_empty()
                && part.bytes().all(|b| b.is_ascii_digit())
                && (part == "0" || !part.starts_with('0'));
            plain.then(|| part.parse().ok()).flatten()
        };
        let parsed = s
            .split_once('.')
            .and_then(|(major, minor)| Some((number(major)?, number(minor)?)));
        match parsed {
            Some((major, minor)) => Ok(ProtocolVersion { major, minor }),
            None => Err(format!(
                "protocol_version `{s}` is not of the form \"MAJOR.MINOR\" (e.g. \"1.0\")"
            )),
        }
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl Serialize for ProtocolVersion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ProtocolVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A job as submitted (parsed, not yet checked against any constraint).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Job {
    pub protocol_version: ProtocolVersion,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_id: Option<Uuid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skill_id: Option<String>,
    /// The runner profile to run in (the service's default when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The service's run-time policy for the job (the service chooses and checks it; the agent
    /// does not read it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    pub constraints: Constraints,
    pub steps: Vec<Step>,
    /// Absolute paths or globs of files to return after the steps (also after a failure).
    pub artifacts: Vec<String>,
    /// Unknown fields ignored under a newer minor version (never serialized: not part of a job).
    #[serde(skip)]
    pub warnings: Vec<String>,
}

/// What the job may do. Every field has the documented default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Constraints {
    pub max_runtime_seconds: u64,
    /// Absolute, canonical directories inside `/workspace` or `/tmp`.
    pub allowed_paths: Vec<String>,
    /// Bare program names, matched against programs found in the image's PATH directories.
    pub allowed_commands: Vec<String>,
    pub network_allowed: bool,
    /// Bytes of stdout and of stderr kept per `run_command` step.
    pub max_output_bytes: u64,
    /// `write_file` may replace an existing file.
    pub allow_overwrite: bool,
}

impl Default for Constraints {
    fn default() -> Self {
        Constraints {
            max_runtime_seconds: 300,
            allowed_paths: vec!["/workspace".into()],
            allowed_commands: Vec::new(),
            network_allowed: false,
            max_output_bytes: 1 << 20,
            allow_overwrite: false,
        }
    }
}

/// One step: an id unique in the job, what it does, and whether a failure ends the job.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub id: String,
    /// A failure of this step does not end the job (it stays `failure` in the result).
    pub continue_on_error: bool,
    pub action: Action,
}

impl Serialize for Step {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Wire<'a> {
            id: &'a str,
            #[serde(rename = "type")]
            step_type: StepType,
            arguments: serde_json::Value,
            #[serde(skip_serializing_if = "std::ops::Not::not")]
            continue_on_error: bool,
        }
        let arguments = match &self.action {
            Action::RunCommand(a) => serde_json::to_value(a),
            Action::WriteFile(a) => serde_json::to_value(a),
            Action::ReadFile(a) => serde_json::to_value(a),
            Action::ApplyUnifiedDiff(a) => serde_json::to_value(a),
            Action::ListTree(a) => serde_json::to_value(a),
        }
        .map_err(serde::ser::Error::custom)?;
        Wire {
            id: &self.id,
            step_type: self.action.step_type(),
            arguments,
            continue_on_error: self.continue_on_error,
        }
        .serialize(s)
    }
}

/// The step types. An unknown type is refused at every protocol version: it cannot be run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepType {
    RunCommand,
    WriteFile,
    ReadFile,
    ApplyUnifiedDiff,
    ListTree,
}

impl StepType {
    pub const ALL: [StepType; 5] = [
        StepType::RunCommand,
        StepType::WriteFile,
        StepType::ReadFile,
        StepType::ApplyUnifiedDiff,
        StepType::ListTree,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StepType::RunCommand => "run_command",
            StepType::WriteFile => "write_file",
            StepType::ReadFile => "read_file",
            StepType::ApplyUnifiedDiff => "apply_unified_diff",
            StepType::ListTree => "list_tree",
        }
    }

    pub fn from_name(name: &str) -> Option<StepType> {
        StepType::ALL.into_iter().find(|t| t.as_str() == name)
    }
}

impl fmt::Display for StepType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a step does, with its typed arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    RunCommand(RunCommand),
    WriteFile(WriteFile),
    ReadFile(ReadFile),
    ApplyUnifiedDiff(ApplyDiff),
    ListTree(ListTree),
}

impl Action {
    pub fn step_type(&self) -> StepType {
        match self {
            Action::RunCommand(_) => StepType::RunCommand,
            Action::WriteFile(_) => StepType::WriteFile,
            Action::ReadFile(_) => StepType::ReadFile,
            Action::ApplyUnifiedDiff(_) => StepType::ApplyUnifiedDiff,
            Action::ListTree(_) => StepType::ListTree,
        }
    }
}

/// `run_command`: one program, never through a shell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunCommand {
    /// A bare name (`python3`) or an absolute path in one of the image's PATH directories.
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    /// Inside `allowed_paths`; default: the first allowed path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    /// Within the job's deadline in any case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
}

/// `write_file`: a new file (or, with `allow_overwrite`, a replaced one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteFile {
    pub path: String,
    pub content: String,
    #[serde(default)]
    pub encoding: Encoding,
    #[serde(default)]
    pub mode: Mode,
}

impl WriteFile {
    /// The file's bytes (`content` decoded).
    pub fn bytes(&self) -> Result<Vec<u8>, String> {
        match self.encoding {
            Encoding::Utf8 => Ok(self.content.as_bytes().to_vec()),
            Encoding::Base64 => data_encoding::BASE64
                .decode(self.content.as_bytes())
                .map_err(|e| format!("content is not valid base64: {e}")),
        }
    }

    /// The decoded size, without decoding.
    pub fn decoded_len(&self) -> u64 {
        match self.encoding {
            Encoding::Utf8 => self.content.len() as u64,
            Encoding::Base64 => {
                let padding = self
                    .content
                    .bytes()
                    .rev()
                    .take_while(|b| *b == b'=')
                    .count();
                (self.content.len() / 4 * 3).saturating_sub(padding) as u64
            }
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Encoding {
    #[default]
    #[serde(rename = "utf8")]
    Utf8,
    #[serde(rename = "base64")]
    Base64,
}

/// Permission bits only (`"0000"`–`"0777"`, as a string of 3 or 4 octal digits): setuid, setgid
/// and sticky bits are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mode(u32);

impl Mode {
    pub fn bits(self) -> u32 {
        self.0
    }

    pub fn from_bits(bits: u32) -> Option<Mode> {
        (bits <= 0o777).then_some(Mode(bits))
    }
}

impl Default for Mode {
    fn default() -> Self {
        Mode(0o644)
    }
}

impl FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let octal = (3..=4).contains(&s.len()) && s.bytes().all(|b| (b'0'..=b'7').contains(&b));
        let bits = if octal {
            u32::from_str_radix(s, 8).ok()
        } else {
            None
        };
        bits.and_then(Mode::from_bits).ok_or_else(|| {
            format!(
                "mode `{s}` is not permission bits (\"0000\" to \"0777\"; setuid, setgid and sticky bits are refused)"
            )
        })
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04o}", self.0)
    }
}

impl Serialize for Mode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Mode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// `read_file`: at most `max_bytes` of a regular file, with its size and sha256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadFile {
    pub path: String,
    #[serde(default = "default_read_bytes")]
    pub max_bytes: u64,
}

fn default_read_bytes() -> u64 {
    65536
}

/// `apply_unified_diff`: a unified diff, applied relative to `/workspace`, all files or none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApplyDiff {
    pub diff: String,
}

/// `list_tree`: a directory's tree, never following a symlink.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListTree {
    pub path: String,
    #[serde(default = "default_depth")]
    pub max_depth: u32,
    /// Default: the deployment's maximum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_entries: Option<u64>,
}

fn default_depth() -> u32 {
    4
}

/// The protocol's error types, on a step and on the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorType {
    /// The job is not a well-formed job of a known protocol version.
    SchemaError,
    /// A constraint is broken: a command not allowed, a path outside `allowed_paths`, a symlink,
    /// an overwrite, a refused environment variable.
    PolicyViolation,
    /// The step ran and failed (a non-zero exit, a diff that does not apply, a missing file).
    ExecutionFailure,
    Timeout,
    /// A deployment maximum or a container limit (memory, disk, file size, output).
    ResourceLimitExceeded,
    /// The sandbox failed, not the job.
    InternalError,
}

impl ErrorType {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorType::SchemaError => "schema_error",
            ErrorType::PolicyViolation => "policy_violation",
            ErrorType::ExecutionFailure => "execution_failure",
            ErrorType::Timeout => "timeout",
            ErrorType::ResourceLimitExceeded => "resource_limit_exceeded",
            ErrorType::InternalError => "internal_error",
        }
    }
}

impl fmt::Display for ErrorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `{"type": ..., "message": ...}`, on a step and on the job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobError {
    #[serde(rename = "type")]
    pub kind: ErrorType,
    pub message: String,
}

impl JobError {
    pub fn new(kind: ErrorType, message: impl Into<String>) -> Self {
        JobError {
            kind,
            message: message.into(),
        }
    }

    pub fn policy(message: impl Into<String>) -> Self {
        JobError::new(ErrorType::PolicyViolation, message)
    }

    pub fn limit(message: impl Into<String>) -> Self {
        JobError::new(ErrorType::ResourceLimitExceeded, message)
    }

    pub fn failure(message: impl Into<String>) -> Self {
        JobError::new(ErrorType::ExecutionFailure, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        JobError::new(ErrorType::InternalError, message)
    }

    /// The job's error when step `id` ended the job with this one.
    pub fn in_step(&self, id: &str) -> JobError {
        JobError::new(self.kind, format!("step `{id}`: {}", self.message))
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

impl std::error::Error for JobError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_major_dot_minor_only() {
        assert_eq!("1.0".parse(), Ok(ProtocolVersion { major: 1, minor: 0 }));
        assert_eq!(
            "1.12".parse(),
            Ok(ProtocolVersion {
                major: 1,
                minor: 12
            })
        );
        assert_eq!("2.0".parse(), Ok(ProtocolVersion { major: 2, minor: 0 }));
        for bad in [
            "1", "1.0.0", "01.0", "1.00", "v1.0", " 1.0", "1.", ".0", "1.-1", "+1.0", "",
        ] {
            assert!(bad.parse::<ProtocolVersion>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn modes_take_permission_bits_only() {
        assert_eq!("0644".parse::<Mode>().map(Mode::bits), Ok(0o644));
        assert_eq!("755".parse::<Mode>().map(Mode::bits), Ok(0o755));
        assert_eq!("0000".parse::<Mode>().map(Mode::bits), Ok(0));
        for bad in [
            "4755", "2755", "1777", "7777", "0999", "64", "00644", "rw-", "0x1ff", "",
        ] {
            assert!(bad.parse::<Mode>().is_err(), "{bad:?}");
        }
        assert_eq!(Mode(0o600).to_string(), "0600");
    }

    #[test]
    fn decoded_length_of_base64_matches_decoding() {
        for data in [&b""[..], b"a", b"ab", b"abc", b"abcd", b"hello world"] {
            let w = WriteFile {
                path: "x".into(),
                content: data_encoding::BASE64.encode(data),
                encoding: Encoding::Base64,
                mode: Mode::default(),
            };
            assert_eq!(w.decoded_len(), data.len() as u64);
            assert_eq!(w.bytes().expect("valid"), data);
        }
    }

    #[test]
    fn steps_serialize_in_the_protocol_shape() {
        let step = Step {
            id: "s".into(),
            continue_on_error: false,
            action: Action::ReadFile(ReadFile {
                path: "/workspace/a".into(),
                max_bytes: 10,
            }),
        };
        assert_eq!(
            serde_json::to_value(&step).expect("json"),
            serde_json::json!({"id": "s", "type": "read_file",
                "arguments": {"path": "/workspace/a", "max_bytes": 10}})
        );
    }
}
