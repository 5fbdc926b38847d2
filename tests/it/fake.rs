//! A hand-written runner for the contract tests: the real service (router, executions, store,
//! validation, approvals) over a sandbox that starts no container. What the sandbox itself
//! promises is tested against the real engine elsewhere.
//!
//! A run answers with what the test registered for its script ([`FakeRunner::answering`]), or by
//! markers in the script: `EXIT n`, `TIMEOUT`, `OOM`, `CRASH`, `BLOCK` (waits for
//! [`FakeRunner::release`]).
//!
//! A job runs as a model of the agent: `write_file` keeps the file, `read_file` returns a kept
//! one, `run_command` exits 0 without output unless its `args` hold `EXIT n`; artifacts are the
//! kept files whose paths a pattern names exactly.
//!
//! Under a run-time policy the fake enforces nothing but reports as a sandbox that does: a script
//! reports itself as one allowed process, a session command likewise (see [`FakeSession`]); a job
//! runs as without one. [`FakeRunner::without_enforcement`] models a sandbox that cannot enforce
//! (as under gVisor): runs, jobs and sessions with a policy are refused and nothing runs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use scriptgate::domain::script::Language;
use scriptgate::sandbox::job::{
    self, Action, ArtifactEntry, CheckedAction, CheckedStep, CommandOutput, ErrorType, JobEnd,
    JobError, JobStatus, ReadOutput, ResourceUsage, StepOutput, StepResult, StepStatus,
    WriteOutput,
};
use scriptgate::sandbox::sessions::{
    Chunk, CommandEnd, CommandSpec, Ended, ExecMode, FileAnswer, FileDone, FileError, FileOp,
    OutputStream, Ran, SessionBox, SessionFault, SessionSpec, ShellState,
};
use scriptgate::sandbox::{
    ArtifactFile, CappedText, EnforceSummary, EnforcedOutcome, Enforcement, JobOutcome, JobRun,
    Lease, Readiness, RunOutcome, RunSpec, Runner, SandboxError, SandboxStats, Timings, Usage,
};
use scriptgate_policy::Decision;
use scriptgate_policy::events::{
    BlockedOperation, Event, Events, FileEvent, FileOperationType, OperationType, ProcessEvent,
};
use sha2::{Digest, Sha256};
use tokio::sync::{Notify, mpsc};

/// What a registered script prints and how it exits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub stdout: String,
    pub stderr: String,
    pub exit_code: i32,
}

impl Answer {
    /// Prints `stdout` and exits 0.
    pub fn prints(stdout: &str) -> Answer {
        Answer {
            stdout: stdout.into(),
            stderr: String::new(),
            exit_code: 0,
        }
    }
}

#[derive(Debug)]
pub struct FakeRunner {
    /// Sandboxes handed out (each run, and each acquisition that failed).
    pub calls: AtomicUsize,
    /// Lets `BLOCK` runs finish, one per notification.
    pub release: Arc<Notify>,
    /// The scripts that ran, in order.
    ran: Arc<Mutex<Vec<String>>>,
    /// The ids of the jobs that ran, in order.
    jobs: Arc<Mutex<Vec<uuid::Uuid>>>,
    /// Leases handed out and not yet run or dropped.
    leased: Arc<AtomicUsize>,
    answers: HashMap<String, Answer>,
    output_bytes: u64,
    /// The engine is "down" for every acquisition (and readiness says so).
    down: bool,
    /// Policies cannot be enforced (as under gVisor): a run, job or session with one is refused.
    no_enforcement: bool,
}

impl Default for FakeRunner {
    fn default() -> Self {
        FakeRunner {
            calls: AtomicUsize::new(0),
            release: Arc::new(Notify::new()),
            ran: Arc::default(),
            jobs: Arc::default(),
            leased: Arc::default(),
            answers: HashMap::new(),
            output_bytes: 1 << 20,
            down: false,
            no_enforcement: false,
        }
    }
}

