//! The HTTP/1.1 front end: forward proxying of absolute-form `http://` requests (keep-alive per
//! client connection, every request decided and connected anew), `CONNECT` tunnels, the health
//! path, and the proxy's own answers (403, 429, 400, 502) with a text that says why.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::UnixStream;

use super::HEALTH_PATH;
use super::decide::{self, Denial, SandboxCtx, Upstream};
use super::events::{Cause, Protocol};
use super::names::Host;
use super::server::Prefixed;
use super::tunnel;

type ProxyBody = BoxBody<Bytes, hyper::Error>;

/// Headers that belong to one hop and are never forwarded (RFC 9110 section 7.6.1).
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// The client side of a connection as the server reads it.
type ClientIo = TokioIo<Prefixed<UnixStream>>;

/// Serves one client connection until it closes.
pub(crate) async fn serve(ctx: Arc<SandboxCtx>, io: Prefixed<UnixStream>) {
    let handshake = ctx.proxy.compiled.timeouts.handshake;
    let service_ctx = ctx.clone();
    let service = service_fn(move |req| {
        let ctx = service_ctx.clone();
        async move { Ok::<_, Infallible>(handle(ctx, req).await) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(handshake);
    let served = builder
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades()
        .await;
    if let Err(e) = served {
        tracing::debug!(sandbox = %ctx.id, error = %e, "egress proxy: client connection ended");
    }
}

fn text(status: StatusCode, message: &str, cause: Option<Cause>) -> Response<ProxyBody> {
    let body = Full::new(Bytes::from(format!("scriptgate egress: {message}\n")))
        .map_err(|never| match never {})
        .boxed();
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if let Some(cause) = cause {
        let name = serde_json::to_value(cause)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        if let Ok(value) = HeaderValue::from_str(&name) {
            headers.insert(HeaderName::from_static("x-scriptgate-egress"), value);
        }
    }
    response
}

fn refused(denial: &Denial) -> Response<ProxyBody> {
    let status = match denial.cause {
        Cause::BadRequest => StatusCode::BAD_REQUEST,
        Cause::Limit => StatusCode::TOO_MANY_REQUESTS,
        Cause::Resolve | Cause::Connect => StatusCode::BAD_GATEWAY,
        Cause::NoRule
        | Cause::Rule
        | Cause::DeniedRange
        | Cause::Operator
        | Cause::ApprovalTimeout
        | Cause::NoApprover => StatusCode::FORBIDDEN,
    };
    text(status, &denial.message, Some(denial.cause))
}

async fn handle(ctx: Arc<SandboxCtx>, req: Request<Incoming>) -> Response<ProxyBody> {
    if req.method() == Method::CONNECT {
        return tunnel(ctx, req).await;
    }
    let uri = req.uri().clone();
    let method = req.method().to_string();
    let Some(authority) = uri.authority().cloned() else {
        if uri.path() == HEALTH_PATH && req.method() == Method::GET {
            return text(StatusCode::OK, "ok", None);
        }
        let message =
            "this is a forward proxy: send requests with an absolute URI (http://host/...)";
        let denial = ctx.refuse_request("", 0, Protocol::Http, Some(method), message.into());
        return refused(&denial);
    };
    let host = authority.host();
    let port = authority.port_u16().unwrap_or(80);
    if uri.scheme_str() != Some("http") {
        let message = "only http:// is forwarded; https:// goes through CONNECT";
        let denial = ctx.refuse_request(host, port, Protocol::Http, Some(method), message.into());
        return refused(&denial);
    }
    if let Err(message) = check_host_header(req.headers(), host, port) {
        let denial = ctx.refuse_request(host, port, Protocol::Http, Some(method), message);
        return refused(&denial);
    }
    match decide::connect(&ctx, host, port, Protocol::Http, Some(method)).await {
        Err(denial) => refused(&denial),
        Ok(upstream) => forward(upstream, req, &authority).await,
    }
}

/// A `Host` header must name the request target: the rules checked the target, and an upstream
/// routing by a different Host would serve a name no rule allowed.
fn check_host_header(headers: &HeaderMap, host: &str, port: u16) -> Result<(), String> {
    let Some(value) = headers.get(header::HOST) else {
        return Ok(());
    };
    let mismatch = || {
        format!(
            "the Host header {:?} does not match the request target {host}:{port}",
            String::from_utf8_lossy(value.as_bytes())
        )
    };
    let given: http::uri::Authority = value
        .to_str()
        .ok()
        .and_then(|v| v.parse().ok())
        .ok_or_else(mismatch)?;
    let same_host = matches!(
        (Host::parse(given.host()), Host::parse(host)),
        (Ok(a), Ok(b)) if a == b
    );
    let same_port = given.port_u16().is_none_or(|p| p == port);
    if same_host && same_port {
        Ok(())
    } else {
        Err(mismatch())
    }
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in listed {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// `name[:port]` in the normal form the rules checked.
fn host_header(authority: &http::uri::Authority) -> Option<HeaderValue> {
    let host = match Host::parse(authority.host()).ok()? {
        Host::Name(name) => name,
        Host::Ip(std::net::IpAddr::V6(ip)) => format!("[{ip}]"),
        Host::Ip(ip) => ip.to_string(),
    };
    let value = match authority.port_u16() {
        Some(port) => format!("{host}:{port}"),
        None => host,
    };
    HeaderValue::from_str(&value).ok()
}

/// Sends `req` over the checked upstream connection and streams the answer back.
async fn forward(
    upstream: Upstream,
    mut req: Request<Incoming>,
    authority: &http::uri::Authority,
) -> Response<ProxyBody> {
    let (stream, record) = upstream.metered();
    let ctx = record.ctx().clone();
    let stats = record.stats().clone();
    let (mut sender, connection) =
        match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await {
            Ok(parts) => parts,
            Err(e) => {
                let message = format!("upstream {authority}: {e}");
                record.finish(Some(message.clone()));
                return text(StatusCode::BAD_GATEWAY, &message, Some(Cause::Connect));
            }
        };
    // The connection reports when it ends: after the response body was read (or cut).
    ctx.spawn(async move {
        let ended = connection.await;
        record.finish(ended.err().map(|e| e.to_string()));
    });
    let origin_form = req
        .uri()
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .parse::<Uri>()
        .unwrap_or_else(|_| Uri::from_static("/"));
    *req.uri_mut() = origin_form;
    strip_hop_by_hop(req.headers_mut());
    // The upstream sees exactly the name that was checked (a Host header that differed was
    // refused before; this also normalises its spelling).
    if let Some(value) = host_header(authority) {
        req.headers_mut().insert(header::HOST, value);
    }
    match sender.send_request(req).await {
        Ok(mut response) => {
            stats
                .status
                .store(response.status().as_u16(), Ordering::Relaxed);
            strip_hop_by_hop(response.headers_mut());
            response.map(|body| body.boxed())
        }
        Err(e) => match stats.limit_hit() {
            Some(kind) => text(
                StatusCode::TOO_MANY_REQUESTS,
                &format!("{} reached", kind.describe()),
                Some(Cause::Limit),
            ),
            None => text(
                StatusCode::BAD_GATEWAY,
                &format!("upstream {authority}: {e}"),
                Some(Cause::Connect),
            ),
        },
    }
}

/// `CONNECT host:port`: decide, connect, answer 200, then splice bytes until either side ends.
async fn tunnel(ctx: Arc<SandboxCtx>, req: Request<Incoming>) -> Response<ProxyBody> {
    let method = Some("CONNECT".to_string());
    let target = req.uri().authority().cloned();
    let Some((authority, port)) = target.and_then(|a| a.port_u16().map(|p| (a, p))) else {
        let message = "CONNECT needs a host:port target";
        let denial = ctx.refuse_request("", 0, Protocol::Connect, method, message.into());
        return refused(&denial);
    };
    let host = authority.host();
    if let Err(message) = check_host_header(req.headers(), host, port) {
        let denial = ctx.refuse_request(host, port, Protocol::Connect, method, message);
        return refused(&denial);
    }
    let upstream = match decide::connect(&ctx, host, port, Protocol::Connect, method).await {
        Ok(upstream) => upstream,
        Err(denial) => return refused(&denial),
    };
    ctx.spawn(async move {
        let relayed = match hyper::upgrade::on(req).await {
            Ok(upgraded) => relay(upgraded, upstream.stream, &upstream.record).await,
            Err(e) => Err(std::io::Error::other(format!(
                "the client left before the tunnel: {e}"
            ))),
        };
        upstream.record.finish(relayed.err().map(|e| e.to_string()));
    });
    Response::new(Empty::new().map_err(|never| match never {}).boxed())
}

/// Relays the upgraded client connection: the socket itself (spliced, with any bytes the client
/// sent early going first) when it is what the server served, a metered copy otherwise.
async fn relay(
    upgraded: hyper::upgrade::Upgraded,
    upstream: tokio::net::TcpStream,
    record: &decide::ConnRecord,
) -> std::io::Result<()> {
    let budget = record.ctx().budget.clone();
    let stats = record.stats().clone();
    match upgraded.downcast::<ClientIo>() {
        Ok(parts) => {
            let (first, client) = parts.io.into_inner().into_parts();
            let mut early: Vec<u8> = first.into_iter().collect();
            early.extend_from_slice(&parts.read_buf);
            tunnel::run(client, upstream, &early, budget, stats).await
        }
        Err(upgraded) => {
            let mut upstream = super::limits::Metered::new(upstream, budget, stats);
            let mut client = TokioIo::new(upgraded);
            tokio::io::copy_bidirectional(&mut client, &mut upstream)
                .await
                .map(|_| ())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(
                HeaderName::from_bytes(k.as_bytes()).expect("name"),
                HeaderValue::from_str(v).expect("value"),
            );
        }
        map
    }

    #[test]
    fn the_host_header_must_name_the_target() {
        let ok = [
            vec![],
            vec![("host", "allowed.test")],
            vec![("host", "ALLOWED.test.")],
            vec![("host", "allowed.test:8080")],
        ];
        for h in ok {
            assert_eq!(
                check_host_header(&headers(&h), "allowed.test", 8080),
                Ok(()),
                "{h:?}"
            );
        }
        for h in [
            vec![("host", "other.test")],
            vec![("host", "allowed.test:9090")],
            vec![("host", "allowed.test/evil")],
        ] {
            assert!(
                check_host_header(&headers(&h), "allowed.test", 8080).is_err(),
                "{h:?}"
            );
        }
    }

    #[test]
    fn hop_by_hop_headers_and_those_connection_lists_are_dropped() {
        let mut h = headers(&[
            ("connection", "keep-alive, x-secret"),
            ("proxy-authorization", "Basic eA=="),
            ("x-secret", "1"),
            ("accept", "*/*"),
            ("keep-alive", "timeout=5"),
        ]);
        strip_hop_by_hop(&mut h);
        let names: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["accept"]);
    }
}
