//! A session container: the same hardened container as a one-shot run, opened with
//! `OpenSession`, then served by one task that owns its stream. Requests (commands, kills, file
//! operations) reach the task over a channel; its frames are routed back to whoever waits for
//! them (output chunks to the running command, `CommandEnd`, `FileDone` by operation id).
//! When the last handle goes or the container dies, the task ends and the container's removal
//! guard removes it.
//!
//! A session with a run-time policy opens only on a supervisor that announces enforcement; each
//! command's `Events` and `ApprovalRequest` frames are gathered as for a one-shot run
//! (`enforced::Gathered`), and the decisions on held operations go back as host messages.
//!
//! A session with network access has one egress socket for its life (its byte budget spans every
//! command); each command restarts the command's count and, once it ended and its connections
//! closed, takes the command's report into [`Ran::network`].
//!
//! One file (past 500 lines): the task that owns the session's stream routes every frame kind, and
//! splitting the routing would split one `match`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use scriptgate_supervisor::enforcement::ApprovalDecision;
use scriptgate_supervisor::job::HARD_MAX_MESSAGE;
use scriptgate_supervisor::sessions::{
    CommandEnd, Exec, FEATURE_SESSIONS, FileReply, FileRequest, Kill, OpenSession, Refused,
    SessionState, SetEnv, ShellState, decode_output, encode_file_request,
};
use scriptgate_supervisor::{
    ArtifactBegin, FrameKind, HostKind, MessageAssembler, PROTOCOL_VERSION, encode_host_message,
};
use tokio::io::AsyncWriteExt;
use tokio::sync::{broadcast, mpsc, oneshot};
use uuid::Uuid;

use super::enforced::{self, Gathered};
use super::jobrun::Conversation;
use super::session::{Msg, Prepared, message_of};
use super::{Cleaner, DockerConfig, Inner};
use crate::domain::script::Language;
use crate::sandbox::egress::{NetworkEvent, NetworkReport, SandboxEgress};
use crate::sandbox::sessions::{
    Chunk, CommandSpec, FileAnswer, FileOp, Ran, SessionBox, SessionFault, SessionJobEnd,
    SessionSpec,
};
use crate::sandbox::{Enforcement, JobRun, NetworkAccess, SandboxError};

/// How long a command's report waits for the connections its processes left to end.
const SETTLE: Duration = Duration::from_secs(1);

/// How long the supervisor may take to answer `OpenSession`.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

type Reply<T> = oneshot::Sender<Result<T, SessionFault>>;

enum Req {
    Exec(CommandSpec, mpsc::UnboundedSender<Chunk>, Reply<Ran>),
    Kill(Uuid, Reply<()>),
    File(FileOp, Vec<u8>, Reply<FileAnswer>),
    SetEnv(SetEnv, Reply<ShellState>),
    Job(Box<JobRun>, Reply<SessionJobEnd>),
}

/// A handle on a session container.
#[derive(Debug)]
pub(super) struct DockerSession {
    id: String,
    requests: mpsc::Sender<Req>,
    cleaner: Arc<Cleaner>,
    /// The session's network access (stopped when it closes).
    network: Option<Arc<SandboxEgress>>,
}