impl FakeRunner {
    /// An engine that is up, with nothing registered.
    pub fn new() -> FakeRunner {
        FakeRunner::default()
    }

    /// `script` answers `answer`.
    pub fn answering(mut self, script: &str, answer: Answer) -> FakeRunner {
        self.answers.insert(script.to_string(), answer);
        self
    }

    /// Bytes of stdout and of stderr kept per run (as `sandbox.limits.output_bytes`).
    pub fn output_bytes(mut self, n: u64) -> FakeRunner {
        self.output_bytes = n;
        self
    }

    /// Runs, jobs and sessions with a policy are refused, as by a sandbox that cannot enforce one.
    pub fn without_enforcement(mut self) -> FakeRunner {
        self.no_enforcement = true;
        self
    }

    /// Every acquisition fails as if the engine were stopped.
    pub fn down(mut self) -> FakeRunner {
        self.down = true;
        self
    }

    /// The scripts that ran so far, in order.
    pub fn ran(&self) -> Vec<String> {
        self.ran.lock().expect("ran lock").clone()
    }

    /// The ids of the jobs that ran so far, in order.
    pub fn jobs(&self) -> Vec<uuid::Uuid> {
        self.jobs.lock().expect("jobs lock").clone()
    }

    /// Leases handed out and not yet run or dropped (0 once the service is idle).
    pub fn leased(&self) -> usize {
        self.leased.load(Ordering::SeqCst)
    }

    fn outcome(&self, id: uuid::Uuid, script: &str) -> RunOutcome {
        let (stdout, stderr, exit) = match self.answers.get(script) {
            Some(a) => (a.stdout.as_str(), a.stderr.as_str(), a.exit_code),
            None => ("", "", marked_exit(script)),
        };
        let capped = |text: &str| {
            let mut c = CappedText::new(self.output_bytes);
            c.push(text.as_bytes());
            c
        };
        RunOutcome {
            execution_id: id,
            container_id: "fake".into(),
            exit_code: (!script.contains("TIMEOUT") && !script.contains("CRASH")).then_some(exit),
            signal: script.contains("OOM").then_some(9),
            stdout: capped(stdout),
            stderr: capped(stderr),
            timed_out: script.contains("TIMEOUT"),
            oom_killed: script.contains("OOM"),
            crashed: script.contains("CRASH").then(|| "gone".to_string()),
            usage: Usage {
                cpu_time_ms: 7,
                max_memory_bytes: 1234,
                oom_kills: 0,
            },
            timings: Timings {
                create: Duration::from_millis(3),
                ..Timings::default()
            },
            warm: false,
            files: Vec::new(),
            files_dropped: 0,
            provenance: Default::default(),
            network: None,
        }
    }
}

