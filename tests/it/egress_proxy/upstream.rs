//! A small HTTP/1.1 upstream on 127.0.0.1 that counts what it sees on the wire (connections,
//! bytes in, bytes out), for the egress proxy's tests and benchmark.
//!
//! Routes: `/hello`, `/bytes/N` (N bytes, streamed), `/echo` (the request body back), `/host`
//! (the Host header it got).

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// What the upstream saw, counted on its sockets.
#[derive(Debug, Default)]
pub struct Seen {
    pub connections: AtomicU64,
    pub requests: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
}

impl Seen {
    pub fn get(&self) -> (u64, u64, u64, u64) {
        (
            self.connections.load(Ordering::SeqCst),
            self.requests.load(Ordering::SeqCst),
            self.bytes_in.load(Ordering::SeqCst),
            self.bytes_out.load(Ordering::SeqCst),
        )
    }
}

pub struct Upstream {
    pub addr: SocketAddr,
    pub seen: Arc<Seen>,
}

/// Starts an upstream on a free port of 127.0.0.1; it runs until the runtime ends.
pub async fn start() -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind upstream");
    let addr = listener.local_addr().expect("upstream address");
    let seen = Arc::new(Seen::default());
    let counters = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let _ = tcp.set_nodelay(true);
            counters.connections.fetch_add(1, Ordering::SeqCst);
            let io = Counted {
                inner: tcp,
                seen: counters.clone(),
            };
            let seen = counters.clone();
            let service = service_fn(move |req| {
                seen.requests.fetch_add(1, Ordering::SeqCst);
                route(req)
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(io), service)
                    .await;
            });
        }
    });
    Upstream { addr, seen }
}

type Body = BoxBody<Bytes, Infallible>;

fn full(data: impl Into<Bytes>) -> Body {
    Full::new(data.into()).boxed()
}

async fn route(req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path().to_string();
    let response = if path == "/hello" {
        Response::new(full("hello from upstream"))
    } else if let Some(n) = path.strip_prefix("/bytes/") {
        bytes(n.parse().unwrap_or(0))
    } else if path == "/echo" {
        let body = req
            .into_body()
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        Response::new(full(body))
    } else if path == "/host" {
        let host = req
            .headers()
            .get(hyper::header::HOST)
            .map(|h| h.as_bytes().to_vec())
            .unwrap_or_default();
        Response::new(full(host))
    } else {
        let mut r = Response::new(full("not found"));
        *r.status_mut() = hyper::StatusCode::NOT_FOUND;
        r
    };
    Ok(response)
}

/// `n` bytes in 64 KiB frames, with a Content-Length.
fn bytes(n: u64) -> Response<Body> {
    const CHUNK: u64 = 64 * 1024;
    let chunk = Bytes::from(vec![b'x'; CHUNK as usize]);
    let frames = (0..n.div_ceil(CHUNK)).map(move |i| {
        let len = CHUNK.min(n - i * CHUNK) as usize;
        Ok::<_, Infallible>(Frame::data(chunk.slice(..len)))
    });
    let body = StreamBody::new(futures::stream::iter(frames)).boxed();
    let mut response = Response::new(body);
    response
        .headers_mut()
        .insert(hyper::header::CONTENT_LENGTH, n.into());
    response
}

/// The upstream's side of a connection, counting bytes both ways.
struct Counted {
    inner: TcpStream,
    seen: Arc<Seen>,
}

impl AsyncRead for Counted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let poll = Pin::new(&mut this.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        this.seen.bytes_in.fetch_add(n as u64, Ordering::SeqCst);
        poll
    }
}

impl AsyncWrite for Counted {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write(cx, b);
        if let Poll::Ready(Ok(n)) = &poll {
            this.seen.bytes_out.fetch_add(*n as u64, Ordering::SeqCst);
        }
        poll
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
