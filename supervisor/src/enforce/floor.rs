//! The exec floor: a Landlock ruleset that lets a process execute only the files some command
//! rule could let run (plus what the kernel needs to run them: the ELF loader and `#!`
//! interpreters). Exec is the one decided call that must be continued, so this is what holds when
//! a thread rewrites the path after the supervisor's check: the kernel itself refuses anything off
//! the list (`EACCES`), whatever the supervisor saw.
//!
//! A policy whose command rules let any program run (a catch-all that does not deny) needs no
//! floor; the ruleset then allows execution everywhere.

use std::collections::BTreeSet;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use scriptgate_policy::{CompiledPolicy, Decision, Operation};

/// Where programs live in the runner images; path rules of a policy add their own directories.
const PROGRAM_DIRS: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
    "/usr/libexec",
];
/// Entries looked at in all, so a huge directory cannot stall a job's start.
const MAX_ENTRIES: usize = 50_000;
/// A path no rule names: whether it may run says whether the policy has a permissive catch-all.
const PROBE: &str = "/nonexistent/scriptgate-exec-probe";

const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
const LANDLOCK_RULE_PATH_BENEATH: u32 = 1;
const ACCESS_FS_EXECUTE: u64 = 1;

/// What the floor allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Floor {
    /// Every program may run: no restriction.
    Open,
    /// Only these files (canonical paths).
    Files(BTreeSet<PathBuf>),
}

impl Floor {
    /// As the enforcement summary names it.
    pub(crate) fn describe(&self) -> String {
        match self {
            Floor::Open => "none".into(),
            Floor::Files(f) => format!("landlock ({} files)", f.len()),
        }
    }
}

fn may_run(policy: &CompiledPolicy, path: &str) -> bool {
    policy.program_may_run(path)
        && policy.decide_file(Operation::Exec, path).decision != Decision::Deny
}

/// The floor for `policy`; `interpreter` (the program the supervisor starts) is always on it.
pub(crate) fn plan(policy: &CompiledPolicy, interpreter: &Path) -> Floor {
    if may_run(policy, PROBE) {
        return Floor::Open;
    }
    let mut files = BTreeSet::new();
    let mut seen = 0usize;
    let mut dirs: Vec<PathBuf> = PROGRAM_DIRS.iter().map(PathBuf::from).collect();
    dirs.extend(rule_dirs(policy));
    for dir in dirs {
        walk(&dir, 3, &mut seen, &mut |file| {
            if let Some(text) = file.to_str()
                && may_run(policy, text)
            {
                files.insert(file.to_path_buf());
            }
        });
    }
    if let Ok(i) = interpreter.canonicalize() {
        files.insert(i);
    }
    let interpreters: Vec<PathBuf> = files.iter().filter_map(|f| shebang(f)).collect();
    files.extend(interpreters);
    files.extend(loaders());
    Floor::Files(files)
}

/// The literal directories of path rules (`/opt/tools/*` → `/opt/tools`).
fn rule_dirs(policy: &CompiledPolicy) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for rule in &policy.policy().command_rules {
        for c in rule.commands.iter().filter(|c| c.contains('/')) {
            let literal: String = c.chars().take_while(|ch| !"*?[{\\".contains(*ch)).collect();
            let dir = match literal.rfind('/') {
                Some(0) => "/".to_string(),
                Some(i) => literal[..i].to_string(),
                None => continue,
            };
            if dir != "/" {
                out.push(PathBuf::from(dir));
            }
        }
    }
    out
}

/// Calls `found` with the canonical path of every executable regular file under `dir`.
fn walk(dir: &Path, depth: u32, seen: &mut usize, found: &mut dyn FnMut(&Path)) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        *seen += 1;
        if *seen > MAX_ENTRIES {
            return;
        }
        let path = entry.path();
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            if depth > 1 && !entry.file_type().is_ok_and(|t| t.is_symlink()) {
                walk(&path, depth - 1, seen, found);
            }
            continue;
        }
        if meta.is_file()
            && meta.permissions().mode() & 0o111 != 0
            && let Ok(canonical) = path.canonicalize()
        {
            found(&canonical);
        }
    }
}

