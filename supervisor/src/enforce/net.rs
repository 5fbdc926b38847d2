//! `connect`: decided on the address the supervisor reads, against `network_rules`.
//!
//! An allowed connect is continued (the socket is the process's), so the kernel reads the address
//! again; what bounds a rewritten one is the container's network namespace: `--network none`
//! has only loopback, which the default policy allows anyway, and a future egress path is a
//! forwarder on loopback that decides again. Unix-domain and other non-IP sockets are not network
//! operations and continue without a decision.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use scriptgate_policy::events::OperationType;

use super::context::{Cx, Outcome};
use super::events::{self, Judgement};
use super::notify::Reply;

/// `connect(fd, addr, addrlen)`.
pub(crate) fn connect(cx: &mut Cx<'_>) -> Outcome {
    let (addr, len) = (cx.arg(1), cx.arg(2) as usize);
    if addr == 0 || len < 2 {
        // The kernel's own EFAULT/EINVAL.
        return Reply::Continue.into();
    }
    let bytes = match cx.mem().and_then(|m| m.read(addr, len.min(128))) {
        Ok(b) => b,
        Err(e) => return e.into(),
    };
    let Some((ip, port)) = parse(&bytes) else {
        return Reply::Continue.into();
    };
    let j = Judgement::of(&cx.policy.decide_network(None, Some(ip), port));
    cx.counters.decided += 1;
    cx.log.push(events::connect(ip, port, &j), cx.sink);
    let target = match ip {
        IpAddr::V4(v4) => format!("{v4}:{port}"),
        IpAddr::V6(v6) => format!("[{v6}]:{port}"),
    };
    cx.gate(
        OperationType::NetConnect,
        || target,
        None,
        j,
        Box::new(|| Reply::Continue),
    )
}

/// The IP address and port of a `sockaddr_in`/`sockaddr_in6`; `None` for other families.
fn parse(bytes: &[u8]) -> Option<(IpAddr, u16)> {
    let family = i32::from(u16::from_ne_bytes([bytes[0], bytes[1]]));
    let port = u16::from_be_bytes([*bytes.get(2)?, *bytes.get(3)?]);
    match family {
        libc::AF_INET => {
            let a: [u8; 4] = bytes.get(4..8)?.try_into().ok()?;
            Some((IpAddr::V4(Ipv4Addr::from(a)), port))
        }
        libc::AF_INET6 => {
            let a: [u8; 16] = bytes.get(8..24)?.try_into().ok()?;
            Some((IpAddr::V6(Ipv6Addr::from(a)), port))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_addresses_are_read_as_the_kernel_lays_them_out() {
        let mut v4 = vec![0u8; 16];
        v4[0..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        v4[2..4].copy_from_slice(&443u16.to_be_bytes());
        v4[4..8].copy_from_slice(&[93, 184, 216, 34]);
        assert_eq!(
            parse(&v4),
            Some(("93.184.216.34".parse().expect("ip"), 443))
        );
        let mut v6 = vec![0u8; 28];
        v6[0..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        v6[2..4].copy_from_slice(&3128u16.to_be_bytes());
        v6[23] = 1;
        assert_eq!(parse(&v6), Some(("::1".parse().expect("ip"), 3128)));
        let mut unix = vec![0u8; 16];
        unix[0..2].copy_from_slice(&(libc::AF_UNIX as u16).to_ne_bytes());
        assert_eq!(parse(&unix), None);
        assert_eq!(parse(&v4[..6]), None, "too short for its family");
    }
}
