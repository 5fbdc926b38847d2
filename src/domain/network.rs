//! Network access of a run: what a request asks for (`network: {allowed_domains,
//! blocked_domains, allowed_ports}`) and what the run did through the egress proxy
//! (`network_operations`, `network_summary`).

use serde::{Deserialize, Serialize};

/// The network access a request asks for. It only ever narrows what the run's policy allows:
/// names outside it are refused at the edge, and at run time both must agree.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkGrant {
    /// Names the run may reach: `example.com`, `*.example.com` (any name below it) or `*`
    /// (anything the policy allows).
    #[schema(example = json!(["pypi.org", "*.pythonhosted.org"]))]
    pub allowed_domains: Vec<String>,
    /// Names the run may not reach, even where `allowed_domains` or the policy would allow them.
    pub blocked_domains: Vec<String>,
    /// Ports the allowed names may be reached on (default: 80 and 443).
    #[schema(example = json!([443]))]
    pub allowed_ports: Vec<u16>,
}

/// Totals of a run's network activity.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NetworkSummary {
    /// Upstream connections made.
    pub connections: u64,
    pub dns_queries: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Connections refused (`decision: deny`).
    pub blocked: u64,
    /// Distinct `host:port` pairs connected to.
    pub unique_destinations: u64,
    /// Events left out of `network_operations` (past `egress.max_events`); still counted above.
    pub events_dropped: u64,
}

/// What a run with network access did: every lookup and connection as the proxy recorded it
/// (`dns_query`, `net_connect`, `net_limit`, each an object with its `type`), and the totals.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NetworkResult {
    pub network_operations: Vec<serde_json::Value>,
    pub network_summary: NetworkSummary,
}