/// The interpreter of a `#!` script (the kernel needs to execute it too).
fn shebang(file: &Path) -> Option<PathBuf> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(file).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let end = line.iter().position(|&b| b == b'\n').unwrap_or(line.len());
    let text = std::str::from_utf8(&line[..end]).ok()?;
    let program = text.split_whitespace().next()?;
    Path::new(program).canonicalize().ok()
}

/// The ELF loaders (`ld-linux*.so*`): executing any dynamic program executes one.
fn loaders() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in [
        "/lib64",
        "/lib",
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
    ] {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with("ld-linux")
                && let Ok(c) = e.path().canonicalize()
            {
                out.push(c);
            }
        }
    }
    out
}

/// The Landlock ABI version, `None` when Landlock is unavailable (gVisor, an engine profile that
/// refuses the calls, a kernel without it).
pub(crate) fn landlock_abi() -> Option<u32> {
    // SAFETY: the version query takes no attribute.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    (v > 0).then_some(v as u32)
}

/// A ruleset that handles execution only (reading, writing and the rest stay the supervisor's
/// per-call decisions).
pub(crate) fn exec_ruleset() -> io::Result<OwnedFd> {
    let handled: u64 = ACCESS_FS_EXECUTE;
    // SAFETY: an attribute of its stated size (ABI 1: handled_access_fs only).
    let fd = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &handled as *const u64,
            std::mem::size_of::<u64>(),
            0u32,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

#[repr(C, packed)]
struct PathBeneath {
    allowed_access: u64,
    parent_fd: i32,
}

fn allow_exec(ruleset: &OwnedFd, path: &Path) -> io::Result<()> {
    let c = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: a NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let attr = PathBeneath {
        allowed_access: ACCESS_FS_EXECUTE,
        parent_fd: fd.as_raw_fd(),
    };
    // SAFETY: a rule attribute of the path-beneath type.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            LANDLOCK_RULE_PATH_BENEATH,
            &attr as *const PathBeneath,
            0u32,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Puts `floor` into `ruleset` (for `Open`, execution anywhere).
pub(crate) fn fill(ruleset: &OwnedFd, floor: &Floor) -> io::Result<()> {
    match floor {
        Floor::Open => allow_exec(ruleset, Path::new("/")),
        Floor::Files(files) => {
            for f in files {
                // A file that vanished since the walk is simply not executable.
                if let Err(e) = allow_exec(ruleset, f)
                    && e.kind() != io::ErrorKind::NotFound
                {
                    return Err(e);
                }
            }
            Ok(())
        }
    }
}

/// Restricts the calling thread (and what it starts) to `ruleset`. Async-signal-safe.
///
/// # Safety
/// Only in a child about to exec (it restricts the calling thread for good).
pub(crate) unsafe fn restrict_self(ruleset: RawFd) -> bool {
    // SAFETY: plain integer arguments.
    unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(yaml_commands: &str) -> CompiledPolicy {
        let json = format!(
            r#"{{"version": 1, "name": "t", "file_rules": [{{"name": "all", "paths": ["/**"], "operations": ["*"], "decision": "allow"}}], "command_rules": {yaml_commands}}}"#
        );
        scriptgate_policy::WirePolicy::from_json(&json)
            .expect("json")
            .compile()
            .expect("compiles")
    }

    #[test]
    fn a_permissive_catch_all_needs_no_floor() {
        let p = policy(r#"[{"name": "any", "commands": ["*"], "decision": "allow"}]"#);
        assert_eq!(plan(&p, Path::new("/usr/bin/bash")), Floor::Open);
    }

    #[test]
    fn a_list_of_programs_becomes_a_list_of_files_with_their_loader() {
        let p = policy(
            r#"[{"name": "ls", "commands": ["ls", "sh"], "decision": "allow"},
                {"name": "rest", "commands": ["*"], "decision": "deny"}]"#,
        );
        let Floor::Files(files) = plan(&p, Path::new("/usr/bin/bash")) else {
            panic!("a floor");
        };
        let ls = Path::new("/usr/bin/ls").canonicalize().expect("ls exists");
        assert!(files.contains(&ls), "{files:?}");
        assert!(!files.iter().any(|f| f.ends_with("cat")), "{files:?}");
        assert!(
            files
                .iter()
                .any(|f| f.to_string_lossy().contains("ld-linux")),
            "{files:?}"
        );
    }
}
