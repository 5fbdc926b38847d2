//! One container's conversation with its supervisor for a job: `RunJob`, then step results and
//! artifacts as they arrive, until `JobEnd`, the backstop deadline, or the end of the stream.
//!
//! The agent enforces the job's own deadline and reports a timed-out job like any other (with its
//! artifacts). The host keeps a backstop beyond it (the runtime, artifact collection and a
//! margin) for a supervisor that stops answering: then it kills the container and completes the
//! result itself, as it does when the container dies. Either way the result is complete.
//!
//! A job under a run-time policy is sent only to a supervisor that announces enforcement (else it
//! does not run, and its result says why); each step's `Events` frames are gathered into its
//! result (`enforced::JobGathered`), and each `ApprovalRequest` goes to the run's approver, whose
//! decision is written back while the job runs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use scriptgate_policy::events::Events;
use scriptgate_supervisor::enforcement::ApprovalDecision;
use scriptgate_supervisor::job::paths::JobPath;
use scriptgate_supervisor::job::{
    ArtifactEntry, ErrorType, HARD_MAX_MESSAGE, JobEnd, JobError, JobResult, JobStatus,
    ResultBuilder, StepType,
};
use scriptgate_supervisor::{
    ArtifactBegin, ArtifactEnd, FEATURE_JOBS, FrameKind, HostKind, JobEndFrame, MessageAssembler,
    PROTOCOL_VERSION, RunJob, StepEnd, StepStarted, encode_host_message,
};
use time::OffsetDateTime;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use uuid::Uuid;

use super::Cleaner;
use super::enforced::{self, JobGathered};
use super::session::{DIAGNOSTICS, Msg, Prepared, message_of};
use crate::sandbox::jobs::Receiving;
use crate::sandbox::{ArtifactFile, CappedText, Enforcement, JobOutcome, JobRun, Timings};

/// Beyond the job's runtime: the agent's artifact collection (60 s) and a margin.
const BACKSTOP_GRACE: Duration = Duration::from_secs(90);

enum End {
    Done(JobEnd),
    TimedOut,
    Lost(String),
    /// Not sent: the sandbox cannot run it as asked (a policy it cannot enforce).
    Refused(String),
}

impl Prepared {
    /// Runs the job; always yields an outcome with a complete result.
    pub(crate) async fn execute_job(mut self, run: &JobRun, cleaner: &Arc<Cleaner>) -> JobOutcome {
        let started = Instant::now();
        let mut talk = Conversation::new(run.clone());
        let (answers, mut decisions) = mpsc::channel(64);
        if let Some(e) = run.enforcement() {
            talk.gather(e.clone(), answers);
        }
        let end = if !self.features.iter().any(|f| f == FEATURE_JOBS) {
            End::Lost("the runner image's supervisor predates jobs: rebuild it with `scriptgate images build`".into())
        } else if run.enforcement().is_some() && !enforced::supported(&self.features) {
            End::Refused(enforced::UNAVAILABLE_JOB.into())
        } else {
            let deadline = tokio::time::Instant::now() + backstop(run);
            self.converse(&mut talk, &mut decisions, deadline).await
        };
        let events = talk.take_events();
        let (mut oom_killed, mut crashed, mut files) = (false, None, Vec::new());
        let result = match end {
            End::Done(end) => {
                let (result, kept) = talk.done(end);
                files = kept;
                result
            }
            End::TimedOut => {
                cleaner.kill(&self.id).await;
                let limit = backstop(run).as_secs();
                crashed = Some("the supervisor did not end the job in time".into());
                talk.abandon(
                    JobStatus::Timeout,
                    JobError::new(
                        ErrorType::Timeout,
                        format!("the sandbox did not end the job within {limit}s and was killed"),
                    ),
                )
            }
            End::Lost(reason) => {
                let state = cleaner
                    .docker
                    .inspect_container(&self.id, None)
                    .await
                    .ok()
                    .and_then(|c| c.state);
                oom_killed = state.and_then(|s| s.oom_killed).unwrap_or(false);
                let detail = talk.diagnostics.text();
                crashed = Some(if detail.trim().is_empty() {
                    reason
                } else {
                    format!("{reason}: {}", detail.trim())
                });
                let error = if oom_killed {
                    JobError::limit("the container ran out of memory and was killed")
                } else {
                    JobError::internal("the sandbox stopped unexpectedly")
                };
                talk.abandon(JobStatus::Failure, error)
            }
            End::Refused(reason) => talk.abandon(JobStatus::Failure, JobError::internal(reason)),
        };
        let outcome = JobOutcome {
            execution_id: self.execution_id,
            container_id: self.id.clone(),
            result,
            files,
            timings: Timings {
                create: self.create,
                start: self.start,
                run: started.elapsed(),
                cleanup: Duration::ZERO,
            },
            warm: self.warm,
            oom_killed,
            crashed,
            provenance: self.provenance.clone(),
            events,
            network: None,
        };
        // Removal happens after the response; dropping `self` schedules it.
        drop(self);
        outcome
    }