impl Inner {
    /// Starts a session container and opens the session in it.
    pub(super) async fn open_session(
        self: &Arc<Self>,
        spec: SessionSpec,
    ) -> Result<DockerSession, SandboxError> {
        let profile = self
            .profiles
            .select(Some(&spec.profile), Language::Bash)
            .map_err(|e| SandboxError::StartFailed(e.to_string()))?
            .clone();
        let config = DockerConfig {
            limits: spec.limits.clone(),
            ..self.config.clone()
        };
        let mut prepared = self
            .prepare_in(&config, &profile, Language::Bash, spec.session_id)
            .await?;
        if !prepared.features.iter().any(|f| f == FEATURE_SESSIONS) {
            return Err(SandboxError::StartFailed(
                "the runner image's supervisor predates sessions: rebuild it with `scriptgate images build`".into(),
            ));
        }
        let network = match spec.network.clone() {
            None => None,
            Some(access) => Some(self.open_network(&mut prepared, access).await?),
        };
        let enforce = match &spec.enforcement {
            None => None,
            Some(_) if !enforced::supported(&prepared.features) => {
                return Err(SandboxError::PolicyUnavailable(
                    enforced::UNAVAILABLE_HERE.into(),
                ));
            }
            Some(e) => Some(enforced::job_field(e).map_err(SandboxError::StartFailed)?),
        };
        let nonce = Uuid::new_v4().simple().to_string();
        let open = OpenSession {
            version: PROTOCOL_VERSION,
            nonce: nonce.clone(),
            env: spec.env.clone(),
            expires_at_ms: spec.expires_at_ms,
            output_limit: spec.output_limit,
            enforce,
        };
        let payload =
            serde_json::to_vec(&open).map_err(|e| SandboxError::StartFailed(e.to_string()))?;
        send(&mut prepared, HostKind::OpenSession, &payload)
            .await
            .map_err(|e| SandboxError::StartFailed(format!("opening the session: {e}")))?;
        match tokio::time::timeout(OPEN_TIMEOUT, opened(&mut prepared, &nonce)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(SandboxError::StartFailed(e)),
            Err(_) => {
                return Err(SandboxError::StartFailed(
                    "the session did not open in time".into(),
                ));
            }
        }
        let (requests, rx) = mpsc::channel(16);
        let id = prepared.id.clone();
        let max_file =
            (config.limits.workspace_mb.max(config.limits.tmpfs_mb) << 20).min(HARD_MAX_MESSAGE);
        let (answers, decisions) = mpsc::channel(64);
        let task = Task {
            enforcement: spec.enforcement,
            gathered: None,
            answers,
            prepared,
            nonce,
            assembler: MessageAssembler::new(HARD_MAX_MESSAGE),
            running: None,
            files: HashMap::new(),
            next_op: 0,
            set_env: None,
            receiving: None,
            received: None,
            max_file,
            job: None,
        };
        tokio::spawn(task.serve(rx, decisions));
        Ok(DockerSession {
            id,
            requests,
            cleaner: self.cleaner.clone(),
            network: network.map(Arc::new),
        })
    }

    /// The session's socket in its container's egress directory, checked before it opens.
    async fn open_network(
        &self,
        prepared: &mut Prepared,
        access: NetworkAccess,
    ) -> Result<SandboxEgress, SandboxError> {
        let Some(egress) = &self.egress else {
            return Err(SandboxError::NetworkUnavailable(
                "the service runs no egress proxy".into(),
            ));
        };
        egress.open(prepared, access).await
    }
}

async fn send(prepared: &mut Prepared, kind: HostKind, payload: &[u8]) -> std::io::Result<()> {
    prepared
        .input
        .write_all(&encode_host_message(kind, payload))
        .await?;
    prepared.input.flush().await
}

/// Waits for the `SessionState` that answers `OpenSession`.
async fn opened(prepared: &mut Prepared, nonce: &str) -> Result<(), String> {
    let mut assembler = MessageAssembler::new(HARD_MAX_MESSAGE);
    loop {
        match prepared.rx.recv().await {
            Some(Msg::Frame(kind, payload)) => {
                let Some((kind, message)) = assembler
                    .push(kind as u8, payload)
                    .map_err(|e| format!("protocol error: {e}"))?
                else {
                    continue;
                };
                match FrameKind::from_u8(kind) {
                    Some(FrameKind::SessionState) => {
                        let state: SessionState = serde_json::from_slice(&message)
                            .map_err(|e| format!("malformed session state: {e}"))?;
                        if state.nonce != nonce {
                            return Err("a session state with a wrong nonce".into());
                        }
                        return Ok(());
                    }
                    Some(FrameKind::Failure) => return Err(message_of(&message)),
                    _ => return Err(format!("unexpected frame of kind {kind} while opening")),
                }
            }
            Some(Msg::Diagnostic(_)) => {}
            Some(Msg::Broken(e)) => return Err(e),
            None => return Err("the container stopped while the session opened".into()),
        }
    }
}

/// The task that owns a session container's stream.
struct Task {
    /// The session's policy (its approvals and live events go where it says).
    enforcement: Option<Enforcement>,
    /// What the running command's policy reported so far.
    gathered: Option<Gathered>,
    /// Where the approver's decisions are sent, to be written to the supervisor.
    answers: mpsc::Sender<ApprovalDecision>,
    prepared: Prepared,
    nonce: String,
    assembler: MessageAssembler,
    running: Option<(Uuid, mpsc::UnboundedSender<Chunk>, Reply<Ran>)>,
    files: HashMap<u64, Reply<FileAnswer>>,
    next_op: u64,
    /// A `SetEnv` waiting for its `SessionState`.
    set_env: Option<Reply<ShellState>>,
    /// The file being read (`ArtifactBegin` … `ArtifactEnd`), then the last one read.
    receiving: Option<Vec<u8>>,
    received: Option<Vec<u8>>,
    max_file: u64,
    /// The job running (its conversation, whoever waits for its end, and whether its first
    /// frame came: until then, file frames still belong to file operations sent before it).
    job: Option<(Conversation, Reply<SessionJobEnd>, bool)>,
}

