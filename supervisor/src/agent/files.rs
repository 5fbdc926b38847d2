//! `write_file`, `read_file` and `list_tree` on job paths, opened through [`fsafe`]. Only regular
//! files are read or written: FIFOs, sockets and devices are refused after a non-blocking open,
//! so none of them can hang a step.

use std::io::{self, Read as _, Write as _};
use std::os::fd::AsFd;

use scriptgate_supervisor::job::paths::JobPath;
use scriptgate_supervisor::job::{
    Encoding, JobError, ListedNode, Mode, NodeKind, ReadOutput, TreeOutput, WriteOutput,
};
use sha2::{Digest, Sha256};

use super::fsafe::{self, Dir, Meta, Roots};

/// The protocol error for a failed file system call on `path`.
pub(crate) fn fs_error(path: &impl std::fmt::Display, e: &io::Error) -> JobError {
    match e.raw_os_error() {
        Some(libc::ELOOP) => JobError::policy(format!(
            "`{path}` has a symlink on its path (symlinks are refused wherever they appear)"
        )),
        Some(libc::EXDEV) => JobError::policy(format!("`{path}` leads outside its root")),
        Some(libc::ENOENT) => JobError::failure(format!("`{path}` does not exist")),
        Some(libc::ENOTDIR) => {
            JobError::failure(format!("a component of `{path}` is not a directory"))
        }
        Some(libc::EISDIR) => JobError::failure(format!("`{path}` is a directory")),
        Some(libc::ENXIO) => JobError::policy(format!("`{path}` is not a regular file")),
        Some(libc::ENOSPC | libc::EDQUOT) => JobError::limit(format!(
            "no space left for `{path}` (the workspace is full)"
        )),
        Some(libc::EFBIG) => {
            JobError::limit(format!("`{path}` is larger than the file size limit"))
        }
        Some(libc::EACCES | libc::EPERM) => {
            JobError::failure(format!("permission denied on `{path}`"))
        }
        _ => JobError::failure(format!("`{path}`: {e}")),
    }
}

fn not_regular(path: &JobPath, meta: &Meta) -> JobError {
    let what = match meta.file_type() {
        libc::S_IFDIR => "a directory",
        libc::S_IFLNK => "a symlink",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFSOCK => "a socket",
        libc::S_IFCHR | libc::S_IFBLK => "a device",
        _ => "not a regular file",
    };
    JobError::policy(format!(
        "`{path}` is {what}; only regular files are read or written"
    ))
}

/// The parent directory of `path` (created as needed) and its last component.
fn parent_of<'a>(roots: &Roots, path: &'a JobPath) -> Result<(Dir, &'a str), JobError> {
    let (root, rel) = fsafe::locate(roots, path).map_err(|e| fs_error(path, &e))?;
    let Some((name, parents)) = rel.split_last() else {
        return Err(JobError::policy(format!(
            "`{path}` is a root directory, not a file"
        )));
    };
    let (dir, _) = root.create_dirs(parents).map_err(|e| fs_error(path, &e))?;
    Ok((dir, name))
}

/// A name for a staged file next to its target, unlikely to exist and never a job's choice.
pub(crate) fn staging_name(target: &str, tag: &str) -> String {
    let nonce: u64 = rand_u64();
    let stem: String = target.chars().take(64).collect();
    format!(".{stem}.scriptgate-{tag}-{nonce:016x}")
}

fn rand_u64() -> u64 {
    let bytes = *uuid::Uuid::new_v4().as_bytes();
    u64::from_le_bytes([
        bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
    ])
}

/// Writes `data` to a new file in `dir` named `name`, with exactly `mode`; the caller renames it.
pub(crate) fn stage(dir: &Dir, name: &str, data: &[u8], mode: u32) -> io::Result<()> {
    let fd = dir.open_at(name, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o600)?;
    let mut file = std::fs::File::from(fd);
    let written = file
        .write_all(data)
        .and_then(|()| file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode)));
    if written.is_err() {
        let _ = dir.unlink_at(name, false);
    }
    written
}

