//! The sidecar deployment (`docker-compose.yml`) with Debian's docker-compose v1, as a user runs
//! it: the service image built by compose on the offline base (from this test's binary instead of
//! the release one, which `scripts/test` does not build), the stack up until Docker reports it
//! healthy, README's approval walkthrough through the published port with the example tokens of
//! `deploy/tokens.example.env`, then `down -v`, after which nothing of the project remains: no
//! container, volume or network of it, and no runner container of its instance.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bollard::query_parameters::{
    InspectContainerOptions, ListContainersOptions, ListNetworksOptions, ListVolumesOptions,
};
use serde_json::{Value, json};

use crate::harness;

/// The example tokens of `deploy/tokens.example.env`.
const AGENT: &str = "agent-token-2f9c1e7a5b3d";
const OPERATOR: &str = "operator-token-8e4b6a2c1f";
const SERVICE: &str = "scriptgate";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One compose project of this test. Dropping it takes it down, removes any runner container of
/// its instance and the image it built, also when the test fails midway; everything it removes
/// carries this run's unique names.
struct Stack {
    project: String,
    instance: String,
    image: String,
    port: u16,
    override_file: PathBuf,
    /// The host directory of the egress proxy's sockets (`SIDECAR_EGRESS_DIR`).
    egress: tempfile::TempDir,
    _context: tempfile::TempDir,
    down: bool,
}

impl Stack {
    /// A build context laid out like the repository's (`target/release/scriptgate`, the
    /// Dockerfile, `.dockerignore`) around this test's binary, and an override file that points
    /// the service's build at it, names the image after this run and checks health every second.
    fn new() -> Stack {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let context = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("context dir");
        let put = |relative: &str, from: &Path| {
            let to = context.path().join(relative);
            std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
            // The binary is large: a hard link when the file system allows it.
            if std::fs::hard_link(from, &to).is_err() {
                std::fs::copy(from, &to).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
            }
        };
        put(
            "target/release/scriptgate",
            Path::new(env!("CARGO_BIN_EXE_scriptgate")),
        );
        put(
            "images/service/Dockerfile",
            &repo().join("images/service/Dockerfile"),
        );
        put(".dockerignore", &repo().join(".dockerignore"));
        let image = format!("scriptgate-compose-test:{}", &id[..12]);
        let override_file = context.path().join("override.yml");
        let quoted = |s: &str| serde_json::to_string(s).expect("quote");
        std::fs::write(
            &override_file,
            format!(
                "version: \"2.4\"\nservices:\n  {SERVICE}:\n    image: {}\n    build:\n      \
                 context: {}\n    healthcheck:\n      interval: 1s\n",
                quoted(&image),
                quoted(&context.path().display().to_string()),
            ),
        )
        .expect("override file");
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            listener.local_addr().expect("addr").port()
        };
        Stack {
            project: format!("scriptgate-compose-{}", &id[..12]),
            instance: harness::instance(),
            image,
            port,
            override_file,
            egress: tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("egress dir"),
            _context: context,
            down: false,
        }
    }

    /// `docker-compose` on this project, with the variables of `docker-compose.yml` set here (so
    /// a developer's `.env` cannot change them).
    fn compose(&self, args: &[&str]) -> Command {
        let mut command = Command::new("docker-compose");
        command
            .current_dir(repo())
            .args(["--project-name", &self.project, "--file"])
            .arg(repo().join("docker-compose.yml"))
            .arg("--file")
            .arg(&self.override_file)
            .args(args)
            .env("SIDECAR_PORT", self.port.to_string())
            .env("SIDECAR_INSTANCE", &self.instance)
            .env("SIDECAR_ENV_FILE", "deploy/tokens.example.env")
            .env("SIDECAR_EGRESS_DIR", self.egress.path());
        command
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    async fn logs(&self) -> String {
        let mut command = self.compose(&["logs", "--no-color", "--tail", "50"]);
        tokio::task::spawn_blocking(move || command.output())
            .await
            .expect("join")
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_else(|e| format!("(no logs: {e})"))
    }

    /// Waits until Docker runs the healthcheck (`scriptgate healthcheck`) successfully; returns
    /// the container as `docker inspect` shows it.
    async fn wait_healthy(&self) -> Value {
        let id = harness::run_ok(self.compose(&["ps", "-q", SERVICE])).await;
        let id = id.trim();
        assert!(!id.is_empty(), "no {SERVICE} container");
        let docker = harness::docker().await;
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let inspect = docker
                .inspect_container(id, None::<InspectContainerOptions>)
                .await
                .expect("inspect the service container");
            let inspect = serde_json::to_value(inspect).expect("JSON");
            let state = &inspect["State"];
            match state["Health"]["Status"].as_str() {
                Some("healthy") => return inspect,
                Some("unhealthy") => {}
                _ if state["Running"] == true && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    continue;
                }
                _ => {}
            }
            panic!(
                "the service did not become healthy: {state}\n--- logs\n{}",
                self.logs().await
            );
        }
    }

    async fn down(&mut self) {
        harness::run_ok(self.compose(&["down", "--volumes", "--remove-orphans"])).await;
        self.down = true;
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        if !self.down {
            let _ = self
                .compose(&["down", "--volumes", "--remove-orphans"])
                .output();
        }
        // Runner containers the service could not remove (it was killed): this run's instance.
        let label = format!("label=scriptgate.instance={}", self.instance);
        if let Ok(out) = Command::new("docker")
            .args(["ps", "-aq", "--filter", &label])
            .output()
        {
            for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = Command::new("docker").args(["rm", "-fv", id]).output();
            }
        }
        let _ = Command::new("docker")
            .args(["image", "rm", &self.image])
            .output();
    }
}

