//! The proxy's listeners: one Unix socket per sandbox in a directory the service owns, the accept
//! loop that tells SOCKS5 from HTTP by the first byte, the health check a sandbox must pass
//! before it starts, and shutdown that removes every socket.
//!
//! One file (past 500 lines with its tests): the sockets, the accept loop and shutdown share the
//! table of live sandboxes.

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use ipnet::IpNet;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::config::Compiled;
use super::decide::SandboxCtx;
use super::events::{NetworkEvent, NetworkReport};
use super::ranges::DeniedRanges;
use super::resolve::Resolver;
use super::{
    CONTAINER_SOCKET_DIR, EgressError, EgressSettings, HEALTH_PATH, SOCKET_NAME, SandboxOptions,
};

/// The longest path a Unix socket address holds (`sun_path` less its NUL).
const MAX_SOCKET_PATH: usize = 107;

/// How long closing a sandbox waits for its connections' events before it stops waiting.
const DRAIN: Duration = Duration::from_secs(5);
/// How often [`SandboxEgress::settle`] looks again.
const SETTLE_POLL: Duration = Duration::from_millis(5);

/// What every sandbox's connections share.
#[derive(Debug)]
pub(crate) struct ProxyShared {
    pub(crate) compiled: Compiled,
    pub(crate) resolver: Resolver,
    ranges: RwLock<Arc<DeniedRanges>>,
    dir: PathBuf,
    stopped: CancellationToken,
    open: Mutex<HashMap<Arc<str>, Registered>>,
}

#[derive(Debug)]
struct Registered {
    dir: PathBuf,
    cancel: CancellationToken,
    tasks: TaskTracker,
}

