//! The egress proxy end to end without Docker: the proxy on a temporary socket directory, the
//! supervisor's forwarder in front of it on loopback (as it listens inside a container), local
//! upstreams on 127.0.0.1 (reachable only because the tests' settings narrow the denied ranges
//! explicitly), and real clients: curl, Python's urllib, requests and http.client, raw sockets.

mod fixture;
mod upstream;

use std::sync::Arc;
use std::time::{Duration, Instant};

use scriptgate::sandbox::egress::{
    ApprovalAnswer, Cause, Decision, Ended, LimitKind, NetLimits, NetworkEvent, NetworkRuleSpec,
    Protocol, RuleDecision, RuleSet,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use fixture::{Env, Operator, Setup, connects, connects_to, queries, run_python, settled};

const HELLO: &str = "hello from upstream";

#[tokio::test]
async fn curl_reaches_an_allowed_domain_by_forwarding_and_through_a_connect_tunnel() {
    let env = Env::start(Setup::default()).await;
    let forwarded = env.curl(&[], &env.url("allowed.test", "/hello")).await;
    assert_eq!(
        (forwarded.status, forwarded.body.as_str()),
        (200, HELLO),
        "{forwarded:?}"
    );
    // -p: a CONNECT tunnel, as for https:// (the proxy never looks inside).
    let tunnelled = env.curl(&["-p"], &env.url("allowed.test", "/hello")).await;
    assert_eq!(
        (tunnelled.status, tunnelled.body.as_str()),
        (200, HELLO),
        "{tunnelled:?}"
    );
    // The upstream got the name the client asked for in its Host header.
    let host = env.curl(&[], &env.url("ALLOWED.test.", "/host")).await;
    assert_eq!(
        host.body,
        format!("allowed.test:{}", env.up.addr.port()),
        "{host:?}"
    );

    let report = settled(&env.egress, |r| connects(r).len() >= 3).await;
    let dns = queries(&report);
    assert!(!dns.is_empty(), "{report:#?}");
    assert_eq!(dns[0].domain, "allowed.test");
    assert_eq!(
        dns[0].answers,
        ["127.0.0.1".parse::<std::net::IpAddr>().expect("ip")]
    );
    assert_eq!(dns[0].decision, Decision::Allow);
    let c = connects_to(&report, "allowed.test");
    assert_eq!(c.len(), 3, "{report:#?}");
    for event in &c {
        assert_eq!(event.decision, Decision::Allow);
        assert_eq!(event.rule.as_deref(), Some("allowed_domains"));
        assert_eq!(event.remote, Some("127.0.0.1".parse().expect("ip")));
        assert_eq!(event.port, env.up.addr.port());
        assert!(
            event.bytes_sent > 0 && event.bytes_received > 0,
            "{event:?}"
        );
        assert_eq!(event.ended, Some(Ended::Closed));
    }
    assert_eq!(c[0].protocol, Protocol::Http);
    assert_eq!(c[0].status, Some(200));
    assert_eq!(c[1].protocol, Protocol::Connect);
}

#[tokio::test]
async fn python_clients_reach_an_allowed_domain_through_the_environment_variables() {
    let env = Env::start(Setup::default()).await;
    let proxy_env = [
        ("HTTP_PROXY", env.proxy_url()),
        ("HTTPS_PROXY", env.proxy_url()),
    ];
    let url = env.url("allowed.test", "/hello");
    let urllib = run_python(
        &format!("import urllib.request; print(urllib.request.urlopen('{url}').read().decode())"),
        &proxy_env,
    )
    .await;
    assert!(urllib.status.success(), "{urllib:?}");
    assert_eq!(String::from_utf8_lossy(&urllib.stdout).trim(), HELLO);

    // A CONNECT tunnel from Python, the way pip and requests reach https:// through a proxy.
    let (host, port) = (env.forward.ip(), env.forward.port());
    let tunnel = run_python(
        &format!(
            "import http.client\n\
             c = http.client.HTTPConnection('{host}', {port}, timeout=20)\n\
             c.set_tunnel('allowed.test', {})\n\
             c.request('GET', '/hello')\n\
             r = c.getresponse()\n\
             print(r.status, r.read().decode())",
            env.up.addr.port()
        ),
        &[],
    )
    .await;
    assert!(tunnel.status.success(), "{tunnel:?}");
    assert_eq!(
        String::from_utf8_lossy(&tunnel.stdout).trim(),
        format!("200 {HELLO}")
    );

    let has_requests = run_python("import requests", &[]).await.status.success();
    if has_requests {
        let denied = env.url("denied.test", "/hello");
        let requests = run_python(
            &format!(
                "import requests\n\
                 print(requests.get('{url}', timeout=20).text)\n\
                 print(requests.get('{denied}', timeout=20).status_code)"
            ),
            &proxy_env,
        )
        .await;
        assert!(requests.status.success(), "{requests:?}");
        assert_eq!(
            String::from_utf8_lossy(&requests.stdout).trim(),
            format!("{HELLO}\n403")
        );
    } else {
        eprintln!(
            "egress_proxy: SKIPPED the requests case: requests is not installed for {}",
            fixture::python().display()
        );
    }
    let report = settled(&env.egress, |r| connects_to(r, "allowed.test").len() >= 2).await;
    let protocols: Vec<Protocol> = connects_to(&report, "allowed.test")
        .iter()
        .map(|c| c.protocol)
        .collect();
    assert!(protocols.contains(&Protocol::Http) && protocols.contains(&Protocol::Connect));
}

#[tokio::test]
async fn a_denied_domain_gets_a_403_and_a_blocked_event_without_being_looked_up() {
    let env = Env::start(Setup::default()).await;
    let denied = env.curl(&[], &env.url("denied.test", "/hello")).await;
    assert_eq!(denied.status, 403, "{denied:?}");
    assert!(
        denied.body.contains("no rule allows denied.test"),
        "{denied:?}"
    );
    let tunnel = env.curl(&["-p"], &env.url("denied.test", "/hello")).await;
    assert_ne!(tunnel.code, Some(0), "{tunnel:?}");
    assert!(tunnel.stderr.contains("403"), "{tunnel:?}");

    let report = env.egress.report();
    let blocked = connects_to(&report, "denied.test");
    assert_eq!(blocked.len(), 2);
    for event in blocked {
        assert_eq!(event.decision, Decision::Deny);
        assert_eq!(event.cause, Some(Cause::NoRule));
        assert_eq!(event.rule, None);
        assert_eq!(event.remote, None);
        assert!(NetworkEvent::NetConnect(event.clone()).needs_audit());
    }
    assert!(
        queries(&report).is_empty(),
        "no lookup of an unlisted name: {report:#?}"
    );
    assert_eq!(report.network_summary.blocked, 2);
    assert_eq!(report.network_summary.connections, 0);
    assert_eq!(env.up.seen.get().0, 0, "the upstream saw nothing");
}

#[tokio::test]
async fn a_wildcard_rule_allows_names_below_a_domain_and_blocked_domains_come_first() {
    let env = Env::start(Setup::default()).await;
    let api = env.curl(&[], &env.url("api.wild.test", "/hello")).await;
    assert_eq!(api.status, 200, "{api:?}");
    let apex = env.curl(&[], &env.url("wild.test", "/hello")).await;
    assert_eq!(
        apex.status, 403,
        "the wildcard does not cover the apex: {apex:?}"
    );
    let secret = env.curl(&[], &env.url("secret.wild.test", "/hello")).await;
    assert_eq!(secret.status, 403, "{secret:?}");
    assert!(secret.body.contains("rule `blocked_domains`"), "{secret:?}");
    let report = settled(&env.egress, |r| connects(r).len() >= 3).await;
    let secret_event = connects_to(&report, "secret.wild.test")[0];
    assert_eq!(secret_event.cause, Some(Cause::Rule));
    assert_eq!(secret_event.rule.as_deref(), Some("blocked_domains"));
}

#[tokio::test]
async fn a_port_no_rule_allows_is_refused_before_any_lookup() {
    let env = Env::start(Setup::default()).await;
    let url = format!("http://allowed.test:{}/hello", env.other.addr.port());
    let refused = env.curl(&[], &url).await;
    assert_eq!(refused.status, 403, "{refused:?}");
    let report = env.egress.report();
    assert!(queries(&report).is_empty());
    assert_eq!(
        connects_to(&report, "allowed.test")[0].port,
        env.other.addr.port()
    );
    assert_eq!(env.other.seen.get().0, 0);
}

#[tokio::test]
async fn an_allowed_name_that_resolves_into_a_denied_range_is_refused() {
    let env = Env::start(Setup::default()).await;
    let cases = [
        ("private.test", "10.0.0.1", "private"),
        ("metadata.test", "169.254.169.254", "cloud metadata"),
        ("mapped.test", "10.1.2.3", "private"),
        ("nat64.test", "64:ff9b::7f00:1", "NAT64"),
    ];
    for (name, address, range) in cases {
        let answer = env.curl(&[], &env.url(name, "/")).await;
        assert_eq!(answer.status, 403, "{name}: {answer:?}");
        assert!(
            answer.body.contains(address) && answer.body.contains(range),
            "{name}: {answer:?}"
        );
        let tunnel = env.curl(&["-p"], &env.url(name, "/")).await;
        assert!(tunnel.stderr.contains("403"), "{name}: {tunnel:?}");
    }
    let report = env.egress.report();
    for (name, _, _) in cases {
        let dns: Vec<_> = queries(&report)
            .into_iter()
            .filter(|q| q.domain == name)
            .collect();
        assert_eq!(
            dns.len(),
            2,
            "{name} was looked up for each attempt (nothing cached)"
        );
        assert_eq!(dns[0].decision, Decision::Deny);
        assert_eq!(dns[0].answers.len(), 1);
        for event in connects_to(&report, name) {
            assert_eq!(
                (event.decision, event.cause, event.remote),
                (Decision::Deny, Some(Cause::DeniedRange), None)
            );
            assert_eq!(
                event.rule.as_deref(),
                None,
                "no rule decided, the range did"
            );
        }
    }
}

#[tokio::test]
async fn loopback_is_refused_without_the_explicit_deployment_setting() {
    let env = Env::start(Setup {
        allow_loopback: false,
        ..Setup::default()
    })
    .await;
    let refused = env.curl(&[], &env.url("allowed.test", "/hello")).await;
    assert_eq!(refused.status, 403, "{refused:?}");
    assert!(refused.body.contains("loopback"), "{refused:?}");
    // Nor by address literal, whatever the rules say.
    let literal = env
        .curl(
            &[],
            &format!("http://127.0.0.1:{}/hello", env.up.addr.port()),
        )
        .await;
    assert_eq!(literal.status, 403, "{literal:?}");
    assert_eq!(env.up.seen.get().0, 0);
}

#[tokio::test]
async fn a_byte_limit_cuts_a_large_download_with_a_typed_event() {
    let limit = 1 << 20;
    let env = Env::start(Setup {
        limits: NetLimits {
            session_bytes: limit,
            ..Setup::default().limits
        },
        ..Setup::default()
    })
    .await;
    let big = env
        .curl(&[], &env.url("allowed.test", "/bytes/8388608"))
        .await;
    assert_ne!(big.code, Some(0), "the download was cut: {:?}", big.stderr);
    assert!(big.body.len() < 8 << 20);
    let report = settled(&env.egress, |r| !connects(r).is_empty()).await;
    let cut = connects_to(&report, "allowed.test")[0];
    assert_eq!(cut.ended, Some(Ended::Limit), "{cut:?}");
    assert_eq!(cut.limit, Some(LimitKind::SessionBytes));
    assert_eq!(
        cut.bytes_sent + cut.bytes_received,
        limit,
        "exactly the limit moved"
    );
    assert!(report.network_operations.iter().any(|e| matches!(
        e,
        NetworkEvent::NetLimit(l) if l.limit == LimitKind::SessionBytes && l.domain == "allowed.test"
    )));
    // The next request is refused at once, and says why.
    let after = env.curl(&[], &env.url("allowed.test", "/hello")).await;
    assert_eq!(after.status, 429, "{after:?}");
    assert!(after.body.contains("max_network_mb"), "{after:?}");
}

#[tokio::test]
async fn a_command_limit_restarts_with_each_command() {
    let env = Env::start(Setup::default()).await;
    env.egress.begin_command(Some(100_000));
    let cut = env
        .curl(&["-p"], &env.url("allowed.test", "/bytes/1000000"))
        .await;
    assert_ne!(cut.code, Some(0), "{cut:?}");
    let report = settled(&env.egress, |r| !connects(r).is_empty()).await;
    assert_eq!(connects(&report)[0].limit, Some(LimitKind::CommandBytes));
    env.egress.begin_command(None);
    let next = env.curl(&[], &env.url("allowed.test", "/hello")).await;
    assert_eq!(next.status, 200, "a new command has a new budget: {next:?}");
    settled(&env.egress, |_| {
        !connects(&env.egress.command_report()).is_empty()
    })
    .await;
    let this_command = env.egress.command_report();
    assert_eq!(connects(&this_command).len(), 1, "{this_command:#?}");
    assert_eq!(this_command.network_summary.connections, 1);
}

#[tokio::test]
async fn the_summary_counts_what_the_upstream_saw() {
    let env = Env::start(Setup::default()).await;
    let mut live = env.egress.subscribe();
    for path in ["/hello", "/bytes/300000", "/host"] {
        assert_eq!(
            env.curl(&[], &env.url("allowed.test", path)).await.status,
            200
        );
    }
    let post = env
        .curl(
            &["--data-binary", "a body of some length"],
            &env.url("api.wild.test", "/echo"),
        )
        .await;
    assert_eq!(post.body, "a body of some length");
    let tunnel = env
        .curl(&["-p"], &env.url("allowed.test", "/bytes/5000"))
        .await;
    assert_eq!(tunnel.body.len(), 5000);
    assert_eq!(
        env.curl(&[], &env.url("denied.test", "/")).await.status,
        403
    );

    let (connections, requests, bytes_in, bytes_out) = env.up.seen.get();
    let report = env.egress.close().await;
    let summary = &report.network_summary;
    assert_eq!(summary.connections, connections, "{report:#?}");
    assert_eq!(connections, 5);
    assert_eq!(requests, 5);
    assert_eq!(
        summary.bytes_sent, bytes_in,
        "what the proxy sent, the upstream received"
    );
    assert_eq!(summary.bytes_received, bytes_out, "and the other way round");
    assert_eq!(summary.blocked, 1);
    assert_eq!(summary.dns_queries, 5);
    assert_eq!(summary.unique_destinations, 2);
    // The live stream carried the same events, in order.
    let mut streamed = Vec::new();
    while let Ok(event) = live.try_recv() {
        streamed.push(event);
    }
    assert_eq!(streamed, report.network_operations);
}

#[tokio::test]
async fn socks5_with_remote_resolution_is_checked_like_the_rest() {
    let env = Env::start(Setup::default()).await;
    let socks = format!("socks5h://{}", env.forward);
    let ok = fixture::curl(&[
        "-x".into(),
        socks.clone(),
        env.url("allowed.test", "/hello"),
    ])
    .await;
    assert_eq!((ok.status, ok.body.as_str()), (200, HELLO), "{ok:?}");
    let denied = fixture::curl(&["-x".into(), socks.clone(), env.url("denied.test", "/")]).await;
    assert_ne!(denied.code, Some(0), "{denied:?}");
    // An address literal (what socks5:// without the h sends) is matched by CIDR rules only.
    let literal = fixture::curl(&[
        "-x".into(),
        socks,
        format!("http://127.0.0.1:{}/hello", env.up.addr.port()),
    ])
    .await;
    assert_ne!(literal.code, Some(0), "{literal:?}");
    let report = settled(&env.egress, |r| connects(r).len() >= 3).await;
    let all = connects(&report);
    assert!(
        all.iter().all(|c| c.protocol == Protocol::Socks5),
        "{report:#?}"
    );
    assert_eq!(
        connects_to(&report, "allowed.test")[0].decision,
        Decision::Allow
    );
    assert_eq!(
        connects_to(&report, "denied.test")[0].decision,
        Decision::Deny
    );
    assert_eq!(
        connects_to(&report, "127.0.0.1")[0].cause,
        Some(Cause::NoRule)
    );
}

/// Sends `request` on a fresh connection to the forwarder and returns what came back first.
async fn raw(env: &Env, request: &str) -> (TcpStream, String) {
    let mut s = TcpStream::connect(env.forward).await.expect("connect");
    s.write_all(request.as_bytes()).await.expect("send");
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(20), s.read(&mut buf))
        .await
        .expect("an answer")
        .expect("read");
    (s, String::from_utf8_lossy(&buf[..n]).into_owned())
}

