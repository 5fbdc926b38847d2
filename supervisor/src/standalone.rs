//! The agent on its own, without the service: `job --file [DIR]` reads `DIR/job.json` (default
//! `/job`) and writes `DIR/result.json` and the collected files under `DIR/artifacts/` (each at
//! its path without the leading slash); `job --stdin` reads the job on stdin and writes the result
//! on stdout. Both log JSON lines on stderr (step start and end, durations, truncation notices,
//! usage), never free-form text. The deployment maxima are the defaults.
//!
//! Exit status: 0 when the job succeeded, 1 when it failed or timed out, 2 when it was refused
//! before anything ran, 3 when no result could be written.

use std::io::{Read as _, Write as _};
use std::path::PathBuf;

use scriptgate_supervisor::job::{
    self, CheckedStep, JobResult, JobStatus, Maxima, ResultBuilder, StepOutput, StepResult,
};
use scriptgate_supervisor::{ArtifactBegin, ArtifactEnd};
use serde_json::{Value, json};
use time::OffsetDateTime;

use crate::agent::{self, ArtifactOut, Dir, Runtime, Sink};
use crate::hostjob::Refused;
use crate::identity::Split;
use crate::{filter, sys};

enum Mode {
    File(PathBuf),
    Stdin,
}

/// `job --file [DIR] | --stdin [--script-uid UID]`; returns the exit status.
pub(crate) fn main(args: &[String]) -> i32 {
    let usage = "usage: scriptgate-supervisor job (--file [DIR] | --stdin) [--script-uid UID]";
    let mut mode = None;
    let mut uid = None;
    let mut rest = args.iter().peekable();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--file" => {
                let dir = rest
                    .next_if(|a| !a.starts_with("--"))
                    .map_or("/job", |s| s.as_str());
                mode = Some(Mode::File(dir.into()));
            }
            "--stdin" => mode = Some(Mode::Stdin),
            "--script-uid" => uid = rest.next().map(String::as_str),
            _ => mode = None,
        }
    }
    let Some(mode) = mode else {
        log("usage_error", json!({"message": usage}));
        return 2;
    };
    match run(&mode, uid) {
        Ok(code) => code,
        Err(message) => {
            log("internal_error", json!({"message": message}));
            3
        }
    }
}

fn run(mode: &Mode, uid: Option<&str>) -> Result<i32, String> {
    let split = Split::from_arg(uid)?;
    sys::make_undumpable()?;
    filter::install()?;
    let sigchld = sys::SignalFd::for_sigchld()?;
    let output = Output::open(mode)?;
    let bytes = read_job(mode)?;
    let started_at = OffsetDateTime::now_utc();
    let run = scriptgate_supervisor::RunJob {
        version: scriptgate_supervisor::PROTOCOL_VERSION,
        nonce: String::new(),
        job: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        maxima: Maxima::default(),
        enforce: None,
    };
    if run.job.is_null() {
        let error = job::parse(&bytes).err().map(|e| e.to_job_error());
        let error = error
            .unwrap_or_else(|| job::JobError::new(job::ErrorType::SchemaError, "the job is null"));
        return finish_refused(
            &output,
            Refused::Schema(error, started_at),
            uuid::Uuid::new_v4(),
        );
    }
    if let Some(split) = split {
        split.become_job_supervisor()?;
    }
    let mut rt = Runtime::in_container(split, sigchld, None);
    let checked = match crate::hostjob::checked(&run, &rt.image_path, started_at) {
        Ok(checked) => checked,
        Err(refused) => {
            let id = run
                .job
                .get("job_id")
                .and_then(Value::as_str)
                .and_then(|s| s.parse().ok());
            return finish_refused(&output, refused, id.unwrap_or_else(uuid::Uuid::new_v4));
        }
    };
    log(
        "job_start",
        json!({"job_id": checked.job_id(), "steps": checked.steps().len()}),
    );
    let mut sink = Local {
        builder: checked.result_builder(started_at),
        artifacts: output.artifacts_dir()?,
        current: None,
        job_id: checked.job_id(),
    };
    let end = agent::run(&checked, &mut rt, &mut sink, started_at)?;
    let result = sink.builder.finish(end);
    done(&output, &result)
}

fn finish_refused(output: &Output, refused: Refused, job_id: uuid::Uuid) -> Result<i32, String> {
    let result = match refused {
        Refused::Rejected(result) => *result,
        Refused::Schema(error, at) => {
            ResultBuilder::new(job_id, std::iter::empty(), Vec::new(), at).refuse(None, error)
        }
    };
    log(
        "job_refused",
        json!({"job_id": result.job_id, "error": result.error}),
    );
    output.write(&result)?;
    Ok(2)
}

fn done(output: &Output, result: &JobResult) -> Result<i32, String> {
    log(
        "usage",
        json!({"job_id": result.job_id, "cpu_time_ms": result.resource_usage.cpu_time_ms,
        "max_rss_bytes": result.resource_usage.max_rss_bytes}),
    );
    let duration = (result.finished_at - result.started_at).whole_milliseconds();
    log(
        "job_end",
        json!({"job_id": result.job_id, "status": result.status, "duration_ms": duration,
        "error": result.error}),
    );
    output.write(result)?;
    Ok(if result.status == JobStatus::Success {
        0
    } else {
        1
    })
}

/// Where the result goes: a directory opened before any step runs (so a step cannot swap it for
/// a symlink), or stdout.
enum Output {
    File(Dir),
    Stdout,
}

