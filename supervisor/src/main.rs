//! `scriptgate-supervisor` is PID 1 of every runner container, and the job agent.
//!
//! Host mode (the default: `scriptgate-supervisor <python|bash> [SCRIPT_UID]`): it starts the
//! interpreter before any job arrives (Python's start-up is most of a hello-world's cost),
//! announces `Ready`, and reads the host's first message from stdin:
//!
//! - a script ([`Job`]): it feeds the script and its stdin to the interpreter, relays stdout and
//!   stderr as frames with per-stream caps, reaps every process in the container, and ends with
//!   an `Exit` frame that carries the job's nonce, the exit status and the resource usage;
//! - a job of the job protocol (`RunJob`, see `agent`): it discards the interpreter, runs the
//!   steps, streams step results and artifacts, and ends with a `JobEnd` frame;
//! - a session (`OpenSession`, see `session`): it serves commands, file operations and jobs
//!   until the host removes the container or the session's time is up.
//!
//! Then it exits, which stops the container.
//!
//! Standalone (`scriptgate-supervisor job --file [DIR]` or `job --stdin`): the job agent without
//! the service (see `standalone`).
//!
//! It marks itself non-dumpable, so the script (same uid) cannot read its memory or file
//! descriptors through /proc, and as PID 1 it ignores every signal sent from inside the container.
//! Under runtimes that do not reproduce those two behaviours (gVisor) the host starts it as root
//! with the script's uid as its second argument, and the two run as different uids (see
//! `identity`).
//! Before the interpreter starts it installs a seccomp filter of its own (see `filter`), stacked
//! on the engine's profile, which the script inherits.
//! A job with a run-time policy runs under the enforcement (see `enforce`): every exec, file
//! operation and connect of the script's processes is decided in the supervisor and reported.
//! The host still owns the deadline: it kills the whole container at timeout.

#![warn(unreachable_pub)]

mod agent;
mod artifacts;
mod child;
mod enforce;
mod enforced;
mod filter;
mod hostjob;
mod identity;
mod input;
mod pipes;
mod relay;
mod session;
mod standalone;
mod sys;
mod usage;

use std::io::Write;
use std::sync::Arc;

use scriptgate_supervisor::sessions::FEATURE_SESSIONS;
use scriptgate_supervisor::{
    Failure, FrameKind, Job, PROTOCOL_VERSION, Ready, encode_frame, encode_message,
};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("job") {
        std::process::exit(standalone::main(&args[1..]));
    }
    let language = args.first().map(String::as_str).unwrap_or_default();
    if let Err(message) = run(language, args.get(1).map(String::as_str)) {
        // Best effort: the host treats a missing Exit frame as a failed run anyway.
        let payload = serde_json::to_vec(&Failure { message }).unwrap_or_default();
        let _ = emit(FrameKind::Failure, &payload);
        std::process::exit(1);
    }
    std::process::exit(0);
}

fn run(language: &str, script_uid: Option<&str>) -> Result<(), String> {
    let split = identity::Split::from_arg(script_uid)?;
    sys::make_undumpable()?;
    filter::install()?;
    let sigchld = sys::SignalFd::for_sigchld()?;
    // Bound before the script exists, so nothing in the container can take the port first; a
    // run without network access finds no socket behind it (every client gets a 502). Started
    // after the filter and after SIGCHLD is blocked: its thread inherits both, so a child's exit
    // always reaches the signalfd (a thread with SIGCHLD unblocked would swallow it).
    let forwarding = scriptgate_supervisor::forward::start_if_mounted()
        .map_err(|e| format!("the egress forwarder cannot start: {e}"))?;
    let sink: child::SinkRef = Arc::new(enforced::HostSink);
    let launch = child::Launch::new(language, split, &sink)?;
    launch.wait_preimport()?;
    let ready = Ready {
        version: PROTOCOL_VERSION,
        language: language.to_string(),
        script_uid: split.map(|s| s.script_uid),
        supervisor_version: Some(env!("CARGO_PKG_VERSION").to_string()),
        features: {
            let mut features = enforced::features(split);
            features.push(FEATURE_SESSIONS.to_string());
            if forwarding {
                features.push(scriptgate_supervisor::forward::FEATURE_EGRESS.to_string());
            }
            features
        },
    };
    emit(
        FrameKind::Ready,
        &serde_json::to_vec(&ready).map_err(|e| e.to_string())?,
    )?;
    match input::read_first()? {
        // stdin closed without a job: the host discarded this container.
        input::First::Closed => Ok(()),
        input::First::Script(job) => run_script(launch, &job, split, &sigchld, &sink),
        input::First::RunJob(job, input) => {
            // The interpreter started for a script is not part of a job (the agent kills it).
            drop(launch);
            hostjob::serve(*job, input, split, sigchld)
        }
        input::First::Session(open, input) => {
            drop(launch);
            session::serve(*open, input, split, sigchld)
        }
    }
}

fn run_script(
    mut launch: child::Launch,
    job: &Job,
    split: Option<identity::Split>,
    sigchld: &sys::SignalFd,
    sink: &child::SinkRef,
) -> Result<(), String> {
    if job.version != PROTOCOL_VERSION {
        return Err(format!(
            "protocol version {} is not supported (this supervisor speaks {PROTOCOL_VERSION})",
            job.version
        ));
    }
    let (running, enforcement) = launch.start(job, sink)?;
    if let (Some(e), Some(_)) = (&enforcement, &job.enforce) {
        enforced::read_decisions(e.decisions());
    }
    // The supervisor needs root only to start the interpreter as the script's uid. (Bash already
    // runs its script here; a uid of its own keeps even a root supervisor out of its reach.)
    if let Some(split) = split {
        split.become_supervisor()?;
    }
    let mut exit = relay::relay(running, job, sigchld)?;
    // The last events (and the summary) go out before `Exit`.
    if let Some(e) = enforcement {
        e.finish();
    }
    if let Some(request) = &job.artifacts {
        exit.artifacts_dropped = artifacts::send(request)?;
    }
    emit(
        FrameKind::Exit,
        &serde_json::to_vec(&exit).map_err(|e| e.to_string())?,
    )
}

/// Writes one frame to the container's stdout (the host's attach stream).
pub(crate) fn emit(kind: FrameKind, payload: &[u8]) -> Result<(), String> {
    let mut frame = Vec::with_capacity(payload.len() + 5);
    encode_frame(kind, payload, &mut frame);
    write_out(&frame)
}

/// Writes one message of any size (`More` frames, then one of `kind`).
pub(crate) fn emit_message(kind: FrameKind, payload: &[u8]) -> Result<(), String> {
    let mut frames = Vec::with_capacity(payload.len() + 16);
    encode_message(kind, payload, &mut frames);
    write_out(&frames)
}

fn write_out(bytes: &[u8]) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(|e| format!("writing to the host: {e}"))
}