/// The `n` of an `EXIT n` marker (0 without one).
fn marked_exit(script: &str) -> i32 {
    script
        .split_whitespace()
        .skip_while(|w| *w != "EXIT")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// One fake sandbox; it reports the run to its runner.
#[derive(Debug)]
struct FakeLease {
    id: uuid::Uuid,
    language: Language,
    runner: Arc<FakeRunner>,
}

impl Drop for FakeLease {
    fn drop(&mut self) {
        self.runner.leased.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `Runner` is implemented on the `Arc`, so a lease can reach its runner's answers.
#[derive(Debug, Clone)]
pub struct Fake(pub Arc<FakeRunner>);

impl Runner for Fake {
    fn acquire(
        &self,
        language: Language,
        execution_id: Option<uuid::Uuid>,
    ) -> BoxFuture<'_, Result<Box<dyn Lease>, SandboxError>> {
        Box::pin(async move {
            self.0.calls.fetch_add(1, Ordering::SeqCst);
            if self.0.down {
                return Err(SandboxError::EngineUnavailable("engine stopped".into()));
            }
            self.0.leased.fetch_add(1, Ordering::SeqCst);
            Ok(Box::new(FakeLease {
                id: execution_id.unwrap_or_else(uuid::Uuid::new_v4),
                language,
                runner: self.0.clone(),
            }) as Box<dyn Lease>)
        })
    }

    fn readiness(&self) -> BoxFuture<'_, Readiness> {
        let up = !self.0.down;
        Box::pin(async move {
            Readiness {
                engine: up,
                images: vec![("runner:test".into(), up)],
                detail: (!up).then(|| "engine down".into()),
            }
        })
    }

    fn stats(&self) -> SandboxStats {
        SandboxStats::default()
    }

    fn open_session(
        &self,
        spec: SessionSpec,
    ) -> BoxFuture<'_, Result<Arc<dyn SessionBox>, SandboxError>> {
        Box::pin(async move {
            self.0.calls.fetch_add(1, Ordering::SeqCst);
            if self.0.down {
                return Err(SandboxError::EngineUnavailable("engine stopped".into()));
            }
            if spec.network.is_some() {
                return Err(SandboxError::NetworkUnavailable(
                    "this sandbox has no egress proxy".into(),
                ));
            }
            if self.0.no_enforcement && spec.enforcement.is_some() {
                return Err(SandboxError::PolicyUnavailable(
                    "run-time policy enforcement is not available in this sandbox".into(),
                ));
            }
            self.0.leased.fetch_add(1, Ordering::SeqCst);
            Ok(Arc::new(FakeSession {
                id: format!("fake-{}", spec.session_id),
                runner: self.0.clone(),
                cwd: Mutex::new("/workspace".into()),
                env: Mutex::new(spec.env.clone()),
                files: Mutex::new(HashMap::new()),
                kill: Notify::new(),
                closed: AtomicUsize::new(0),
                enforcement: spec.enforcement,
            }) as Arc<dyn SessionBox>)
        })
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// What a sandbox that cannot enforce a policy says (nothing ran).
const CANNOT_ENFORCE: &str = "this sandbox cannot enforce a run-time policy";

impl FakeLease {
    /// Runs a script: records it, waits on `BLOCK`, answers as registered or marked.
    async fn script(&self, spec: RunSpec) -> RunOutcome {
        let script = spec.script().to_string();
        self.runner
            .ran
            .lock()
            .expect("ran lock")
            .push(script.clone());
        if script.contains("BLOCK") {
            self.runner.release.notified().await;
        }
        self.runner.outcome(self.id, &script)
    }
}

impl Lease for FakeLease {
    fn execution_id(&self) -> uuid::Uuid {
        self.id
    }

    fn warm(&self) -> bool {
        false
    }

    fn run(self: Box<Self>, spec: RunSpec) -> BoxFuture<'static, RunOutcome> {
        Box::pin(async move { self.script(spec).await })
    }

    fn run_enforced(
        self: Box<Self>,
        spec: RunSpec,
        enforcement: Enforcement,
    ) -> BoxFuture<'static, EnforcedOutcome> {
        Box::pin(async move {
            if self.runner.no_enforcement {
                return EnforcedOutcome {
                    outcome: RunOutcome::not_run(self.id, CANNOT_ENFORCE.into()),
                    events: None,
                    summary: None,
                };
            }
            // The script reports itself as one allowed process, published live before it runs.
            let process = Event::Process(ProcessEvent {
                pid: 2,
                argv: vec![match self.language {
                    Language::Python => "python3".into(),
                    Language::Bash => "bash".into(),
                }],
                cwd: "/tmp".into(),
                decision: Decision::Allow,
                rule: None,
            });
            if let Some(live) = &enforcement.live {
                let _ = live.send(process.clone());
            }
            let mut events = Events::with_cap(enforcement.event_cap as usize);
            events.push(process);
            let outcome = self.script(spec).await;
            EnforcedOutcome {
                outcome,
                events: Some(events),
                summary: Some(EnforceSummary {
                    decided: 1,
                    exec_floor: "none".into(),
                    ..EnforceSummary::default()
                }),
            }
        })
    }

    fn run_job(self: Box<Self>, run: JobRun) -> BoxFuture<'static, JobOutcome> {
        Box::pin(async move {
            if run.enforcement().is_some() && self.runner.no_enforcement {
                // As for scripts: a sandbox that cannot enforce a policy runs nothing.
                let error = JobError::internal(CANNOT_ENFORCE);
                return JobOutcome::not_run(&run, self.id, error);
            }
            let job = run.job();
            self.runner
                .jobs
                .lock()
                .expect("jobs lock")
                .push(job.job_id());
            let started_at = time::OffsetDateTime::now_utc();
            let mut builder = job.result_builder(started_at);
            let mut files: Vec<(String, Vec<u8>)> = Vec::new();
            let mut ended: Option<JobError> = None;
            for (index, step) in job.steps().iter().enumerate() {
                let (output, error) = fake_step(step, &mut files);
                let failed = error.is_some();
                let result = StepResult {
                    id: step.step.id.clone(),
                    step_type: step.step.action.step_type(),
                    status: if failed {
                        StepStatus::Failure
                    } else {
                        StepStatus::Success
                    },
                    duration_ms: 1,
                    result: output,
                    error: error.clone(),
                    events: None,
                };
                builder.record(index, result).expect("the job's own step");
                if failed && !step.step.continue_on_error {
                    ended = error.map(|e| e.in_step(&step.step.id));
                    break;
                }
            }
            let kept: Vec<&(String, Vec<u8>)> = files
                .iter()
                .filter(|(path, _)| job.artifacts().iter().any(|p| &p.text == path))
                .collect();
            let entries = kept
                .iter()
                .map(|(path, bytes)| ArtifactEntry {
                    path: path.clone(),
                    sha256: Some(hex::encode(Sha256::digest(bytes))),
                    size_bytes: Some(bytes.len() as u64),
                    mime_type: Some(job::mime_type(path).to_string()),
                    error: None,
                })
                .collect();
            let spooled = kept
                .iter()
                .map(|(path, bytes)| {
                    ArtifactFile::from_bytes(path, job::mime_type(path), bytes).expect("spooled")
                })
                .collect();
            let result = builder.finish(JobEnd {
                status: ended
                    .as_ref()
                    .map_or(JobStatus::Success, JobStatus::ended_by),
                error: ended,
                started_at,
                finished_at: time::OffsetDateTime::now_utc(),
                artifacts: entries,
                resource_usage: ResourceUsage {
                    cpu_time_ms: 5,
                    max_rss_bytes: 4096,
                },
            });
            JobOutcome {
                execution_id: self.id,
                container_id: "fake".into(),
                result,
                files: spooled,
                timings: Timings::default(),
                warm: false,
                oom_killed: false,
                crashed: None,
                provenance: Default::default(),
                events: None,
                network: None,
            }
        })
    }
}

