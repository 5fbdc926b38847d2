//! Returning files after the script exited (plots): regular files directly in the requested
//! directory, never through a symlink, in name order, each within the size cap.

use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;

use scriptgate_supervisor::{ArtifactRequest, FrameKind, MAX_ARTIFACT, encode_artifact};

/// Sends the requested files as `Artifact` frames; returns how many were left out.
pub(crate) fn send(request: &ArtifactRequest) -> Result<u32, String> {
    let Ok(entries) = std::fs::read_dir(&request.dir) else {
        return Ok(0);
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    let cap = request.max_bytes.min(MAX_ARTIFACT);
    let (mut sent, mut dropped) = (0u32, 0u32);
    for name in names {
        if sent >= request.max_count {
            dropped += 1;
            continue;
        }
        match read_capped(&format!("{}/{name}", request.dir), cap) {
            Some(data) => {
                crate::emit(FrameKind::Artifact, &encode_artifact(&name, &data))?;
                sent += 1;
            }
            None => dropped += 1,
        }
    }
    Ok(dropped)
}

/// The file's bytes if it is a regular file (opened without following a symlink) within `cap`.
fn read_capped(path: &str, cap: u64) -> Option<Vec<u8>> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > cap {
        return None;
    }
    let mut data = Vec::new();
    file.take(cap + 1).read_to_end(&mut data).ok()?;
    (data.len() as u64 <= cap).then_some(data)
}
