//! The run itself: feed the script and stdin, relay output with caps, wait for the script's exit.

use scriptgate_supervisor::{Exit, FrameKind, Job};

use crate::child::Running;
use crate::pipes::{Feed, Stream};
use crate::{emit, sys, usage};

/// Output is read (and relayed) in chunks of at most this size.
const CHUNK: usize = 32 * 1024;
/// After the script exits, at most this much output still buffered is collected: a background
/// process that keeps writing cannot hold the supervisor.
const DRAIN_LIMIT: usize = 4 << 20;

pub(crate) fn relay(running: Running, job: &Job, sigchld: &sys::SignalFd) -> Result<Exit, String> {
    let Running {
        pid,
        stdin,
        stdout,
        stderr,
        code,
    } = running;
    let mut streams = [Stream::new(stdout), Stream::new(stderr)];
    let kinds = [FrameKind::Stdout, FrameKind::Stderr];
    let mut feeds = [
        Feed::new(code, job.script.as_bytes()),
        Feed::new(stdin, job.stdin.as_bytes()),
    ];
    for feed in &mut feeds {
        feed.push();
    }
    let mut buf = vec![0u8; CHUNK];
    let status = loop {
        if let Some(status) = reap_until(pid) {
            break status;
        }
        let mut fds = vec![libc::pollfd {
            fd: sigchld.raw(),
            events: libc::POLLIN,
            revents: 0,
        }];
        fds.extend(
            streams
                .iter()
                .filter_map(Stream::raw)
                .map(|fd| sys::pollfd(fd, libc::POLLIN)),
        );
        fds.extend(
            feeds
                .iter()
                .filter_map(Feed::raw)
                .map(|fd| sys::pollfd(fd, libc::POLLOUT)),
        );
        sys::poll(&mut fds)?;
        sigchld.drain();
        for (s, kind) in streams.iter_mut().zip(kinds) {
            s.pump(job.output_limit, &mut buf, &mut |b| emit(kind, b))?;
        }
        for f in &mut feeds {
            f.push();
        }
    };
    // The script is gone; collect what it left in the pipes, then stop any stragglers.
    let mut drained = 0;
    for (s, kind) in streams.iter_mut().zip(kinds) {
        let left = DRAIN_LIMIT.saturating_sub(drained);
        drained += s.drain(job.output_limit, left, &mut buf, &mut |b| emit(kind, b))?;
    }
    sys::kill_group(pid);
    while sys::reap_one().is_some() {}
    let (exit_code, signal) = sys::decode_status(status);
    let (cpu, rss) = sys::children_usage();
    Ok(Exit {
        nonce: job.nonce.clone(),
        exit_code,
        signal,
        stdout_truncated: streams[0].truncated(),
        stderr_truncated: streams[1].truncated(),
        usage: usage::measure(cpu, rss),
        artifacts_dropped: 0,
    })
}

/// Reaps every exited process (PID 1 adopts orphans); returns the script's status once it exited.
fn reap_until(pid: libc::pid_t) -> Option<libc::c_int> {
    let mut found = None;
    while let Some(r) = sys::reap_one() {
        if r.pid == pid {
            found = Some(r.status);
        }
    }
    found
}
