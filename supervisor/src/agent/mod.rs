//! The job agent: runs a checked job's steps in order inside the container, then collects its
//! artifacts, reporting each step to a [`Sink`] as it finishes (frames to the host, or the result
//! file of a standalone run).
//!
//! - The first failing step ends the job (unless it says `continue_on_error`; the job's deadline
//!   ends it regardless); the steps after it are never reported and end up `skipped`.
//! - `run_command` starts one program, without a shell, in a session of its own as the script's
//!   uid; when it ends (or its timeout passes) every process but the supervisor is killed before
//!   the next step ([`command`]).
//! - Under a run-time policy (`Runtime::enforce`) each `run_command` step runs under it as a
//!   session's command does: its events and held operations go to the host as frames, and the
//!   host's decisions are read from its stream while the step runs (the step's deadline keeps
//!   running meanwhile). File steps are decided by the host before the job is sent.
//! - File steps and artifact collection run in a forked child ([`isolate`]), as the script's uid,
//!   on paths opened beneath a handle of their root that refuse every symlink ([`fsafe`]).

mod collect;
mod command;
pub(crate) mod files;
pub(crate) mod fsafe;
pub(crate) mod isolate;
mod patch;

use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use scriptgate_supervisor::HostKind;
use scriptgate_supervisor::enforcement::{ApprovalDecision, Enforce};

use scriptgate_supervisor::job::{
    ArtifactEntry, CheckedAction, CheckedJob, CheckedStep, ErrorType, JobEnd, JobError, JobStatus,
    ResourceUsage, StepOutput, StepResult, StepStatus, TreeOutput,
};
use time::OffsetDateTime;

pub(crate) use collect::ArtifactOut;
pub(crate) use files::{stage, staging_name};
pub(crate) use fsafe::{Dir, Roots};

use crate::enforce::{Decisions, Sink as EnforceSink};
use crate::identity::Split;
use crate::input::HostInput;
use crate::sys::{self, SignalFd};
use crate::usage;

/// How long artifact collection may take after the steps (also after a timeout).
pub(crate) const ARTIFACT_TIME: Duration = Duration::from_secs(60);
/// Beyond its own deadline, how long a collecting child has to end before it is killed.
const KILL_GRACE: Duration = Duration::from_secs(10);

/// Where a job's progress goes.
pub(crate) trait Sink: ArtifactOut {
    fn step_started(&mut self, index: usize, step: &CheckedStep) -> Result<(), String>;
    fn step_finished(&mut self, index: usize, result: &StepResult) -> Result<(), String>;
    /// The sink is the host's stream (stdout): artifact frames may be written there directly.
    fn is_host_stream(&self) -> bool {
        false
    }
}

/// What the agent runs with: where the roots are, the image's PATH and base environment, the
/// script's identity, and the host's stream (host mode).
pub(crate) struct Runtime {
    pub(crate) roots: Roots,
    pub(crate) image_path: String,
    /// The environment every command starts from (the container's own, without the
    /// supervisor's settings).
    pub(crate) env: Vec<(String, String)>,
    pub(crate) split: Option<Split>,
    pub(crate) sigchld: SignalFd,
    pub(crate) input: Option<HostInput>,
    /// The run-time policy of every `run_command` step, and where its events go.
    pub(crate) enforce: Option<(Enforce, Arc<dyn EnforceSink>)>,
    /// A session's job: messages other than decisions wait for the session's loop.
    pub(crate) defer_messages: bool,
}

impl Runtime {
    /// The container's roots, PATH and environment.
    pub(crate) fn in_container(
        split: Option<Split>,
        sigchld: SignalFd,
        input: Option<HostInput>,
    ) -> Self {
        let env: Vec<(String, String)> = std::env::vars()
            .filter(|(k, _)| !k.starts_with("SCRIPTGATE_"))
            .collect();
        let image_path = env.iter().find(|(k, _)| k == "PATH").map_or(
            scriptgate_supervisor::job::env::IMAGE_PATH.to_string(),
            |(_, v)| v.clone(),
        );
        Runtime {
            roots: Roots::container(),
            image_path,
            env,
            split,
            sigchld,
            input,
            enforce: None,
            defer_messages: false,
        }
    }

