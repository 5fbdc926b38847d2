//! Frames in both directions, messages larger than a frame, and the payloads of the job frames.

use serde::{Deserialize, Serialize};

use crate::job::{self, JobEnd, Maxima, StepResult, StepType};
use crate::{DecodeError, FrameKind, MAX_FRAME};

/// In a supervisor's `Ready::features`: it takes [`RunJob`] messages (Job protocol 1.x).
pub const FEATURE_JOBS: &str = "jobs/1";

/// Bytes of artifact per `ArtifactData` frame.
pub const ARTIFACT_CHUNK: usize = 512 * 1024;

/// The kind byte of `More`, the same in both directions.
const MORE: u8 = FrameKind::More as u8;

/// Kinds of the frames the host writes (never 0: see the crate docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum HostKind {
    RunJob = 1,
    /// Session messages (`sessions`): the first opens one, the others only follow it.
    OpenSession = 2,
    Exec = 3,
    Kill = 4,
    File = 5,
    Resume = 6,
    SetEnv = 7,
    /// An approval decision (`enforcement::ApprovalDecision`), after a job with a policy.
    ApprovalDecision = 21,
    More = 127,
}

impl HostKind {
    pub fn from_u8(b: u8) -> Option<Self> {
        match b {
            1 => Some(HostKind::RunJob),
            2 => Some(HostKind::OpenSession),
            3 => Some(HostKind::Exec),
            4 => Some(HostKind::Kill),
            5 => Some(HostKind::File),
            6 => Some(HostKind::Resume),
            7 => Some(HostKind::SetEnv),
            21 => Some(HostKind::ApprovalDecision),
            127 => Some(HostKind::More),
            _ => None,
        }
    }
}

