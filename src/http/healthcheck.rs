//! The client side of `/readyz` for `scriptgate healthcheck`: one `GET` over plain HTTP/1.0 (no
//! client library for one request; the images have no curl).

use std::io::{Read as _, Write as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, ToSocketAddrs as _};
use std::time::Duration;

/// Why the endpoint could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("--url: only http:// URLs")]
    NotHttp,
    #[error("address {authority}: {source}")]
    Resolve {
        authority: String,
        source: std::io::Error,
    },
    #[error("address {0}: nothing resolved")]
    Unresolved(String),
    #[error("connect to {authority}: {source}")]
    Connect {
        authority: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// What the endpoint answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The status line (`HTTP/1.1 200 OK`).
    pub status_line: String,
    pub body: String,
}

impl Answer {
    pub fn ok(&self) -> bool {
        self.status_line.split_whitespace().nth(1) == Some("200")
    }
}

/// `(authority, path)` of `url`, or of `/readyz` at `listen` (a wildcard address is reached
/// through loopback).
pub fn target(url: Option<&str>, listen: SocketAddr) -> Result<(String, String), ProbeError> {
    let Some(url) = url else {
        let mut addr = listen;
        if addr.ip().is_unspecified() {
            addr.set_ip(match addr.ip() {
                IpAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
                IpAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
            });
        }
        return Ok((addr.to_string(), "/readyz".to_string()));
    };
    let rest = url.strip_prefix("http://").ok_or(ProbeError::NotHttp)?;
    Ok(match rest.split_once('/') {
        Some((authority, path)) => (authority.to_string(), format!("/{path}")),
        None => (rest.to_string(), "/".to_string()),
    })
}

/// `GET path` at `authority`, each step bounded by `limit`.
pub fn get(authority: &str, path: &str, limit: Duration) -> Result<Answer, ProbeError> {
    let addr = authority
        .to_socket_addrs()
        .map_err(|source| ProbeError::Resolve {
            authority: authority.to_string(),
            source,
        })?
        .next()
        .ok_or_else(|| ProbeError::Unresolved(authority.to_string()))?;
    let mut stream =
        TcpStream::connect_timeout(&addr, limit).map_err(|source| ProbeError::Connect {
            authority: authority.to_string(),
            source,
        })?;
    stream.set_read_timeout(Some(limit))?;
    stream.set_write_timeout(Some(limit))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {authority}\r\n\r\n")?;
    let mut response = Vec::new();
    stream.take(1 << 20).read_to_end(&mut response)?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    Ok(Answer {
        status_line: head.lines().next().unwrap_or_default().to_string(),
        body: body.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_is_the_url_or_readyz_through_loopback() {
        let listen: SocketAddr = "0.0.0.0:8080".parse().expect("addr");
        assert_eq!(
            target(None, listen).expect("target"),
            ("127.0.0.1:8080".to_string(), "/readyz".to_string())
        );
        assert_eq!(
            target(Some("http://h:1/x/y"), listen).expect("target"),
            ("h:1".to_string(), "/x/y".to_string())
        );
        assert_eq!(target(Some("http://h:1"), listen).expect("target").1, "/");
        assert!(matches!(
            target(Some("https://h/"), listen),
            Err(ProbeError::NotHttp)
        ));
    }
}
