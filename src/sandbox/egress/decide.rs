//! The decision for one upstream connection, shared by the HTTP, CONNECT and SOCKS front ends:
//! limits, the name check before any lookup, the lookup, the range and rule check of every
//! address, approval, and the connection to exactly a checked address; plus the record that
//! turns into the connection's `net_connect` event however it ends.

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::events::{
    ApprovalRecord, Cause, Decision, DnsQuery, Ended, EventMeta, NetConnect, NetLimit,
    NetworkEvent, Protocol, Recorder,
};
use super::limits::{Budget, ConnStats, LimitKind, Metered, NetLimits, Rate};
use super::names::Host;
use super::rules::{NameCheck, RuleDecision, Verdict};
use super::server::ProxyShared;
use super::{ApprovalAnswer, ApprovalRequest, EgressPolicy, NetworkApprover};

/// Everything the proxy knows about one sandbox.
#[derive(Debug)]
pub(crate) struct SandboxCtx {
    pub(crate) id: Arc<str>,
    pub(crate) proxy: Arc<ProxyShared>,
    pub(crate) policy: Arc<dyn EgressPolicy>,
    pub(crate) approver: Option<Arc<dyn NetworkApprover>>,
    pub(crate) budget: Arc<Budget>,
    rate: Rate,
    slots: Option<Arc<Semaphore>>,
    pub(crate) recorder: Recorder,
    pub(crate) cancel: CancellationToken,
    pub(crate) tasks: TaskTracker,
}

/// A refused or failed connection, as the front end reports it to the client.
#[derive(Debug, Clone)]
pub(crate) struct Denial {
    pub(crate) cause: Cause,
    pub(crate) message: String,
}

/// A connection to a checked address, with the record that reports it.
#[derive(Debug)]
pub(crate) struct Upstream {
    pub(crate) stream: TcpStream,
    pub(crate) record: ConnRecord,
}

impl Upstream {
    /// The stream wrapped to count and limit its bytes (for relays that read through it).
    pub(crate) fn metered(self) -> (Metered<TcpStream>, ConnRecord) {
        let stream = Metered::new(
            self.stream,
            self.record.ctx.budget.clone(),
            self.record.stats.clone(),
        );
        (stream, self.record)
    }
}

impl SandboxCtx {
    pub(crate) fn new(
        id: Arc<str>,
        proxy: Arc<ProxyShared>,
        policy: Arc<dyn EgressPolicy>,
        approver: Option<Arc<dyn NetworkApprover>>,
        limits: &NetLimits,
        cancel: CancellationToken,
    ) -> SandboxCtx {
        let max_events = proxy.compiled.max_events;
        SandboxCtx {
            recorder: Recorder::new(id.clone(), max_events),
            id,
            proxy,
            policy,
            approver,
            budget: Arc::new(Budget::new(limits)),
            rate: Rate::new(limits.connections_per_second),
            slots: (limits.max_concurrent > 0)
                .then(|| Arc::new(Semaphore::new(limits.max_concurrent as usize))),
            cancel,
            tasks: TaskTracker::new(),
        }
    }

    /// Runs `task` until it ends or the sandbox's egress closes.
    pub(crate) fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let cancel = self.cancel.clone();
        self.tasks.spawn(async move {
            tokio::select! {
                () = cancel.cancelled() => {}
                () = task => {}
            }
        });
    }

    /// Records a refused attempt and returns what to tell the client.
    fn refuse(&self, mut event: NetConnect, cause: Cause, message: String) -> Denial {
        if cause == Cause::Resolve || cause == Cause::Connect {
            // Allowed, but the destination could not be reached: not a blocked attempt.
            event.decision = match event.decision {
                Decision::Deny => Decision::Allow,
                other => other,
            };
        } else {
            event.decision = Decision::Deny;
        }
        event.cause = Some(cause);
        event.reason = Some(message.clone());
        self.recorder.record(NetworkEvent::NetConnect(event));
        Denial { cause, message }
    }

    fn refuse_limit(&self, mut event: NetConnect, kind: LimitKind) -> Denial {
        let message = format!("{} reached", kind.describe());
        self.recorder.record(NetworkEvent::NetLimit(NetLimit {
            limit: kind,
            domain: event.domain.clone(),
            port: event.port,
            reason: message.clone(),
            meta: EventMeta::default(),
        }));
        event.limit = Some(kind);
        self.refuse(event, Cause::Limit, message)
    }

    /// Records a request refused before any destination was decided (malformed, Host mismatch).
    pub(crate) fn refuse_request(
        &self,
        domain: &str,
        port: u16,
        protocol: Protocol,
        method: Option<String>,
        message: String,
    ) -> Denial {
        let event = blank_event(domain, port, protocol, method);
        self.refuse(event, Cause::BadRequest, message)
    }
}

