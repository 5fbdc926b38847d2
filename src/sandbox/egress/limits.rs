//! The limits of one sandbox's egress: bytes per command and per session, new connections per
//! second, connections at once; and [`Metered`], the upstream stream that counts every byte and
//! stops exactly at the byte budget.

use std::io;
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU16, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Limits of one sandbox. Zero means "no limit" for every field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetLimits {
    /// Bytes sent plus received over the sandbox's whole life (`max_network_mb`).
    pub session_bytes: u64,
    /// Bytes sent plus received between two [`super::SandboxEgress::begin_command`] calls.
    pub command_bytes: u64,
    /// New upstream connections per second (a bucket that holds one second's worth).
    pub connections_per_second: u32,
    /// Upstream connections open at once.
    pub max_concurrent: u32,
}

/// Which limit ended or refused a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    SessionBytes,
    CommandBytes,
    ConnectionsPerSecond,
    ConcurrentConnections,
}

impl LimitKind {
    fn code(self) -> u8 {
        match self {
            LimitKind::SessionBytes => 1,
            LimitKind::CommandBytes => 2,
            LimitKind::ConnectionsPerSecond => 3,
            LimitKind::ConcurrentConnections => 4,
        }
    }

    fn from_code(code: u8) -> Option<LimitKind> {
        match code {
            1 => Some(LimitKind::SessionBytes),
            2 => Some(LimitKind::CommandBytes),
            3 => Some(LimitKind::ConnectionsPerSecond),
            4 => Some(LimitKind::ConcurrentConnections),
            _ => None,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            LimitKind::SessionBytes => "network byte limit of the session (max_network_mb)",
            LimitKind::CommandBytes => "network byte limit of the command",
            LimitKind::ConnectionsPerSecond => "connections-per-second limit",
            LimitKind::ConcurrentConnections => "concurrent connections limit",
        }
    }
}

#[derive(Debug)]
struct Used {
    session: u64,
    command: u64,
    command_limit: u64,
}

/// Bytes left for the session and the current command, shared by all of a sandbox's connections.
#[derive(Debug)]
pub(crate) struct Budget {
    session_limit: u64,
    used: Mutex<Used>,
}

fn remaining(limit: u64, used: u64) -> u64 {
    if limit == 0 {
        u64::MAX
    } else {
        limit.saturating_sub(used)
    }
}