    pub(crate) fn input_fd(&self) -> Option<RawFd> {
        self.input.as_ref().and_then(HostInput::fd)
    }

    /// Reads the host's stream if it has anything: approval decisions (under a policy) go to
    /// `decisions`, the running step's enforcement (one for no step is dropped: its operation
    /// ended already); a session's other messages wait; anything else is an error.
    pub(crate) fn read_input(&mut self, decisions: Option<&Decisions>) -> Result<(), String> {
        let Some(input) = &mut self.input else {
            return Ok(());
        };
        for (kind, message) in input.read_available()? {
            if kind == HostKind::ApprovalDecision as u8 && self.enforce.is_some() {
                let decision: ApprovalDecision = serde_json::from_slice(&message)
                    .map_err(|e| format!("a malformed approval decision: {e}"))?;
                if let Some(decisions) = decisions {
                    decisions.deliver(decision);
                }
            } else if self.defer_messages {
                input.defer(kind, message);
            } else {
                return Err(format!(
                    "unexpected message of kind {kind} while a job runs"
                ));
            }
        }
        Ok(())
    }
}

/// Runs `job` to its end; `Err` only when the sink failed (the host is gone).
pub(crate) fn run(
    job: &CheckedJob,
    rt: &mut Runtime,
    sink: &mut dyn Sink,
    started_at: OffsetDateTime,
) -> Result<JobEnd, String> {
    let deadline = Instant::now() + job.runtime();
    // Whatever ran before the job (a pre-started interpreter) is not part of it.
    sys::kill_all_but_self(None);
    let mut ended: Option<JobError> = None;
    for (index, step) in job.steps().iter().enumerate() {
        sink.step_started(index, step)?;
        let started = Instant::now();
        let (output, error) = if Instant::now() >= deadline {
            (None, Some(deadline_passed(job)))
        } else {
            execute(job, step, rt, sink, deadline)?
        };
        let result = StepResult {
            id: step.step.id.clone(),
            step_type: step.step.action.step_type(),
            status: if error.is_some() {
                StepStatus::Failure
            } else {
                StepStatus::Success
            },
            duration_ms: millis(started.elapsed()),
            result: output,
            error: error.clone(),
            events: None,
        };
        sink.step_finished(index, &result)?;
        if let Some(e) = error
            && (!step.step.continue_on_error || Instant::now() >= deadline)
        {
            ended = Some(e.in_step(&step.step.id));
            break;
        }
    }
    let artifacts = artifacts(job, rt, sink)?;
    let (cpu, rss) = sys::children_usage();
    let usage = usage::measure(cpu, rss);
    Ok(JobEnd {
        status: ended
            .as_ref()
            .map_or(JobStatus::Success, JobStatus::ended_by),
        error: ended,
        started_at,
        finished_at: OffsetDateTime::now_utc(),
        artifacts,
        resource_usage: ResourceUsage {
            cpu_time_ms: usage.cpu_time_ms,
            max_rss_bytes: usage.max_memory_bytes,
        },
    })
}

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn deadline_passed(job: &CheckedJob) -> JobError {
    JobError::new(
        ErrorType::Timeout,
        format!(
            "the job did not finish within max_runtime_seconds ({}s)",
            job.runtime().as_secs()
        ),
    )
}

type Outcome = (Option<StepOutput>, Option<JobError>);