impl ProxyShared {
    pub(crate) fn ranges(&self) -> Arc<DeniedRanges> {
        self.ranges
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Registered>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The egress proxy of one service: opens and closes per-sandbox sockets.
#[derive(Debug, Clone)]
pub struct EgressProxy {
    shared: Arc<ProxyShared>,
}

fn io_error(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> EgressError {
    let path = path.to_path_buf();
    move |source| EgressError::Io { what, path, source }
}

impl EgressProxy {
    /// Checks `settings`, creates `socket_dir` (mode 0711) and removes what an earlier instance
    /// left in it. Needs a tokio runtime.
    pub async fn start(
        settings: &EgressSettings,
        socket_dir: &Path,
    ) -> Result<EgressProxy, EgressError> {
        let compiled = settings.compile()?;
        let resolver = Resolver::new(
            compiled.hosts.clone(),
            &compiled.dns_servers,
            compiled.timeouts.dns,
        )?;
        prepare_dir(socket_dir).await?;
        Ok(EgressProxy {
            shared: Arc::new(ProxyShared {
                ranges: RwLock::new(Arc::new(compiled.ranges.clone())),
                compiled,
                resolver,
                dir: socket_dir.to_path_buf(),
                stopped: CancellationToken::new(),
                open: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// Denies the engine's networks (bridges, the networks containers sit on) from now on,
    /// replacing the networks given before.
    pub fn set_engine_networks(&self, networks: &[IpNet]) {
        let mut ranges = self
            .shared
            .ranges
            .write()
            .unwrap_or_else(|e| e.into_inner());
        *ranges = Arc::new(ranges.with_engine_networks(networks));
    }

    pub fn is_running(&self) -> bool {
        !self.shared.stopped.is_cancelled()
    }

    /// Opens a sandbox's socket (in a directory of its own) and starts serving it.
    pub async fn open(&self, options: SandboxOptions) -> Result<SandboxEgress, EgressError> {
        let dir = self.reserve().await?;
        self.open_in(dir, options).await
    }

    /// A sandbox directory with no socket in it yet: a container can be created with it mounted
    /// (a warm container, before anyone knows whether its run will ask for network access), and
    /// [`EgressProxy::open_in`] puts the socket there once a run does. Dropping it removes it.
    pub async fn reserve(&self) -> Result<EgressDir, EgressError> {
        if self.shared.stopped.is_cancelled() {
            return Err(EgressError::Stopped);
        }
        let dir = self.shared.dir.join(sandbox_dir_name());
        let socket = dir.join(SOCKET_NAME);
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(EgressError::SocketPathTooLong {
                path: socket,
                max: MAX_SOCKET_PATH,
            });
        }
        tokio::fs::create_dir(&dir)
            .await
            .map_err(io_error("create", &dir))?;
        // The sandbox's uid differs from the service's: it must traverse the directory and connect.
        tokio::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
            .await
            .map_err(io_error("set permissions of", &dir))?;
        Ok(EgressDir { path: dir })
    }

    /// Opens a sandbox's socket in `dir` (from [`EgressProxy::reserve`]) and starts serving it.
    pub async fn open_in(
        &self,
        dir: EgressDir,
        options: SandboxOptions,
    ) -> Result<SandboxEgress, EgressError> {
        let shared = &self.shared;
        if shared.stopped.is_cancelled() {
            return Err(EgressError::Stopped);
        }
        let id: Arc<str> = options.id.as_str().into();
        if shared.registry().contains_key(&id) {
            return Err(EgressError::AlreadyOpen(options.id));
        }
        let socket = dir.path.join(SOCKET_NAME);
        let listener = bind(&socket).await?;
        let cancel = shared.stopped.child_token();
        let ctx = Arc::new(SandboxCtx::new(
            id.clone(),
            shared.clone(),
            options.policy,
            options.approver,
            &options.limits,
            cancel.clone(),
        ));
        shared.registry().insert(
            id.clone(),
            Registered {
                dir: dir.path.clone(),
                cancel: cancel.clone(),
                tasks: ctx.tasks.clone(),
            },
        );
        ctx.tasks.spawn(accept_loop(listener, ctx.clone()));
        Ok(SandboxEgress {
            id,
            dir,
            socket,
            ctx,
            closed: false,
        })
    }

    /// Stops every sandbox's proxy, waits briefly for their connections to report, and removes
    /// every socket. Opened [`SandboxEgress`] values fail their health check from now on.
    pub async fn shutdown(&self) {
        self.shared.stopped.cancel();
        let entries: Vec<Registered> = self.shared.registry().drain().map(|(_, r)| r).collect();
        for entry in entries {
            entry.cancel.cancel();
            entry.tasks.close();
            let _ = tokio::time::timeout(DRAIN, entry.tasks.wait()).await;
            let _ = tokio::fs::remove_dir_all(&entry.dir).await;
        }
    }
}

/// The name of a sandbox's directory: 16 lower-case hex digits.
fn sandbox_dir_name() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..16].to_string()
}

fn is_sandbox_dir_name(name: &std::ffi::OsStr) -> bool {
    name.to_str()
        .is_some_and(|n| n.len() == 16 && n.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

async fn prepare_dir(dir: &Path) -> Result<(), EgressError> {
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(io_error("create", dir))?;
    // Sandboxes only ever see their own subdirectory; the parent needs no listing by others.
    tokio::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711))
        .await
        .map_err(io_error("set permissions of", dir))?;
    let mut entries = tokio::fs::read_dir(dir)
        .await
        .map_err(io_error("read", dir))?;
    // Only what an earlier instance made is removed: a misconfigured socket_dir that holds other
    // files loses none of them.
    while let Some(entry) = entries.next_entry().await.map_err(io_error("read", dir))? {
        let path = entry.path();
        if path.is_dir() && is_sandbox_dir_name(&entry.file_name()) {
            tokio::fs::remove_dir_all(&path)
                .await
                .map_err(io_error("remove the leftover", &path))?;
        }
    }
    Ok(())
}

async fn bind(socket: &Path) -> Result<UnixListener, EgressError> {
    let listener = UnixListener::bind(socket).map_err(io_error("listen on", socket))?;
    tokio::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o666))
        .await
        .map_err(io_error("set permissions of", socket))?;
    Ok(listener)
}

/// A sandbox's directory under the socket directory; removed (with whatever is in it) when
/// dropped.
#[derive(Debug)]
pub struct EgressDir {
    path: PathBuf,
}

impl EgressDir {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The bind in the engine's `source:target:ro` form.
    pub fn bind(&self) -> String {
        format!("{}:{CONTAINER_SOCKET_DIR}:ro", self.path.display())
    }
}

impl Drop for EgressDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

async fn accept_loop(listener: UnixListener, ctx: Arc<SandboxCtx>) {
    loop {
        let accepted = tokio::select! {
            () = ctx.cancel.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _)) => {
                let conn_ctx = ctx.clone();
                ctx.spawn(serve_connection(conn_ctx, stream));
            }
            Err(e) => {
                // Out of descriptors or memory: back off instead of spinning.
                tracing::warn!(sandbox = %ctx.id, error = %e, "egress proxy: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// One client connection: SOCKS5 when the first byte is 5, HTTP otherwise.
async fn serve_connection(ctx: Arc<SandboxCtx>, mut stream: UnixStream) {
    let mut first = [0u8; 1];
    let handshake = ctx.proxy.compiled.timeouts.handshake;
    match tokio::time::timeout(handshake, stream.read(&mut first)).await {
        Ok(Ok(1)) => {}
        _ => return,
    }
    if first[0] == 5 {
        super::socks::serve(ctx, stream).await;
    } else {
        super::http::serve(ctx, Prefixed::new(first[0], stream)).await;
    }
}

/// A stream with one byte already read back in front of it.
#[derive(Debug)]
pub(crate) struct Prefixed<S> {
    first: Option<u8>,
    inner: S,
}

impl<S> Prefixed<S> {
    fn new(first: u8, inner: S) -> Self {
        Prefixed {
            first: Some(first),
            inner,
        }
    }

    /// The byte not read yet (if any) and the stream.
    pub(crate) fn into_parts(self) -> (Option<u8>, S) {
        (self.first, self.inner)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() > 0
            && let Some(byte) = this.first.take()
        {
            buf.put_slice(&[byte]);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, b)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// One sandbox's egress: its socket, its events, its limits. Closing it (or dropping it) stops
/// the socket and removes it.
#[derive(Debug)]
pub struct SandboxEgress {
    id: Arc<str>,
    dir: EgressDir,
    socket: PathBuf,
    ctx: Arc<SandboxCtx>,
    closed: bool,
}

impl SandboxEgress {
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The socket on the host (for host-side clients and tests).
    pub fn socket_path(&self) -> &Path {
        &self.socket
    }

    /// The directory to bind-mount read-only at [`CONTAINER_SOCKET_DIR`]; it holds only this
    /// sandbox's socket.
    pub fn mount_source(&self) -> &Path {
        self.dir.path()
    }

    /// The bind in the engine's `source:target:ro` form.
    pub fn bind(&self) -> String {
        self.dir.bind()
    }

    /// Every event as it happens (for SSE). A subscriber that falls more than 1,024 events
    /// behind is told how many it missed; the final list keeps them all (up to `max_events`).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<NetworkEvent> {
        self.ctx.recorder.subscribe()
    }

    /// A session's next command starts: its events, summary and byte count restart, with
    /// `command_bytes` as its limit when given.
    pub fn begin_command(&self, command_bytes: Option<u64>) {
        self.ctx.budget.begin_command(command_bytes);
        self.ctx.recorder.begin_command();
    }

    /// Waits (at most `max`) until no connection of the sandbox is open, so that a command's
    /// report holds the connections its processes closed as they exited (a connection is
    /// recorded when it ends). The socket keeps accepting meanwhile.
    pub async fn settle(&self, max: Duration) {
        let deadline = tokio::time::Instant::now() + max;
        // The accept loop is always one of the tasks.
        while self.ctx.tasks.len() > 1 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(SETTLE_POLL).await;
        }
    }

    /// Events and summary since the last [`SandboxEgress::begin_command`].
    pub fn command_report(&self) -> NetworkReport {
        self.ctx.recorder.command_report()
    }

    /// Events and summary of the sandbox's whole life so far.
    pub fn report(&self) -> NetworkReport {
        self.ctx.recorder.session_report()
    }

    /// Asks the proxy through the sandbox's own socket, as the forwarder would; an error means
    /// the run must not start (the proxy is stopped, the socket is gone, or nothing answers
    /// within `egress.health_timeout_ms`).
    pub async fn check(&self) -> Result<(), EgressError> {
        let unavailable = |reason: String| EgressError::Unavailable {
            sandbox: self.id.to_string(),
            reason,
        };
        if self.ctx.cancel.is_cancelled() {
            return Err(unavailable("the egress proxy is stopped".into()));
        }
        let timeout = self.ctx.proxy.compiled.timeouts.health;
        match tokio::time::timeout(timeout, health_request(&self.socket)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(unavailable(e.to_string())),
            Err(_) => Err(unavailable(format!(
                "no answer within {} ms",
                timeout.as_millis()
            ))),
        }
    }

    /// Stops the socket, lets open connections report (at most a few seconds; the rest are
    /// recorded as cancelled), removes the socket and returns everything that happened.
    pub async fn close(mut self) -> NetworkReport {
        self.stop();
        self.ctx.tasks.close();
        let _ = tokio::time::timeout(DRAIN, self.ctx.tasks.wait()).await;
        // The socket goes at once; the directory with the rest of the value (a container may
        // still have it mounted).
        let _ = tokio::fs::remove_file(&self.socket).await;
        self.ctx.recorder.session_report()
    }

    /// Stops the socket now (a session that ends: its container goes next); what is left is
    /// removed when the value drops.
    pub fn stop_now(&self) {
        self.ctx.cancel.cancel();
        self.ctx.proxy.registry().remove(&self.id);
    }

    fn stop(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        self.ctx.cancel.cancel();
        self.ctx.proxy.registry().remove(&self.id);
    }
}

impl Drop for SandboxEgress {
    fn drop(&mut self) {
        if !self.closed {
            self.stop();
            let _ = std::fs::remove_file(&self.socket);
        }
    }
}

/// `GET` [`HEALTH_PATH`] over `socket`; `Ok` on a 200.
pub(crate) async fn health_request(socket: &Path) -> io::Result<()> {
    let mut stream = UnixStream::connect(socket).await?;
    let request =
        format!("GET {HEALTH_PATH} HTTP/1.1\r\nHost: egress\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).await?;
    if &head == b"HTTP/1.1 200" {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "unexpected answer {:?}",
            String::from_utf8_lossy(&head)
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn start_up_removes_only_what_an_earlier_instance_left() {
        let dir = tempfile::tempdir().expect("dir");
        let leftover = dir.path().join(sandbox_dir_name());
        std::fs::create_dir(&leftover).expect("leftover");
        std::fs::write(leftover.join(SOCKET_NAME), b"").expect("stale socket");
        let foreign = dir.path().join("scriptgate.db");
        std::fs::write(&foreign, b"data").expect("foreign file");
        let foreign_dir = dir.path().join("artifacts");
        std::fs::create_dir(&foreign_dir).expect("foreign dir");
        EgressProxy::start(&EgressSettings::default(), dir.path())
            .await
            .expect("starts");
        assert!(!leftover.exists());
        assert!(foreign.exists() && foreign_dir.exists());
    }

    #[test]
    fn sandbox_directories_have_recognisable_names() {
        assert!(is_sandbox_dir_name(std::ffi::OsStr::new(
            &sandbox_dir_name()
        )));
        for other in [
            "egress",
            "0123456789abcdeg",
            "0123456789ABCDEF",
            "0123456789abcdef0",
        ] {
            assert!(!is_sandbox_dir_name(std::ffi::OsStr::new(other)), "{other}");
        }
    }
}
