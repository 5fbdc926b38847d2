//! Files that runs return (plots, job and workspace artifacts), kept on disk under the data
//! directory by content: `artifacts/<sha256>`. A record lists `{path, sha256, size_bytes,
//! mime_type}`; a download checks the blob against its sha256 before the first byte goes out, and a
//! sweep removes blobs older than the retention period.
//!
//! Plots are capped here (`max_artifact_bytes`, `max_run_bytes`); job and workspace artifacts are
//! capped where they are collected, by the jobs maxima (`sandbox.jobs.max_artifact_bytes`,
//! `max_artifacts_total_bytes`), and streamed into the store without being held whole.

use std::io::{Read, Seek};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub(crate) use crate::domain::record::Artifact;

/// How long artifacts are kept and how large they may be (`[artifacts]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ArtifactSettings {
    /// Artifacts older than this are deleted (default 24 hours).
    pub retention_secs: u64,
    /// Largest artifact kept, in bytes.
    pub max_artifact_bytes: u64,
    /// Bytes of artifacts kept per run; later files beyond it are dropped.
    pub max_run_bytes: u64,
}

impl Default for ArtifactSettings {
    fn default() -> Self {
        ArtifactSettings {
            retention_secs: 24 * 3600,
            max_artifact_bytes: 1 << 20,
            max_run_bytes: 16 << 20,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("artifact not found (it may have expired)")]
    NotFound,
    #[error("artifact {0} does not match its sha256")]
    Corrupt(String),
    #[error("artifact storage: {0}")]
    Io(#[from] std::io::Error),
    #[error("artifact task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// The on-disk store.
#[derive(Debug, Clone)]
pub(crate) struct ArtifactStore {
    dir: PathBuf,
    settings: ArtifactSettings,
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// The MIME type of a file by its name (what a browser or an MCP client needs to show it).
pub(crate) fn mime_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()) {
        Some(e) if e == "png" => "image/png",
        Some(e) if e == "json" => "application/json",
        Some(e) if e == "txt" || e == "log" => "text/plain",
        Some(e) if e == "csv" => "text/csv",
        Some(e) if e == "svg" => "image/svg+xml",
        _ => "application/octet-stream",
    }
}

impl ArtifactStore {
    pub(crate) fn open(data_dir: &Path, settings: ArtifactSettings) -> Result<Self, ArtifactError> {
        let dir = data_dir.join("artifacts");
        std::fs::create_dir_all(&dir)?;
        Ok(ArtifactStore { dir, settings })
    }

    /// Keeps the files of one run within the caps; returns what was kept and how many were not.
    pub(crate) fn put_all(&self, files: &[(String, Vec<u8>)]) -> (Vec<Artifact>, u32) {
        let mut kept = Vec::new();
        let (mut total, mut dropped) = (0u64, 0u32);
        for (path, data) in files {
            let size = data.len() as u64;
            if size > self.settings.max_artifact_bytes || total + size > self.settings.max_run_bytes
            {
                dropped += 1;
                continue;
            }
            match self.put(path, data) {
                Ok(a) => {
                    total += size;
                    kept.push(a);
                }
                Err(e) => {
                    tracing::error!(error = %e, "could not keep an artifact");
                    dropped += 1;
                }
            }
        }
        (kept, dropped)
    }

    /// Writes one blob (atomically: a temporary file renamed into place).
    pub(crate) fn put(&self, path: &str, data: &[u8]) -> Result<Artifact, ArtifactError> {
        let sha256 = hex::encode(Sha256::digest(data));
        let target = self.dir.join(&sha256);
        if target.is_file() {
            // Same content: refresh its age so the retention counts from the latest run.
            std::fs::File::options()
                .append(true)
                .open(&target)?
                .set_modified(SystemTime::now())?;
        } else {
            let tmp = self.dir.join(format!(".{sha256}.{}", uuid::Uuid::new_v4()));
            std::fs::write(&tmp, data)?;
            std::fs::rename(&tmp, &target)?;
        }
        Ok(Artifact {
            path: path.to_string(),
            sha256,
            size_bytes: data.len() as u64,
            mime_type: mime_type(path).to_string(),
        })
    }

    /// Keeps a file read from `data` whose sha256 is known (a collected artifact): copied and
    /// hashed on the way, kept only when the hash matches.
    pub(crate) fn put_reader(
        &self,
        path: &str,
        mime_type: &str,
        sha256: &str,
        data: &mut dyn Read,
    ) -> Result<Artifact, ArtifactError> {
        if !is_sha256(sha256) {
            return Err(ArtifactError::Corrupt(sha256.to_string()));
        }
        let target = self.dir.join(sha256);
        let size_bytes = if target.is_file() {
            std::fs::File::options()
                .append(true)
                .open(&target)?
                .set_modified(SystemTime::now())?;
            std::fs::metadata(&target)?.len()
        } else {
            let tmp = self.dir.join(format!(".{sha256}.{}", uuid::Uuid::new_v4()));
            let written = copy_hashed(data, &tmp);
            match written {
                Ok((size, hash)) if hash == sha256 => {
                    std::fs::rename(&tmp, &target)?;
                    size
                }
                other => {
                    let _ = std::fs::remove_file(&tmp);
                    other?;
                    return Err(ArtifactError::Corrupt(sha256.to_string()));
                }
            }
        };
        Ok(Artifact {
            path: path.to_string(),
            sha256: sha256.to_string(),
            size_bytes,
            mime_type: mime_type.to_string(),
        })
    }

    /// The blob with this sha256, checked against it, as a handle at its start and its size:
    /// for streaming a large file out without holding it.
    pub(crate) fn open_blob(&self, sha256: &str) -> Result<(std::fs::File, u64), ArtifactError> {
        if !is_sha256(sha256) {
            return Err(ArtifactError::NotFound);
        }
        let mut file = match std::fs::File::open(self.dir.join(sha256)) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ArtifactError::NotFound);
            }
            Err(e) => return Err(e.into()),
        };
        // Blobs are renamed into place whole and never rewritten, so what is checked on this
        // handle is what it then reads.
        let (size, hash) = hash_all(&mut file)?;
        if hash != sha256 {
            return Err(ArtifactError::Corrupt(sha256.to_string()));
        }
        file.rewind()?;
        Ok((file, size))
    }

    /// The blob with this sha256, checked against it.
    pub(crate) fn get(&self, sha256: &str) -> Result<Vec<u8>, ArtifactError> {
        if !is_sha256(sha256) {
            return Err(ArtifactError::NotFound);
        }
        let data = match std::fs::read(self.dir.join(sha256)) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ArtifactError::NotFound);
            }
            Err(e) => return Err(e.into()),
        };
        if hex::encode(Sha256::digest(&data)) != sha256 {
            return Err(ArtifactError::Corrupt(sha256.to_string()));
        }
        Ok(data)
    }

    /// Deletes blobs (and abandoned temporary files) older than the retention; returns how many.
    pub(crate) fn sweep(&self) -> Result<usize, ArtifactError> {
        let retention = Duration::from_secs(self.settings.retention_secs);
        let now = SystemTime::now();
        let mut removed = 0;
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| now.duration_since(t).ok())
                .is_some_and(|age| age >= retention);
            if old && std::fs::remove_file(entry.path()).is_ok() {
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Sweeps now and then every `min(retention, 1 h)` until the token is cancelled.
    pub(crate) fn spawn_sweeper(self, stop: tokio_util::sync::CancellationToken) {
        let every = Duration::from_secs(self.settings.retention_secs.clamp(1, 3600));
        tokio::spawn(async move {
            loop {
                let store = self.clone();
                match tokio::task::spawn_blocking(move || store.sweep()).await {
                    Ok(Ok(n)) if n > 0 => tracing::info!(removed = n, "expired artifacts removed"),
                    Ok(Err(e)) => tracing::warn!(error = %e, "artifact sweep failed"),
                    _ => {}
                }
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    _ = stop.cancelled() => return,
                }
            }
        });
    }
}

