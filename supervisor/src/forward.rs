//! The in-container end of the egress path: listens on `127.0.0.1:3128` (and `[::1]:3128` when
//! loopback has IPv6) inside a `network: none` container and relays (copies) each TCP connection
//! to the egress proxy's Unix socket, bind-mounted read-only at [`CONTAINER_SOCKET_DIR`].
//!
//! Proxy-aware clients (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`) need a `host:port`, never a
//! socket path: this is that port. It is convenience, not a boundary: the socket is the only way
//! out, and everything that arrives on it is checked by the proxy.
//!
//! One thread serves every connection with `poll(2)` (threads count against the container's pids
//! limit, which the script needs), at most [`DEFAULT_MAX_CONNECTIONS`] at once. When the proxy is
//! gone (socket missing or refusing), a client gets a `502` text at once and the connection
//! closes: a run never hangs on a dead proxy.
//!
//! One file (past 500 lines with its tests): the listener, the copy loop and the 502 answer are
//! one `poll(2)` state machine.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

use pipe::Pipe;

mod pipe;

/// The port proxy-aware clients are pointed at.
pub const PROXY_PORT: u16 = 3128;

/// Where the sandbox's egress directory is mounted (read-only) in the container.
pub const CONTAINER_SOCKET_DIR: &str = "/run/egress";

/// The proxy's socket in that directory.
pub const SOCKET_NAME: &str = "proxy.sock";

/// The path the proxy answers `200 ok` on for health checks (an origin-form request, which a
/// forward proxy never forwards).
pub const HEALTH_PATH: &str = "/.well-known/scriptgate/egress/health";

/// Announced in `Ready::features` by a supervisor whose forwarder is listening (its container
/// has the egress directory mounted).
pub const FEATURE_EGRESS: &str = "egress-forward";

/// Connections spliced at once; more are answered `503` and closed.
pub const DEFAULT_MAX_CONNECTIONS: usize = 64;

/// A send and receive buffer size to ask for on both sockets of a spliced connection
/// ([`Forwarder::with_socket_buffer`]). Not the default: on loopback with 2 shared cores it gave
/// no consistent gain over the kernel's defaults (`benches/egress.rs` prints both).
pub const SOCKET_BUFFER: usize = 1 << 20;

/// The socket's path inside the container.
pub fn container_socket() -> PathBuf {
    Path::new(CONTAINER_SOCKET_DIR).join(SOCKET_NAME)
}

/// Starts the forwarder when the container has an egress directory mounted (the host mounts one
/// into every container while its service runs an egress proxy); `Ok(false)` without one.
pub fn start_if_mounted() -> io::Result<bool> {
    if !Path::new(CONTAINER_SOCKET_DIR).is_dir() {
        return Ok(false);
    }
    Forwarder::bind(PROXY_PORT, container_socket())?.spawn()?;
    Ok(true)
}

/// Bound listeners and the socket they forward to.
#[derive(Debug)]
pub struct Forwarder {
    listeners: Vec<TcpListener>,
    socket: PathBuf,
    max_connections: usize,
    socket_buffer: Option<usize>,
}