    async fn converse(
        &mut self,
        talk: &mut Conversation,
        decisions: &mut mpsc::Receiver<ApprovalDecision>,
        deadline: tokio::time::Instant,
    ) -> End {
        let payload = match talk.message().and_then(|m| json(&m)) {
            Ok(p) => p,
            Err(e) => return End::Lost(format!("encoding the job: {e}")),
        };
        // The stream stays open: the supervisor reads on while the job runs.
        let sent = async {
            self.input
                .write_all(&encode_host_message(HostKind::RunJob, &payload))
                .await?;
            self.input.flush().await
        };
        if let Err(e) = sent.await {
            return End::Lost(format!("could not send the job: {e}"));
        }
        loop {
            tokio::select! {
                biased;
                msg = self.rx.recv() => match msg {
                    Some(Msg::Frame(kind, payload)) => match talk.frame(kind as u8, payload) {
                        Ok(Some(end)) => return End::Done(end),
                        Ok(None) => {}
                        Err(e) => return End::Lost(e),
                    },
                    Some(Msg::Diagnostic(b)) => talk.diagnostics.push(&b),
                    Some(Msg::Broken(e)) => return End::Lost(e),
                    None => return End::Lost("the container stopped without ending the job".into()),
                },
                Some(decision) = decisions.recv() => {
                    // The operation waits in the sandbox: its decision goes back at once.
                    let sent = async {
                        let payload = json(&decision).map_err(std::io::Error::other)?;
                        self.input
                            .write_all(&encode_host_message(HostKind::ApprovalDecision, &payload))
                            .await?;
                        self.input.flush().await
                    };
                    if let Err(e) = sent.await {
                        return End::Lost(format!("could not send an approval decision: {e}"));
                    }
                },
                _ = tokio::time::sleep_until(deadline) => return End::TimedOut,
            }
        }
    }
}

fn json(value: &impl serde::Serialize) -> Result<Vec<u8>, String> {
    serde_json::to_vec(value).map_err(|e| e.to_string())
}

/// How long the host waits for `run`'s end before it gives the sandbox up.
pub(super) fn backstop(run: &JobRun) -> Duration {
    run.job().runtime() + BACKSTOP_GRACE
}

/// What the host has heard of a job so far (of a job container, or of a session's job).
pub(super) struct Conversation {
    run: JobRun,
    nonce: String,
    builder: ResultBuilder,
    assembler: MessageAssembler,
    receiving: Option<Receiving>,
    files: Vec<ArtifactFile>,
    announced_bytes: u64,
    announced_files: usize,
    pub(super) diagnostics: CappedText,
    /// What the job's policy reported so far (a job under one only).
    gathered: Option<JobGathered>,
}

impl Conversation {
    pub(super) fn new(run: JobRun) -> Self {
        let builder = run.job().result_builder(OffsetDateTime::now_utc());
        Conversation {
            run,
            nonce: Uuid::new_v4().simple().to_string(),
            builder,
            assembler: MessageAssembler::new(HARD_MAX_MESSAGE),
            receiving: None,
            files: Vec::new(),
            announced_bytes: 0,
            announced_files: 0,
            diagnostics: CappedText::new(DIAGNOSTICS),
            gathered: None,
        }
    }

    /// The `RunJob` message that starts the job (with this conversation's nonce, and the run's
    /// policy when it has one).
    pub(super) fn message(&self) -> Result<RunJob, String> {
        let enforce = match self.run.enforcement() {
            Some(e) => Some(enforced::job_field(e)?),
            None => None,
        };
        Ok(RunJob {
            version: PROTOCOL_VERSION,
            nonce: self.nonce.clone(),
            job: self.run.job().to_json(),
            maxima: self.run.job().maxima().clone(),
            enforce,
        })
    }

    /// Gathers the job's events and hands its held operations to `enforcement`'s approver
    /// (decisions to `answers`): a job container's run under its policy, or a session's job
    /// under the session's.
    pub(super) fn gather(
        &mut self,
        enforcement: Enforcement,
        answers: mpsc::Sender<ApprovalDecision>,
    ) {
        self.gathered = Some(JobGathered::new(enforcement, answers));
    }

    /// Every step's events together (`None`: the job ran without a policy).
    pub(super) fn take_events(&mut self) -> Option<Events> {
        self.gathered.take().map(JobGathered::finish)
    }

    /// One frame; the job's end once it arrives.
    fn frame(&mut self, kind: u8, payload: Vec<u8>) -> Result<Option<JobEnd>, String> {
        let Some((kind, message)) = self
            .assembler
            .push(kind, payload)
            .map_err(|e| format!("protocol error: {e}"))?
        else {
            return Ok(None);
        };
        self.message_of_kind(kind, &message)
    }

    /// Whether a message of `kind` belongs to a job (a session routes these here while its job
    /// runs).
    pub(super) fn is_job_kind(kind: u8) -> bool {
        matches!(
            FrameKind::from_u8(kind),
            Some(
                FrameKind::StepStarted
                    | FrameKind::StepEnd
                    | FrameKind::ArtifactBegin
                    | FrameKind::ArtifactData
                    | FrameKind::ArtifactEnd
                    | FrameKind::JobEnd
                    | FrameKind::Events
                    | FrameKind::ApprovalRequest
            )
        )
    }