fn execute(
    job: &CheckedJob,
    step: &CheckedStep,
    rt: &mut Runtime,
    sink: &mut dyn Sink,
    deadline: Instant,
) -> Result<Outcome, String> {
    use scriptgate_supervisor::job::Action;
    if let (
        Action::RunCommand(c),
        CheckedAction::RunCommand {
            command,
            working_dir,
            timeout,
        },
    ) = (&step.step.action, &step.plan)
    {
        let step_deadline = timeout.map_or(deadline, |t| deadline.min(Instant::now() + t));
        let plan = command::Plan {
            command,
            working_dir,
            max_output: job.constraints().max_output_bytes,
            deadline: step_deadline,
            job_deadline: deadline,
            runtime: job.runtime(),
        };
        return command::run(rt, c, &plan);
    }
    let allow_overwrite = job.constraints().allow_overwrite;
    let roots = rt.roots.clone();
    let action = step.step.action.clone();
    let plan = step.plan.clone();
    let done = isolate::run(rt, deadline, sink, isolate::Route::Pipe, move |_| {
        file_step(&roots, &action, &plan, allow_overwrite)
    });
    Ok(match done {
        Ok(Ok(output)) => (Some(output), None),
        Ok(Err(e)) => (None, Some(e)),
        Err(isolate::OpError::Timeout) => (None, Some(deadline_passed(job))),
        Err(isolate::OpError::Lost(why)) => (None, Some(JobError::internal(why))),
        Err(isolate::OpError::Out(why)) => return Err(why),
    })
}

/// A file step, in the operation's child.
fn file_step(
    roots: &Roots,
    action: &scriptgate_supervisor::job::Action,
    plan: &CheckedAction,
    allow_overwrite: bool,
) -> Result<StepOutput, JobError> {
    use scriptgate_supervisor::job::Action;
    match (action, plan) {
        (Action::WriteFile(w), CheckedAction::WriteFile { path }) => {
            let bytes = w
                .bytes()
                .map_err(|e| JobError::new(ErrorType::SchemaError, e))?;
            files::write(roots, path, &bytes, w.mode, allow_overwrite).map(StepOutput::WriteFile)
        }
        (Action::ReadFile(r), CheckedAction::ReadFile { path }) => {
            files::read(roots, path, r.max_bytes).map(StepOutput::ReadFile)
        }
        (Action::ApplyUnifiedDiff(_), CheckedAction::ApplyUnifiedDiff { files }) => {
            patch::apply(roots, files).map(StepOutput::ApplyUnifiedDiff)
        }
        (Action::ListTree(l), CheckedAction::ListTree { path, max_entries }) => {
            files::list(roots, path, l.max_depth, *max_entries)
                .map(|t: TreeOutput| StepOutput::ListTree(t))
        }
        _ => Err(JobError::internal(
            "a step whose checked plan is of another type",
        )),
    }
}

/// Collects the job's artifacts in a child of its own (bounded by [`ARTIFACT_TIME`]).
fn artifacts(
    job: &CheckedJob,
    rt: &mut Runtime,
    sink: &mut dyn Sink,
) -> Result<Vec<ArtifactEntry>, String> {
    if job.artifacts().is_empty() {
        return Ok(Vec::new());
    }
    let roots = rt.roots.clone();
    let patterns = job.artifacts().to_vec();
    let maxima = job.maxima().clone();
    let route = if sink.is_host_stream() {
        isolate::Route::HostStream
    } else {
        isolate::Route::Pipe
    };
    // The child stops itself at the deadline (never mid-frame); it is killed only past a grace.
    let deadline = Instant::now() + ARTIFACT_TIME;
    let done = isolate::run(rt, deadline + KILL_GRACE, sink, route, move |channel| {
        collect::collect(&roots, &patterns, &maxima, deadline, channel)
    });
    let failed = |e: JobError| {
        job.artifacts()
            .iter()
            .map(|p| ArtifactEntry::failed(&p.text, e.clone()))
            .collect()
    };
    Ok(match done {
        Ok(Ok(entries)) => entries,
        Ok(Err(why)) => failed(JobError::internal(why)),
        Err(isolate::OpError::Timeout) => failed(JobError::new(
            ErrorType::Timeout,
            format!(
                "collecting artifacts took longer than {}s",
                ARTIFACT_TIME.as_secs()
            ),
        )),
        Err(isolate::OpError::Lost(why)) => failed(JobError::internal(why)),
        Err(isolate::OpError::Out(why)) => return Err(why),
    })
}