/// `write_file`: the whole file appears at once (staged, then renamed into place); an existing
/// file is replaced only with `allow_overwrite`, and never when it is not a regular file.
pub(crate) fn write(
    roots: &Roots,
    path: &JobPath,
    data: &[u8],
    mode: Mode,
    allow_overwrite: bool,
) -> Result<WriteOutput, JobError> {
    let (dir, name) = parent_of(roots, path)?;
    let existing = dir.stat_at(name).map_err(|e| fs_error(path, &e))?;
    if let Some(meta) = existing {
        if !meta.is_file() {
            return Err(not_regular(path, &meta));
        }
        if !allow_overwrite {
            return Err(JobError::policy(format!(
                "`{path}` exists and allow_overwrite is false"
            )));
        }
    }
    let staged = staging_name(name, "write");
    stage(&dir, &staged, data, mode.bits()).map_err(|e| fs_error(path, &e))?;
    if let Err(e) = dir.rename_at(&staged, name, existing.is_none()) {
        let _ = dir.unlink_at(&staged, false);
        return Err(if e.raw_os_error() == Some(libc::EEXIST) {
            JobError::policy(format!("`{path}` exists and allow_overwrite is false"))
        } else {
            fs_error(path, &e)
        });
    }
    Ok(WriteOutput {
        path: path.to_string(),
        size_bytes: data.len() as u64,
        sha256: hex(&Sha256::digest(data)),
        created: existing.is_none(),
    })
}

/// A regular file of `path` opened for reading (a FIFO opens without waiting, then is refused);
/// `None` when nothing is there.
pub(crate) fn open_regular(
    roots: &Roots,
    path: &JobPath,
) -> Result<Option<(std::fs::File, Meta)>, JobError> {
    let (root, rel) = fsafe::locate(roots, path).map_err(|e| fs_error(path, &e))?;
    let fd = match root.open_file(rel, libc::O_RDONLY | libc::O_NONBLOCK, 0) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
        Err(e) => return Err(fs_error(path, &e)),
    };
    let meta = fsafe::fstat(fd.as_fd()).map_err(|e| fs_error(path, &e))?;
    if !meta.is_file() {
        return Err(not_regular(path, &meta));
    }
    Ok(Some((std::fs::File::from(fd), meta)))
}

/// `read_file`: the first `max_bytes` bytes, and the size and sha256 of the whole file.
pub(crate) fn read(roots: &Roots, path: &JobPath, max_bytes: u64) -> Result<ReadOutput, JobError> {
    let (mut file, _) = open_regular(roots, path)?
        .ok_or_else(|| JobError::failure(format!("`{path}` does not exist")))?;
    let mut hasher = Sha256::new();
    let mut kept = Vec::new();
    let mut size = 0u64;
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(fs_error(path, &e)),
        };
        hasher.update(&buf[..n]);
        let room = usize::try_from(max_bytes.saturating_sub(size)).unwrap_or(usize::MAX);
        kept.extend_from_slice(&buf[..n.min(room)]);
        size += n as u64;
    }
    let (content, encoding) = match String::from_utf8(kept) {
        Ok(text) => (text, Encoding::Utf8),
        Err(e) => (data_encoding::BASE64.encode(e.as_bytes()), Encoding::Base64),
    };
    Ok(ReadOutput {
        content,
        encoding,
        size_bytes: size,
        truncated: size > max_bytes,
        sha256: hex(&hasher.finalize()),
    })
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    data_encoding::HEXLOWER.encode(bytes)
}

/// `list_tree`: the directory at `path` to `max_depth`, at most `max_entries` entries, by name.
pub(crate) fn list(
    roots: &Roots,
    path: &JobPath,
    max_depth: u32,
    max_entries: u64,
) -> Result<TreeOutput, JobError> {
    let (root, rel) = fsafe::locate(roots, path).map_err(|e| fs_error(path, &e))?;
    let dir = root.open_dir(rel).map_err(|e| fs_error(path, &e))?;
    let meta = fsafe::fstat(dir.fd()).map_err(|e| fs_error(path, &e))?;
    let mut budget = Budget {
        left: max_entries,
        listed: 0,
        truncated: false,
    };
    let children = list_dir(&dir, path, max_depth, &mut budget)?;
    Ok(TreeOutput {
        tree: ListedNode {
            name: path.name().unwrap_or(path.root().path()).to_string(),
            kind: NodeKind::Directory,
            size: meta.size,
            mode: format!("{:04o}", meta.permissions()),
            children: Some(children),
        },
        entries: budget.listed,
        truncated: budget.truncated,
    })
}

struct Budget {
    left: u64,
    listed: u64,
    truncated: bool,
}