/// One step of a fake job: its output, or the error that failed it.
fn fake_step(
    step: &CheckedStep,
    files: &mut Vec<(String, Vec<u8>)>,
) -> (Option<StepOutput>, Option<JobError>) {
    match (&step.step.action, &step.plan) {
        (Action::WriteFile(w), CheckedAction::WriteFile { path }) => {
            let path = path.to_string();
            let bytes = w.bytes().expect("checked content");
            let out = WriteOutput {
                path: path.clone(),
                size_bytes: bytes.len() as u64,
                sha256: hex::encode(Sha256::digest(&bytes)),
                created: true,
            };
            files.push((path, bytes));
            (Some(StepOutput::WriteFile(out)), None)
        }
        (Action::ReadFile(_), CheckedAction::ReadFile { path }) => {
            match files.iter().find(|(p, _)| *p == path.to_string()) {
                Some((_, bytes)) => {
                    let out = ReadOutput {
                        content: String::from_utf8_lossy(bytes).into_owned(),
                        encoding: job::Encoding::Utf8,
                        size_bytes: bytes.len() as u64,
                        truncated: false,
                        sha256: hex::encode(Sha256::digest(bytes)),
                    };
                    (Some(StepOutput::ReadFile(out)), None)
                }
                None => (
                    None,
                    Some(JobError::new(ErrorType::ExecutionFailure, "no such file")),
                ),
            }
        }
        (Action::RunCommand(c), _) => {
            let exit = marked_exit(&c.args.join(" "));
            let out = CommandOutput {
                exit_code: Some(exit),
                signal: None,
                stdout: String::new(),
                stderr: String::new(),
                stdout_truncated: false,
                stderr_truncated: false,
                duration_ms: 1,
            };
            let error = (exit != 0)
                .then(|| JobError::new(ErrorType::ExecutionFailure, format!("exit code {exit}")));
            (Some(StepOutput::RunCommand(out)), error)
        }
        _ => (None, None),
    }
}