impl Task {
    async fn serve(
        mut self,
        mut requests: mpsc::Receiver<Req>,
        mut decisions: mpsc::Receiver<ApprovalDecision>,
    ) {
        let lost = loop {
            tokio::select! {
                Some(decision) = decisions.recv() => {
                    let payload = match serde_json::to_vec(&decision) {
                        Ok(p) => p,
                        Err(e) => break e.to_string(),
                    };
                    if let Err(e) = self.write(HostKind::ApprovalDecision, &payload).await { break e }
                },
                req = requests.recv() => match req {
                    Some(req) => if let Err(e) = self.request(req).await { break e },
                    // Every handle is gone: the container goes with this task.
                    None => break "the session was closed".to_string(),
                },
                msg = self.prepared.rx.recv() => match msg {
                    Some(Msg::Frame(kind, payload)) => if let Err(e) = self.frame(kind as u8, payload) { break e },
                    Some(Msg::Diagnostic(b)) => {
                        tracing::debug!(container = %super::short(&self.prepared.id), "session supervisor: {}", String::from_utf8_lossy(&b));
                    }
                    Some(Msg::Broken(e)) => break e,
                    None => break "the session's container stopped".to_string(),
                },
            }
        };
        self.fail_all(&lost);
    }

    fn fail_all(&mut self, why: &str) {
        if let Some((_, _, reply)) = self.running.take() {
            let _ = reply.send(Err(SessionFault::Lost(why.to_string())));
        }
        for (_, reply) in self.files.drain() {
            let _ = reply.send(Err(SessionFault::Lost(why.to_string())));
        }
        if let Some(reply) = self.set_env.take() {
            let _ = reply.send(Err(SessionFault::Lost(why.to_string())));
        }
        if let Some((_, reply, _)) = self.job.take() {
            let _ = reply.send(Err(SessionFault::Lost(why.to_string())));
        }
    }

    async fn request(&mut self, req: Req) -> Result<(), String> {
        match req {
            Req::Exec(command, out, reply) => {
                if self.running.is_some() || self.job.is_some() {
                    let _ = reply.send(Err(SessionFault::Refused(
                        "another command is running".into(),
                    )));
                    return Ok(());
                }
                let exec = Exec {
                    id: command.id(),
                    mode: command.mode().clone(),
                    stdin: command.stdin().to_string(),
                    timeout_ms: u64::try_from(command.timeout().as_millis()).unwrap_or(u64::MAX),
                };
                let payload = serde_json::to_vec(&exec).map_err(|e| e.to_string())?;
                self.gathered = self
                    .enforcement
                    .as_ref()
                    .map(|e| Gathered::new(e, self.answers.clone()));
                self.running = Some((command.id(), out, reply));
                self.write(HostKind::Exec, &payload).await
            }
            Req::Kill(id, reply) => {
                let payload = serde_json::to_vec(&Kill { id }).map_err(|e| e.to_string())?;
                let sent = self.write(HostKind::Kill, &payload).await;
                let _ = reply.send(Ok(()));
                sent
            }
            Req::File(op, data, reply) => {
                self.next_op += 1;
                let request = FileRequest {
                    op_id: self.next_op,
                    op,
                };
                self.files.insert(self.next_op, reply);
                self.write(HostKind::File, &encode_file_request(&request, &data))
                    .await
            }
            Req::SetEnv(set, reply) => {
                if self.running.is_some() || self.set_env.is_some() || self.job.is_some() {
                    let _ = reply.send(Err(SessionFault::Refused("a command is running".into())));
                    return Ok(());
                }
                let payload = serde_json::to_vec(&set).map_err(|e| e.to_string())?;
                self.set_env = Some(reply);
                self.write(HostKind::SetEnv, &payload).await
            }
            Req::Job(run, reply) => {
                if self.running.is_some() || self.set_env.is_some() || self.job.is_some() {
                    let _ = reply.send(Err(SessionFault::Refused("a command is running".into())));
                    return Ok(());
                }
                let mut talk = Conversation::new(*run);
                // The session's policy applies to its job (the supervisor has it already).
                if let Some(e) = &self.enforcement {
                    talk.gather(e.clone(), self.answers.clone());
                }
                let payload = serde_json::to_vec(&talk.message()?).map_err(|e| e.to_string())?;
                self.job = Some((talk, reply, false));
                self.write(HostKind::RunJob, &payload).await
            }
        }
    }

