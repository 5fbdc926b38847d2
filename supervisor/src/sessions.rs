//! Sessions (`sessions/1`): one long-lived container whose supervisor serves many commands, file
//! operations and kills over the host's open message stream, keeping a shell's state between
//! commands. The wire types both sides share.
//!
//! A supervisor announces [`FEATURE_SESSIONS`] in `Ready`; only then does the host open a session
//! with [`OpenSession`] as its first message. From then on, in both directions:
//!
//! ```text
//! host → supervisor   OpenSession | Resume                → SessionState (the shell state)
//! host → supervisor   Exec {id, mode, stdin, timeout}      → CommandOutput… then CommandEnd {id}
//! host → supervisor   Kill {id}                            (the command ends as `killed`)
//! host → supervisor   File {op_id, op} [+ bytes]           → [ArtifactBegin/Data/End] FileDone
//! host → supervisor   SetEnv {set, unset}                  → SessionState
//! host → supervisor   RunJob (a job in the workspace)      → the job frames, then JobEnd
//! host → supervisor   ApprovalDecision (kind 21)           an answer to an ApprovalRequest
//! supervisor → host   Events, ApprovalRequest              while a command of a session with a
//!                                                          run-time policy runs (before its
//!                                                          CommandEnd)
//! supervisor → host   Refused {id | op_id, message}        a message that could not be served
//! ```
//!
//! Every command runs in a fresh process; what persists between commands is the working
//! directory, the exported environment and the aliases ([`ShellState`]), nothing that runs code by
//! itself. After each command every other process of the container is killed.
//!
//! A session opened with [`OpenSession::enforce`] runs every command under that run-time policy
//! (see [`crate::enforcement`]): its events and approval requests are framed as for a one-shot
//! run, the last batch (with the summary) before the command's `CommandEnd`. Only a supervisor
//! announcing [`crate::enforcement::FEATURE_ENFORCE`] is sent one; an older one refuses the
//! unknown field, and one that cannot enforce here ends the session with a `Failure`: a session
//! with a policy never runs a command without it.
//!
//! The host may lose its attach stream (a service restart) and attach again: it then writes
//! [`PADDING`] zero bytes, which complete any message the old stream left half written (a zero
//! byte where a frame would start is padding, and a frame that then makes no sense is dropped),
//! and asks for the state with [`Resume`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::Usage;
use crate::job::{JobError, TreeOutput, WriteOutput};

/// In a supervisor's `Ready::features`: it serves sessions.
pub const FEATURE_SESSIONS: &str = "sessions/1";

/// Zero bytes a re-attached host writes before its first message: more than any frame.
pub const PADDING: usize = crate::MAX_FRAME + 16;

/// The first message of a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenSession {
    pub version: u32,
    /// Echoed in every `SessionState` and `CommandEnd`, so the host can tell genuine ones.
    pub nonce: String,
    /// Set over the container's own environment (checked by the host, again here).
    pub env: BTreeMap<String, String>,
    /// Unix milliseconds after which the supervisor ends the session by itself, should the host
    /// be gone by then (the host stops it at that time otherwise).
    pub expires_at_ms: u64,
    /// Bytes of each output stream relayed per command; the rest is counted, not sent.
    pub output_limit: u64,
    /// The run-time policy every command of the session runs under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforce: Option<crate::enforcement::Enforce>,
}

/// Asks a running session for its state (after the host attached again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resume {
    pub nonce: String,
}

/// What a session carries from one command to the next.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellState {
    pub cwd: String,
    pub env: BTreeMap<String, String>,
    pub aliases: BTreeMap<String, String>,
}

/// The interpreter of a script command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScriptLanguage {
    Python,
    Bash,
}

