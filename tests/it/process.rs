//! The scriptgate binary as its own process: spawn `scriptgate serve`, wait until it answers, stop
//! it (SIGTERM, then SIGKILL) when the test is done or fails. The benchmarks include this file too:
//! one fixture for every test and benchmark that starts the binary.
//!
//! The fixture binds the listening socket itself and hands it to the child as descriptor 3
//! (`serve --listen-fd 3`), so the port is known before the child starts and no other process
//! can take it in between (picking a free port and releasing it races with every other test).
//! The fixture's own copy is closed once the child has it: when the child dies, the port refuses
//! connections as it would for a real service.

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The descriptor the child finds its listener on.
const LISTEN_FD: i32 = 3;

/// A running `scriptgate serve`, stopped when dropped.
pub(crate) struct Process {
    child: Child,
    port: u16,
    log: Option<PathBuf>,
}

/// What to start: the environment of the child and where its stderr goes.
pub(crate) struct Spawn {
    command: Command,
    log: Option<PathBuf>,
}

impl Spawn {
    /// `scriptgate serve` for `instance` with its data in `data_dir`; stderr discarded.
    pub(crate) fn new(instance: &str, data_dir: &Path) -> Spawn {
        let mut command = Command::new(env!("CARGO_BIN_EXE_scriptgate"));
        command
            .args(["serve", "--listen-fd", &LISTEN_FD.to_string()])
            .env("SCRIPTGATE_SANDBOX__INSTANCE", instance)
            .env("SCRIPTGATE_DATA_DIR", data_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        Spawn { command, log: None }
    }

    pub(crate) fn env(mut self, key: &str, value: &str) -> Spawn {
        self.command.env(key, value);
        self
    }

    /// JSON logs (level info) into the file `log` (see [`Process::log_lines`]).
    pub(crate) fn log_to(mut self, log: PathBuf) -> Spawn {
        let file = std::fs::File::create(&log).expect("log file");
        self.command
            .env("SCRIPTGATE_LOG_FORMAT", "json")
            .env("RUST_LOG", "info")
            .stderr(file);
        self.log = Some(log);
        self
    }

    /// The child's stderr on this process's stderr (benchmarks show the service's warnings).
    #[allow(dead_code)] // for benches/, which include this file
    pub(crate) fn inherit_stderr(mut self) -> Spawn {
        self.command.stderr(Stdio::inherit());
        self
    }

    /// The child's stderr as a pipe (read it with [`Process::child`]).
    pub(crate) fn piped_stderr(mut self) -> Spawn {
        self.command.stderr(Stdio::piped());
        self
    }

    /// Binds a loopback port and starts the child on it (it has not necessarily answered yet).
    pub(crate) fn start(mut self) -> Process {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = listener.local_addr().expect("local address").port();
        let fd = listener.as_raw_fd();
        // SAFETY: between fork and exec only dup2 or fcntl runs, both async-signal-safe; either
        // leaves descriptor 3 without close-on-exec, so the exec'd binary inherits this socket.
        unsafe {
            self.command.pre_exec(move || {
                let handed = if fd == LISTEN_FD {
                    libc::fcntl(fd, libc::F_SETFD, 0)
                } else {
                    libc::dup2(fd, LISTEN_FD)
                };
                if handed == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = self.command.spawn().expect("spawn scriptgate serve");
        drop(listener);
        Process {
            child,
            port,
            log: self.log,
        }
    }
}

impl Process {
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Waits until `path` answers 200 (a hang bound of `limit`, not a speed claim).
    pub(crate) async fn wait_for(&self, path: &str, limit: Duration) {
        let client = reqwest::Client::new();
        let deadline = Instant::now() + limit;
        loop {
            let last = match client.get(self.url(path)).send().await {
                Ok(r) if r.status() == 200 => return,
                Ok(r) => r.text().await.unwrap_or_default(),
                Err(e) => e.to_string(),
            };
            assert!(
                Instant::now() < deadline,
                "{path} did not answer 200 within {limit:?}: {last}\nlog: {:?}",
                self.log_lines()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until `/readyz` answers 200.
    pub(crate) async fn ready(&self) {
        self.wait_for("/readyz", Duration::from_secs(90)).await;
    }

    /// The JSON lines logged so far (empty without [`Spawn::log_to`]).
    pub(crate) fn log_lines(&self) -> Vec<Value> {
        let Some(log) = &self.log else {
            return Vec::new();
        };
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The child's process id.
    #[allow(dead_code)] // for benches/, which include this file
    pub(crate) fn id(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// SIGKILL: no chance to clean up.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM (graceful stop), then SIGKILL if it has not exited within 30 s.
    pub(crate) fn terminate(&mut self) {
        self.signal_term();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
    }

    /// Sends SIGTERM without waiting.
    pub(crate) fn signal_term(&self) {
        let pid = i32::try_from(self.child.id()).expect("pid");
        // SAFETY: signalling a child process this fixture spawned.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.terminate();
        }
    }
}