impl Output {
    fn open(mode: &Mode) -> Result<Output, String> {
        match mode {
            Mode::File(dir) => Dir::open_path(dir)
                .map(Output::File)
                .map_err(|e| format!("{}: {e}", dir.display())),
            Mode::Stdin => Ok(Output::Stdout),
        }
    }

    fn artifacts_dir(&self) -> Result<Option<Dir>, String> {
        match self {
            Output::File(dir) => dir
                .create_dirs(&["artifacts".to_string()])
                .map(|(d, _)| Some(d))
                .map_err(|e| format!("artifacts directory: {e}")),
            Output::Stdout => Ok(None),
        }
    }

    fn write(&self, result: &JobResult) -> Result<(), String> {
        let mut text = serde_json::to_vec_pretty(result).map_err(|e| e.to_string())?;
        text.push(b'\n');
        match self {
            // Staged and renamed: the file is whole or absent.
            Output::File(dir) => {
                let staged = agent::staging_name("result.json", "result");
                agent::stage(dir, &staged, &text, 0o644)
                    .and_then(|()| dir.rename_at(&staged, "result.json", false))
                    .map_err(|e| format!("result.json: {e}"))
            }
            Output::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(&text)
                    .and_then(|()| out.flush())
                    .map_err(|e| format!("stdout: {e}"))
            }
        }
    }
}

fn read_job(mode: &Mode) -> Result<Vec<u8>, String> {
    let limit = Maxima::default().max_job_bytes;
    let mut bytes = Vec::new();
    let read = match mode {
        Mode::File(dir) => std::fs::File::open(dir.join("job.json"))
            .and_then(|f| f.take(limit + 1).read_to_end(&mut bytes)),
        Mode::Stdin => std::io::stdin()
            .lock()
            .take(limit + 1)
            .read_to_end(&mut bytes),
    };
    read.map_err(|e| format!("reading the job: {e}"))?;
    if bytes.len() as u64 > limit {
        return Err(format!("the job is larger than {limit} bytes"));
    }
    Ok(bytes)
}

/// One JSON line on stderr.
fn log(event: &str, mut fields: Value) {
    let ts = OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    if let Value::Object(map) = &mut fields {
        map.insert("ts".into(), json!(ts));
        map.insert("event".into(), json!(event));
    }
    let mut line = fields.to_string();
    line.push('\n');
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// The artifact being received: its directory, final and staged names, and the staged file.
struct Receiving {
    path: String,
    dir: Option<(Dir, String, String, std::fs::File)>,
}

/// Builds the result in memory, logs progress, and writes artifacts under the output directory.
struct Local {
    builder: ResultBuilder,
    artifacts: Option<Dir>,
    current: Option<Receiving>,
    job_id: uuid::Uuid,
}

impl ArtifactOut for Local {
    fn begin(&mut self, begin: &ArtifactBegin) -> Result<(), String> {
        let parts: Vec<String> = begin
            .path
            .trim_start_matches('/')
            .split('/')
            .map(String::from)
            .collect();
        let mut receiving = Receiving {
            path: begin.path.clone(),
            dir: None,
        };
        if let (Some(base), Some((name, parents))) = (&self.artifacts, parts.split_last()) {
            let failed = |e: std::io::Error| format!("artifacts/{}: {e}", begin.path);
            let (dir, _) = base.create_dirs(parents).map_err(failed)?;
            let staged = agent::staging_name(name, "artifact");
            let fd = dir
                .open_at(
                    &staged,
                    libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
                    0o644,
                )
                .map_err(failed)?;
            receiving.dir = Some((dir, name.clone(), staged, std::fs::File::from(fd)));
        }
        self.current = Some(receiving);
        Ok(())
    }

    fn data(&mut self, chunk: &[u8]) -> Result<(), String> {
        match self.current.as_mut().and_then(|r| r.dir.as_mut()) {
            Some((_, _, _, file)) => file
                .write_all(chunk)
                .map_err(|e| format!("writing an artifact: {e}")),
            None => Ok(()),
        }
    }

    fn end(&mut self, end: &ArtifactEnd) -> Result<(), String> {
        let Some(receiving) = self.current.take() else {
            return Ok(());
        };
        if let Some((dir, name, staged, _)) = receiving.dir {
            dir.rename_at(&staged, &name, false)
                .map_err(|e| format!("artifact {name}: {e}"))?;
        }
        log(
            "artifact",
            json!({"job_id": self.job_id, "path": receiving.path, "sha256": end.sha256}),
        );
        Ok(())
    }
}

impl Sink for Local {
    fn step_started(&mut self, index: usize, step: &CheckedStep) -> Result<(), String> {
        self.builder.started(index);
        log(
            "step_start",
            json!({"job_id": self.job_id, "index": index, "step": step.step.id,
            "type": step.step.action.step_type()}),
        );
        Ok(())
    }

    fn step_finished(&mut self, index: usize, result: &StepResult) -> Result<(), String> {
        if let Some(StepOutput::RunCommand(out)) = &result.result {
            for (stream, truncated) in [
                ("stdout", out.stdout_truncated),
                ("stderr", out.stderr_truncated),
            ] {
                if truncated {
                    log(
                        "output_truncated",
                        json!({"job_id": self.job_id, "step": result.id, "stream": stream}),
                    );
                }
            }
        }
        log(
            "step_end",
            json!({"job_id": self.job_id, "index": index, "step": result.id,
            "status": result.status, "duration_ms": result.duration_ms,
            "error": result.error.as_ref().map(|e| e.kind)}),
        );
        self.builder.record(index, result.clone())
    }
}