/// What a command runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ExecMode {
    /// A bash command line in the session's shell state (aliases already expanded by the host);
    /// the only kind that changes the state.
    Line { line: String },
    /// A program and its arguments, without a shell.
    Argv { argv: Vec<String> },
    /// A script, run by its interpreter.
    Script {
        language: ScriptLanguage,
        source: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Exec {
    pub id: Uuid,
    pub mode: ExecMode,
    #[serde(default)]
    pub stdin: String,
    pub timeout_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Kill {
    pub id: Uuid,
}

/// Environment changes between commands (`PATCH` of a session).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetEnv {
    pub set: BTreeMap<String, String>,
    pub unset: Vec<String>,
}

/// A file operation on a path of the job protocol (under `/workspace` or `/tmp`, no symlinks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum FileOp {
    /// Replaces the file with the bytes after the header, whole or not at all.
    Put { path: String, sha256: String },
    /// The file's bytes, as `ArtifactBegin`/`ArtifactData`/`ArtifactEnd` frames before the reply.
    Get { path: String },
    /// A file, or a directory and everything in it.
    Delete { path: String },
    List {
        path: String,
        depth: u32,
        max_entries: u64,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileRequest {
    pub op_id: u64,
    pub op: FileOp,
}

/// What a file operation did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FileDone {
    Written(WriteOutput),
    Read {
        path: String,
        size_bytes: u64,
        sha256: String,
    },
    Deleted {
        path: String,
        entries: u64,
    },
    Listed(TreeOutput),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileReply {
    pub op_id: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done: Option<FileDone>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<JobError>,
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ended {
    Exited,
    Timeout,
    Killed,
    /// It never started (the program is missing, the working directory is gone, …).
    FailedToStart,
}

/// The last command that ended (reported on `Resume`, for a host that missed its end).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastCommand {
    pub id: Uuid,
    pub ended: Ended,
    pub exit_code: Option<i32>,
}

/// The answer to `OpenSession`, `Resume` and `SetEnv`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionState {
    pub nonce: String,
    pub state: ShellState,
    /// The command running now.
    pub running: Option<Uuid>,
    pub last: Option<LastCommand>,
    /// Commands run so far.
    pub commands: u64,
    /// Environment changes that were refused (names that load code).
    #[serde(default)]
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandEnd {
    pub nonce: String,
    pub id: Uuid,
    pub ended: Ended,
    /// The exit status, or 128 + signal; `None` when it timed out, was killed or never started.
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Bytes the command wrote to each stream, relayed or not.
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub usage: Usage,
    pub duration_ms: u64,
    /// The state after the command (unchanged unless a command line reported a new one).
    pub state: ShellState,
    /// What was not kept of the reported state, and why; why it never started.
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// A message that could not be served (a malformed one, a second command, an unknown id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refused {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op_id: Option<u64>,
    pub message: String,
}

/// The output streams of a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputStream {
    Stdout,
    Stderr,
}

/// A `CommandOutput` payload: `[stream: 1 stdout | 2 stderr][command id: 16 bytes][bytes]`.
pub fn encode_output(stream: OutputStream, id: Uuid, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(17 + bytes.len());
    out.push(match stream {
        OutputStream::Stdout => 1,
        OutputStream::Stderr => 2,
    });
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(bytes);
    out
}

/// The stream, command id and bytes of a `CommandOutput` payload.
pub fn decode_output(payload: &[u8]) -> Option<(OutputStream, Uuid, &[u8])> {
    let stream = match payload.first()? {
        1 => OutputStream::Stdout,
        2 => OutputStream::Stderr,
        _ => return None,
    };
    let id = Uuid::from_slice(payload.get(1..17)?).ok()?;
    Some((stream, id, &payload[17..]))
}

/// A `File` message: `[header length: u32 BE][FileRequest JSON][bytes of a Put]`.
pub fn encode_file_request(request: &FileRequest, data: &[u8]) -> Vec<u8> {
    let header = serde_json::to_vec(request).expect("a file request serializes");
    let mut out = Vec::with_capacity(4 + header.len() + data.len());
    out.extend_from_slice(&(header.len() as u32).to_be_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(data);
    out
}

/// The request and the bytes of a `File` message.
pub fn decode_file_request(payload: &[u8]) -> Result<(FileRequest, &[u8]), String> {
    let len = payload
        .get(..4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .ok_or("a file message without a header")?;
    let header = payload
        .get(4..4 + len)
        .ok_or("a file message shorter than its header")?;
    let request = serde_json::from_slice(header).map_err(|e| format!("malformed file op: {e}"))?;
    Ok((request, &payload[4 + len..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_and_file_payloads_round_trip() {
        let id = Uuid::new_v4();
        let p = encode_output(OutputStream::Stderr, id, b"oops\n");
        assert_eq!(
            decode_output(&p),
            Some((OutputStream::Stderr, id, &b"oops\n"[..]))
        );
        assert_eq!(decode_output(&[3; 20]), None);
        assert_eq!(decode_output(&[1, 2]), None);
        let request = FileRequest {
            op_id: 7,
            op: FileOp::Put {
                path: "a.txt".into(),
                sha256: "x".into(),
            },
        };
        let wire = encode_file_request(&request, b"\0bytes");
        let (back, data) = decode_file_request(&wire).expect("decodes");
        assert_eq!((back, data), (request, &b"\0bytes"[..]));
        assert!(decode_file_request(&wire[..6]).is_err());
        assert!(decode_file_request(&[0, 0]).is_err());
    }

    #[test]
    fn exec_modes_are_tagged() {
        let exec = Exec {
            id: Uuid::nil(),
            mode: ExecMode::Argv {
                argv: vec!["ls".into(), "-l".into()],
            },
            stdin: String::new(),
            timeout_ms: 1000,
        };
        let json = serde_json::to_value(&exec).expect("json");
        assert_eq!(json["mode"]["kind"], "argv");
        assert_eq!(serde_json::from_value::<Exec>(json).expect("back"), exec);
    }
}