#[tokio::test]
async fn raw_connect_tunnels_and_host_checks() {
    let env = Env::start(Setup::default()).await;
    let port = env.up.addr.port();
    let (mut tunnel, answer) = raw(
        &env,
        &format!("CONNECT allowed.test:{port} HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n"),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    tunnel
        .write_all(b"GET /hello HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
        .await
        .expect("through the tunnel");
    let mut inside = String::new();
    tunnel.read_to_string(&mut inside).await.expect("read");
    assert!(inside.ends_with(HELLO), "{inside}");
    // The tunnel stays open while the client keeps its side; it is recorded once both ended.
    drop(tunnel);

    // A Host header naming another host than the target is refused (400), not forwarded.
    let (_, smuggled) = raw(
        &env,
        &format!("GET http://allowed.test:{port}/host HTTP/1.1\r\nHost: denied.test\r\n\r\n"),
    )
    .await;
    assert!(smuggled.starts_with("HTTP/1.1 400"), "{smuggled}");
    // Origin-form requests are not proxied.
    let (_, origin) = raw(&env, "GET /hello HTTP/1.1\r\nHost: allowed.test\r\n\r\n").await;
    assert!(origin.starts_with("HTTP/1.1 400"), "{origin}");
    // A CONNECT without a port says so.
    let (_, portless) = raw(&env, "CONNECT allowed.test HTTP/1.1\r\n\r\n").await;
    assert!(portless.starts_with("HTTP/1.1 400"), "{portless}");
    let report = settled(&env.egress, |r| connects(r).len() >= 4).await;
    assert_eq!(
        connects_to(&report, "allowed.test")[0].ended,
        Some(Ended::Closed)
    );
    let bad: Vec<_> = connects(&report)
        .into_iter()
        .filter(|c| c.cause == Some(Cause::BadRequest))
        .collect();
    assert_eq!(bad.len(), 3, "{report:#?}");
}

fn approve_policy() -> Arc<RuleSet> {
    Arc::new(
        RuleSet::compile(&[NetworkRuleSpec {
            name: "ask-first".into(),
            domains: Some(vec!["approve.test".into()]),
            cidrs: None,
            ports: None,
            decision: RuleDecision::Approve,
            message: Some("{domain} needs an operator".into()),
        }])
        .expect("policy"),
    )
}

#[tokio::test]
async fn approve_rules_hold_the_connection_until_an_operator_decides() {
    let yes = Operator::new(Some(ApprovalAnswer::Approved {
        by: Some("alice".into()),
    }));
    let env = Env::start(Setup {
        policy: Some(approve_policy()),
        approver: Some(yes.clone()),
        ..Setup::default()
    })
    .await;
    let approved = env.curl(&[], &env.url("approve.test", "/hello")).await;
    assert_eq!(approved.status, 200, "{approved:?}");
    let asked = yes.asked.lock().expect("lock").clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].domain, "approve.test");
    assert_eq!(
        asked[0].message.as_deref(),
        Some("approve.test needs an operator")
    );
    assert_eq!(
        asked[0].addresses,
        ["127.0.0.1".parse::<std::net::IpAddr>().expect("ip")]
    );
    let report = settled(&env.egress, |r| !connects(r).is_empty()).await;
    let event = connects(&report)[0];
    let approval = event.approval.as_ref().expect("approval recorded");
    assert!(approval.approved);
    assert_eq!(approval.by.as_deref(), Some("alice"));
    assert!(NetworkEvent::NetConnect(event.clone()).needs_audit());

    let no = Operator::new(Some(ApprovalAnswer::Denied {
        by: Some("bob".into()),
        reason: None,
    }));
    let env = Env::start(Setup {
        policy: Some(approve_policy()),
        approver: Some(no),
        ..Setup::default()
    })
    .await;
    let refused = env.curl(&[], &env.url("approve.test", "/hello")).await;
    assert_eq!(refused.status, 403, "{refused:?}");
    assert_eq!(
        connects(&env.egress.report())[0].cause,
        Some(Cause::Operator)
    );

    let env = Env::start(Setup {
        policy: Some(approve_policy()),
        ..Setup::default()
    })
    .await;
    let nobody = env.curl(&[], &env.url("approve.test", "/hello")).await;
    assert_eq!(nobody.status, 403, "{nobody:?}");
    assert_eq!(
        connects(&env.egress.report())[0].cause,
        Some(Cause::NoApprover)
    );
}

