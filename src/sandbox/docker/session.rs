//! One container's conversation with its supervisor: wait for `Ready`, send the job, collect frames
//! until `Exit`, the deadline, or the stream's end.
//!
//! A reader task decodes the attach stream into a bounded channel, so a flood of output applies
//! backpressure all the way to the script instead of growing the service's memory, and so a
//! container that dies while waiting in the pool is noticed (its channel closes).

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::task::AbortOnDropHandle;

use bollard::container::{AttachContainerResults, LogOutput};
use bytes::Bytes;
use futures::StreamExt;
use scriptgate_supervisor::enforcement::encode_decision;
use scriptgate_supervisor::{
    ArtifactRequest, Exit, Failure, FrameDecoder, FrameKind, Job, PROTOCOL_VERSION, Ready,
    decode_artifact, encode_job,
};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use uuid::Uuid;

use super::enforced::{self, Gathered};
use super::{Cleaner, Removal, short};
use crate::domain::script::Language;
use crate::sandbox::{
    CappedText, EnforcedOutcome, Enforcement, OutputFile, Provenance, RunOutcome, RunSpec,
    SandboxError, Timings,
};

/// What the supervisor writes to its own stderr (diagnostics only) is kept up to this size.
pub(super) const DIAGNOSTICS: u64 = 4096;

#[derive(Debug)]
pub(super) enum Msg {
    Frame(FrameKind, Vec<u8>),
    /// The supervisor's own stderr (it never carries script output).
    Diagnostic(Bytes),
    /// The stream failed or carried something that is not our protocol.
    Broken(String),
}

/// A started container whose supervisor is waiting for its one job.
pub(crate) struct Prepared {
    pub id: String,
    pub execution_id: Uuid,
    pub language: Language,
    pub ready_at: Instant,
    pub(super) rx: mpsc::Receiver<Msg>,
    pub(super) input: Pin<Box<dyn AsyncWrite + Send>>,
    /// The frame reader, aborted when the container is done with.
    _reader: AbortOnDropHandle<()>,
    _removal: Removal,
    pub(super) create: Duration,
    pub(super) start: Duration,
    pub(super) warm: bool,
    pub(super) provenance: Provenance,
    /// Files to ask the supervisor for (profiles with plots).
    files: Option<ArtifactRequest>,
    /// What the supervisor announced it can do beyond a script (`Ready::features`).
    pub(super) features: Vec<String>,
    /// The sandbox's egress directory, mounted in the container (the service has a proxy); a
    /// run with network access gets its socket there.
    pub(super) egress_dir: Option<crate::sandbox::egress::EgressDir>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("id", &short(&self.id))
            .field("language", &self.language)
            .finish()
    }
}

async fn read_frames(
    mut output: Pin<
        Box<dyn futures::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>,
    >,
    tx: mpsc::Sender<Msg>,
) {
    let mut decoder = FrameDecoder::default();
    while let Some(item) = output.next().await {
        let msg = match item {
            Ok(LogOutput::StdOut { message }) => {
                decoder.push(&message);
                loop {
                    match decoder.next_frame() {
                        Ok(Some((kind, payload))) => {
                            if tx.send(Msg::Frame(kind, payload)).await.is_err() {
                                return;
                            }
                        }
                        Ok(None) => break,
                        Err(e) => {
                            let _ = tx.send(Msg::Broken(format!("protocol error: {e}"))).await;
                            return;
                        }
                    }
                }
                continue;
            }
            Ok(LogOutput::StdErr { message }) => Msg::Diagnostic(message),
            Ok(_) => continue,
            Err(e) => Msg::Broken(e.to_string()),
        };
        let broken = matches!(msg, Msg::Broken(_));
        if tx.send(msg).await.is_err() || broken {
            return;
        }
    }
}

pub(super) fn message_of(payload: &[u8]) -> String {
    serde_json::from_slice::<Failure>(payload)
        .map(|f| f.message)
        .unwrap_or_else(|_| String::from_utf8_lossy(payload).into_owned())
}