/// A session over the fake runner: a command line prints itself (`cd DIR` changes the working
/// directory, `BLOCK` waits for [`FakeRunner::release`] or a kill, `EXIT n` exits n); files live
/// in a map (a path with `FULL` in it does not fit). The session counts as a lease until closed.
/// Under a policy every command reports itself as a process (allowed), and `DENY PATH` as a
/// denied write of PATH (blocked, `EACCES`), published live before a `BLOCK` waits.
#[derive(Debug)]
struct FakeSession {
    id: String,
    runner: Arc<FakeRunner>,
    cwd: Mutex<String>,
    env: Mutex<std::collections::BTreeMap<String, String>>,
    files: Mutex<HashMap<String, Vec<u8>>>,
    kill: Notify,
    closed: AtomicUsize,
    enforcement: Option<scriptgate::sandbox::Enforcement>,
}

impl FakeSession {
    fn text(mode: &ExecMode) -> String {
        match mode {
            ExecMode::Line { line } => line.clone(),
            ExecMode::Argv { argv } => argv.join(" "),
            ExecMode::Script { source, .. } => source.clone(),
        }
    }

    /// The events a command reports under the session's policy (published live as they happen).
    fn events(&self, text: &str) -> Option<Events> {
        let e = self.enforcement.as_ref()?;
        let mut events = Events::with_cap(e.event_cap as usize);
        let mut all = vec![Event::Process(ProcessEvent {
            pid: 2,
            argv: text.split_whitespace().map(String::from).collect(),
            cwd: self.cwd.lock().expect("cwd").clone(),
            decision: Decision::Allow,
            rule: Some("any-program".into()),
        })];
        if let Some(path) = text.split("DENY ").nth(1) {
            let path = path
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string();
            all.push(Event::File(FileEvent {
                kind: FileOperationType::FileWrite,
                path: path.clone(),
                bytes: None,
                decision: Decision::Deny,
                rule: Some("no-writes-outside-scratch".into()),
            }));
            all.push(Event::Blocked(BlockedOperation {
                kind: OperationType::FileWrite,
                pid: Some(2),
                target: path,
                decision: Decision::Deny,
                rule: Some("no-writes-outside-scratch".into()),
                message: Some("refused".into()),
                errno: Some(13),
            }));
        }
        for event in all {
            if let Some(live) = &e.live {
                let _ = live.send(event.clone());
            }
            events.push(event);
        }
        Some(events)
    }
}

impl SessionBox for FakeSession {
    fn container_id(&self) -> &str {
        &self.id
    }

