//! The protocol between the scriptgate service and the supervisor that is PID 1 of every runner
//! container, and the job protocol both sides share ([`job`]).
//!
//! Both directions are frames, `[kind: u8][length: u32 big-endian][payload]`, at most
//! [`MAX_FRAME`] bytes of payload each. A step's or an output's own bytes only ever travel inside
//! frames the supervisor writes, so nothing a script prints can pass for a protocol frame, and the
//! frames that end a run (`Exit`, `JobEnd`) carry a per-run nonce the script never sees.
//!
//! A script run (one-shot):
//!
//! ```text
//! supervisor → host   Ready {version, language, features}   interpreter started, waiting
//! host → supervisor   [len u32][Job JSON] {nonce, script…}   once; then stdin is closed
//! supervisor → host   Stdout/Stderr bytes …                  as the script writes
//! supervisor → host   Artifact [name len u16][name][bytes]   files of `Job::artifacts` (if asked)
//! supervisor → host   Exit {nonce, exit_code, usage}         after the script exited (or Failure)
//! ```
//!
//! A job (Job protocol 1.0, [`job`]), to a supervisor whose `Ready` lists [`FEATURE_JOBS`]:
//!
//! ```text
//! host → supervisor   RunJob {version, nonce, job, maxima, enforce?}   a framed message (HostKind)
//! supervisor → host   StepStarted {index, id, type}           per step, as it starts
//! supervisor → host   Events, ApprovalRequest                 under `enforce`, while a
//!                                                             `run_command` step runs
//! host → supervisor   ApprovalDecision                        any time while the job runs
//! supervisor → host   StepEnd {index, result}                 per step (a job::StepResult)
//! supervisor → host   ArtifactBegin {path, size_bytes, mime_type}, ArtifactData bytes…,
//!                     ArtifactEnd {sha256}                    per collected file, in chunks
//! supervisor → host   JobEnd {nonce, status, error, artifacts, resource_usage, …}
//! ```
//!
//! Host → supervisor is a stream of messages that stays open after the first: the supervisor keeps
//! reading its stdin while a job runs, so later message kinds (a decision, a cancellation, a file)
//! can reach it mid-run. The one-shot script run keeps its original form, a length-prefixed job
//! and then end of input; the two are told apart by the first byte, which is a length's high byte
//! (0: a job is far smaller than 16 MiB) for a script and a [`HostKind`] (never 0) for a framed
//! message.
//!
//! A script run with a run-time policy ([`Job::enforce`], see [`enforcement`]) adds `Events` and
//! `ApprovalRequest` frames before `Exit`, and the host keeps stdin open after the job for
//! approval decisions (`[kind 21][length u32][ApprovalDecision JSON]`, framed as host messages).
//!
//! A message larger than a frame (a job with big files, a step result with a lot of output) is sent
//! as `More` frames followed by one frame of its own kind; its payload is the concatenation
//! ([`encode_message`], [`MessageAssembler`]), at most [`job::HARD_MAX_MESSAGE`] bytes. Artifacts
//! stream in [`ARTIFACT_CHUNK`]-byte `ArtifactData` frames and are never held whole.
//!
//! A session (`sessions`, to a supervisor whose `Ready` lists [`sessions::FEATURE_SESSIONS`]) is
//! one more form of that stream: many commands, file operations and kills, each answered by frames
//! that name it.
//!
//! The protocol only grows: new [`Job`] fields are only sent when set, new `Ready`/`Exit` fields
//! are optional, new frame kinds are only sent to a peer that asked for them (a job only to a
//! supervisor announcing [`FEATURE_JOBS`]), so every runner image keeps working with a newer
//! service and the other way round.

#![warn(unreachable_pub)]

pub mod job;
mod stream;

pub use stream::{
    ARTIFACT_CHUNK, ArtifactBegin, ArtifactEnd, FEATURE_JOBS, HostKind, JobEndFrame,
    MessageAssembler, RawFrameDecoder, RunJob, StepEnd, StepStarted, encode_host_message,
    encode_message,
};

pub mod enforcement;
pub mod forward;
pub mod sessions;

use serde::{Deserialize, Serialize};

/// Bumped on any incompatible change; the host refuses a supervisor that speaks another version.
pub const PROTOCOL_VERSION: u32 = 1;

/// No frame or job is larger than this (output is relayed in smaller chunks).
pub const MAX_FRAME: usize = 1 << 20;

