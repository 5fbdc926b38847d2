//! The egress proxy's cost, measured in one run against one local upstream: request latency
//! (p50, p99) on a keep-alive connection straight to the upstream and through the forwarder and
//! the proxy (the path a sandbox's client takes), and the throughput of a 100 MB download both
//! ways (forwarded and through a CONNECT tunnel), through the forwarder as the supervisor runs it
//! (the kernel's default socket buffers) and, for comparison in the same run, with 1 MiB socket
//! buffers (`SOCKET_BUFFER`, an experiment that gave no consistent gain). Two rows place the
//! cost: a CONNECT on the proxy's socket itself (the proxy without the forwarder), and a bare TCP
//! relay with no proxy at all (what the one more loopback connection a sandbox's client makes to
//! the forwarder costs by itself).
//!
//! Run: `cargo bench --bench egress`. No Docker, loopback only. Goals (issue 15): p50 overhead
//! ≤ 1 ms, throughput ≥ 0.8× direct. Figures are printed, never asserted: the machine is shared,
//! and on loopback every hop costs CPU that a real network link would hide.

#![allow(clippy::print_stdout)] // printing the figures is what this file is for

#[path = "../tests/it/egress_proxy/upstream.rs"]
#[allow(dead_code)]
mod upstream;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::Request;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use scriptgate::sandbox::egress::{
    EgressProxy, EgressSettings, Grant, NetLimits, SandboxEgress, SandboxOptions,
};
use scriptgate_supervisor::forward::{Forwarder, SOCKET_BUFFER};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

const REQUESTS: usize = 2000;
const WARMUP: usize = 200;
const DOWNLOAD: u64 = 100 * 1024 * 1024;
const DOWNLOAD_RUNS: usize = 5;

async fn client(addr: SocketAddr) -> SendRequest<Empty<Bytes>> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    tcp.set_nodelay(true).expect("nodelay");
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    sender
}