#[tokio::test]
async fn an_approval_nobody_gives_times_out_as_a_denial() {
    let silent = Operator::new(None);
    let env = Env::start(Setup {
        policy: Some(approve_policy()),
        approver: Some(silent),
        approval_timeout_secs: 1,
        ..Setup::default()
    })
    .await;
    let answer = env.curl(&["-p"], &env.url("approve.test", "/hello")).await;
    assert!(answer.stderr.contains("403"), "{answer:?}");
    let event = connects(&env.egress.report())[0].clone();
    assert_eq!(event.cause, Some(Cause::ApprovalTimeout));
    assert_eq!(event.approval.map(|a| a.approved), Some(false));
}

#[tokio::test]
async fn connection_rate_and_concurrency_limits_answer_429_with_a_typed_event() {
    let env = Env::start(Setup {
        limits: NetLimits {
            connections_per_second: 2,
            ..Setup::default().limits
        },
        ..Setup::default()
    })
    .await;
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(
            env.curl(&[], &env.url("allowed.test", "/hello"))
                .await
                .status,
        );
    }
    assert!(statuses.contains(&429), "{statuses:?}");
    let report = env.egress.report();
    assert!(report.network_operations.iter().any(|e| matches!(
        e,
        NetworkEvent::NetLimit(l) if l.limit == LimitKind::ConnectionsPerSecond
    )));

    let env = Env::start(Setup {
        limits: NetLimits {
            max_concurrent: 1,
            ..Setup::default().limits
        },
        ..Setup::default()
    })
    .await;
    let port = env.up.addr.port();
    let (_held, first) = raw(
        &env,
        &format!("CONNECT allowed.test:{port} HTTP/1.1\r\n\r\n"),
    )
    .await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    let second = env.curl(&[], &env.url("allowed.test", "/hello")).await;
    assert_eq!(second.status, 429, "{second:?}");
    assert!(second.body.contains("concurrent"), "{second:?}");
}

