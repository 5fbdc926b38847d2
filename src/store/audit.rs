//! The audit log: append-only records, each carrying the hash of the one before it, so a changed,
//! removed or reordered record breaks the chain at that point.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// An event to append (the store fills in sequence, time and hashes).
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEvent {
    pub actor: String,
    pub execution_id: Option<uuid::Uuid>,
    pub event: &'static str,
    pub script_sha256: Option<String>,
    pub outcome: serde_json::Value,
}

impl AuditEvent {
    pub fn new(
        actor: &str,
        execution_id: uuid::Uuid,
        event: &'static str,
        script_sha256: &str,
        outcome: serde_json::Value,
    ) -> Self {
        AuditEvent {
            actor: actor.to_string(),
            execution_id: Some(execution_id),
            event,
            script_sha256: Some(script_sha256.to_string()),
            outcome,
        }
    }
}

/// A stored record, as `audit tail` prints it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub seq: i64,
    pub at: String,
    pub actor: String,
    pub execution_id: Option<String>,
    pub event: String,
    pub script_sha256: Option<String>,
    pub outcome: serde_json::Value,
    pub prev_hash: String,
    pub hash: String,
}

/// The hash of the first record's predecessor.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The fields a record's hash covers, in a fixed order.
#[derive(Serialize)]
struct Hashed<'a> {
    seq: i64,
    at: &'a str,
    actor: &'a str,
    execution_id: Option<&'a str>,
    event: &'a str,
    script_sha256: Option<&'a str>,
    outcome: &'a serde_json::Value,
}

pub fn hash(prev_hash: &str, r: &AuditRecord) -> String {
    let body = serde_json::to_vec(&Hashed {
        seq: r.seq,
        at: &r.at,
        actor: &r.actor,
        execution_id: r.execution_id.as_deref(),
        event: &r.event,
        script_sha256: r.script_sha256.as_deref(),
        outcome: &r.outcome,
    })
    .expect("audit records serialize");
    let mut h = Sha256::new();
    h.update(prev_hash.as_bytes());
    h.update(b"\n");
    h.update(&body);
    hex::encode(h.finalize())
}

/// The first record whose stored hash or link does not match, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Break {
    pub seq: i64,
    pub reason: String,
}

pub fn verify<'a>(records: impl IntoIterator<Item = &'a AuditRecord>) -> Result<usize, Break> {
    let mut prev = GENESIS.to_string();
    let mut count = 0;
    for (expected_seq, r) in (1..).zip(records) {
        if r.seq != expected_seq {
            return Err(Break {
                seq: r.seq,
                reason: format!(
                    "sequence jumps from {} to {} (records removed)",
                    expected_seq - 1,
                    r.seq
                ),
            });
        }
        if r.prev_hash != prev {
            return Err(Break {
                seq: r.seq,
                reason: "does not link to the record before it".into(),
            });
        }
        if hash(&prev, r) != r.hash {
            return Err(Break {
                seq: r.seq,
                reason: "content does not match its hash (record altered)".into(),
            });
        }
        prev = r.hash.clone();
        count += 1;
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(n: i64) -> Vec<AuditRecord> {
        let mut prev = GENESIS.to_string();
        (1..=n)
            .map(|seq| {
                let mut r = AuditRecord {
                    seq,
                    at: "2026-01-01T00:00:00Z".into(),
                    actor: "a".into(),
                    execution_id: None,
                    event: "e".into(),
                    script_sha256: None,
                    outcome: serde_json::json!({"n": seq}),
                    prev_hash: prev.clone(),
                    hash: String::new(),
                };
                r.hash = hash(&prev, &r);
                prev = r.hash.clone();
                r
            })
            .collect()
    }

    #[test]
    fn an_intact_chain_verifies() {
        assert_eq!(verify(&chain(5)), Ok(5));
        assert_eq!(verify(&chain(0)), Ok(0));
    }

    #[test]
    fn altered_removed_and_relinked_records_are_named() {
        let mut altered = chain(5);
        altered[2].outcome = serde_json::json!({"n": 99});
        assert_eq!(verify(&altered).map_err(|b| b.seq), Err(3));
        let mut removed = chain(5);
        removed.remove(1);
        assert_eq!(verify(&removed).map_err(|b| b.seq), Err(3));
        let mut relinked = chain(5);
        relinked[3].prev_hash = GENESIS.into();
        assert_eq!(verify(&relinked).map_err(|b| b.seq), Err(4));
    }
}