    fn exec(
        &self,
        command: CommandSpec,
        out: mpsc::UnboundedSender<Chunk>,
    ) -> BoxFuture<'_, Result<Ran, SessionFault>> {
        Box::pin(async move {
            let text = Self::text(command.mode());
            let events = self.events(&text);
            self.runner.ran.lock().expect("ran lock").push(text.clone());
            if let Some(dir) = text.strip_prefix("cd ") {
                *self.cwd.lock().expect("cwd") = dir.trim().to_string();
            }
            let line = format!("{text}\n");
            let _ = out.send(Chunk {
                stream: OutputStream::Stdout,
                bytes: line.clone().into(),
            });
            let mut ended = Ended::Exited;
            if text.contains("BLOCK") {
                tokio::select! {
                    () = self.runner.release.notified() => {}
                    () = self.kill.notified() => ended = Ended::Killed,
                }
            }
            let state = ShellState {
                cwd: self.cwd.lock().expect("cwd").clone(),
                env: self.env.lock().expect("env").clone(),
                ..ShellState::default()
            };
            let end = CommandEnd {
                nonce: String::new(),
                id: command.id(),
                ended,
                exit_code: (ended == Ended::Exited).then(|| marked_exit(&text)),
                signal: None,
                stdout_bytes: line.len() as u64,
                stderr_bytes: 0,
                usage: Usage::default(),
                duration_ms: 1,
                state,
                warnings: Vec::new(),
            };
            Ok(Ran {
                end,
                events,
                network: None,
            })
        })
    }

    fn kill(&self, _id: uuid::Uuid) -> BoxFuture<'_, Result<(), SessionFault>> {
        Box::pin(async move {
            self.kill.notify_one();
            Ok(())
        })
    }

    fn file(&self, op: FileOp, data: Vec<u8>) -> BoxFuture<'_, Result<FileAnswer, SessionFault>> {
        Box::pin(async move {
            let mut files = self.files.lock().expect("files");
            let (result, bytes) = match op {
                FileOp::Put { path, .. } if path.contains("FULL") => (
                    Err(FileError::limit(format!("no space left for `{path}`"))),
                    None,
                ),
                FileOp::Put { path, sha256 } => {
                    let size_bytes = data.len() as u64;
                    let created = files.insert(path.clone(), data).is_none();
                    let written = scriptgate_supervisor::job::WriteOutput {
                        path,
                        size_bytes,
                        sha256,
                        created,
                    };
                    (Ok(FileDone::Written(written)), None)
                }
                FileOp::Get { path } => match files.get(&path) {
                    Some(data) => (
                        Ok(FileDone::Read {
                            path,
                            size_bytes: data.len() as u64,
                            sha256: String::new(),
                        }),
                        Some(data.clone()),
                    ),
                    None => (
                        Err(FileError::failure(format!("`{path}` does not exist"))),
                        None,
                    ),
                },
                FileOp::Delete { path } => match files.remove(&path) {
                    Some(_) => (Ok(FileDone::Deleted { path, entries: 1 }), None),
                    None => (
                        Err(FileError::failure(format!("`{path}` does not exist"))),
                        None,
                    ),
                },
                FileOp::List { .. } => (
                    Err(FileError::internal("the fake session does not list")),
                    None,
                ),
            };
            Ok(FileAnswer { result, bytes })
        })
    }

    fn set_env(
        &self,
        set: std::collections::BTreeMap<String, String>,
        unset: Vec<String>,
    ) -> BoxFuture<'_, Result<ShellState, SessionFault>> {
        Box::pin(async move {
            let mut env = self.env.lock().expect("env");
            env.extend(set);
            for name in unset {
                env.remove(&name);
            }
            Ok(ShellState {
                cwd: self.cwd.lock().expect("cwd").clone(),
                env: env.clone(),
                aliases: Default::default(),
            })
        })
    }

    fn run_job(
        &self,
        _run: scriptgate::sandbox::JobRun,
    ) -> BoxFuture<'_, Result<scriptgate::sandbox::sessions::SessionJobEnd, SessionFault>> {
        // Session jobs are a sandbox promise: they are tested on the real engine only.
        Box::pin(async {
            Err(SessionFault::Refused(
                "the fake runs no session jobs".into(),
            ))
        })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if self.closed.fetch_add(1, Ordering::SeqCst) == 0 {
                self.runner.leased.fetch_sub(1, Ordering::SeqCst);
            }
        })
    }
}