#[tokio::test]
async fn a_stopped_proxy_fails_health_checks_and_clients_at_once() {
    let env = Env::start(Setup::default()).await;
    env.egress.check().await.expect("a live proxy passes");
    let socket = env.egress.socket_path().to_path_buf();
    tokio::task::spawn_blocking(move || {
        scriptgate_supervisor::forward::probe(&socket, Duration::from_secs(5))
    })
    .await
    .expect("join")
    .expect("the in-container probe passes too");
    let dir = env.egress.mount_source().to_path_buf();
    assert!(env.egress.bind().ends_with(":/run/egress:ro"));
    env.proxy.shutdown().await;
    assert!(!dir.exists(), "shutdown removes the sockets");
    let started = Instant::now();
    let err = env.egress.check().await.expect_err("a stopped proxy fails");
    assert!(err.to_string().contains("unavailable"), "{err}");
    let answer = env.curl(&[], &env.url("allowed.test", "/hello")).await;
    assert_eq!(answer.status, 502, "{answer:?}");
    assert!(
        answer.body.contains("egress proxy is unavailable"),
        "{answer:?}"
    );
    // A bound on a hang, not a timing assertion: failing must not wait for any timeout.
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        env.proxy
            .open(scriptgate::sandbox::egress::SandboxOptions {
                id: "late".into(),
                policy: Arc::new(RuleSet::default()),
                limits: Setup::default().limits,
                approver: None,
            })
            .await
            .is_err()
    );
}