/// `target` is what goes on the request line: `/hello` directly, the absolute URI via the proxy.
async fn get(sender: &mut SendRequest<Empty<Bytes>>, target: &str, host: &str) -> u64 {
    let request = Request::get(target)
        .header("host", host)
        .body(Empty::new())
        .expect("request");
    sender.ready().await.expect("the connection stays open");
    let mut response = sender.send_request(request).await.expect("response");
    assert!(response.status().is_success(), "{}", response.status());
    let mut bytes = 0;
    while let Some(frame) = response.body_mut().frame().await {
        if let Ok(data) = frame.expect("body").into_data() {
            bytes += data.len() as u64;
        }
    }
    bytes
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Latencies of `REQUESTS` sequential requests on one connection to `addr`.
async fn latencies(addr: SocketAddr, target: &str, host: &str) -> Vec<Duration> {
    let mut sender = client(addr).await;
    for _ in 0..WARMUP {
        get(&mut sender, target, host).await;
    }
    let mut samples = Vec::with_capacity(REQUESTS);
    for _ in 0..REQUESTS {
        let started = Instant::now();
        get(&mut sender, target, host).await;
        samples.push(started.elapsed());
    }
    samples.sort();
    samples
}

/// MB/s of one download of `DOWNLOAD` bytes.
async fn forwarded_download(addr: SocketAddr, target: &str, host: &str) -> f64 {
    let mut sender = client(addr).await;
    let started = Instant::now();
    let n = get(&mut sender, target, host).await;
    assert_eq!(n, DOWNLOAD);
    n as f64 / 1e6 / started.elapsed().as_secs_f64()
}

/// Where a tunnel starts: the forwarder's port (a sandbox's path) or the proxy's socket itself
/// (the forwarder's share of the cost).
enum Entry<'a> {
    Forwarder(SocketAddr),
    Socket(&'a std::path::Path),
}

/// The same download through `CONNECT`, read raw from the tunnel.
async fn tunnelled_download(entry: &Entry<'_>, authority: &str) -> f64 {
    {
        let mut tcp: Box<dyn Stream> = match *entry {
            Entry::Forwarder(addr) => Box::new(TcpStream::connect(addr).await.expect("connect")),
            Entry::Socket(path) => Box::new(UnixStream::connect(path).await.expect("connect")),
        };
        let started = Instant::now();
        let request = format!(
            "CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n\
             GET /bytes/{DOWNLOAD} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
        );
        tcp.write_all(request.as_bytes()).await.expect("send");
        let mut buf = vec![0u8; 256 * 1024];
        let mut total = 0u64;
        loop {
            let n = tcp.read(&mut buf).await.expect("read");
            if n == 0 {
                break;
            }
            total += n as u64;
        }
        assert!(
            total > DOWNLOAD,
            "the whole body came through ({total} bytes)"
        );
        DOWNLOAD as f64 / 1e6 / started.elapsed().as_secs_f64()
    }
}

/// The proxy with one sandbox, and two forwarders in front of its socket: as the supervisor runs
/// it (the kernel's default buffers) and with socket buffers of `SOCKET_BUFFER`.
async fn proxy(
    upstream_port: u16,
) -> (
    EgressProxy,
    SandboxEgress,
    [SocketAddr; 2],
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().expect("dir");
    let settings = EgressSettings {
        allow_private_ranges: vec!["127.0.0.0/8".into()],
        hosts: BTreeMap::from([("bench.test".to_string(), vec!["127.0.0.1".to_string()])]),
        ..EgressSettings::default()
    };
    let proxy = EgressProxy::start(&settings, dir.path())
        .await
        .expect("proxy");
    let grant = Grant {
        allowed_domains: vec!["bench.test".into()],
        allowed_ports: vec![upstream_port],
        ..Grant::default()
    };
    let egress = proxy
        .open(SandboxOptions {
            id: "bench".into(),
            policy: Arc::new(grant.compile().expect("grant")),
            limits: NetLimits {
                session_bytes: 0,
                command_bytes: 0,
                connections_per_second: 0,
                max_concurrent: 0,
            },
            approver: None,
        })
        .await
        .expect("open");
    let mut ports = Vec::new();
    for buffer in [None, Some(SOCKET_BUFFER)] {
        let forwarder = Forwarder::bind(0, egress.socket_path())
            .expect("forwarder")
            .with_socket_buffer(buffer);
        ports.push(forwarder.local_addrs().expect("addr")[0]);
        forwarder.spawn().expect("forwarder thread");
    }
    (proxy, egress, [ports[0], ports[1]], dir)
}

/// A bare TCP relay to `upstream` (one thread per direction copying through 256 KiB, no proxy):
/// what one more loopback connection costs by itself, the hop a sandbox's client adds by
/// reaching the forwarder over TCP.
fn bare_relay(upstream: SocketAddr) -> SocketAddr {
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener};
    fn pump(mut from: std::net::TcpStream, mut to: std::net::TcpStream) {
        let mut buf = vec![0u8; 256 * 1024];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 || to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    }
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind relay");
    let addr = listener.local_addr().expect("relay address");
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let server = std::net::TcpStream::connect(upstream).expect("relay to upstream");
            for s in [&client, &server] {
                s.set_nodelay(true).expect("nodelay");
            }
            let (c2, s2) = (
                client.try_clone().expect("clone"),
                server.try_clone().expect("clone"),
            );
            std::thread::spawn(move || pump(client, server));
            std::thread::spawn(move || pump(s2, c2));
        }
    });
    addr
}

trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin> Stream for T {}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let up = upstream::start().await;
    let port = up.addr.port();
    let (_proxy, egress, [forward, tuned], _dir) = proxy(port).await;
    let authority = format!("bench.test:{port}");
    let absolute = format!("http://{authority}/hello");
    let relay = bare_relay(up.addr);

    let direct = latencies(up.addr, "/hello", &authority).await;
    let proxied = latencies(forward, &absolute, &authority).await;
    let (d50, p50) = (percentile(&direct, 0.5), percentile(&proxied, 0.5));
    let (d99, p99) = (percentile(&direct, 0.99), percentile(&proxied, 0.99));

    // Rounds interleave the paths so that a busy moment of a shared machine hits them all.
    let bytes_target = format!("/bytes/{DOWNLOAD}");
    let absolute_bytes = format!("http://{authority}{bytes_target}");
    let mut best = [0f64; 7];
    for _ in 0..DOWNLOAD_RUNS {
        let round = [
            forwarded_download(relay, &bytes_target, &authority).await,
            forwarded_download(up.addr, &bytes_target, &authority).await,
            forwarded_download(forward, &absolute_bytes, &authority).await,
            tunnelled_download(&Entry::Forwarder(forward), &authority).await,
            tunnelled_download(&Entry::Socket(egress.socket_path()), &authority).await,
            forwarded_download(tuned, &absolute_bytes, &authority).await,
            tunnelled_download(&Entry::Forwarder(tuned), &authority).await,
        ];
        for (b, r) in best.iter_mut().zip(round) {
            *b = b.max(r);
        }
    }
    let [
        relay_mbps,
        direct_mbps,
        proxied_mbps,
        tunnel_mbps,
        socket_mbps,
        tuned_proxied,
        tuned_tunnel,
    ] = best;
    let summary = egress.close().await.network_summary;

    println!(
        "egress proxy, one run on this machine ({REQUESTS} keep-alive requests after {WARMUP} \
         warm-up; best of {DOWNLOAD_RUNS} downloads of {} MB):",
        DOWNLOAD / 1_000_000
    );
    println!();
    println!("| measurement | direct | through the proxy | overhead / ratio | goal |");
    println!("|---|---:|---:|---:|---:|");
    println!(
        "| request latency p50 | {:.0} µs | {:.0} µs | +{:.0} µs | ≤ +1000 µs |",
        micros(d50),
        micros(p50),
        micros(p50) - micros(d50)
    );
    println!(
        "| request latency p99 | {:.0} µs | {:.0} µs | +{:.0} µs | |",
        micros(d99),
        micros(p99),
        micros(p99) - micros(d99)
    );
    println!(
        "| 100 MB download, forwarded | {direct_mbps:.0} MB/s | {proxied_mbps:.0} MB/s | {:.2}× | ≥ 0.8× |",
        proxied_mbps / direct_mbps
    );
    println!(
        "| 100 MB download, CONNECT tunnel | {direct_mbps:.0} MB/s | {tunnel_mbps:.0} MB/s | {:.2}× | ≥ 0.8× |",
        tunnel_mbps / direct_mbps
    );
    println!(
        "| experiment: forwarded, forwarder with 1 MiB socket buffers | {direct_mbps:.0} MB/s | {tuned_proxied:.0} MB/s | {:.2}× | |",
        tuned_proxied / direct_mbps
    );
    println!(
        "| experiment: CONNECT, forwarder with 1 MiB socket buffers | {direct_mbps:.0} MB/s | {tuned_tunnel:.0} MB/s | {:.2}× | |",
        tuned_tunnel / direct_mbps
    );
    println!(
        "| 100 MB download, CONNECT on the proxy's socket (no forwarder) | {direct_mbps:.0} MB/s | {socket_mbps:.0} MB/s | {:.2}× | |",
        socket_mbps / direct_mbps
    );
    println!(
        "| 100 MB download through a bare TCP relay (no proxy, one more loopback hop) | {direct_mbps:.0} MB/s | {relay_mbps:.0} MB/s | {:.2}× | |",
        relay_mbps / direct_mbps
    );
    println!();
    println!(
        "proxy summary: {} connections, {} DNS queries, {:.0} MB received",
        summary.connections,
        summary.dns_queries,
        summary.bytes_received as f64 / 1e6
    );
}
