//! `scriptgate-supervisor` is PID 1 of every runner container.
//!
//! It starts the interpreter before any job arrives (Python's start-up is most of a hello-world's
//! cost), announces `Ready`, reads exactly one [`Job`] from stdin, feeds the script and its stdin to
//! the interpreter, relays stdout and stderr as frames with per-stream caps, reaps every process in
//! the container, and ends with an `Exit` frame that carries the job's nonce, the exit status and
//! the resource usage. Then it exits, which stops the container.
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

mod artifacts;
mod child;
mod enforce;
mod enforced;
mod filter;
mod identity;
mod relay;
mod sys;
mod usage;

use std::io::{Read, Write};
use std::sync::Arc;

use scriptgate_supervisor::{
    Failure, FrameKind, Job, MAX_FRAME, PROTOCOL_VERSION, Ready, encode_frame,
};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
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
    let sink: child::SinkRef = Arc::new(enforced::HostSink);
    let mut launch = child::Launch::new(language, split, &sink)?;
    launch.wait_preimport()?;
    let ready = Ready {
        version: PROTOCOL_VERSION,
        language: language.to_string(),
        script_uid: split.map(|s| s.script_uid),
        supervisor_version: Some(env!("CARGO_PKG_VERSION").to_string()),
        features: enforced::features(split),
    };
    emit(
        FrameKind::Ready,
        &serde_json::to_vec(&ready).map_err(|e| e.to_string())?,
    )?;
    let Some(job) = read_job()? else {
        // stdin closed without a job: the host discarded this container.
        return Ok(());
    };
    if job.version != PROTOCOL_VERSION {
        return Err(format!(
            "protocol version {} is not supported (this supervisor speaks {PROTOCOL_VERSION})",
            job.version
        ));
    }
    let (running, enforcement) = launch.start(&job, &sink)?;
    if let (Some(e), Some(_)) = (&enforcement, &job.enforce) {
        enforced::read_decisions(e.decisions());
    }
    // The supervisor needs root only to start the interpreter as the script's uid. (Bash already
    // runs its script here; a uid of its own keeps even a root supervisor out of its reach.)
    if let Some(split) = split {
        split.become_supervisor()?;
    }
    let mut exit = relay::relay(running, &job, &sigchld)?;
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

/// Reads the one length-prefixed job from stdin; `None` on end of input before a job.
fn read_job() -> Result<Option<Job>, String> {
    let mut stdin = std::io::stdin().lock();
    let mut len = [0u8; 4];
    match stdin.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(format!("reading the job: {e}")),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(format!("job of {len} bytes is too large"));
    }
    let mut buf = vec![0u8; len];
    stdin
        .read_exact(&mut buf)
        .map_err(|e| format!("reading the job: {e}"))?;
    serde_json::from_slice(&buf)
        .map(Some)
        .map_err(|e| format!("malformed job: {e}"))
}

/// Writes one frame to the container's stdout (the host's attach stream).
pub(crate) fn emit(kind: FrameKind, payload: &[u8]) -> Result<(), String> {
    let mut frame = Vec::with_capacity(payload.len() + 5);
    encode_frame(kind, payload, &mut frame);
    let mut out = std::io::stdout().lock();
    out.write_all(&frame)
        .and_then(|()| out.flush())
        .map_err(|e| format!("writing to the host: {e}"))
}
