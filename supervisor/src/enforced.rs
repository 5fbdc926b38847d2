//! The host's end of the run-time enforcement: events and approval requests leave as frames,
//! approval decisions arrive on stdin after the job (see `scriptgate_supervisor::enforcement`).

use std::io::Read;

use scriptgate_supervisor::enforcement::{
    ApprovalDecision, ApprovalRequest, EventBatch, FEATURE_ENFORCE, HOST_APPROVAL_DECISION,
};
use scriptgate_supervisor::{FEATURE_JOBS, FrameKind, MAX_FRAME};

use crate::enforce::{self, Decisions, Sink};
use crate::identity::Split;

/// Frames on the container's stdout. A write that fails means the host is gone; the container
/// ends with it, so there is nobody to report to.
#[derive(Debug)]
pub(crate) struct HostSink;

impl Sink for HostSink {
    fn events(&self, batch: &EventBatch) {
        if let Ok(json) = serde_json::to_vec(batch) {
            let _ = crate::emit(FrameKind::Events, &json);
        }
    }

    fn approval(&self, request: &ApprovalRequest) {
        if let Ok(json) = serde_json::to_vec(request) {
            let _ = crate::emit(FrameKind::ApprovalRequest, &json);
        }
    }
}

/// What `Ready` announces: jobs always, enforcement when this runtime can do it for this script.
pub(crate) fn features(split: Option<Split>) -> Vec<String> {
    let mut features = vec![FEATURE_JOBS.to_string()];
    if split.is_none() && enforce::available() {
        features.push(FEATURE_ENFORCE.to_string());
    }
    features
}

/// Reads decisions from stdin (after the job) on a thread of its own until the host closes it.
/// Other frame kinds are skipped: later protocol versions may send more.
pub(crate) fn read_decisions(decisions: Decisions) {
    let spawned = std::thread::Builder::new()
        .name("decisions".into())
        .spawn(move || {
            let mut stdin = std::io::stdin().lock();
            loop {
                let mut head = [0u8; 5];
                if stdin.read_exact(&mut head).is_err() {
                    return;
                }
                let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
                if len > MAX_FRAME {
                    eprintln!("scriptgate-supervisor: a host frame of {len} bytes; decisions stop");
                    return;
                }
                let mut payload = vec![0u8; len];
                if stdin.read_exact(&mut payload).is_err() {
                    return;
                }
                if head[0] != HOST_APPROVAL_DECISION {
                    continue;
                }
                match serde_json::from_slice::<ApprovalDecision>(&payload) {
                    Ok(d) => decisions.deliver(d),
                    Err(e) => eprintln!("scriptgate-supervisor: a malformed decision: {e}"),
                }
            }
        });
    if let Err(e) = spawned {
        eprintln!("scriptgate-supervisor: no thread for approval decisions: {e}");
    }
}