/// Run this job instead of a script (a framed message, `HostKind::RunJob`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunJob {
    pub version: u32,
    /// Echoed in `JobEnd`, so the host can tell a genuine end of the job.
    pub nonce: String,
    /// The job as protocol JSON, `job_id` set; the agent parses and checks it again.
    pub job: serde_json::Value,
    /// The deployment's maxima the host checked it against.
    pub maxima: Maxima,
    /// The run-time policy every `run_command` step runs under (sent only to a supervisor that
    /// announces [`crate::enforcement::FEATURE_ENFORCE`]; one that cannot enforce it here refuses
    /// the job). A session's job runs under the session's policy instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforce: Option<crate::enforcement::Enforce>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepStarted {
    pub index: u32,
    pub id: String,
    #[serde(rename = "type")]
    pub step_type: StepType,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepEnd {
    pub index: u32,
    pub result: StepResult,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactBegin {
    pub path: String,
    pub size_bytes: u64,
    pub mime_type: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactEnd {
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobEndFrame {
    pub nonce: String,
    #[serde(flatten)]
    pub end: JobEnd,
}

/// Appends a message of `kind` to `out`: `More` frames, then one frame of `kind`.
pub fn encode_message(kind: FrameKind, payload: &[u8], out: &mut Vec<u8>) {
    message_frames(kind as u8, payload, out);
}

/// A host message of `kind` as frames (`More` frames, then one frame of `kind`).
pub fn encode_host_message(kind: HostKind, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 5 * (payload.len() / MAX_FRAME + 1));
    message_frames(kind as u8, payload, &mut out);
    out
}

fn message_frames(kind: u8, payload: &[u8], out: &mut Vec<u8>) {
    let mut frame = |k: u8, chunk: &[u8]| {
        out.push(k);
        out.extend_from_slice(&(chunk.len() as u32).to_be_bytes());
        out.extend_from_slice(chunk);
    };
    let mut chunks = payload.chunks(MAX_FRAME).peekable();
    if chunks.peek().is_none() {
        frame(kind, &[]);
    }
    while let Some(chunk) = chunks.next() {
        frame(if chunks.peek().is_some() { MORE } else { kind }, chunk);
    }
}

/// Frames of either direction, kinds as bytes, from arbitrary chunks of a stream.
#[derive(Debug, Default)]
pub struct RawFrameDecoder {
    buf: Vec<u8>,
    /// Where the unread frames start in `buf` (consumed bytes are dropped in batches).
    at: usize,
}

impl RawFrameDecoder {
    pub fn push(&mut self, bytes: &[u8]) {
        if self.at > 0 && self.at >= self.buf.len() / 2 {
            self.buf.drain(..self.at);
            self.at = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The kind of the next frame, once its first byte is here.
    pub fn peek_kind(&self) -> Option<u8> {
        self.buf.get(self.at).copied()
    }

    /// The next complete frame, if one is buffered.
    pub fn next_frame(&mut self) -> Result<Option<(u8, Vec<u8>)>, DecodeError> {
        let rest = &self.buf[self.at..];
        if rest.len() < 5 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        if len > MAX_FRAME {
            return Err(DecodeError::TooLarge(len));
        }
        if rest.len() < 5 + len {
            return Ok(None);
        }
        let frame = (rest[0], rest[5..5 + len].to_vec());
        self.at += 5 + len;
        Ok(Some(frame))
    }

    /// Bytes received that do not yet form a frame.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.at
    }

    /// Skips zero bytes where a frame would start (a session's padding, `sessions::PADDING`).
    pub fn skip_padding(&mut self) {
        while self.buf.get(self.at) == Some(&0) {
            self.at += 1;
        }
    }

    /// Drops everything buffered (after a frame that made no sense).
    pub fn clear(&mut self) {
        self.buf.clear();
        self.at = 0;
    }
}

/// Joins `More` frames and the frame that ends their message, up to a size limit.
#[derive(Debug)]
pub struct MessageAssembler {
    limit: usize,
    parts: Vec<u8>,
}

impl MessageAssembler {
    /// `limit`: the largest message accepted (at most [`job::HARD_MAX_MESSAGE`]).
    pub fn new(limit: u64) -> Self {
        MessageAssembler {
            limit: usize::try_from(limit.min(job::HARD_MAX_MESSAGE)).unwrap_or(usize::MAX),
            parts: Vec::new(),
        }
    }

    /// Takes one frame; returns the message it completes (`None` after a `More` frame).
    pub fn push(
        &mut self,
        kind: u8,
        payload: Vec<u8>,
    ) -> Result<Option<(u8, Vec<u8>)>, DecodeError> {
        if self.parts.len() + payload.len() > self.limit {
            return Err(DecodeError::TooLarge(self.parts.len() + payload.len()));
        }
        if kind == MORE {
            self.parts.extend_from_slice(&payload);
            return Ok(None);
        }
        if self.parts.is_empty() {
            return Ok(Some((kind, payload)));
        }
        let mut message = std::mem::take(&mut self.parts);
        message.extend_from_slice(&payload);
        Ok(Some((kind, message)))
    }

    /// Whether a message is half received.
    pub fn in_progress(&self) -> bool {
        !self.parts.is_empty()
    }

    /// Forgets a half-received message.
    pub fn reset(&mut self) {
        self.parts.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(wire: &[u8], limit: u64) -> Result<Vec<(u8, Vec<u8>)>, DecodeError> {
        let mut decoder = RawFrameDecoder::default();
        let mut assembler = MessageAssembler::new(limit);
        let mut out = Vec::new();
        for chunk in wire.chunks(7919) {
            decoder.push(chunk);
            while let Some((kind, payload)) = decoder.next_frame()? {
                if let Some(message) = assembler.push(kind, payload)? {
                    out.push(message);
                }
            }
        }
        Ok(out)
    }

    #[test]
    fn messages_larger_than_a_frame_are_split_and_joined() {
        let big: Vec<u8> = (0..(MAX_FRAME * 2 + 17)).map(|i| i as u8).collect();
        let mut wire = Vec::new();
        encode_message(FrameKind::StepEnd, &big, &mut wire);
        encode_message(FrameKind::JobEnd, b"{}", &mut wire);
        encode_message(FrameKind::StepStarted, b"", &mut wire);
        let got = messages(&wire, job::HARD_MAX_MESSAGE).expect("decodes");
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], (FrameKind::StepEnd as u8, big));
        assert_eq!(got[1], (FrameKind::JobEnd as u8, b"{}".to_vec()));
        assert_eq!(got[2], (FrameKind::StepStarted as u8, Vec::new()));
    }

    #[test]
    fn host_messages_never_start_with_a_zero_byte() {
        let wire = encode_host_message(HostKind::RunJob, &vec![b'x'; MAX_FRAME + 1]);
        assert_ne!(wire[0], 0, "a legacy job's length starts with 0");
        let got = messages(&wire, job::HARD_MAX_MESSAGE).expect("decodes");
        assert_eq!(
            got,
            vec![(HostKind::RunJob as u8, vec![b'x'; MAX_FRAME + 1])]
        );
        assert_eq!(HostKind::from_u8(wire[0]), Some(HostKind::More));
    }

    #[test]
    fn a_message_over_the_limit_is_refused_before_it_is_buffered_whole() {
        let mut wire = Vec::new();
        encode_message(FrameKind::StepEnd, &vec![0u8; MAX_FRAME * 3], &mut wire);
        assert!(matches!(
            messages(&wire, MAX_FRAME as u64 * 2),
            Err(DecodeError::TooLarge(_))
        ));
    }
}