impl Forwarder {
    /// Binds `127.0.0.1:port` (required) and `[::1]:port` (when available). Port 0 picks a free
    /// port for each (tests).
    pub fn bind(port: u16, socket: impl Into<PathBuf>) -> io::Result<Forwarder> {
        let mut listeners = vec![TcpListener::bind((Ipv4Addr::LOCALHOST, port))?];
        // The engine disables IPv6 in containers without it; then there is no ::1 to bind.
        if let Ok(v6) = TcpListener::bind((Ipv6Addr::LOCALHOST, port)) {
            listeners.push(v6);
        }
        for listener in &listeners {
            listener.set_nonblocking(true)?;
        }
        Ok(Forwarder {
            listeners,
            socket: socket.into(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            socket_buffer: None,
        })
    }

    /// The socket buffer size to ask for (`None`: the kernel's defaults).
    pub fn with_socket_buffer(mut self, bytes: Option<usize>) -> Forwarder {
        self.socket_buffer = bytes;
        self
    }

    pub fn with_max_connections(mut self, max: usize) -> Forwarder {
        self.max_connections = max.max(1);
        self
    }

    /// The bound addresses (IPv4 first).
    pub fn local_addrs(&self) -> io::Result<Vec<SocketAddr>> {
        self.listeners.iter().map(TcpListener::local_addr).collect()
    }

    /// Serves on a thread of its own, named `egress-forward`, with every signal blocked: a
    /// process-directed signal (the supervisor's SIGCHLD, which it reads from a signalfd) must
    /// never be taken, and dropped, by this thread.
    pub fn spawn(self) -> io::Result<thread::JoinHandle<io::Error>> {
        thread::Builder::new()
            .name("egress-forward".into())
            .spawn(move || {
                block_signals();
                self.run()
            })
    }

    /// Serves until `poll` itself fails (never in practice); returns that error.
    pub fn run(self) -> io::Error {
        let mut conns: Vec<Conn> = Vec::new();
        let mut fds: Vec<libc::pollfd> = Vec::new();
        loop {
            fds.clear();
            for listener in &self.listeners {
                fds.push(pollfd(listener.as_raw_fd(), libc::POLLIN));
            }
            for conn in &conns {
                let (tcp, uds) = conn.interest();
                fds.push(pollfd(conn.tcp.as_raw_fd(), tcp));
                fds.push(pollfd(conn.uds.as_raw_fd(), uds));
            }
            if let Err(e) = poll(&mut fds) {
                return e;
            }
            let first_conn = self.listeners.len();
            for (i, conn) in conns.iter_mut().enumerate() {
                let tcp = fds[first_conn + 2 * i].revents;
                let uds = fds[first_conn + 2 * i + 1].revents;
                if tcp != 0 || uds != 0 {
                    conn.step(tcp, uds);
                }
            }
            conns.retain(|c| !c.finished());
            for (i, listener) in self.listeners.iter().enumerate() {
                if fds[i].revents != 0 {
                    self.accept_all(listener, &mut conns);
                }
            }
        }
    }

    fn accept_all(&self, listener: &TcpListener, conns: &mut Vec<Conn>) {
        loop {
            let tcp = match listener.accept() {
                Ok((tcp, _)) => tcp,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // WouldBlock, or out of descriptors: poll again later.
                Err(_) => return,
            };
            if conns.len() >= self.max_connections {
                refuse(
                    tcp,
                    "503 Service Unavailable",
                    "too many connections at once",
                );
                continue;
            }
            match open(tcp, &self.socket, self.socket_buffer) {
                Ok(conn) => conns.push(conn),
                Err((tcp, e)) => refuse(
                    tcp,
                    "502 Bad Gateway",
                    &format!("the egress proxy is unavailable ({e})"),
                ),
            }
        }
    }
}

/// Connects to the proxy for one client. The socket belongs to this sandbox alone, so its
/// backlog (over a thousand) cannot be filled by this forwarder's at most 64 connections: the
/// blocking `connect` returns at once, with an error when the proxy is gone.
fn open(
    tcp: TcpStream,
    socket: &Path,
    buffer: Option<usize>,
) -> Result<Conn, (TcpStream, io::Error)> {
    let uds = match UnixStream::connect(socket) {
        Ok(uds) => uds,
        Err(e) => return Err((tcp, e)),
    };
    if let Some(bytes) = buffer {
        // Best effort: the kernel caps it (net.core.*mem_max) and the splice works either way.
        for fd in [tcp.as_raw_fd(), uds.as_raw_fd()] {
            set_buffer(fd, libc::SO_SNDBUF, bytes);
            set_buffer(fd, libc::SO_RCVBUF, bytes);
        }
    }
    let setup = tcp
        .set_nonblocking(true)
        .and_then(|()| uds.set_nonblocking(true))
        .and_then(|()| tcp.set_nodelay(true));
    if let Err(e) = setup {
        return Err((tcp, e));
    }
    Ok(Conn {
        tcp,
        uds,
        up: Pipe::new(),
        down: Pipe::new(),
        failed: false,
    })
}

/// Answers a client we cannot serve with a short HTTP error (what proxy clients understand) and
/// closes. A SOCKS client sees a malformed reply and fails just as fast. The client's request is
/// read first (briefly) so that closing does not reset the connection before it reads the answer.
fn refuse(mut tcp: TcpStream, status: &str, reason: &str) {
    let body = format!("scriptgate egress: {reason}\n");
    let answer = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let linger = Some(Duration::from_millis(100));
    let _ = tcp.set_nonblocking(false);
    let _ = tcp.set_read_timeout(linger);
    let _ = tcp.set_write_timeout(linger);
    let mut request = [0u8; 4096];
    let _ = tcp.read(&mut request);
    let _ = tcp.write_all(answer.as_bytes());
    let _ = tcp.shutdown(Shutdown::Write);
    while matches!(tcp.read(&mut request), Ok(n) if n > 0) {}
}

/// Blocks every signal in the calling thread.
fn block_signals() {
    // SAFETY: sigset_t is plain data; sigfillset initialises it; pthread_sigmask only changes
    // this thread's mask.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    }
}

fn set_buffer(fd: i32, option: libc::c_int, bytes: usize) {
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: `fd` is an open socket and `value` a c_int that outlives the call.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            option,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

fn pollfd(fd: i32, events: i16) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

fn poll(fds: &mut [libc::pollfd]) -> io::Result<()> {
    loop {
        // SAFETY: `fds` is a valid, exclusively borrowed array of `fds.len()` pollfd structs.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// One client connection and its connection to the proxy.
#[derive(Debug)]
struct Conn {
    tcp: TcpStream,
    uds: UnixStream,
    /// Client to proxy.
    up: Pipe,
    /// Proxy to client.
    down: Pipe,
    failed: bool,
}

impl Conn {
    fn interest(&self) -> (i16, i16) {
        let mut tcp = 0;
        let mut uds = 0;
        if self.up.has_room() {
            tcp |= libc::POLLIN;
        }
        if self.up.has_data() {
            uds |= libc::POLLOUT;
        }
        if self.down.has_room() {
            uds |= libc::POLLIN;
        }
        if self.down.has_data() {
            tcp |= libc::POLLOUT;
        }
        (tcp, uds)
    }

    fn step(&mut self, tcp_events: i16, uds_events: i16) {
        if self.pump().is_err() {
            self.failed = true;
            return;
        }
        // A side that hung up entirely can take nothing more: once everything it sent has been
        // passed on, the connection is over (instead of polling its hang-up forever).
        let hup = libc::POLLHUP | libc::POLLERR;
        if (tcp_events & hup != 0 && self.up.is_shut())
            || (uds_events & hup != 0 && self.down.is_shut())
        {
            self.failed = true;
        }
    }

    fn pump(&mut self) -> io::Result<()> {
        let (tcp, uds) = (&self.tcp, &self.uds);
        self.up.fill(tcp)?;
        self.up.drain(uds, || uds.shutdown(Shutdown::Write))?;
        self.down.fill(uds)?;
        self.down.drain(tcp, || tcp.shutdown(Shutdown::Write))
    }

    fn finished(&self) -> bool {
        self.failed || (self.up.is_shut() && self.down.is_shut())
    }
}

/// Asks the proxy through `socket` whether it serves ([`HEALTH_PATH`]); for a check before the
/// script starts. Fails within `timeout` when nothing answers.
pub fn probe(socket: &Path, timeout: Duration) -> io::Result<()> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let request =
        format!("GET {HEALTH_PATH} HTTP/1.1\r\nHost: egress\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes())?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head)?;
    if &head == b"HTTP/1.1 200" {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "the egress proxy answered {:?}",
            String::from_utf8_lossy(&head)
        )))
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixListener;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A directory of its own under the system's temporary directory, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> TempDir {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let dir = std::env::temp_dir().join(format!(
                "sg-fwd-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::SeqCst)
            ));
            std::fs::create_dir_all(&dir).expect("temp dir");
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A Unix socket server that runs `serve` for each connection on a thread of its own.
    fn uds_server(dir: &TempDir, serve: fn(UnixStream)) -> PathBuf {
        let path = dir.0.join("proxy.sock");
        let listener = UnixListener::bind(&path).expect("bind socket");
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                thread::spawn(move || serve(stream));
            }
        });
        path
    }

    fn forwarder(socket: &Path) -> SocketAddr {
        let f = Forwarder::bind(0, socket).expect("bind");
        let addr = f.local_addrs().expect("addrs")[0];
        f.spawn().expect("thread");
        addr
    }

    fn client(addr: SocketAddr) -> TcpStream {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        s
    }

    /// Echoes everything, then closes after the client's end of file.
    fn echo(mut s: UnixStream) {
        let mut copy = s.try_clone().expect("clone");
        let _ = io::copy(&mut s, &mut copy);
    }

    #[test]
    fn bytes_travel_both_ways_intact() {
        let dir = TempDir::new();
        let addr = forwarder(&uds_server(&dir, echo));
        let mut c = client(addr);
        let data: Vec<u8> = (0..8 * 1024 * 1024u32)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let mut writer = c.try_clone().expect("clone");
        let sent = data.clone();
        let t = thread::spawn(move || {
            writer.write_all(&sent).expect("write");
            writer.shutdown(Shutdown::Write).expect("half-close");
        });
        let mut got = Vec::new();
        c.read_to_end(&mut got).expect("read to the end");
        t.join().expect("writer");
        assert_eq!(got.len(), data.len());
        assert!(got == data, "the echo differs");
    }

    #[test]
    fn a_half_close_reaches_the_proxy_and_its_answer_still_comes_back() {
        fn answer_after_eof(mut s: UnixStream) {
            let mut request = Vec::new();
            s.read_to_end(&mut request).expect("read to eof");
            s.write_all(format!("got {} bytes", request.len()).as_bytes())
                .expect("answer");
        }
        let dir = TempDir::new();
        let addr = forwarder(&uds_server(&dir, answer_after_eof));
        let mut c = client(addr);
        c.write_all(b"hello").expect("write");
        c.shutdown(Shutdown::Write).expect("half-close");
        let mut answer = String::new();
        c.read_to_string(&mut answer).expect("answer");
        assert_eq!(answer, "got 5 bytes");
    }

    #[test]
    fn many_connections_are_served_at_once() {
        let dir = TempDir::new();
        let addr = forwarder(&uds_server(&dir, echo));
        let clients: Vec<_> = (0..20)
            .map(|i| {
                thread::spawn(move || {
                    let mut c = client(addr);
                    let msg = format!("client {i}");
                    c.write_all(msg.as_bytes()).expect("write");
                    c.shutdown(Shutdown::Write).expect("half-close");
                    let mut back = String::new();
                    c.read_to_string(&mut back).expect("read");
                    assert_eq!(back, msg);
                })
            })
            .collect();
        for c in clients {
            c.join().expect("client");
        }
    }

    #[test]
    fn a_missing_proxy_gets_a_502_at_once() {
        let dir = TempDir::new();
        let addr = forwarder(&dir.0.join("absent.sock"));
        let mut c = client(addr);
        let _ = c.write_all(b"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n");
        let mut answer = String::new();
        c.read_to_string(&mut answer)
            .expect("answer, then end of file");
        assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
        assert!(answer.contains("egress proxy is unavailable"), "{answer}");
    }

    #[test]
    fn connections_past_the_limit_are_refused_not_queued() {
        fn hold(mut s: UnixStream) {
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink);
        }
        let dir = TempDir::new();
        let socket = uds_server(&dir, hold);
        let f = Forwarder::bind(0, &socket)
            .expect("bind")
            .with_max_connections(1);
        let addr = f.local_addrs().expect("addrs")[0];
        f.spawn().expect("thread");
        let mut first = client(addr);
        first.write_all(b"x").expect("first is served");
        let mut second = client(addr);
        let mut answer = String::new();
        second.read_to_string(&mut answer).expect("answer");
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    }

    #[test]
    fn the_probe_tells_a_live_proxy_from_a_dead_one() {
        fn healthy(mut s: UnixStream) {
            let mut buf = [0u8; 256];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        }
        fn silent(mut s: UnixStream) {
            let mut buf = Vec::new();
            let _ = s.read_to_end(&mut buf);
        }
        let dir = TempDir::new();
        let live = uds_server(&dir, healthy);
        probe(&live, Duration::from_secs(5)).expect("healthy");
        assert!(probe(&dir.0.join("gone.sock"), Duration::from_secs(5)).is_err());
        let other = TempDir::new();
        let stuck = uds_server(&other, silent);
        let err = probe(&stuck, Duration::from_millis(200)).expect_err("times out");
        assert!(
            matches!(
                err.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ),
            "{err:?}"
        );
    }
}