#[tokio::test]
async fn closing_a_sandbox_removes_its_socket_and_keeps_its_final_list() {
    let env = Env::start(Setup::default()).await;
    assert_eq!(
        env.curl(&[], &env.url("allowed.test", "/hello"))
            .await
            .status,
        200
    );
    let socket = env.egress.socket_path().to_path_buf();
    let report = env.egress.close().await;
    assert!(!socket.exists());
    assert_eq!(report.network_summary.connections, 1, "{report:#?}");
    let json = serde_json::to_value(&report).expect("json");
    assert_eq!(json["network_operations"][1]["type"], "net_connect");
    assert_eq!(json["network_operations"][1]["sandbox"], "sandbox-1");
}

#[tokio::test]
async fn each_request_on_a_keep_alive_connection_is_decided_on_its_own() {
    let env = Env::start(Setup::default()).await;
    // One curl, three URLs: curl keeps the one proxy connection for all of them.
    let answer = env
        .curl(
            &[
                "-v",
                &env.url("allowed.test", "/hello"),
                &env.url("denied.test", "/hello"),
            ],
            &env.url("api.wild.test", "/hello"),
        )
        .await;
    assert!(
        answer.stderr.contains("Re-using existing connection"),
        "{answer:?}"
    );
    assert!(answer.body.starts_with(HELLO), "{answer:?}");
    assert!(
        answer.body.contains("no rule allows denied.test"),
        "{answer:?}"
    );
    let report = settled(&env.egress, |r| connects(r).len() >= 3).await;
    let decisions: Vec<(&str, Decision)> = connects(&report)
        .iter()
        .map(|c| (c.domain.as_str(), c.decision))
        .collect();
    assert!(
        decisions.contains(&("allowed.test", Decision::Allow)),
        "{decisions:?}"
    );
    assert!(
        decisions.contains(&("denied.test", Decision::Deny)),
        "{decisions:?}"
    );
    assert!(
        decisions.contains(&("api.wild.test", Decision::Allow)),
        "{decisions:?}"
    );
    assert_eq!(
        queries(&report).len(),
        2,
        "each allowed request was looked up anew"
    );
}

#[tokio::test]
async fn a_client_that_leaves_mid_download_frees_its_upstream_connection() {
    let env = Env::start(Setup {
        limits: NetLimits {
            max_concurrent: 1,
            ..Setup::default().limits
        },
        ..Setup::default()
    })
    .await;
    let (mut client, first) = raw(
        &env,
        &format!(
            "GET {} HTTP/1.1\r\nHost: allowed.test:{}\r\n\r\n",
            env.url("allowed.test", "/bytes/104857600"),
            env.up.addr.port()
        ),
    )
    .await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    let mut some = vec![0u8; 256 * 1024];
    client
        .read_exact(&mut some)
        .await
        .expect("part of the body");
    drop(client);
    let report = settled(&env.egress, |r| !connects(r).is_empty()).await;
    let event = connects(&report)[0];
    assert!(event.bytes_received < 100 << 20, "{event:?}");
    assert_ne!(event.ended, Some(Ended::Cancelled), "{event:?}");
    // Its concurrency slot is free again.
    let next = env.curl(&[], &env.url("allowed.test", "/hello")).await;
    assert_eq!(next.status, 200, "{next:?}");
}