impl Prepared {
    /// Takes over an attached, started container and waits for its supervisor's `Ready`, which
    /// must confirm `script_uid` when the script is to run apart from its supervisor.
    pub(super) async fn ready(
        id: String,
        execution_id: Uuid,
        language: Language,
        script_uid: Option<u32>,
        attach: AttachContainerResults,
        removal: Removal,
        timeout: Duration,
    ) -> Result<Self, SandboxError> {
        let AttachContainerResults { output, input } = attach;
        let (tx, rx) = mpsc::channel(64);
        let reader = AbortOnDropHandle::new(tokio::spawn(read_frames(output, tx)));
        let mut prepared = Prepared {
            id,
            execution_id,
            language,
            ready_at: Instant::now(),
            rx,
            input,
            _reader: reader,
            _removal: removal,
            create: Duration::ZERO,
            start: Duration::ZERO,
            warm: false,
            provenance: Provenance::default(),
            files: None,
            features: Vec::new(),
            egress_dir: None,
        };
        let mut diagnostics = CappedText::new(DIAGNOSTICS);
        let wait = async {
            loop {
                match prepared.rx.recv().await {
                    Some(Msg::Frame(FrameKind::Ready, payload)) => {
                        let ready: Ready = serde_json::from_slice(&payload).map_err(|e| {
                            SandboxError::StartFailed(format!("malformed ready frame: {e}"))
                        })?;
                        if ready.version != PROTOCOL_VERSION {
                            return Err(SandboxError::StartFailed(format!(
                                "supervisor speaks protocol {}, the service {PROTOCOL_VERSION}: rebuild the images",
                                ready.version
                            )));
                        }
                        prepared.provenance.supervisor_version = ready.supervisor_version;
                        prepared.features = ready.features;
                        if ready.script_uid != script_uid {
                            return Err(SandboxError::StartFailed(format!(
                                "the supervisor runs the script as uid {:?}, the service expects {script_uid:?}: rebuild the images",
                                ready.script_uid
                            )));
                        }
                        return Ok(());
                    }
                    Some(Msg::Frame(FrameKind::Failure, payload)) => {
                        return Err(SandboxError::StartFailed(message_of(&payload)));
                    }
                    Some(Msg::Diagnostic(b)) => diagnostics.push(&b),
                    Some(Msg::Frame(kind, _)) => {
                        return Err(SandboxError::StartFailed(format!(
                            "unexpected {kind:?} frame before ready"
                        )));
                    }
                    Some(Msg::Broken(e)) => return Err(SandboxError::StartFailed(e)),
                    None => {
                        return Err(SandboxError::StartFailed(format!(
                            "container exited before it was ready: {}",
                            diagnostics.text().trim()
                        )));
                    }
                }
            }
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(Ok(())) => {
                prepared.ready_at = Instant::now();
                Ok(prepared)
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(SandboxError::StartFailed(format!(
                "not ready within {}s",
                timeout.as_secs()
            ))),
        }
    }

    /// Records what runs the script (the supervisor version comes from its `Ready`) and which
    /// files to return.
    pub(super) fn with_origin(
        mut self,
        profile: &str,
        image: &str,
        digest: Option<String>,
        files: Option<ArtifactRequest>,
    ) -> Self {
        self.provenance.profile = profile.to_string();
        self.provenance.image = image.to_string();
        self.provenance.image_digest = digest;
        self.files = files;
        self
    }

    pub(super) fn with_egress(mut self, dir: Option<crate::sandbox::egress::EgressDir>) -> Self {
        self.egress_dir = dir;
        self
    }

    pub(super) fn with_timings(mut self, create: Duration, start: Duration) -> Self {
        self.create = create;
        self.start = start;
        self
    }

    /// Marks a container taken from the warm pool: its start-up happened before the request.
    pub(super) fn into_warm(mut self) -> Self {
        self.warm = true;
        self.create = Duration::ZERO;
        self.start = Duration::ZERO;
        self
    }

    pub(super) fn is_warm(&self) -> bool {
        self.warm
    }

    /// Whether the container is still there (its attach stream has not ended).
    pub(super) fn alive(&self) -> bool {
        !self.rx.is_closed()
    }

    /// Runs the job (under `enforcement`'s policy, if given); always yields an outcome (failures
    /// of the container are part of it). A policy the supervisor cannot enforce is never dropped:
    /// the script does not run.
    pub(super) async fn execute(
        mut self,
        request: &RunSpec,
        enforcement: Option<Enforcement>,
        cleaner: &Arc<Cleaner>,
        output_limit: u64,
    ) -> EnforcedOutcome {
        let started = Instant::now();
        let nonce = Uuid::new_v4().simple().to_string();
        let enforce = match &enforcement {
            None => None,
            Some(_) if !enforced::supported(&self.features) => {
                return self.refused(enforced::UNAVAILABLE.into());
            }
            Some(e) => match enforced::job_field(e) {
                Ok(field) => Some(field),
                Err(reason) => return self.refused(reason),
            },
        };
        let (answers_tx, mut answers) = tokio::sync::mpsc::channel(64);
        let mut gathered = enforcement.as_ref().map(|e| Gathered::new(e, answers_tx));
        let job = Job {
            version: PROTOCOL_VERSION,
            nonce: nonce.clone(),
            script: request.script().to_string(),
            stdin: request.stdin().to_string(),
            output_limit,
            artifacts: self.files.clone(),
            enforce,
        };
        let mut files = Vec::new();
        let mut stdout = CappedText::new(output_limit);
        let mut stderr = CappedText::new(output_limit);
        let mut diagnostics = CappedText::new(DIAGNOSTICS);
        let deadline = tokio::time::Instant::now() + request.timeout();
        let keep_open = job.enforce.is_some();
        let sent = async {
            self.input.write_all(&encode_job(&job)).await?;
            self.input.flush().await?;
            if keep_open {
                // Approval decisions follow on stdin.
                return Ok(());
            }
            // End of stdin: the supervisor reads exactly one job.
            self.input.shutdown().await
        };
        let end = match sent.await {
            Err(e) => End::Lost(format!("could not send the job: {e}")),
            Ok(()) => loop {
                tokio::select! {
                    biased;
                    msg = self.rx.recv() => match msg {
                        Some(Msg::Frame(FrameKind::Stdout, b)) => stdout.push(&b),
                        Some(Msg::Frame(FrameKind::Stderr, b)) => stderr.push(&b),
                        Some(Msg::Frame(FrameKind::Artifact, p)) => match (&self.files, decode_artifact(&p)) {
                            (Some(req), Some((name, data)))
                                if !name.contains('/') && files.len() < req.max_count as usize
                                    && data.len() as u64 <= req.max_bytes =>
                            {
                                files.push(OutputFile { path: format!("{}/{name}", req.dir), data: data.to_vec() });
                            }
                            _ => break End::Lost("unexpected or malformed file frame".into()),
                        },
                        Some(Msg::Frame(FrameKind::Exit, p)) => break match serde_json::from_slice::<Exit>(&p) {
                            Ok(exit) if exit.nonce == nonce => End::Exited(exit),
                            Ok(_) => End::Lost("completion frame with a wrong nonce".into()),
                            Err(e) => End::Lost(format!("malformed completion frame: {e}")),
                        },
                        Some(Msg::Frame(FrameKind::Failure, p)) => break End::Lost(message_of(&p)),
                        Some(Msg::Frame(FrameKind::Ready, _)) => break End::Lost("unexpected second ready frame".into()),
                        Some(Msg::Frame(FrameKind::Events, p)) => match gathered.as_mut().map(|g| g.on_events(&p)) {
                            Some(Ok(())) => {}
                            Some(Err(e)) => break End::Lost(e),
                            None => break End::Lost("events in a run without a policy".into()),
                        },
                        Some(Msg::Frame(FrameKind::ApprovalRequest, p)) => match gathered.as_mut().map(|g| g.on_request(&p)) {
                            Some(Ok(())) => {}
                            Some(Err(e)) => break End::Lost(e),
                            None => break End::Lost("an approval request in a run without a policy".into()),
                        },
                        // Job frames: only a job asks for them.
                        Some(Msg::Frame(kind, _)) => break End::Lost(format!("unexpected {kind:?} frame in a script run")),
                        Some(Msg::Diagnostic(b)) => diagnostics.push(&b),
                        Some(Msg::Broken(e)) => break End::Lost(e),
                        None => break End::Lost("the container stopped without reporting an exit".into()),
                    },
                    Some(decision) = answers.recv() => {
                        let frame = encode_decision(&decision);
                        if let Err(e) = self.input.write_all(&frame).await {
                            break End::Lost(format!("could not send an approval decision: {e}"));
                        }
                        let _ = self.input.flush().await;
                    }
                    _ = tokio::time::sleep_until(deadline) => break End::TimedOut,
                }
            },
        };
        let mut outcome = RunOutcome {
            execution_id: self.execution_id,
            container_id: self.id.clone(),
            exit_code: None,
            signal: None,
            stdout,
            stderr,
            timed_out: false,
            oom_killed: false,
            crashed: None,
            usage: Default::default(),
            timings: Timings {
                create: self.create,
                start: self.start,
                run: Duration::ZERO,
                cleanup: Duration::ZERO,
            },
            warm: self.warm,
            files: Vec::new(),
            files_dropped: 0,
            provenance: self.provenance.clone(),
            network: None,
        };
        let (events, summary) = match gathered {
            Some(g) => {
                let (events, summary) = g.finish();
                (Some(events), summary)
            }
            None => (None, None),
        };
        match end {
            End::Exited(exit) => {
                outcome.files = files;
                outcome.files_dropped = exit.artifacts_dropped;
                outcome.exit_code = Some(exit.exit_code);
                outcome.signal = exit.signal;
                // SIGKILL plus a kill by the memory cgroup's OOM killer: the memory limit was hit.
                outcome.oom_killed =
                    exit.usage.oom_kills > 0 && exit.signal == Some(libc_sigkill());
                if exit.stdout_truncated {
                    outcome.stdout.mark_truncated();
                }
                if exit.stderr_truncated {
                    outcome.stderr.mark_truncated();
                }
                outcome.usage = exit.usage;
            }
            End::TimedOut => {
                // The host owns the deadline: SIGKILL through the engine, whatever the script traps.
                cleaner.kill(&self.id).await;
                outcome.timed_out = true;
            }
            End::Lost(reason) => {
                let state = cleaner
                    .docker
                    .inspect_container(&self.id, None)
                    .await
                    .ok()
                    .and_then(|c| c.state);
                outcome.oom_killed = state.as_ref().and_then(|s| s.oom_killed).unwrap_or(false);
                let detail = diagnostics.text();
                outcome.crashed = Some(if detail.trim().is_empty() {
                    reason
                } else {
                    format!("{reason}: {}", detail.trim())
                });
            }
        }
        outcome.timings.run = started.elapsed();
        // Removal happens after the response; `self.removal` schedules it when dropped here.
        drop(self);
        EnforcedOutcome {
            outcome,
            events,
            summary,
        }
    }
}

impl Prepared {
    /// The outcome of a run refused before its job was sent (the container is removed).
    fn refused(self, reason: String) -> EnforcedOutcome {
        let mut outcome = RunOutcome::not_run(self.execution_id, reason);
        outcome.container_id = self.id.clone();
        outcome.warm = self.warm;
        outcome.provenance = self.provenance.clone();
        EnforcedOutcome {
            outcome,
            events: None,
            summary: None,
        }
    }
}

/// SIGKILL's number (9 on every Linux architecture).
const fn libc_sigkill() -> i32 {
    9
}

enum End {
    Exited(Exit),
    TimedOut,
    Lost(String),
}