async fn call(url: &str, method: &str, bearer: Option<&str>, body: Option<Value>) -> (u16, Value) {
    let mut request = reqwest::Client::new().request(method.parse().expect("method"), url);
    if let Some(token) = bearer {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// `filters` as the engine's list endpoints take them: this compose project's objects.
fn of_project(project: &str) -> HashMap<String, Vec<String>> {
    HashMap::from([(
        "label".to_string(),
        vec![format!("com.docker.compose.project={project}")],
    )])
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sidecar_runs_an_approved_script_and_down_leaves_nothing() {
    match Command::new("docker-compose").arg("version").output() {
        Ok(out) if out.status.success() => {}
        other => {
            panic!("docker-compose is needed (scripts/test-deps.sh installs Debian's): {other:?}")
        }
    }
    let mut stack = Stack::new();
    harness::run_ok(stack.compose(&["build"])).await;
    harness::run_ok(stack.compose(&["up", "--detach"])).await;
    let inspect = stack.wait_healthy().await;

    // The container is what docker-compose.yml promises.
    let host = &inspect["HostConfig"];
    assert_eq!(host["ReadonlyRootfs"], true, "{host}");
    assert_eq!(host["CapDrop"], json!(["ALL"]), "{host}");
    assert_eq!(host["RestartPolicy"]["Name"], "unless-stopped", "{host}");
    let bindings = host["PortBindings"]["8080/tcp"]
        .as_array()
        .expect("8080 published");
    assert!(
        bindings.iter().all(|b| b["HostIp"] == "127.0.0.1"),
        "published beyond loopback: {bindings:?}"
    );
    assert!(
        inspect["Mounts"]
            .as_array()
            .expect("mounts")
            .iter()
            .any(|m| m["Destination"] == "/var/run/docker.sock"),
        "{}",
        inspect["Mounts"]
    );

    // Tokens are required (a non-loopback listener), and come from the example env file.
    let execute = stack.url("/v1/execute");
    let script = json!({"script_content": "print(6 * 7)", "script_type": "python", "timeout": 30});
    let (status, body) = call(&execute, "POST", None, Some(script.clone())).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["type"], "unauthorized", "{body}");

    // Approval is `always`: the agent's script waits for the operator, then runs in a runner
    // container that the service started on the host's engine.
    let (status, submitted) = call(&execute, "POST", Some(AGENT), Some(script)).await;
    assert_eq!(status, 202, "{submitted}");
    assert_eq!(submitted["status"], "pending_approval", "{submitted}");
    let id = submitted["execution_id"].as_str().expect("execution id");
    let (status, decided) = call(
        &stack.url(&format!("/v1/approvals/{id}")),
        "POST",
        Some(OPERATOR),
        Some(json!({"decision": "approve", "reason": "compose test"})),
    )
    .await;
    assert_eq!(status, 200, "{decided}");
    let (status, result) = call(
        &stack.url(&format!("/v1/executions/{id}?wait=30")),
        "GET",
        Some(AGENT),
        None,
    )
    .await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["status"], "completed", "{result}");
    assert_eq!(result["stdout"], "42\n", "{result}");
    assert_eq!(result["approval"]["by"], "alice", "{result}");

    // Its runner containers (the warm pool) carry the instance set through SIDECAR_INSTANCE.
    let deadline = Instant::now() + Duration::from_secs(30);
    while harness::containers(&stack.instance).await.is_empty() {
        assert!(
            Instant::now() < deadline,
            "no runner container labelled {}",
            stack.instance
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Each has its egress directory in the host directory the service writes to, mounted
    // read-only where its forwarder looks (the engine resolved the bind source on the host).
    // (A container that finished its run may be gone by the time it is inspected.)
    let prefix = stack.egress.path().display().to_string();
    let docker = harness::docker().await;
    let mounted = |binds: &[String]| {
        binds
            .iter()
            .any(|b| b.starts_with(&prefix) && b.ends_with(":/run/egress:ro"))
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut binds = Vec::new();
    while !mounted(&binds) && Instant::now() < deadline {
        for runner in harness::containers(&stack.instance).await {
            if let Ok(inspected) = docker
                .inspect_container(&runner, None::<InspectContainerOptions>)
                .await
            {
                binds.extend(
                    inspected
                        .host_config
                        .and_then(|h| h.binds)
                        .unwrap_or_default(),
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(mounted(&binds), "{binds:?}");

    stack.down().await;
    let left: Vec<_> = std::fs::read_dir(stack.egress.path())
        .expect("egress dir")
        .collect();
    assert!(
        left.is_empty(),
        "the service removed its socket directories: {left:?}"
    );
    let docker = harness::docker().await;
    let containers = docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(of_project(&stack.project)),
            ..Default::default()
        }))
        .await
        .expect("list containers");
    assert!(containers.is_empty(), "containers left: {containers:?}");
    let volumes = docker
        .list_volumes(Some(ListVolumesOptions {
            filters: Some(of_project(&stack.project)),
        }))
        .await
        .expect("list volumes")
        .volumes
        .unwrap_or_default();
    assert!(volumes.is_empty(), "volumes left: {volumes:?}");
    let networks = docker
        .list_networks(Some(ListNetworksOptions {
            filters: Some(of_project(&stack.project)),
        }))
        .await
        .expect("list networks");
    assert!(networks.is_empty(), "networks left: {networks:?}");
    // The service removed its runner containers before it exited (SIGTERM from `down`).
    let runners = harness::containers(&stack.instance).await;
    assert!(runners.is_empty(), "runner containers left: {runners:?}");
}