/// Copies `data` into a new file at `to`; returns its size and sha256.
fn copy_hashed(data: &mut dyn Read, to: &Path) -> std::io::Result<(u64, String)> {
    use std::io::Write as _;
    let mut out = std::fs::File::create(to)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 << 10];
    let mut size = 0u64;
    loop {
        let n = match data.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n])?;
        size += n as u64;
    }
    out.sync_data()?;
    Ok((size, hex::encode(hasher.finalize())))
}

/// The size and sha256 of what `file` holds from where it is.
fn hash_all(file: &mut std::fs::File) -> std::io::Result<(u64, String)> {
    let mut hasher = Sha256::new();
    let size = std::io::copy(file, &mut hasher)?;
    Ok((size, hex::encode(hasher.finalize())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(settings: ArtifactSettings) -> (tempfile::TempDir, ArtifactStore) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = ArtifactStore::open(dir.path(), settings).expect("open");
        (dir, store)
    }

    #[test]
    fn blobs_round_trip_by_sha256_and_corruption_is_detected() {
        let (_d, s) = store(ArtifactSettings::default());
        let a = s.put("/tmp/p/figure-001.png", b"png bytes").expect("put");
        assert_eq!(a.mime_type, "image/png");
        assert_eq!(a.size_bytes, 9);
        assert_eq!(s.get(&a.sha256).expect("get"), b"png bytes");
        std::fs::write(s.dir.join(&a.sha256), b"tampered").expect("write");
        assert!(matches!(s.get(&a.sha256), Err(ArtifactError::Corrupt(_))));
        assert!(matches!(
            s.get("../etc/passwd"),
            Err(ArtifactError::NotFound)
        ));
        assert!(matches!(
            s.get(&"0".repeat(64)),
            Err(ArtifactError::NotFound)
        ));
    }

    #[test]
    fn streamed_files_are_kept_only_when_their_hash_matches() {
        let (_d, s) = store(ArtifactSettings::default());
        let data = vec![7u8; 700_000];
        let sha = hex::encode(Sha256::digest(&data));
        let a = s
            .put_reader(
                "/workspace/big.bin",
                "application/octet-stream",
                &sha,
                &mut &data[..],
            )
            .expect("kept");
        assert_eq!((a.size_bytes, a.sha256.as_str()), (700_000, sha.as_str()));
        let (mut file, size) = s.open_blob(&sha).expect("opens");
        let mut back = Vec::new();
        file.read_to_end(&mut back).expect("read");
        assert_eq!((size, back), (700_000, data));
        let wrong = "1".repeat(64);
        assert!(matches!(
            s.put_reader("/x", "text/plain", &wrong, &mut &b"abc"[..]),
            Err(ArtifactError::Corrupt(_))
        ));
        assert!(matches!(s.open_blob(&wrong), Err(ArtifactError::NotFound)));
        let leftovers = std::fs::read_dir(&s.dir).expect("dir").count();
        assert_eq!(leftovers, 1, "no temporary file is left behind");
        std::fs::write(s.dir.join(&sha), b"tampered").expect("write");
        assert!(matches!(s.open_blob(&sha), Err(ArtifactError::Corrupt(_))));
    }

    #[test]
    fn caps_drop_files_per_artifact_and_per_run() {
        let (_d, s) = store(ArtifactSettings {
            max_artifact_bytes: 4,
            max_run_bytes: 6,
            ..ArtifactSettings::default()
        });
        let files = vec![
            ("/a".to_string(), b"1234".to_vec()),
            ("/b".to_string(), b"12345".to_vec()),
            ("/c".to_string(), b"123".to_vec()),
            ("/d".to_string(), b"12".to_vec()),
        ];
        let (kept, dropped) = s.put_all(&files);
        assert_eq!(
            kept.iter().map(|a| a.path.as_str()).collect::<Vec<_>>(),
            ["/a", "/d"]
        );
        assert_eq!(dropped, 2);
    }

    #[test]
    fn the_sweep_removes_only_expired_blobs() {
        let (_d, s) = store(ArtifactSettings {
            retention_secs: 3600,
            ..ArtifactSettings::default()
        });
        let old = s.put("/old", b"old").expect("put");
        let new = s.put("/new", b"new").expect("put");
        let past = SystemTime::now() - Duration::from_secs(7200);
        std::fs::File::options()
            .append(true)
            .open(s.dir.join(&old.sha256))
            .and_then(|f| f.set_modified(past))
            .expect("age it");
        assert_eq!(s.sweep().expect("sweep"), 1);
        assert!(matches!(s.get(&old.sha256), Err(ArtifactError::NotFound)));
        assert!(s.get(&new.sha256).is_ok());
    }
}