/// The one run a container performs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Job {
    pub version: u32,
    /// Random per run; echoed in [`Exit`] so the host can tell a genuine completion frame.
    pub nonce: String,
    pub script: String,
    /// Bytes for the script's standard input (then end of file).
    #[serde(default)]
    pub stdin: String,
    /// Bytes relayed per stream; the rest is read and discarded (and reported as truncated).
    pub output_limit: u64,
    /// Files to return after the script exits (plots). Only sent when set, so a supervisor that
    /// predates it still accepts every job that does not ask for files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifacts: Option<ArtifactRequest>,
    /// A run-time policy to enforce on every process of the run (only sent when set, and only to
    /// a supervisor announcing [`enforcement::FEATURE_ENFORCE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforce: Option<enforcement::Enforce>,
}

/// Which files the supervisor returns in `Artifact` frames once the script has exited: regular
/// files directly in `dir` (never through a symlink), in name order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactRequest {
    pub dir: String,
    /// Files returned at most (the rest are counted in [`Exit::artifacts_dropped`]).
    pub max_count: u32,
    /// Larger files are not returned (and counted as dropped); at most [`MAX_ARTIFACT`].
    pub max_bytes: u64,
}

/// The largest file one `Artifact` frame carries (a frame also holds its name).
pub const MAX_ARTIFACT: u64 = (MAX_FRAME - 1024) as u64;

/// `Artifact` frame payload: `[name length: u16 BE][name][file bytes]`.
pub fn encode_artifact(name: &str, data: &[u8]) -> Vec<u8> {
    let name = &name.as_bytes()[..name.len().min(255)];
    let mut out = Vec::with_capacity(2 + name.len() + data.len());
    out.extend_from_slice(&(name.len() as u16).to_be_bytes());
    out.extend_from_slice(name);
    out.extend_from_slice(data);
    out
}

/// The name and bytes of an `Artifact` frame payload.
pub fn decode_artifact(payload: &[u8]) -> Option<(String, &[u8])> {
    let len = usize::from(u16::from_be_bytes([*payload.first()?, *payload.get(1)?]));
    let name = std::str::from_utf8(payload.get(2..2 + len)?).ok()?;
    Some((name.to_string(), &payload[2 + len..]))
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ready {
    pub version: u32,
    pub language: String,
    /// The uid the script runs as when the supervisor runs as another (see the supervisor's
    /// `identity` module); absent when they share one. The host checks it, so an image whose
    /// supervisor predates the separation is refused rather than run as root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script_uid: Option<u32>,
    /// The supervisor's crate version (absent from supervisors that predate it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supervisor_version: Option<String>,
    /// What this supervisor can do beyond a script run ([`FEATURE_JOBS`],
    /// [`enforcement::FEATURE_ENFORCE`]); empty in older ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<String>,
}

/// Resource use of the run, measured inside the container (never from anything the script prints).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// User + system CPU time of the script and every descendant it waited for or that was reaped.
    pub cpu_time_ms: u64,
    /// Peak memory of the container's cgroup (or the largest child RSS when the cgroup is unreadable).
    pub max_memory_bytes: u64,
    /// Processes the kernel OOM killer killed in the container's cgroup.
    pub oom_kills: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exit {
    pub nonce: String,
    /// The exit status, or 128 + signal when a signal ended the script (as shells report it).
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub usage: Usage,
    /// Files of [`Job::artifacts`] not returned (over the count or the size cap, or unreadable).
    #[serde(default)]
    pub artifacts_dropped: u32,
}

/// The supervisor could not run the job (it never ran, or the interpreter could not start).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    Ready = 1,
    Stdout = 2,
    Stderr = 3,
    Exit = 4,
    Failure = 5,
    Artifact = 6,
    /// Job frames (only to a host that sent a `RunJob`).
    StepStarted = 7,
    StepEnd = 8,
    ArtifactBegin = 9,
    ArtifactData = 10,
    ArtifactEnd = 11,
    JobEnd = 12,
    /// Session frames (only to a host that opened a session: `sessions`).
    SessionState = 13,
    CommandOutput = 14,
    CommandEnd = 15,
    FileDone = 16,
    Refused = 17,
    /// The payload continues in the next frame; the message's kind is its last frame's.
    More = 127,
    /// An [`enforcement::EventBatch`] (only for a job with `enforce`).
    Events = 20,
    /// An [`enforcement::ApprovalRequest`] (only for a job with `enforce`).
    ApprovalRequest = 21,
}

impl FrameKind {
    pub fn from_u8(b: u8) -> Option<Self> {
        Some(match b {
            1 => FrameKind::Ready,
            2 => FrameKind::Stdout,
            3 => FrameKind::Stderr,
            4 => FrameKind::Exit,
            5 => FrameKind::Failure,
            6 => FrameKind::Artifact,
            7 => FrameKind::StepStarted,
            8 => FrameKind::StepEnd,
            9 => FrameKind::ArtifactBegin,
            10 => FrameKind::ArtifactData,
            11 => FrameKind::ArtifactEnd,
            12 => FrameKind::JobEnd,
            13 => FrameKind::SessionState,
            14 => FrameKind::CommandOutput,
            15 => FrameKind::CommandEnd,
            16 => FrameKind::FileDone,
            17 => FrameKind::Refused,
            127 => FrameKind::More,
            20 => FrameKind::Events,
            21 => FrameKind::ApprovalRequest,
            _ => return None,
        })
    }
}