    /// Hands a job's message to its conversation; `false` when it is not the job's.
    fn job_frame(&mut self, kind: u8, message: &[u8]) -> Result<bool, String> {
        let Some((talk, _, begun)) = &mut self.job else {
            return Ok(false);
        };
        let opens = matches!(
            FrameKind::from_u8(kind),
            Some(FrameKind::StepStarted | FrameKind::StepEnd | FrameKind::JobEnd)
        );
        if !(Conversation::is_job_kind(kind) && (*begun || opens)) {
            return Ok(false);
        }
        *begun = true;
        if let Some(end) = talk.message_of_kind(kind, message)?
            && let Some((mut talk, reply, _)) = self.job.take()
        {
            let events = talk.take_events();
            let (result, files) = talk.done(end);
            let _ = reply.send(Ok(SessionJobEnd {
                result,
                files,
                events,
            }));
        }
        Ok(true)
    }

    async fn write(&mut self, kind: HostKind, payload: &[u8]) -> Result<(), String> {
        send(&mut self.prepared, kind, payload)
            .await
            .map_err(|e| format!("writing to the session: {e}"))
    }

    fn frame(&mut self, kind: u8, payload: Vec<u8>) -> Result<(), String> {
        let Some((kind, message)) = self
            .assembler
            .push(kind, payload)
            .map_err(|e| format!("protocol error: {e}"))?
        else {
            return Ok(());
        };
        if self.job_frame(kind, &message)? {
            return Ok(());
        }
        let malformed = |what: &str| format!("malformed {what} frame");
        match FrameKind::from_u8(kind) {
            Some(FrameKind::CommandOutput) => {
                let (stream, id, bytes) =
                    decode_output(&message).ok_or_else(|| malformed("output"))?;
                if let Some((running, out, _)) = &self.running
                    && *running == id
                {
                    let _ = out.send(Chunk {
                        stream,
                        bytes: Bytes::copy_from_slice(bytes),
                    });
                }
            }
            Some(FrameKind::CommandEnd) => {
                let end: CommandEnd =
                    serde_json::from_slice(&message).map_err(|_| malformed("command end"))?;
                if end.nonce != self.nonce {
                    return Err("a command end with a wrong nonce".into());
                }
                if self.running.as_ref().is_some_and(|(id, ..)| *id == end.id)
                    && let Some((_, _, reply)) = self.running.take()
                {
                    let events = self.gathered.take().map(|g| g.finish().0);
                    let _ = reply.send(Ok(Ran {
                        end,
                        events,
                        network: None,
                    }));
                }
            }
            Some(FrameKind::Events) => self
                .gathered
                .as_mut()
                .ok_or("events outside a command under a policy")?
                .on_events(&message)?,
            Some(FrameKind::ApprovalRequest) => self
                .gathered
                .as_mut()
                .ok_or("an approval request outside a command under a policy")?
                .on_request(&message)?,
            Some(FrameKind::ArtifactBegin) => {
                let begin: ArtifactBegin =
                    serde_json::from_slice(&message).map_err(|_| malformed("file"))?;
                if begin.size_bytes > self.max_file {
                    return Err(format!(
                        "a file larger than the session's places ({})",
                        begin.path
                    ));
                }
                self.receiving = Some(Vec::with_capacity(begin.size_bytes as usize));
            }
            Some(FrameKind::ArtifactData) => {
                let buf = self.receiving.as_mut().ok_or("file data outside a file")?;
                buf.extend_from_slice(&message);
                if buf.len() as u64 > self.max_file {
                    return Err("a file longer than announced".into());
                }
            }
            Some(FrameKind::ArtifactEnd) => self.received = self.receiving.take(),
            Some(FrameKind::FileDone) => {
                let reply: FileReply =
                    serde_json::from_slice(&message).map_err(|_| malformed("file done"))?;
                let bytes = self.received.take();
                if let Some(waiting) = self.files.remove(&reply.op_id) {
                    let result = match (reply.done, reply.error) {
                        (Some(done), _) => Ok(done),
                        (None, Some(e)) => Err(e),
                        (None, None) => Err(crate::sandbox::sessions::FileError::internal(
                            "the file operation answered nothing",
                        )),
                    };
                    let _ = waiting.send(Ok(FileAnswer { result, bytes }));
                }
            }
            Some(FrameKind::Refused) => self.refused(&message),
            Some(FrameKind::SessionState) => {
                let state: SessionState =
                    serde_json::from_slice(&message).map_err(|_| malformed("session state"))?;
                if state.nonce != self.nonce {
                    return Err("a session state with a wrong nonce".into());
                }
                if let Some(reply) = self.set_env.take() {
                    let _ = reply.send(Ok(state.state));
                }
            }
            Some(FrameKind::Failure) => return Err(message_of(&message)),
            _ => return Err(format!("unexpected frame of kind {kind} in a session")),
        }
        Ok(())
    }

