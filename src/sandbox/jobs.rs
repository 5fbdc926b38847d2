//! Jobs (Job protocol 1.0) on the sandbox side: what a lease runs ([`JobRun`]) and what comes back
//! ([`JobOutcome`]: always a complete result, and the collected files, checked against their
//! sha256).
//!
//! The protocol itself (types, parser, checks) is `scriptgate_supervisor::job`, re-exported as
//! [`job`]: the service and the agent in the container share one definition.

use std::io::{self, Read, Seek, Write};

use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use uuid::Uuid;

pub use scriptgate_supervisor::job;

use super::{NotCleared, Provenance, Timings};
use crate::domain::content::JobVerdict;

/// A job for a lease to run: one that passed [`job::check`] against the deployment's maxima and
/// whose content passed validation. The field is private and the one constructor takes both, so
/// no job reaches a container without them.
#[derive(Debug, Clone)]
pub struct JobRun {
    job: job::CheckedJob,
    /// The run-time policy its `run_command` steps run under ([`JobRun::enforced`]).
    enforcement: Option<super::Enforcement>,
}

impl JobRun {
    /// The run of `job`, when `verdict` judged this very job (its sha256) and everything in it
    /// passed.
    pub fn cleared(job: job::CheckedJob, verdict: &JobVerdict) -> Result<JobRun, NotCleared> {
        if !verdict.passed() || verdict.job_sha256 != job_sha256(&job) {
            return Err(NotCleared);
        }
        Ok(JobRun {
            job,
            enforcement: None,
        })
    }

    /// The same run with its `run_command` steps under `enforcement`: a sandbox that cannot
    /// enforce it runs nothing (the result says why).
    pub fn enforced(self, enforcement: super::Enforcement) -> JobRun {
        JobRun {
            enforcement: Some(enforcement),
            ..self
        }
    }

    pub fn job(&self) -> &job::CheckedJob {
        &self.job
    }

    /// The run-time policy its commands run under.
    pub fn enforcement(&self) -> Option<&super::Enforcement> {
        self.enforcement.as_ref()
    }
}

/// The sha256 of a checked job's document (what a [`JobVerdict`] is bound to).
pub fn job_sha256(job: &job::CheckedJob) -> String {
    hex::encode(Sha256::digest(job.to_json().to_string().as_bytes()))
}

/// What happened to a job in its sandbox.
#[derive(Debug)]
pub struct JobOutcome {
    pub execution_id: Uuid,
    pub container_id: String,
    /// Complete whatever happened: steps never reported are `skipped`, and a sandbox that was lost
    /// or timed out fails the step it was running.
    pub result: job::JobResult,
    /// The files of `result.artifacts` that arrived intact, in the same order.
    pub files: Vec<ArtifactFile>,
    pub timings: Timings,
    /// Served by a container started before the request.
    pub warm: bool,
    /// The container's memory limit was hit (the engine says so).
    pub oom_killed: bool,
    /// The sandbox ended without the agent's report (for logs; the result carries a typed error).
    pub crashed: Option<String>,
    pub provenance: Provenance,
    /// What the job's commands did under its run-time policy, every step together (each step's
    /// own are in its result); `None` without a policy.
    pub events: Option<scriptgate_policy::events::Events>,
    /// What the job did through the egress proxy (jobs with network access only).
    pub network: Option<super::egress::NetworkReport>,
}

impl JobOutcome {
    /// The outcome of a job no sandbox could run.
    pub fn not_run(run: &JobRun, execution_id: Uuid, error: job::JobError) -> Self {
        let builder = run.job().result_builder(OffsetDateTime::now_utc());
        JobOutcome {
            execution_id,
            container_id: String::new(),
            result: builder.abandon(job::JobStatus::Failure, error),
            files: Vec::new(),
            timings: Timings::default(),
            warm: false,
            oom_killed: false,
            crashed: None,
            provenance: Provenance::default(),
            events: None,
            network: None,
        }
    }
}

/// A collected file, spooled to an anonymous temporary file as it arrived (never held in memory
/// whole), its sha256 checked against the agent's.
#[derive(Debug)]
pub struct ArtifactFile {
    /// Absolute path in the container.
    pub path: String,
    pub sha256: String,
    pub size_bytes: u64,
    pub mime_type: String,
    data: std::fs::File,
}