impl Budget {
    pub(crate) fn new(limits: &NetLimits) -> Budget {
        Budget {
            session_limit: limits.session_bytes,
            used: Mutex::new(Used {
                session: 0,
                command: 0,
                command_limit: limits.command_bytes,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Used> {
        self.used.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new command starts: its count restarts (with a new limit when given).
    pub(crate) fn begin_command(&self, command_limit: Option<u64>) {
        let mut used = self.lock();
        used.command = 0;
        if let Some(limit) = command_limit {
            used.command_limit = limit;
        }
    }

    /// Takes up to `want` bytes; `Err` names the exhausted limit when nothing is left.
    pub(crate) fn reserve(&self, want: u64) -> Result<u64, LimitKind> {
        let mut used = self.lock();
        let session = remaining(self.session_limit, used.session);
        let command = remaining(used.command_limit, used.command);
        if session == 0 {
            return Err(LimitKind::SessionBytes);
        }
        if command == 0 {
            return Err(LimitKind::CommandBytes);
        }
        let granted = want.min(session).min(command);
        used.session += granted;
        used.command += granted;
        Ok(granted)
    }

    /// Gives back what a reservation did not use.
    pub(crate) fn refund(&self, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let mut used = self.lock();
        used.session = used.session.saturating_sub(bytes);
        used.command = used.command.saturating_sub(bytes);
    }

    /// The exhausted limit, if any (checked before a new connection).
    pub(crate) fn exhausted(&self) -> Option<LimitKind> {
        self.reserve(0).err()
    }
}

/// A token bucket of new connections.
#[derive(Debug)]
pub(crate) struct Rate {
    per_second: f64,
    state: Mutex<(f64, Instant)>,
}

impl Rate {
    pub(crate) fn new(per_second: u32) -> Rate {
        Rate {
            per_second: f64::from(per_second),
            state: Mutex::new((f64::from(per_second), Instant::now())),
        }
    }

    /// Takes one token; `false` when the bucket is empty.
    pub(crate) fn try_take(&self) -> bool {
        if self.per_second == 0.0 {
            return true;
        }
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let refill = now.duration_since(state.1).as_secs_f64() * self.per_second;
        state.0 = (state.0 + refill).min(self.per_second);
        state.1 = now;
        if state.0 >= 1.0 {
            state.0 -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Counters of one upstream connection, read when it ends.
#[derive(Debug, Default)]
pub(crate) struct ConnStats {
    pub(crate) sent: AtomicU64,
    pub(crate) received: AtomicU64,
    /// The HTTP status of the last response (forward proxying), 0 when none.
    pub(crate) status: AtomicU16,
    limit: AtomicU8,
}

impl ConnStats {
    pub(crate) fn limit_hit(&self) -> Option<LimitKind> {
        LimitKind::from_code(self.limit.load(Ordering::Relaxed))
    }

    /// Records that `kind` stopped the connection; the error to end it with.
    pub(crate) fn limit(&self, kind: LimitKind) -> io::Error {
        self.limit.store(kind.code(), Ordering::Relaxed);
        io::Error::other(format!("{} reached", kind.describe()))
    }
}

/// The upstream side of a connection: counts bytes both ways and fails with
/// [`io::ErrorKind::Other`] once the budget is spent, so no byte beyond the limit moves.
#[derive(Debug)]
pub(crate) struct Metered<S> {
    inner: S,
    budget: std::sync::Arc<Budget>,
    stats: std::sync::Arc<ConnStats>,
}

impl<S> Metered<S> {
    pub(crate) fn new(
        inner: S,
        budget: std::sync::Arc<Budget>,
        stats: std::sync::Arc<ConnStats>,
    ) -> Self {
        Metered {
            inner,
            budget,
            stats,
        }
    }

    fn limit_error(&self, kind: LimitKind) -> io::Error {
        self.stats.limit(kind)
    }

    pub(crate) fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        let granted = match this.budget.reserve(buf.remaining() as u64) {
            Ok(n) => n as usize,
            Err(kind) => return Poll::Ready(Err(this.limit_error(kind))),
        };
        let (poll, filled) = if granted == buf.remaining() {
            let before = buf.filled().len();
            let poll = Pin::new(&mut this.inner).poll_read(cx, buf);
            (poll, buf.filled().len() - before)
        } else {
            // Near the limit: read into a shorter view of the buffer (initialised first, which
            // costs a memset only on this rare path).
            let mut limited = ReadBuf::new(buf.initialize_unfilled_to(granted));
            let poll = Pin::new(&mut this.inner).poll_read(cx, &mut limited);
            let filled = limited.filled().len();
            buf.advance(filled);
            (poll, filled)
        };
        this.budget.refund((granted - filled) as u64);
        this.stats
            .received
            .fetch_add(filled as u64, Ordering::Relaxed);
        poll
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if data.is_empty() {
            return Pin::new(&mut this.inner).poll_write(cx, data);
        }
        let granted = match this.budget.reserve(data.len() as u64) {
            Ok(n) => n as usize,
            Err(kind) => return Poll::Ready(Err(this.limit_error(kind))),
        };
        let poll = Pin::new(&mut this.inner).poll_write(cx, &data[..granted]);
        let written = match &poll {
            Poll::Ready(Ok(n)) => *n,
            _ => 0,
        };
        this.budget.refund((granted - written) as u64);
        this.stats.sent.fetch_add(written as u64, Ordering::Relaxed);
        poll
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn limits(session: u64, command: u64) -> NetLimits {
        NetLimits {
            session_bytes: session,
            command_bytes: command,
            connections_per_second: 0,
            max_concurrent: 0,
        }
    }

    #[test]
    fn the_budget_grants_up_to_the_tighter_limit() {
        let b = Budget::new(&limits(100, 30));
        assert_eq!(b.reserve(20), Ok(20));
        assert_eq!(b.reserve(20), Ok(10));
        assert_eq!(b.reserve(1), Err(LimitKind::CommandBytes));
        b.begin_command(None);
        assert_eq!(b.reserve(30), Ok(30));
        b.begin_command(Some(0));
        assert_eq!(b.reserve(100), Ok(40));
        assert_eq!(b.reserve(1), Err(LimitKind::SessionBytes));
        assert_eq!(b.exhausted(), Some(LimitKind::SessionBytes));
        b.refund(5);
        assert_eq!(b.exhausted(), None);
    }

    #[test]
    fn zero_means_unlimited() {
        let b = Budget::new(&limits(0, 0));
        assert_eq!(b.reserve(u64::MAX / 2), Ok(u64::MAX / 2));
        assert!(Rate::new(0).try_take());
    }

    #[test]
    fn the_rate_bucket_holds_one_second_of_connections() {
        let r = Rate::new(3);
        assert!(r.try_take() && r.try_take() && r.try_take());
        assert!(!r.try_take());
    }

    #[tokio::test]
    async fn metered_streams_stop_at_the_budget_and_count_both_ways() {
        let (a, mut b) = tokio::io::duplex(1 << 16);
        let budget = Arc::new(Budget::new(&limits(0, 1000)));
        let stats = Arc::new(ConnStats::default());
        let mut m = Metered::new(a, budget.clone(), stats.clone());
        m.write_all(&[1; 600]).await.expect("within the budget");
        b.write_all(&[2; 1000]).await.expect("peer writes");
        let mut got = vec![0; 1000];
        let mut n = 0;
        let err = loop {
            match m.read(&mut got[n..]).await {
                Ok(0) => panic!("eof before the limit"),
                Ok(k) => n += k,
                Err(e) => break e,
            }
        };
        assert_eq!(n, 400, "exactly the rest of the budget was read");
        assert!(err.to_string().contains("limit"), "{err}");
        assert_eq!(stats.sent.load(Ordering::Relaxed), 600);
        assert_eq!(stats.received.load(Ordering::Relaxed), 400);
        assert_eq!(stats.limit_hit(), Some(LimitKind::CommandBytes));
        assert!(m.write_all(&[1]).await.is_err());
    }
}