    fn refused(&mut self, message: &[u8]) {
        let Ok(refused) = serde_json::from_slice::<Refused>(message) else {
            return;
        };
        let fault = SessionFault::Refused(refused.message.clone());
        if let Some(op) = refused.op_id
            && let Some(reply) = self.files.remove(&op)
        {
            let _ = reply.send(Err(fault));
            return;
        }
        if refused.id.is_some()
            && self.running.as_ref().map(|(id, ..)| *id) == refused.id
            && let Some((_, _, reply)) = self.running.take()
        {
            let _ = reply.send(Err(fault));
            return;
        }
        if refused.id.is_none()
            && refused.op_id.is_none()
            && let Some(reply) = self.set_env.take()
        {
            let _ = reply.send(Err(fault));
            return;
        }
        if refused.id.is_none()
            && refused.op_id.is_none()
            && let Some((_, reply, _)) = self.job.take()
        {
            let _ = reply.send(Err(fault));
            return;
        }
        tracing::warn!(message = %refused.message, "the session refused a message");
    }
}

impl DockerSession {
    /// The report of the command that just ended, once the connections its processes left
    /// have ended (at most [`SETTLE`]).
    async fn command_network(&self) -> Option<NetworkReport> {
        let egress = self.network.as_ref()?;
        egress.settle(SETTLE).await;
        Some(egress.command_report())
    }

    async fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> Req) -> Result<T, SessionFault> {
        let (tx, rx) = oneshot::channel();
        self.requests
            .send(make(tx))
            .await
            .map_err(|_| SessionFault::Lost("the session's container is gone".into()))?;
        rx.await
            .map_err(|_| SessionFault::Lost("the session's container is gone".into()))?
    }
}

impl SessionBox for DockerSession {
    fn container_id(&self) -> &str {
        &self.id
    }

    fn exec(
        &self,
        command: CommandSpec,
        out: mpsc::UnboundedSender<Chunk>,
    ) -> BoxFuture<'_, Result<Ran, SessionFault>> {
        Box::pin(async move {
            if let Some(egress) = &self.network {
                egress.begin_command(None);
            }
            let mut ran = self
                .ask(move |reply| Req::Exec(command, out, reply))
                .await?;
            ran.network = self.command_network().await;
            Ok(ran)
        })
    }

    fn kill(&self, id: Uuid) -> BoxFuture<'_, Result<(), SessionFault>> {
        Box::pin(self.ask(move |reply| Req::Kill(id, reply)))
    }

    fn file(&self, op: FileOp, data: Vec<u8>) -> BoxFuture<'_, Result<FileAnswer, SessionFault>> {
        Box::pin(self.ask(move |reply| Req::File(op, data, reply)))
    }

    fn set_env(
        &self,
        set: std::collections::BTreeMap<String, String>,
        unset: Vec<String>,
    ) -> BoxFuture<'_, Result<ShellState, SessionFault>> {
        Box::pin(self.ask(move |reply| Req::SetEnv(SetEnv { set, unset }, reply)))
    }

    fn run_job(&self, run: JobRun) -> BoxFuture<'_, Result<SessionJobEnd, SessionFault>> {
        Box::pin(async move {
            // The agent ends the job at its deadline; beyond this backstop the supervisor no
            // longer answers, and the session is lost.
            let backstop = super::jobrun::backstop(&run);
            tokio::time::timeout(
                backstop,
                self.ask(move |reply| Req::Job(Box::new(run), reply)),
            )
            .await
            .unwrap_or_else(|_| {
                Err(SessionFault::Lost(
                    "the supervisor did not end the job in time".into(),
                ))
            })
        })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Some(egress) = &self.network {
                egress.stop_now();
            }
            self.cleaner.remove(&self.id).await
        })
    }

    fn network_events(&self) -> Option<broadcast::Receiver<NetworkEvent>> {
        self.network.as_deref().map(SandboxEgress::subscribe)
    }
}
