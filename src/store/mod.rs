//! Durable state in an embedded SQLite database: executions (with their approvals) and the audit
//! log. Write-ahead logging, a busy timeout, and every call on the blocking pool so the async
//! runtime never waits on the disk.

pub mod audit;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OptionalExtension, params};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;

use crate::domain::record::{ExecutionRecord, Status};
use crate::domain::session::SessionRecord;
pub use audit::{AuditEvent, AuditRecord};

const SCHEMA_VERSION: i64 = 3;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database {}: cannot create the data directory: {source}", .path.display())]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("database {}: {source}", .path.display())]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("database: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("database record: {0}")]
    Corrupt(#[from] serde_json::Error),
    #[error("database task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// A thread panicked while it held the connection.
    #[error("database task failed: connection lock poisoned")]
    Poisoned,
    /// Another execution already runs the job with this id.
    #[error("job_id {0} is already used by another job")]
    DuplicateJob(Uuid),
}

/// A status change that did not apply because the record was no longer in an expected status.
#[derive(Debug, Clone, PartialEq)]
pub enum Transition {
    Applied(Box<ExecutionRecord>),
    Conflict(Status),
    Missing,
}

#[derive(Debug, Clone)]
pub struct Store {
    conn: Arc<Mutex<Connection>>,
    path: PathBuf,
}