/// Appends one frame to `out`.
pub fn encode_frame(kind: FrameKind, payload: &[u8], out: &mut Vec<u8>) {
    let len = u32::try_from(payload.len()).expect("frames are smaller than MAX_FRAME");
    out.push(kind as u8);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(payload);
}

/// A length-prefixed JSON job, as the host writes it.
pub fn encode_job(job: &Job) -> Vec<u8> {
    let json = serde_json::to_vec(job).expect("a job always serializes");
    let mut out = Vec::with_capacity(json.len() + 4);
    out.extend_from_slice(&u32::try_from(json.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(&json);
    out
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    UnknownKind(u8),
    TooLarge(usize),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::UnknownKind(k) => write!(f, "unknown frame kind {k}"),
            DecodeError::TooLarge(n) => {
                write!(f, "frame of {n} bytes exceeds the {MAX_FRAME}-byte limit")
            }
        }
    }
}

impl std::error::Error for DecodeError {}

/// Reassembles frames from arbitrary chunks of the stream the supervisor writes.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    raw: RawFrameDecoder,
}

impl FrameDecoder {
    pub fn push(&mut self, bytes: &[u8]) {
        self.raw.push(bytes);
    }

    /// The next complete frame, if one is buffered.
    pub fn next_frame(&mut self) -> Result<Option<(FrameKind, Vec<u8>)>, DecodeError> {
        let Some(kind) = self.raw.peek_kind() else {
            return Ok(None);
        };
        let kind = FrameKind::from_u8(kind).ok_or(DecodeError::UnknownKind(kind))?;
        Ok(self.raw.next_frame()?.map(|(_, payload)| (kind, payload)))
    }

    /// Bytes received that do not yet form a frame.
    pub fn pending(&self) -> usize {
        self.raw.pending()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_survive_any_chunking() {
        let mut wire = Vec::new();
        encode_frame(FrameKind::Stdout, b"hello", &mut wire);
        encode_frame(FrameKind::Stderr, b"", &mut wire);
        encode_frame(FrameKind::Exit, b"{}", &mut wire);
        for chunk in 1..wire.len() {
            let mut d = FrameDecoder::default();
            let mut got = Vec::new();
            for part in wire.chunks(chunk) {
                d.push(part);
                while let Some(f) = d.next_frame().expect("valid frames") {
                    got.push(f);
                }
            }
            assert_eq!(
                got,
                vec![
                    (FrameKind::Stdout, b"hello".to_vec()),
                    (FrameKind::Stderr, vec![]),
                    (FrameKind::Exit, b"{}".to_vec())
                ]
            );
            assert_eq!(d.pending(), 0);
        }
    }

    #[test]
    fn artifact_payloads_round_trip() {
        let p = encode_artifact("figure-001.png", b"\x89PNG");
        assert_eq!(
            decode_artifact(&p),
            Some(("figure-001.png".to_string(), &b"\x89PNG"[..]))
        );
        assert_eq!(decode_artifact(&[0, 9, b'a']), None);
        assert_eq!(decode_artifact(&[]), None);
    }

    #[test]
    fn bad_frames_are_errors_not_panics() {
        let mut d = FrameDecoder::default();
        d.push(&[99, 0, 0, 0, 0]);
        assert_eq!(d.next_frame(), Err(DecodeError::UnknownKind(99)));
        let mut d = FrameDecoder::default();
        d.push(&[2, 0xff, 0xff, 0xff, 0xff]);
        assert!(matches!(d.next_frame(), Err(DecodeError::TooLarge(_))));
    }

    #[test]
    fn jobs_are_length_prefixed_json() {
        let job = Job {
            version: PROTOCOL_VERSION,
            nonce: "n".into(),
            script: "print(1)".into(),
            stdin: String::new(),
            output_limit: 10,
            artifacts: None,
            enforce: None,
        };
        let wire = encode_job(&job);
        // A job without files or a policy is exactly what older supervisors accept.
        assert!(!String::from_utf8_lossy(&wire).contains("artifacts"));
        assert!(!String::from_utf8_lossy(&wire).contains("enforce"));
        let len = u32::from_be_bytes([wire[0], wire[1], wire[2], wire[3]]) as usize;
        assert_eq!(len, wire.len() - 4);
        let back: Job = serde_json::from_slice(&wire[4..]).expect("json");
        assert_eq!(back, job);
    }
}
