//! The SOCKS5 front end (RFC 1928, `CONNECT` only, no authentication): a client that sends a
//! name (`socks5h://`) has it resolved and checked by the proxy; one that resolved the name
//! itself sends an address literal, which only CIDR rules can allow.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::UnixStream;

use super::decide::{self, SandboxCtx, Upstream};
use super::events::{Cause, Protocol};
use super::tunnel;

const VERSION: u8 = 5;
const NO_AUTH: u8 = 0;
const NO_ACCEPTABLE_METHOD: u8 = 0xFF;
const CMD_CONNECT: u8 = 1;

/// Reply codes.
const SUCCEEDED: u8 = 0;
const GENERAL_FAILURE: u8 = 1;
const NOT_ALLOWED: u8 = 2;
const HOST_UNREACHABLE: u8 = 4;
const CONNECTION_REFUSED: u8 = 5;
const COMMAND_NOT_SUPPORTED: u8 = 7;
const ADDRESS_TYPE_NOT_SUPPORTED: u8 = 8;

/// What the client asked to reach.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    host: String,
    port: u16,
}

/// A handshake that cannot go on; the reply code to send, if any.
#[derive(Debug)]
struct Refusal(Option<u8>);

impl From<io::Error> for Refusal {
    fn from(_: io::Error) -> Self {
        Refusal(None)
    }
}

/// Serves one SOCKS5 client whose version byte was already read.
pub(crate) async fn serve(ctx: Arc<SandboxCtx>, mut stream: UnixStream) {
    let handshake = ctx.proxy.compiled.timeouts.handshake;
    let target = match tokio::time::timeout(handshake, negotiate(&mut stream)).await {
        Ok(Ok(target)) => target,
        Ok(Err(Refusal(Some(code)))) => {
            let _ = reply(&mut stream, code).await;
            return;
        }
        Ok(Err(Refusal(None))) | Err(_) => return,
    };
    let upstream = decide::connect(&ctx, &target.host, target.port, Protocol::Socks5, None).await;
    let Upstream {
        stream: remote,
        record,
    } = match upstream {
        Ok(upstream) => upstream,
        Err(denial) => {
            let code = match denial.cause {
                Cause::Resolve => HOST_UNREACHABLE,
                Cause::Connect => CONNECTION_REFUSED,
                Cause::BadRequest => GENERAL_FAILURE,
                _ => NOT_ALLOWED,
            };
            let _ = reply(&mut stream, code).await;
            return;
        }
    };
    if let Err(e) = reply(&mut stream, SUCCEEDED).await {
        record.finish(Some(format!("the client left before the tunnel: {e}")));
        return;
    }
    let budget = record.ctx().budget.clone();
    let relayed = tunnel::run(stream, remote, &[], budget, record.stats().clone()).await;
    record.finish(relayed.err().map(|e| e.to_string()));
}

/// Method selection and the request, up to the target.
async fn negotiate<S>(stream: &mut S) -> Result<Target, Refusal>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let count = stream.read_u8().await?;
    let mut methods = vec![0u8; usize::from(count)];
    stream.read_exact(&mut methods).await?;
    if !methods.contains(&NO_AUTH) {
        stream.write_all(&[VERSION, NO_ACCEPTABLE_METHOD]).await?;
        return Err(Refusal(None));
    }
    stream.write_all(&[VERSION, NO_AUTH]).await?;
    let mut head = [0u8; 4];
    stream.read_exact(&mut head).await?;
    let [version, command, _reserved, address_type] = head;
    if version != VERSION {
        return Err(Refusal(None));
    }
    if command != CMD_CONNECT {
        return Err(Refusal(Some(COMMAND_NOT_SUPPORTED)));
    }
    let host = match address_type {
        1 => {
            let mut octets = [0u8; 4];
            stream.read_exact(&mut octets).await?;
            Ipv4Addr::from(octets).to_string()
        }
        3 => {
            let len = stream.read_u8().await?;
            let mut name = vec![0u8; usize::from(len)];
            stream.read_exact(&mut name).await?;
            String::from_utf8(name).map_err(|_| Refusal(Some(GENERAL_FAILURE)))?
        }
        4 => {
            let mut octets = [0u8; 16];
            stream.read_exact(&mut octets).await?;
            format!("[{}]", Ipv6Addr::from(octets))
        }
        _ => return Err(Refusal(Some(ADDRESS_TYPE_NOT_SUPPORTED))),
    };
    let port = stream.read_u16().await?;
    Ok(Target { host, port })
}

/// A reply with an unspecified bound address (the sandbox has no use for it).
async fn reply<S: AsyncWrite + Unpin>(stream: &mut S, code: u8) -> io::Result<()> {
    stream
        .write_all(&[VERSION, code, 0, 1, 0, 0, 0, 0, 0, 0])
        .await?;
    stream.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn negotiated(client_bytes: &[u8]) -> (Result<Target, Refusal>, Vec<u8>) {
        let (mut client, mut server) = tokio::io::duplex(1024);
        client.write_all(client_bytes).await.expect("write");
        let result = negotiate(&mut server).await;
        drop(server);
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.expect("read");
        (result, answer)
    }

    #[tokio::test]
    async fn a_name_request_is_read_as_a_name() {
        let mut bytes = vec![1, NO_AUTH, VERSION, CMD_CONNECT, 0, 3, 12];
        bytes.extend_from_slice(b"allowed.test");
        bytes.extend_from_slice(&8080u16.to_be_bytes());
        let (result, answer) = negotiated(&bytes).await;
        assert_eq!(
            result.expect("target"),
            Target {
                host: "allowed.test".into(),
                port: 8080
            }
        );
        assert_eq!(answer, [VERSION, NO_AUTH]);
    }

    #[tokio::test]
    async fn address_requests_keep_their_literal() {
        let mut bytes = vec![1, NO_AUTH, VERSION, CMD_CONNECT, 0, 4];
        bytes.extend_from_slice(&"::1".parse::<Ipv6Addr>().expect("ip").octets());
        bytes.extend_from_slice(&443u16.to_be_bytes());
        let (result, _) = negotiated(&bytes).await;
        assert_eq!(result.expect("target").host, "[::1]");
    }

    #[tokio::test]
    async fn clients_without_the_no_auth_method_or_with_other_commands_are_refused() {
        let (result, answer) = negotiated(&[1, 2]).await;
        assert!(result.is_err());
        assert_eq!(answer, [VERSION, NO_ACCEPTABLE_METHOD]);
        let (result, _) = negotiated(&[1, NO_AUTH, VERSION, 2, 0, 1]).await;
        assert!(matches!(result, Err(Refusal(Some(COMMAND_NOT_SUPPORTED)))));
        let (result, _) = negotiated(&[1, NO_AUTH, VERSION, CMD_CONNECT, 0, 9]).await;
        assert!(matches!(
            result,
            Err(Refusal(Some(ADDRESS_TYPE_NOT_SUPPORTED)))
        ));
    }
}
