//! A job sent by the service (`RunJob`): checked again here, run by the agent, reported in frames
//! on stdout, ended by a `JobEnd` that carries the job's nonce. A job with a run-time policy
//! (`RunJob::enforce`) runs its commands under it, or is refused when this sandbox cannot
//! enforce it.

use scriptgate_supervisor::job::{self, CheckedStep, JobEnd, StepResult, StepStatus};
use scriptgate_supervisor::{
    ArtifactBegin, ArtifactEnd, FrameKind, JobEndFrame, PROTOCOL_VERSION, RunJob, StepEnd,
    StepStarted,
};
use time::OffsetDateTime;

use std::sync::Arc;

use scriptgate_supervisor::enforcement::Enforce;

use crate::agent::{self, ArtifactOut, Runtime, Sink};
use crate::enforce;
use crate::enforced::HostSink;
use crate::identity::Split;
use crate::input::HostInput;
use crate::sys::SignalFd;
use crate::{emit, emit_message};

/// Runs the job and sends its frames; `Err` when the host cannot be reached any more.
pub(crate) fn serve(
    run: RunJob,
    input: HostInput,
    split: Option<Split>,
    sigchld: SignalFd,
) -> Result<(), String> {
    let started_at = OffsetDateTime::now_utc();
    if run.version != PROTOCOL_VERSION {
        return Err(format!(
            "protocol version {} is not supported (this supervisor speaks {PROTOCOL_VERSION})",
            run.version
        ));
    }
    run.maxima.validate()?;
    let enforce = match &run.enforce {
        Some(enforce) => Some(checked_policy(enforce, split)?),
        None => None,
    };
    if let Some(split) = split {
        split.become_job_supervisor()?;
    }
    let mut rt = Runtime::in_container(split, sigchld, Some(input));
    rt.enforce = enforce;
    let mut sink = Frames;
    let end = match checked(&run, &rt.image_path, started_at) {
        Ok(job) => agent::run(&job, &mut rt, &mut sink, started_at)?,
        Err(refused) => refused.report(&mut sink)?,
    };
    let frame = JobEndFrame {
        nonce: run.nonce,
        end,
    };
    emit_message(FrameKind::JobEnd, &json(&frame)?)
}

/// The job's policy, when it can be enforced here (`Err`: the job is refused, nothing runs
/// without the policy it was given).
pub(crate) fn checked_policy(
    enforce: &Enforce,
    split: Option<Split>,
) -> Result<(Enforce, Arc<dyn enforce::Sink>), String> {
    if split.is_some() || !enforce::available() {
        return Err(
            "this job asks for a run-time policy, and enforcement is not available in this sandbox (gVisor, or the script runs under another uid): the job is refused"
                .into(),
        );
    }
    enforce::rules(enforce).map_err(|e| e.to_string())?;
    Ok((enforce.clone(), Arc::new(HostSink)))
}

/// A job refused here, before anything ran.
pub(crate) enum Refused {
    /// Not a well-formed job: no step can be named.
    Schema(job::JobError, OffsetDateTime),
    /// A constraint broken: the complete result, with the offending step failed.
    Rejected(Box<job::JobResult>),
}

impl Refused {
    /// Reports the failed step (if any) and returns how the job ended.
    pub(crate) fn report(self, sink: &mut dyn Sink) -> Result<JobEnd, String> {
        match self {
            Refused::Schema(error, at) => Ok(refused_end(error, at)),
            Refused::Rejected(result) => {
                for (index, step) in result.steps.iter().enumerate() {
                    if step.status != StepStatus::Skipped {
                        sink.step_finished(index, step)?;
                    }
                }
                Ok(JobEnd {
                    status: result.status,
                    error: result.error,
                    started_at: result.started_at,
                    finished_at: result.finished_at,
                    artifacts: Vec::new(),
                    resource_usage: result.resource_usage,
                })
            }
        }
    }
}

fn refused_end(error: job::JobError, at: OffsetDateTime) -> JobEnd {
    JobEnd {
        status: job::JobStatus::Failure,
        error: Some(error),
        started_at: at,
        finished_at: at,
        artifacts: Vec::new(),
        resource_usage: job::ResourceUsage::default(),
    }
}

/// The job parsed and checked as the service did (with this image's PATH).
pub(crate) fn checked(
    run: &RunJob,
    image_path: &str,
    at: OffsetDateTime,
) -> Result<job::CheckedJob, Refused> {
    let parsed = job::parse_value(&run.job).map_err(|e| Refused::Schema(e.to_job_error(), at))?;
    job::check_with(parsed, &run.maxima, image_path)
        .map_err(|r| Refused::Rejected(Box::new(r.result(at))))
}

fn json(value: &impl serde::Serialize) -> Result<Vec<u8>, String> {
    serde_json::to_vec(value).map_err(|e| e.to_string())
}

/// Frames on stdout, the host's attach stream.
pub(crate) struct Frames;

impl ArtifactOut for Frames {
    fn begin(&mut self, begin: &ArtifactBegin) -> Result<(), String> {
        emit(FrameKind::ArtifactBegin, &json(begin)?)
    }

    fn data(&mut self, chunk: &[u8]) -> Result<(), String> {
        emit(FrameKind::ArtifactData, chunk)
    }

    fn end(&mut self, end: &ArtifactEnd) -> Result<(), String> {
        emit(FrameKind::ArtifactEnd, &json(end)?)
    }
}

impl Sink for Frames {
    fn step_started(&mut self, index: usize, step: &CheckedStep) -> Result<(), String> {
        let started = StepStarted {
            index: index as u32,
            id: step.step.id.clone(),
            step_type: step.step.action.step_type(),
        };
        emit(FrameKind::StepStarted, &json(&started)?)
    }

    fn step_finished(&mut self, index: usize, result: &StepResult) -> Result<(), String> {
        let end = StepEnd {
            index: index as u32,
            result: result.clone(),
        };
        emit_message(FrameKind::StepEnd, &json(&end)?)
    }

    fn is_host_stream(&self) -> bool {
        true
    }
}