fn now_ms() -> i64 {
    (OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as i64
}

fn rfc3339(ms: i64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_default()
}

impl Store {
    /// Opens (creating when needed) `dir/scriptgate.db`.
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        let path = dir.join("scriptgate.db");
        std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
            path: path.clone(),
            source,
        })?;
        let conn = connect(&path).map_err(|source| StoreError::Open {
            path: path.clone(),
            source,
        })?;
        Ok(Store {
            conn: Arc::new(Mutex::new(conn)),
            path,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` with the connection on the blocking pool.
    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            let mut guard = conn.lock().map_err(|_| StoreError::Poisoned)?;
            f(&mut guard)
        })
        .await?
    }

    /// Writes a record (new or changed) and its audit events in one transaction.
    pub async fn save(
        &self,
        record: &ExecutionRecord,
        events: Vec<AuditEvent>,
    ) -> Result<(), StoreError> {
        let record = record.clone();
        self.with(move |conn| {
            let tx = conn.transaction()?;
            write_record(&tx, &record)?;
            for e in &events {
                append(&tx, e)?;
            }
            tx.commit()?;
            Ok(())
        })
        .await
    }

    pub async fn get(&self, id: Uuid) -> Result<Option<ExecutionRecord>, StoreError> {
        self.with(move |conn| read_record(conn, id)).await
    }

    /// The execution that runs the job `job_id`.
    pub async fn by_job(&self, job_id: Uuid) -> Result<Option<ExecutionRecord>, StoreError> {
        self.with(move |conn| {
            let json: Option<String> = conn
                .query_row(
                    "SELECT record FROM executions WHERE job_id = ?1",
                    params![job_id.to_string()],
                    |r| r.get(0),
                )
                .optional()?;
            json.map(|j| decode(&j)).transpose()
        })
        .await
    }

    pub async fn with_status(&self, status: Status) -> Result<Vec<ExecutionRecord>, StoreError> {
        self.with(move |conn| {
            let mut stmt = conn
                .prepare("SELECT record FROM executions WHERE status = ?1 ORDER BY created_at")?;
            let rows = stmt.query_map(params![status.as_str()], |r| r.get::<_, String>(0))?;
            rows.map(|json| decode(&json?)).collect()
        })
        .await
    }

    /// Applies `change` only when the record is in one of `from` (compare-and-set), with its events.
    pub async fn transition(
        &self,
        id: Uuid,
        from: &'static [Status],
        change: impl FnOnce(&mut ExecutionRecord) -> Vec<AuditEvent> + Send + 'static,
    ) -> Result<Transition, StoreError> {
        self.with(move |conn| {
            let tx = conn.transaction()?;
            let Some(mut record) = read_record(&tx, id)? else {
                return Ok(Transition::Missing);
            };
            if !from.contains(&record.status) {
                return Ok(Transition::Conflict(record.status));
            }
            let events = change(&mut record);
            record.updated_at = OffsetDateTime::now_utc();
            write_record(&tx, &record)?;
            for e in &events {
                append(&tx, e)?;
            }
            tx.commit()?;
            Ok(Transition::Applied(Box::new(record)))
        })
        .await
    }

    /// Writes a session's record (new or changed).
    pub async fn save_session(&self, record: &SessionRecord) -> Result<(), StoreError> {
        let json = serde_json::to_string(record)?;
        let (id, agent) = (record.id.to_string(), record.agent.clone());
        let stopped = record
            .stopped_at
            .map(|t| (t.unix_timestamp_nanos() / 1_000_000) as i64);
        self.with(move |conn| {
            conn.execute(
                "INSERT INTO sessions (id, agent, stopped_at, record) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(id) DO UPDATE SET stopped_at = ?3, record = ?4",
                params![id, agent, stopped, json],
            )?;
            Ok(())
        })
        .await
    }

    /// Session records still alive or stopped after `since`; older ones are deleted.
    pub async fn sessions_since(
        &self,
        since: OffsetDateTime,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        let since = (since.unix_timestamp_nanos() / 1_000_000) as i64;
        self.with(move |conn| {
            conn.execute("DELETE FROM sessions WHERE stopped_at < ?1", params![since])?;
            let mut stmt = conn.prepare("SELECT record FROM sessions")?;
            let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
            rows.map(|json| Ok(serde_json::from_str(&json?)?)).collect()
        })
        .await
    }

    /// Appends audit events that belong to no execution record (a session command's policy
    /// decisions), in one transaction.
    pub async fn append_audit(&self, events: Vec<AuditEvent>) -> Result<(), StoreError> {
        self.with(move |conn| {
            let tx = conn.transaction()?;
            for e in &events {
                append(&tx, e)?;
            }
            tx.commit()?;
            Ok(())
        })
        .await
    }

    /// The last `n` audit records, oldest first.
    pub async fn audit_tail(&self, n: usize) -> Result<Vec<AuditRecord>, StoreError> {
        self.with(move |conn| {
            let mut records = read_audit(conn, Some(n))?;
            records.reverse();
            Ok(records)
        })
        .await
    }

    /// Checks the whole audit chain; `Ok(count)` or the first broken record.
    pub async fn audit_verify(&self) -> Result<Result<usize, audit::Break>, StoreError> {
        self.with(move |conn| {
            let mut records = read_audit(conn, None)?;
            records.reverse();
            Ok(audit::verify(&records))
        })
        .await
    }
}

/// The connection with write-ahead logging, a busy timeout and the current schema.
fn connect(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    migrate(&conn)?;
    Ok(conn)
}

fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if version >= SCHEMA_VERSION {
        return Ok(());
    }
    if version < 1 {
        create_v1(conn)?;
    }
    if version < 2 {
        // Version 2: jobs, found by their own id, which no two executions share.
        conn.execute_batch(
            "BEGIN;
             ALTER TABLE executions ADD COLUMN job_id TEXT;
             CREATE UNIQUE INDEX IF NOT EXISTS executions_by_job ON executions(job_id)
                 WHERE job_id IS NOT NULL;
             PRAGMA user_version = 2;
             COMMIT;",
        )?;
    }
    // Version 3: session records, so a restart accounts for every session it finds.
    conn.execute_batch(
        "BEGIN;
         CREATE TABLE IF NOT EXISTS sessions (
             id TEXT PRIMARY KEY,
             agent TEXT NOT NULL,
             stopped_at INTEGER,
             record TEXT NOT NULL
         );
         PRAGMA user_version = 3;
         COMMIT;",
    )
}

fn create_v1(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "BEGIN;
         CREATE TABLE IF NOT EXISTS executions (
             id TEXT PRIMARY KEY,
             status TEXT NOT NULL,
             agent TEXT NOT NULL,
             created_at INTEGER NOT NULL,
             updated_at INTEGER NOT NULL,
             record TEXT NOT NULL
         );
         CREATE INDEX IF NOT EXISTS executions_by_status ON executions(status, created_at);
         CREATE TABLE IF NOT EXISTS audit (
             seq INTEGER PRIMARY KEY,
             at INTEGER NOT NULL,
             actor TEXT NOT NULL,
             execution_id TEXT,
             event TEXT NOT NULL,
             script_sha256 TEXT,
             outcome TEXT NOT NULL,
             prev_hash TEXT NOT NULL,
             hash TEXT NOT NULL
         );
         PRAGMA user_version = 1;
         COMMIT;",
    )
}

fn decode(json: &str) -> Result<ExecutionRecord, StoreError> {
    Ok(serde_json::from_str(json)?)
}

fn read_record(conn: &Connection, id: Uuid) -> Result<Option<ExecutionRecord>, StoreError> {
    let json: Option<String> = conn
        .query_row(
            "SELECT record FROM executions WHERE id = ?1",
            params![id.to_string()],
            |r| r.get(0),
        )
        .optional()?;
    json.map(|j| decode(&j)).transpose()
}

fn write_record(conn: &Connection, r: &ExecutionRecord) -> Result<(), StoreError> {
    let json = serde_json::to_string(r)?;
    let ms = |t: OffsetDateTime| (t.unix_timestamp_nanos() / 1_000_000) as i64;
    let job_id = r.job_id().map(|j| j.to_string());
    let written = conn.execute(
        "INSERT INTO executions (id, status, agent, created_at, updated_at, record, job_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT(id) DO UPDATE SET status = excluded.status, updated_at = excluded.updated_at, record = excluded.record",
        params![r.id.to_string(), r.status.as_str(), r.agent, ms(r.created_at), ms(r.updated_at), json, job_id],
    );
    match (written, r.job_id()) {
        (Err(rusqlite::Error::SqliteFailure(e, _)), Some(job))
            if e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE =>
        {
            Err(StoreError::DuplicateJob(job))
        }
        (written, _) => written.map(drop).map_err(Into::into),
    }
}

fn append(conn: &Connection, e: &AuditEvent) -> Result<(), StoreError> {
    let (last_seq, prev_hash): (i64, String) = conn
        .query_row(
            "SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?
        .unwrap_or((0, audit::GENESIS.to_string()));
    let at_ms = now_ms();
    let mut record = AuditRecord {
        seq: last_seq + 1,
        at: rfc3339(at_ms),
        actor: e.actor.clone(),
        execution_id: e.execution_id.map(|id| id.to_string()),
        event: e.event.to_string(),
        script_sha256: e.script_sha256.clone(),
        outcome: e.outcome.clone(),
        prev_hash,
        hash: String::new(),
    };
    record.hash = audit::hash(&record.prev_hash, &record);
    conn.execute(
        "INSERT INTO audit (seq, at, actor, execution_id, event, script_sha256, outcome, prev_hash, hash)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        params![
            record.seq,
            at_ms,
            record.actor,
            record.execution_id,
            record.event,
            record.script_sha256,
            record.outcome.to_string(),
            record.prev_hash,
            record.hash
        ],
    )?;
    Ok(())
}

/// Audit records, newest first (at most `limit`).
fn read_audit(conn: &Connection, limit: Option<usize>) -> Result<Vec<AuditRecord>, StoreError> {
    let sql = match limit {
        Some(n) => format!("SELECT seq, at, actor, execution_id, event, script_sha256, outcome, prev_hash, hash FROM audit ORDER BY seq DESC LIMIT {n}"),
        None => "SELECT seq, at, actor, execution_id, event, script_sha256, outcome, prev_hash, hash FROM audit ORDER BY seq DESC".to_string(),
    };
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt.query_map([], |r| {
        let outcome: String = r.get(6)?;
        Ok(AuditRecord {
            seq: r.get(0)?,
            at: rfc3339(r.get(1)?),
            actor: r.get(2)?,
            execution_id: r.get(3)?,
            event: r.get(4)?,
            script_sha256: r.get(5)?,
            outcome: serde_json::from_str(&outcome).unwrap_or(serde_json::Value::String(outcome)),
            prev_hash: r.get(7)?,
            hash: r.get(8)?,
        })
    })?;
    rows.collect::<Result<_, _>>().map_err(Into::into)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tables_and_columns(conn: &Connection) -> (Vec<String>, Vec<String>) {
        let mut t = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .expect("query");
        let tables = t
            .query_map([], |r| r.get(0))
            .expect("rows")
            .collect::<Result<Vec<String>, _>>()
            .expect("names");
        let mut c = conn
            .prepare("SELECT name FROM pragma_table_info('executions')")
            .expect("query");
        let columns = c
            .query_map([], |r| r.get(0))
            .expect("rows")
            .collect::<Result<Vec<String>, _>>()
            .expect("names");
        (tables, columns)
    }

    #[test]
    fn a_version_1_database_keeps_its_rows_and_gains_jobs_and_sessions() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("scriptgate.db");
        {
            let conn = Connection::open(&path).expect("open");
            create_v1(&conn).expect("v1");
            conn.execute(
                "INSERT INTO executions (id, status, agent, created_at, updated_at, record)
                 VALUES ('x', 'succeeded', 'a', 1, 1, '{}')",
                [],
            )
            .expect("row");
        }
        let conn = connect(&path).expect("migrated");
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .expect("version");
        assert_eq!(version, SCHEMA_VERSION);
        let (tables, columns) = tables_and_columns(&conn);
        assert!(tables.contains(&"sessions".to_string()), "{tables:?}");
        assert!(columns.contains(&"job_id".to_string()), "{columns:?}");
        let rows: i64 = conn
            .query_row("SELECT count(*) FROM executions", [], |r| r.get(0))
            .expect("count");
        assert_eq!(rows, 1);
        drop(conn);
        // Opening again is a no-op at the current version.
        connect(&path).expect("reopened");
    }

    #[test]
    fn a_new_database_has_the_whole_schema() {
        let dir = tempfile::tempdir().expect("dir");
        let conn = connect(&dir.path().join("scriptgate.db")).expect("created");
        let (tables, columns) = tables_and_columns(&conn);
        for t in ["audit", "executions", "sessions"] {
            assert!(tables.contains(&t.to_string()), "{tables:?}");
        }
        assert!(columns.contains(&"job_id".to_string()), "{columns:?}");
    }
}