fn blank_event(domain: &str, port: u16, protocol: Protocol, method: Option<String>) -> NetConnect {
    NetConnect {
        domain: domain.chars().take(253).collect(),
        remote: None,
        port,
        bytes_sent: 0,
        bytes_received: 0,
        duration_ms: 0,
        decision: Decision::Deny,
        rule: None,
        protocol,
        method,
        status: None,
        cause: None,
        reason: None,
        approval: None,
        ended: None,
        limit: None,
        meta: EventMeta::default(),
    }
}

fn millis(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

fn render(message: &str, domain: &str) -> String {
    message.replace("{domain}", domain)
}

/// The text for a denying verdict.
fn verdict_message(verdict: &Verdict, host: &Host, port: u16) -> (Cause, String) {
    let domain = host.to_string();
    match (&verdict.rule, &verdict.message) {
        (_, Some(message)) => (Cause::Rule, render(message, &domain)),
        (Some(rule), None) => (Cause::Rule, format!("rule `{rule}` denies {domain}:{port}")),
        (None, None) => (Cause::NoRule, format!("no rule allows {domain}:{port}")),
    }
}

/// What screening the answers left.
struct Screened {
    usable: Vec<(IpAddr, Verdict)>,
    /// Why the first unusable address was refused.
    refusal: Option<(Cause, String, Option<Arc<str>>)>,
}

fn screen(ctx: &SandboxCtx, host: &Host, answers: &[IpAddr], port: u16) -> Screened {
    let ranges = ctx.proxy.ranges();
    let mut screened = Screened {
        usable: Vec::new(),
        refusal: None,
    };
    for &address in answers {
        let refusal = match ranges.check(address) {
            Err(denied) => Some((Cause::DeniedRange, denied.to_string(), None)),
            Ok(()) => {
                let verdict = ctx.policy.check_address(host, address, port);
                if verdict.decision == RuleDecision::Deny {
                    let (cause, message) = verdict_message(&verdict, host, port);
                    Some((cause, message, verdict.rule))
                } else {
                    screened.usable.push((address.to_canonical(), verdict));
                    None
                }
            }
        };
        if screened.refusal.is_none() {
            screened.refusal = refusal;
        }
    }
    screened
}

/// Decides and, when allowed, opens the upstream connection for `raw_host`:`port`.
pub(crate) async fn connect(
    ctx: &Arc<SandboxCtx>,
    raw_host: &str,
    port: u16,
    protocol: Protocol,
    method: Option<String>,
) -> Result<Upstream, Denial> {
    let started = Instant::now();
    let mut event = blank_event(raw_host, port, protocol, method);
    let host = match Host::parse(raw_host) {
        Ok(host) => host,
        Err(e) => return Err(ctx.refuse(event, Cause::BadRequest, e.to_string())),
    };
    event.domain = host.to_string();
    if port == 0 {
        return Err(ctx.refuse(event, Cause::BadRequest, "port 0 is not a port".into()));
    }
    // Limits first: a refused attempt costs no lookup.
    if let Some(kind) = ctx.budget.exhausted() {
        return Err(ctx.refuse_limit(event, kind));
    }
    if !ctx.rate.try_take() {
        return Err(ctx.refuse_limit(event, LimitKind::ConnectionsPerSecond));
    }
    let permit = match &ctx.slots {
        None => None,
        Some(slots) => match slots.clone().try_acquire_owned() {
            Ok(permit) => Some(permit),
            Err(_) => return Err(ctx.refuse_limit(event, LimitKind::ConcurrentConnections)),
        },
    };
    let screened = match &host {
        Host::Ip(ip) => screen(ctx, &host, &[*ip], port),
        Host::Name(name) => {
            if let NameCheck::Deny(verdict) = ctx.policy.check_name(name, port) {
                let (cause, message) = verdict_message(&verdict, &host, port);
                event.rule = verdict.rule.as_deref().map(str::to_string);
                return Err(ctx.refuse(event, cause, message));
            }
            lookup(ctx, &host, name, port, &mut event).await?
        }
    };
    let Some((_, verdict)) = screened.usable.first() else {
        let (cause, message, rule) =
            screened
                .refusal
                .unwrap_or((Cause::NoRule, format!("no address of {host}"), None));
        event.rule = rule.as_deref().map(str::to_string);
        return Err(ctx.refuse(event, cause, message));
    };
    let verdict = verdict.clone();
    event.rule = verdict.rule.as_deref().map(str::to_string);
    event.decision = if verdict.decision == RuleDecision::Log {
        Decision::Log
    } else {
        Decision::Allow
    };
    // Only addresses the same rule allowed are tried: an approval covers exactly those.
    let addresses: Vec<IpAddr> = screened
        .usable
        .iter()
        .filter(|(_, v)| *v == verdict)
        .map(|(a, _)| *a)
        .collect();
    if verdict.decision == RuleDecision::Approve {
        event.approval = Some(approve(ctx, &host, port, &addresses, &verdict, &mut event).await?);
    }
    dial(ctx, event, &addresses, port, started, permit).await
}

/// Resolves `name`, screens the answers and records the `dns_query` event.
async fn lookup(
    ctx: &SandboxCtx,
    host: &Host,
    name: &str,
    port: u16,
    event: &mut NetConnect,
) -> Result<Screened, Denial> {
    let asked = Instant::now();
    let answers = ctx.proxy.resolver.resolve(name).await;
    let mut query = DnsQuery {
        domain: name.to_string(),
        answers: Vec::new(),
        decision: Decision::Allow,
        reason: None,
        duration_ms: millis(asked),
        meta: EventMeta::default(),
    };
    match answers {
        Err(e) => {
            query.reason = Some(e.to_string());
            ctx.recorder.record(NetworkEvent::DnsQuery(query));
            event.decision = Decision::Allow;
            Err(ctx.refuse(event.clone(), Cause::Resolve, e.to_string()))
        }
        Ok(answers) => {
            let screened = screen(ctx, host, &answers, port);
            if screened.usable.is_empty() {
                query.decision = Decision::Deny;
                query.reason = screened.refusal.as_ref().map(|(_, m, _)| m.clone());
            }
            query.answers = answers;
            ctx.recorder.record(NetworkEvent::DnsQuery(query));
            Ok(screened)
        }
    }
}

/// Holds the connection until the sandbox's approver decides, at most the approval timeout.
async fn approve(
    ctx: &SandboxCtx,
    host: &Host,
    port: u16,
    addresses: &[IpAddr],
    verdict: &Verdict,
    event: &mut NetConnect,
) -> Result<ApprovalRecord, Denial> {
    let Some(approver) = &ctx.approver else {
        let message = format!("{host}:{port} needs an operator's approval and none can be asked");
        return Err(ctx.refuse(event.clone(), Cause::NoApprover, message));
    };
    let request = ApprovalRequest {
        sandbox: ctx.id.clone(),
        domain: host.to_string(),
        port,
        addresses: addresses.to_vec(),
        protocol: event.protocol,
        rule: verdict.rule.as_deref().map(str::to_string),
        message: verdict
            .message
            .as_deref()
            .map(|m| render(m, &host.to_string())),
    };
    let asked = Instant::now();
    let timeout = ctx.proxy.compiled.timeouts.approval;
    let answer = tokio::time::timeout(timeout, approver.decide(request)).await;
    let waited_ms = millis(asked);
    let (record, cause, message) = match answer {
        Ok(ApprovalAnswer::Approved { by }) => {
            return Ok(ApprovalRecord {
                approved: true,
                by,
                waited_ms,
            });
        }
        Ok(ApprovalAnswer::Denied { by, reason }) => {
            let message = reason.unwrap_or_else(|| format!("an operator refused {host}:{port}"));
            let record = ApprovalRecord {
                approved: false,
                by,
                waited_ms,
            };
            (record, Cause::Operator, message)
        }
        Err(_) => {
            let record = ApprovalRecord {
                approved: false,
                by: None,
                waited_ms,
            };
            let message = format!(
                "nobody approved {host}:{port} within {} s",
                timeout.as_secs()
            );
            (record, Cause::ApprovalTimeout, message)
        }
    };
    event.approval = Some(record);
    Err(ctx.refuse(event.clone(), cause, message))
}

/// Connects to the first of `addresses` that accepts, never to anything else.
async fn dial(
    ctx: &Arc<SandboxCtx>,
    mut event: NetConnect,
    addresses: &[IpAddr],
    port: u16,
    started: Instant,
    permit: Option<OwnedSemaphorePermit>,
) -> Result<Upstream, Denial> {
    let timeout = ctx.proxy.compiled.timeouts.connect;
    let mut last_error = String::from("no address to connect to");
    for &address in addresses {
        match tokio::time::timeout(timeout, TcpStream::connect((address, port))).await {
            Ok(Ok(stream)) => {
                // Latency over batching: requests and TLS records are forwarded as they come.
                let _ = stream.set_nodelay(true);
                event.remote = Some(address);
                let record = ConnRecord {
                    ctx: ctx.clone(),
                    event: Some(event),
                    stats: Arc::new(ConnStats::default()),
                    started,
                    _permit: permit,
                };
                return Ok(Upstream { stream, record });
            }
            Ok(Err(e)) => last_error = format!("{address} port {port}: {e}"),
            Err(_) => {
                last_error = format!(
                    "{address} port {port}: no answer in {} s",
                    timeout.as_secs()
                )
            }
        }
    }
    event.duration_ms = millis(started);
    Err(ctx.refuse(event, Cause::Connect, last_error))
}

/// Reports an open connection when it ends: through [`ConnRecord::finish`], or on drop (the
/// sandbox's egress closed, the task was cancelled), so no connection goes unrecorded.
#[derive(Debug)]
pub(crate) struct ConnRecord {
    ctx: Arc<SandboxCtx>,
    event: Option<NetConnect>,
    stats: Arc<ConnStats>,
    started: Instant,
    _permit: Option<OwnedSemaphorePermit>,
}

impl ConnRecord {
    pub(crate) fn stats(&self) -> &Arc<ConnStats> {
        &self.stats
    }

    pub(crate) fn ctx(&self) -> &Arc<SandboxCtx> {
        &self.ctx
    }

    /// The connection ended, cleanly or with `error`.
    pub(crate) fn finish(mut self, error: Option<String>) {
        let ended = if error.is_some() {
            Ended::UpstreamError
        } else {
            Ended::Closed
        };
        self.emit(ended, error);
    }

    fn emit(&mut self, ended: Ended, error: Option<String>) {
        use std::sync::atomic::Ordering::Relaxed;
        let Some(mut event) = self.event.take() else {
            return;
        };
        event.bytes_sent = self.stats.sent.load(Relaxed);
        event.bytes_received = self.stats.received.load(Relaxed);
        event.duration_ms = millis(self.started);
        let status = self.stats.status.load(Relaxed);
        event.status = (status != 0).then_some(status);
        if let Some(kind) = self.stats.limit_hit() {
            let reason = format!("{} reached: connection cut", kind.describe());
            self.ctx.recorder.record(NetworkEvent::NetLimit(NetLimit {
                limit: kind,
                domain: event.domain.clone(),
                port: event.port,
                reason: reason.clone(),
                meta: EventMeta::default(),
            }));
            event.ended = Some(Ended::Limit);
            event.limit = Some(kind);
            event.cause = Some(Cause::Limit);
            event.reason = Some(reason);
        } else {
            event.ended = Some(ended);
            event.reason = error;
        }
        self.ctx.recorder.record(NetworkEvent::NetConnect(event));
    }
}

impl Drop for ConnRecord {
    fn drop(&mut self) {
        self.emit(Ended::Cancelled, None);
    }
}