fn list_dir(
    dir: &Dir,
    at: &JobPath,
    depth: u32,
    budget: &mut Budget,
) -> Result<Vec<ListedNode>, JobError> {
    let mut names = dir.names().map_err(|e| fs_error(at, &e))?;
    names.sort();
    let mut out = Vec::new();
    for name in names {
        if budget.left == 0 {
            budget.truncated = true;
            break;
        }
        let Some(meta) = dir.stat_at(&name).map_err(|e| fs_error(at, &e))? else {
            continue; // removed meanwhile
        };
        budget.left -= 1;
        budget.listed += 1;
        let kind = node_kind(&meta);
        let children = if kind == NodeKind::Directory && depth > 0 {
            let child_path = at.child(&name);
            match (child_path, dir.open_dir(std::slice::from_ref(&name))) {
                (Some(p), Ok(sub)) => Some(list_dir(&sub, &p, depth - 1, budget)?),
                _ => None,
            }
        } else {
            None
        };
        out.push(ListedNode {
            name,
            kind,
            size: meta.size,
            mode: format!("{:04o}", meta.permissions()),
            children,
        });
    }
    Ok(out)
}

fn node_kind(meta: &Meta) -> NodeKind {
    match meta.file_type() {
        libc::S_IFDIR => NodeKind::Directory,
        libc::S_IFLNK => NodeKind::Symlink,
        libc::S_IFIFO => NodeKind::Fifo,
        libc::S_IFSOCK => NodeKind::Socket,
        libc::S_IFCHR => NodeKind::CharDevice,
        libc::S_IFBLK => NodeKind::BlockDevice,
        _ => NodeKind::File,
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{PermissionsExt as _, symlink};

    use scriptgate_supervisor::job::ErrorType;

    use super::*;

    struct Fixture {
        _dir: tempfile::TempDir,
        ws: std::path::PathBuf,
        roots: Roots,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path().join("workspace");
        let tmp = dir.path().join("tmp");
        std::fs::create_dir_all(&ws).expect("ws");
        std::fs::create_dir_all(&tmp).expect("tmp");
        let roots = Roots::at(&ws, &tmp);
        Fixture {
            _dir: dir,
            ws,
            roots,
        }
    }

    fn p(path: &str) -> JobPath {
        JobPath::parse(path).expect("path")
    }

    fn mode(m: &str) -> Mode {
        m.parse().expect("mode")
    }

    #[test]
    fn write_creates_parents_sets_the_exact_mode_and_refuses_overwrite() {
        let f = fixture();
        let out = write(
            &f.roots,
            &p("/workspace/src/app.py"),
            b"print(1)\n",
            mode("0750"),
            false,
        )
        .expect("written");
        assert!(out.created);
        assert_eq!(out.sha256, hex(&Sha256::digest(b"print(1)\n")));
        let meta = std::fs::metadata(f.ws.join("src/app.py")).expect("exists");
        assert_eq!(meta.permissions().mode() & 0o777, 0o750);
        let e = write(
            &f.roots,
            &p("/workspace/src/app.py"),
            b"x",
            mode("0644"),
            false,
        )
        .expect_err("exists");
        assert_eq!(e.kind, ErrorType::PolicyViolation);
        assert_eq!(
            std::fs::read(f.ws.join("src/app.py")).expect("kept"),
            b"print(1)\n"
        );
        let out = write(
            &f.roots,
            &p("/workspace/src/app.py"),
            b"x",
            mode("0644"),
            true,
        )
        .expect("overwritten");
        assert!(!out.created);
        assert_eq!(
            std::fs::read(f.ws.join("src/app.py")).expect("replaced"),
            b"x"
        );
        let leftovers: Vec<_> = std::fs::read_dir(f.ws.join("src")).expect("dir").collect();
        assert_eq!(leftovers.len(), 1, "no staged file left behind");
    }

    #[test]
    fn a_symlink_planted_by_an_earlier_step_redirects_nothing() {
        let f = fixture();
        let outside = tempfile::tempdir().expect("outside");
        symlink(outside.path(), f.ws.join("out")).expect("dir link");
        std::fs::write(outside.path().join("secret"), "s").expect("secret");
        symlink(outside.path().join("secret"), f.ws.join("report.json")).expect("file link");
        symlink("real.txt", f.ws.join("inside-link")).expect("link inside the workspace");
        std::fs::write(f.ws.join("real.txt"), "r").expect("real");
        for target in [
            "/workspace/out/x.txt",
            "/workspace/report.json",
            "/workspace/inside-link",
        ] {
            for overwrite in [false, true] {
                let e = write(&f.roots, &p(target), b"pwned", mode("0644"), overwrite)
                    .expect_err(target);
                assert_eq!(e.kind, ErrorType::PolicyViolation, "{target}: {e}");
            }
            let e = read(&f.roots, &p(target), 100).expect_err(target);
            assert_eq!(e.kind, ErrorType::PolicyViolation, "{target}: {e}");
        }
        assert!(!outside.path().join("x.txt").exists());
        assert_eq!(
            std::fs::read(outside.path().join("secret")).expect("secret"),
            b"s"
        );
        assert_eq!(std::fs::read(f.ws.join("real.txt")).expect("real"), b"r");
    }

    #[test]
    fn fifos_and_directories_are_refused_without_hanging() {
        let f = fixture();
        let fifo = f.ws.join("pipe");
        let c = fsafe::cstring(&fifo.to_string_lossy()).expect("c path");
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let e = read(&f.roots, &p("/workspace/pipe"), 10).expect_err("fifo");
        assert_eq!(e.kind, ErrorType::PolicyViolation);
        let e = write(&f.roots, &p("/workspace/pipe"), b"x", mode("0644"), true).expect_err("fifo");
        assert_eq!(e.kind, ErrorType::PolicyViolation);
        std::fs::create_dir(f.ws.join("d")).expect("dir");
        let e = read(&f.roots, &p("/workspace/d"), 10).expect_err("dir");
        assert_eq!(e.kind, ErrorType::PolicyViolation);
    }

    #[test]
    fn read_caps_the_content_but_hashes_the_whole_file() {
        let f = fixture();
        let data: Vec<u8> = (0..100_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        std::fs::write(f.ws.join("big.txt"), &data).expect("big");
        let out = read(&f.roots, &p("/workspace/big.txt"), 10).expect("read");
        assert_eq!(out.content, "abcdefghij");
        assert!(out.truncated);
        assert_eq!(out.size_bytes, 100_000);
        assert_eq!(out.sha256, hex(&Sha256::digest(&data)));
        std::fs::write(f.ws.join("bin"), [0xff, 0, 1]).expect("binary");
        let out = read(&f.roots, &p("/workspace/bin"), 10).expect("read");
        assert_eq!(
            (out.encoding, out.content.as_str()),
            (Encoding::Base64, "/wAB")
        );
        let e = read(&f.roots, &p("/workspace/missing"), 10).expect_err("missing");
        assert_eq!(e.kind, ErrorType::ExecutionFailure);
    }

    #[test]
    fn list_tree_reports_symlinks_without_following_and_stops_at_its_limits() {
        let f = fixture();
        std::fs::create_dir_all(f.ws.join("a/b/c")).expect("dirs");
        std::fs::write(f.ws.join("a/file.txt"), "hello").expect("file");
        symlink("/etc", f.ws.join("a/etc")).expect("link");
        let out = list(&f.roots, &p("/workspace"), 4, 100).expect("listed");
        let a = &out.tree.children.as_ref().expect("children")[0];
        assert_eq!((a.name.as_str(), a.kind), ("a", NodeKind::Directory));
        let names: Vec<(&str, NodeKind)> = a
            .children
            .as_ref()
            .expect("a's children")
            .iter()
            .map(|n| (n.name.as_str(), n.kind))
            .collect();
        assert_eq!(
            names,
            [
                ("b", NodeKind::Directory),
                ("etc", NodeKind::Symlink),
                ("file.txt", NodeKind::File)
            ]
        );
        assert_eq!(out.entries, 5);
        assert!(!out.truncated);
        let shallow = list(&f.roots, &p("/workspace"), 0, 100).expect("listed");
        assert_eq!(shallow.entries, 1);
        assert!(shallow.tree.children.expect("root")[0].children.is_none());
        let few = list(&f.roots, &p("/workspace"), 4, 2).expect("listed");
        assert_eq!((few.entries, few.truncated), (2, true));
        let e = list(&f.roots, &p("/workspace/a/etc"), 1, 10).expect_err("a link");
        assert_eq!(e.kind, ErrorType::PolicyViolation);
    }
}