    /// One whole message; the job's end once it arrives.
    pub(super) fn message_of_kind(
        &mut self,
        kind: u8,
        message: &[u8],
    ) -> Result<Option<JobEnd>, String> {
        let message = message.to_vec();
        let json = |what: &str| format!("malformed {what} frame");
        match FrameKind::from_u8(kind) {
            Some(FrameKind::StepStarted) => {
                let started: StepStarted =
                    serde_json::from_slice(&message).map_err(|_| json("step start"))?;
                self.builder.started(started.index as usize);
                if let Some(g) = &mut self.gathered {
                    g.step_started();
                }
            }
            Some(FrameKind::StepEnd) => {
                let mut end: StepEnd =
                    serde_json::from_slice(&message).map_err(|_| json("step end"))?;
                if let Some(g) = &mut self.gathered {
                    let events = g.step_ended();
                    // File steps are decided before the job runs: only commands have events.
                    end.result.events =
                        (end.result.step_type == StepType::RunCommand).then_some(events);
                }
                self.builder.record(end.index as usize, end.result)?;
            }
            Some(FrameKind::Events) => self
                .gathered
                .as_mut()
                .ok_or("events from a job without a policy")?
                .on_events(&message)?,
            Some(FrameKind::ApprovalRequest) => self
                .gathered
                .as_mut()
                .ok_or("an approval request from a job without a policy")?
                .on_request(&message)?,
            Some(FrameKind::ArtifactBegin) => {
                let begin: ArtifactBegin =
                    serde_json::from_slice(&message).map_err(|_| json("artifact"))?;
                self.begin(begin)?;
            }
            Some(FrameKind::ArtifactData) => match &mut self.receiving {
                Some(r) => r.push(&message)?,
                None => return Err("artifact data outside an artifact".into()),
            },
            Some(FrameKind::ArtifactEnd) => {
                let end: ArtifactEnd =
                    serde_json::from_slice(&message).map_err(|_| json("artifact end"))?;
                let receiving = self
                    .receiving
                    .take()
                    .ok_or("an artifact end outside an artifact")?;
                self.files.extend(receiving.finish(&end.sha256));
            }
            Some(FrameKind::JobEnd) => {
                let end: JobEndFrame =
                    serde_json::from_slice(&message).map_err(|_| json("job end"))?;
                if end.nonce != self.nonce {
                    return Err("a job end with a wrong nonce".into());
                }
                return Ok(Some(end.end));
            }
            Some(FrameKind::Failure) => return Err(message_of(&message)),
            _ => return Err(format!("unexpected frame of kind {kind} during a job")),
        }
        Ok(None)
    }

    /// A file announced: within the deployment's maxima and inside the job's allowed paths.
    fn begin(&mut self, begin: ArtifactBegin) -> Result<(), String> {
        let maxima = self.run.job().maxima();
        self.announced_files += 1;
        self.announced_bytes += begin.size_bytes;
        let inside =
            JobPath::parse(&begin.path).is_ok_and(|p| self.run.job().allowed().contains(&p));
        if !inside
            || self.announced_files > maxima.max_artifacts
            || begin.size_bytes > maxima.max_artifact_bytes
            || self.announced_bytes > maxima.max_artifacts_total_bytes
        {
            return Err(format!(
                "an artifact beyond the job's paths or maxima (`{}`)",
                begin.path
            ));
        }
        // A file cut short by the agent (its collection timed out) is simply not kept.
        self.receiving = Some(
            Receiving::new(begin.path, begin.size_bytes, begin.mime_type)
                .map_err(|e| format!("spooling an artifact: {e}"))?,
        );
        Ok(())
    }

    /// The complete result of a job that ended, with the files that arrived intact.
    pub(super) fn done(mut self, end: JobEnd) -> (JobResult, Vec<ArtifactFile>) {
        let (entries, kept) = self.reconcile(end.artifacts.clone());
        let result = self.builder.finish(JobEnd {
            artifacts: entries,
            ..end
        });
        (result, kept)
    }

    /// The complete result of a job whose end never came: `error` fails the step it was running.
    pub(super) fn abandon(self, status: JobStatus, error: JobError) -> JobResult {
        self.builder.abandon(status, error)
    }

    /// The agent's entries, each with its file when it arrived intact (an error entry otherwise).
    fn reconcile(
        &mut self,
        entries: Vec<ArtifactEntry>,
    ) -> (Vec<ArtifactEntry>, Vec<ArtifactFile>) {
        let mut kept = Vec::new();
        let entries = entries
            .into_iter()
            .map(|entry| {
                let Some(sha) = entry.sha256.clone() else {
                    return entry;
                };
                let found = self
                    .files
                    .iter()
                    .position(|f| f.path == entry.path && f.sha256 == sha);
                match found {
                    Some(i) => {
                        kept.push(self.files.swap_remove(i));
                        entry
                    }
                    None => ArtifactEntry::failed(
                        entry.path,
                        JobError::internal("the file did not arrive intact"),
                    ),
                }
            })
            .collect();
        (entries, kept)
    }
}
