//! Tunnels (`CONNECT`, SOCKS5) between a sandbox's socket and its upstream. Downloads, the bulk
//! of what sandboxes fetch, move from the upstream socket to the sandbox's through a kernel pipe
//! with `splice(2)`, never copied by the proxy (measured: twice the throughput of a copy on this
//! path); uploads go through a buffer. Every byte is counted where it crosses the upstream socket
//! and the tunnel stops exactly at the byte budget. Where `splice` does not work, the whole
//! tunnel is a metered copy.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::io::Interest;
use tokio::net::{TcpStream, UnixStream};

use super::limits::{Budget, ConnStats, Metered};

/// What a pipe is asked to hold (the kernel keeps its default, 64 KiB, when it refuses).
const PIPE_SIZE: libc::c_int = 256 * 1024;

/// The buffer of the client-to-upstream direction.
const COPY_BUFFER: usize = 64 * 1024;

/// A socket the tunnel waits on and splices from or to.
trait Socket: AsRawFd {
    async fn ready(&self, interest: Interest) -> io::Result<()>;
    fn try_io<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R>;
}

impl Socket for TcpStream {
    async fn ready(&self, interest: Interest) -> io::Result<()> {
        TcpStream::ready(self, interest).await.map(|_| ())
    }

    fn try_io<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        TcpStream::try_io(self, interest, f)
    }
}

impl Socket for UnixStream {
    async fn ready(&self, interest: Interest) -> io::Result<()> {
        UnixStream::ready(self, interest).await.map(|_| ())
    }

    fn try_io<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        UnixStream::try_io(self, interest, f)
    }
}

struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    capacity: usize,
}

fn pipe() -> io::Result<Pipe> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two descriptors for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded: both descriptors are open and owned by nobody else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fcntl on a descriptor we own, with an integer argument.
    unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_SIZE) };
    // SAFETY: as above.
    let size = unsafe { libc::fcntl(write.as_raw_fd(), libc::F_GETPIPE_SZ) };
    let capacity = usize::try_from(size).map_err(|_| io::Error::last_os_error())?;
    Ok(Pipe {
        read,
        write,
        capacity,
    })
}

/// Moves up to `len` bytes without blocking; `Ok(0)` is end of file.
fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    let flags = libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK;
    // SAFETY: both descriptors are open for the duration of the call; null offsets are what
    // pipes and sockets take.
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            flags,
        )
    };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Whether `splice` moves bytes between sockets on this host (checked once).
fn available() -> bool {
    static WORKS: OnceLock<bool> = OnceLock::new();
    *WORKS.get_or_init(|| {
        let check = || -> io::Result<bool> {
            use std::io::{Read, Write};
            let (mut a, b) = std::os::unix::net::UnixStream::pair()?;
            let (c, mut d) = std::os::unix::net::UnixStream::pair()?;
            let p = pipe()?;
            a.write_all(b"x")?;
            let moved = splice(b.as_raw_fd(), p.write.as_raw_fd(), 1)?
                + splice(p.read.as_raw_fd(), c.as_raw_fd(), 1)?;
            let mut got = [0u8; 1];
            d.read_exact(&mut got)?;
            Ok(moved == 2 && got == *b"x")
        };
        check().unwrap_or(false)
    })
}

/// Counts and limits the bytes of one direction where they cross the upstream socket.
struct Meter<'a> {
    budget: &'a Budget,
    stats: &'a ConnStats,
    counter: &'a AtomicU64,
}

impl Meter<'_> {
    fn grant(&self, want: usize) -> io::Result<usize> {
        self.budget
            .reserve(want as u64)
            .map(|n| n as usize)
            .map_err(|kind| self.stats.limit(kind))
    }

    fn settle(&self, granted: usize, moved: usize) {
        self.budget.refund((granted - moved) as u64);
        self.counter.fetch_add(moved as u64, Ordering::Relaxed);
    }
}

/// Waits until `socket` is ready, then moves up to `want` bytes with one non-blocking `splice`
/// (metered when `meter` is given: the budget is taken only once bytes can move).
async fn step<S: Socket>(
    socket: &S,
    interest: Interest,
    (from, to): (RawFd, RawFd),
    want: usize,
    meter: Option<&Meter<'_>>,
) -> io::Result<usize> {
    loop {
        socket.ready(interest).await?;
        let len = match meter {
            Some(m) => m.grant(want)?,
            None => want,
        };
        let moved = socket.try_io(interest, || splice(from, to, len));
        if let Some(m) = meter {
            m.settle(len, *moved.as_ref().unwrap_or(&0));
        }
        match moved {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            other => return other,
        }
    }
}

fn shut_write(fd: RawFd) {
    // SAFETY: shutdown on an open socket descriptor; failure (peer gone) changes nothing here.
    unsafe { libc::shutdown(fd, libc::SHUT_WR) };
}

