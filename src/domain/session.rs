//! What the service keeps of a persistent session across restarts: who owns it, where it runs,
//! and whether (and why) it stopped.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use uuid::Uuid;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub id: Uuid,
    pub agent: String,
    pub profile: String,
    /// The service node (engine instance label) that holds, or held, its container.
    pub node: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
    /// When it stopped; `None` while it lives.
    #[serde(with = "time::serde::rfc3339::option")]
    pub stopped_at: Option<OffsetDateTime>,
    pub reason: Option<String>,
    /// The run-time policy its commands ran under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
}
