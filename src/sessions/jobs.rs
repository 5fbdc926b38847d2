//! Jobs of the job protocol in a session (`POST /v1/sessions/{id}/jobs`): a job the edge has
//! checked and whose content passed validation (a [`JobRun`]) runs in the session's container,
//! in its workspace, while the session is busy. It runs in a task of its own, so a client that
//! goes away does not leave the session busy; a sandbox that no longer answers stops it. Under
//! the session's run-time policy its `run_command` steps run under that policy (each step's
//! result carries its events), and every decision that was not a plain `allow` is audited under
//! the job's id, as a command's are under the command's.

use std::sync::Arc;

use tokio::sync::oneshot;
use uuid::Uuid;

use super::command::ensure_serving;
use super::{Session, SessionError, Sessions, State};
use crate::auth::Caller;
use crate::sandbox::JobRun;
use crate::sandbox::sessions::{SessionFault, SessionJobEnd};

impl Sessions {
    /// Runs `run` in the session `id`; its complete result once it ended. Like a command, it
    /// needs the session ready (409 `session_busy` otherwise) and counts as activity.
    pub(crate) async fn run_job(
        self: &Arc<Self>,
        caller: &Caller,
        id: Uuid,
        run: JobRun,
    ) -> Result<SessionJobEnd, SessionError> {
        let session = self.get(caller, id)?;
        let sandbox = {
            let mut live = session.live.lock().expect("session lock");
            ensure_serving(&live)?;
            let sandbox = live
                .sandbox
                .clone()
                .ok_or_else(|| SessionError::Stopped("stopped".into()))?;
            live.state = State::Busy;
            Session::touch(&mut live);
            sandbox
        };
        let (tx, rx) = oneshot::channel();
        let this = self.clone();
        let job_id = run.job().job_id();
        let document = run.job().to_json().to_string();
        self.tasks.spawn(async move {
            let end = sandbox.run_job(run).await;
            if let Ok(SessionJobEnd {
                events: Some(events),
                ..
            }) = &end
            {
                // Audited before the result is visible, as a command's decisions are.
                this.audit_decisions(&session, job_id, &document, events)
                    .await;
            }
            {
                let mut live = session.live.lock().expect("session lock");
                if live.state == State::Busy {
                    live.state = State::Ready;
                }
                Session::touch(&mut live);
            }
            if let Err(fault @ SessionFault::Lost(_)) = &end {
                this.stop(&session, format!("sandbox_lost: {fault}")).await;
            }
            let _ = tx.send(end);
        });
        match rx.await {
            Ok(Ok(end)) => Ok(end),
            // The supervisor refused it: something else runs there.
            Ok(Err(SessionFault::Refused(_))) => Err(SessionError::Busy(Uuid::nil())),
            Ok(Err(fault)) => Err(SessionError::Stopped(fault.to_string())),
            Err(_) => Err(SessionError::Stopped("the service is shutting down".into())),
        }
    }
}