impl ArtifactFile {
    /// The file's bytes.
    pub fn read_all(&self) -> io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(usize::try_from(self.size_bytes).unwrap_or(0));
        self.open()?.read_to_end(&mut out)?;
        Ok(out)
    }

    /// A reader from the start of the file (a handle of its own).
    pub fn open(&self) -> io::Result<std::fs::File> {
        let mut file = self.data.try_clone()?;
        file.rewind()?;
        Ok(file)
    }

    /// A file held whole, spooled as a received one would be (for runners that make files
    /// themselves, like test doubles).
    pub fn from_bytes(path: &str, mime_type: &str, bytes: &[u8]) -> io::Result<Self> {
        let mut r = Receiving::new(path.into(), bytes.len() as u64, mime_type.into())?;
        r.push(bytes).map_err(io::Error::other)?;
        let sha256 = hex::encode(Sha256::digest(bytes));
        r.finish(&sha256)
            .ok_or_else(|| io::Error::other("the spooled file does not match its bytes"))
    }
}

/// A file being received: its announced size, the bytes so far, their hash.
#[derive(Debug)]
pub(crate) struct Receiving {
    pub(crate) path: String,
    pub(crate) size_bytes: u64,
    pub(crate) mime_type: String,
    received: u64,
    hasher: Sha256,
    data: std::fs::File,
}

impl Receiving {
    pub(crate) fn new(path: String, size_bytes: u64, mime_type: String) -> io::Result<Self> {
        Ok(Receiving {
            path,
            size_bytes,
            mime_type,
            received: 0,
            hasher: Sha256::new(),
            data: tempfile::tempfile()?,
        })
    }

    /// Appends a chunk; more bytes than announced is an error.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Result<(), String> {
        if self.received + chunk.len() as u64 > self.size_bytes {
            return Err(format!("`{}` is longer than announced", self.path));
        }
        self.hasher.update(chunk);
        self.data
            .write_all(chunk)
            .map_err(|e| format!("spooling an artifact: {e}"))?;
        self.received += chunk.len() as u64;
        Ok(())
    }

    /// The file, if all of it arrived and its hash is `sha256`.
    pub(crate) fn finish(self, sha256: &str) -> Option<ArtifactFile> {
        let hash = hex::encode(self.hasher.finalize());
        (self.received == self.size_bytes && hash == sha256).then_some(ArtifactFile {
            path: self.path,
            sha256: hash,
            size_bytes: self.received,
            mime_type: self.mime_type,
            data: self.data,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::content::ContentVerdict;
    use crate::domain::verdict::{Finding, Layer, Severity};

    fn checked() -> job::CheckedJob {
        let value = serde_json::json!({"protocol_version": "1.0",
            "steps": [{"id": "l", "type": "list_tree", "arguments": {"path": "/workspace"}}]});
        let parsed = job::parse_value(&value).expect("well-formed");
        job::check(parsed, &job::Maxima::default()).expect("passes")
    }

    #[test]
    fn only_a_passing_verdict_on_the_same_job_clears_it() {
        let job = checked();
        let passing = JobVerdict {
            job_sha256: job_sha256(&job),
            contents: Vec::new(),
        };
        assert!(JobRun::cleared(job.clone(), &passing).is_ok());
        let other = JobVerdict {
            job_sha256: "0".repeat(64),
            ..passing.clone()
        };
        assert_eq!(JobRun::cleared(job.clone(), &other).err(), Some(NotCleared));
        let secret = Finding {
            layer: Layer::Secrets,
            rule: "r".into(),
            severity: Severity::Block,
            message: "m".into(),
            line: 1,
            column: 1,
        };
        let mut forged = ContentVerdict::scanned(None, "x".into(), vec![secret]);
        forged.valid = true;
        forged.layer = None;
        let blocked = JobVerdict {
            contents: vec![forged],
            ..passing
        };
        assert_eq!(JobRun::cleared(job, &blocked).err(), Some(NotCleared));
    }

    #[test]
    fn a_file_is_kept_only_when_whole_and_hashed_as_announced() {
        let sha = hex::encode(Sha256::digest(b"hello"));
        let mut r = Receiving::new("/workspace/a".into(), 5, "text/plain".into()).expect("spool");
        r.push(b"hel").expect("chunk");
        r.push(b"lo").expect("chunk");
        let file = r.finish(&sha).expect("intact");
        assert_eq!(file.read_all().expect("read"), b"hello");
        assert_eq!(file.read_all().expect("read twice"), b"hello");
        let mut short =
            Receiving::new("/workspace/a".into(), 5, "text/plain".into()).expect("spool");
        short.push(b"hel").expect("chunk");
        assert!(short.finish(&sha).is_none(), "incomplete");
        let mut wrong =
            Receiving::new("/workspace/a".into(), 5, "text/plain".into()).expect("spool");
        wrong.push(b"hellx").expect("chunk");
        assert!(wrong.finish(&sha).is_none(), "another hash");
        let mut long =
            Receiving::new("/workspace/a".into(), 2, "text/plain".into()).expect("spool");
        assert!(long.push(b"abc").is_err());
    }
}