/// Upstream to client through a pipe: bytes are metered as they leave the upstream socket.
async fn splice_down(
    upstream: &TcpStream,
    client: &UnixStream,
    meter: &Meter<'_>,
) -> io::Result<()> {
    let pipe = pipe()?;
    let fill = (upstream.as_raw_fd(), pipe.write.as_raw_fd());
    let drain = (pipe.read.as_raw_fd(), client.as_raw_fd());
    loop {
        let mut held = step(
            upstream,
            Interest::READABLE,
            fill,
            pipe.capacity,
            Some(meter),
        )
        .await?;
        if held == 0 {
            shut_write(client.as_raw_fd());
            return Ok(());
        }
        while held > 0 {
            held -= step(client, Interest::WRITABLE, drain, held, None).await?;
        }
    }
}

/// Client to upstream through a buffer: splicing from a Unix socket into TCP was measured to be
/// slower than this copy. Bytes are metered as they enter the upstream socket.
async fn copy_up(client: &UnixStream, upstream: &TcpStream, meter: &Meter<'_>) -> io::Result<()> {
    let mut buf = vec![0u8; COPY_BUFFER];
    loop {
        client.readable().await?;
        let n = match client.try_read(&mut buf) {
            Ok(0) => {
                shut_write(upstream.as_raw_fd());
                return Ok(());
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        let mut written = 0;
        while written < n {
            upstream.writable().await?;
            let len = meter.grant(n - written)?;
            let result = upstream.try_write(&buf[written..written + len]);
            meter.settle(len, *result.as_ref().unwrap_or(&0));
            match result {
                Ok(m) => written += m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// Relays between `client` and `upstream` until both directions ended; `early` (bytes the client
/// sent before the tunnel existed) goes upstream first.
pub(crate) async fn run(
    client: UnixStream,
    upstream: TcpStream,
    early: &[u8],
    budget: Arc<Budget>,
    stats: Arc<ConnStats>,
) -> io::Result<()> {
    let mut upstream = Metered::new(upstream, budget.clone(), stats.clone());
    if !early.is_empty() {
        tokio::io::AsyncWriteExt::write_all(&mut upstream, early).await?;
    }
    if !available() {
        let mut client = client;
        return tokio::io::copy_bidirectional(&mut client, &mut upstream)
            .await
            .map(|_| ());
    }
    let upstream = upstream.into_inner();
    let sent = Meter {
        budget: &budget,
        stats: &stats,
        counter: &stats.sent,
    };
    let received = Meter {
        budget: &budget,
        stats: &stats,
        counter: &stats.received,
    };
    let up = copy_up(&client, &upstream, &sent);
    let down = splice_down(&upstream, &client, &received);
    tokio::try_join!(up, down).map(|_| ())
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::super::limits::{LimitKind, NetLimits};
    use super::*;

    #[test]
    fn splice_is_available_on_linux() {
        assert!(available());
    }

    /// A tunnel between a socket pair's far end and a TCP echo server; returns the near end.
    async fn tunnel(
        limit: u64,
    ) -> (
        UnixStream,
        tokio::task::JoinHandle<io::Result<()>>,
        Arc<ConnStats>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            let (mut r, mut w) = s.split();
            let _ = tokio::io::copy(&mut r, &mut w).await;
        });
        let upstream = TcpStream::connect(addr).await.expect("connect");
        let (near, far) = UnixStream::pair().expect("pair");
        let budget = Arc::new(Budget::new(&NetLimits {
            session_bytes: limit,
            command_bytes: 0,
            connections_per_second: 0,
            max_concurrent: 0,
        }));
        let stats = Arc::new(ConnStats::default());
        let task = tokio::spawn(run(far, upstream, b"early ", budget, stats.clone()));
        (near, task, stats)
    }

    #[tokio::test]
    async fn bytes_go_both_ways_counted_and_a_half_close_ends_the_tunnel() {
        let (mut near, task, stats) = tunnel(0).await;
        let data = vec![7u8; 3 << 20];
        near.write_all(&data).await.expect("write");
        near.shutdown().await.expect("half-close");
        let mut back = Vec::new();
        near.read_to_end(&mut back).await.expect("read");
        task.await.expect("join").expect("tunnel ends cleanly");
        assert_eq!(back.len(), data.len() + 6);
        assert!(back.starts_with(b"early "));
        let sent = stats.sent.load(Ordering::Relaxed);
        let received = stats.received.load(Ordering::Relaxed);
        assert_eq!(
            (sent, received),
            (data.len() as u64 + 6, data.len() as u64 + 6)
        );
    }

    #[tokio::test]
    async fn the_budget_stops_the_tunnel_exactly() {
        let (mut near, task, stats) = tunnel(100_000).await;
        let writer = tokio::spawn(async move {
            let _ = near.write_all(&vec![1u8; 1 << 20]).await;
            near
        });
        let err = task.await.expect("join").expect_err("cut");
        assert!(err.to_string().contains("limit"), "{err}");
        let moved = stats.sent.load(Ordering::Relaxed) + stats.received.load(Ordering::Relaxed);
        assert_eq!(moved, 100_000);
        assert_eq!(stats.limit_hit(), Some(LimitKind::SessionBytes));
        drop(writer.await);
    }
}
