//! Starting the real service (on the real engine, or over the fake runner of [`crate::fake`]) or
//! the sandbox alone for a test, and checking what it leaves behind.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::models::ContainerSummary;
use bollard::query_parameters::ListContainersOptions;
use scriptgate::config::Config;
use scriptgate::domain::script::{Language, Script};
use scriptgate::domain::verdict::Verdict;
use scriptgate::domain::work::{DEFAULT_PROFILE, ScriptRun};
use scriptgate::sandbox::docker::{DockerConfig, DockerSandbox};
use scriptgate::sandbox::{RunRequest, RunSpec};
use serde_json::Value;
use tokio::sync::oneshot;

use crate::fake::{Fake, FakeRunner};

/// A unique instance label, so tests sharing one engine never see (or reap) each other's containers.
pub fn instance() -> String {
    format!("test-{}", uuid::Uuid::new_v4().simple())
}

pub async fn docker() -> Docker {
    scriptgate::sandbox::docker::connect(None)
        .await
        .expect("a Docker engine for the integration tests")
}

/// Managed containers of `instance` (running or not).
pub async fn containers(instance: &str) -> Vec<String> {
    labelled(&[
        "scriptgate.managed=true".to_string(),
        format!("scriptgate.instance={instance}"),
    ])
    .await
    .expect("list containers")
    .into_iter()
    .filter_map(|c| c.id)
    .collect()
}

/// Containers (running or not) carrying every one of `labels` (`key=value`).
pub async fn labelled(labels: &[String]) -> Result<Vec<ContainerSummary>, bollard::errors::Error> {
    let filters = HashMap::from([("label".to_string(), labels.to_vec())]);
    docker()
        .await
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        }))
        .await
}

/// Waits until `instance` has at most `n` containers (removal is asynchronous by design).
pub async fn settle(instance: &str, n: usize, within: Duration) -> usize {
    let deadline = Instant::now() + within;
    loop {
        let count = containers(instance).await.len();
        if count <= n || Instant::now() > deadline {
            return count;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The real service on an ephemeral port.
#[derive(Debug)]
pub struct Service {
    pub url: String,
    pub instance: String,
    pub data_dir: std::path::PathBuf,
    pub client: reqwest::Client,
    /// The runner when the service runs over the fake one (no containers).
    fake: Option<Arc<FakeRunner>>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), scriptgate::StartError>>>,
}

/// The configuration every test service starts from: its own instance label and data directory,
/// the pool off (cold runs); `tweak` changes the rest.
fn test_config(tweak: impl FnOnce(&mut Config)) -> Config {
    let mut config = Config::default();
    config.sandbox.instance = instance();
    config.sandbox.pool.size = 0;
    config.data_dir = Some(tempfile::tempdir().expect("data dir").keep());
    // A whole service tests the image of this tree too (see `runner_image`).
    if std::env::var_os("RUNNER_IMAGE_UNDER_TEST").is_some() {
        config.sandbox.python_image = runner_image();
        config.sandbox.bash_image = runner_image();
    }
    // The same for the `data` profile's image (`DATA_IMAGE_UNDER_TEST`).
    if let Ok(image) = std::env::var("DATA_IMAGE_UNDER_TEST") {
        config
            .sandbox
            .profiles
            .push(scriptgate::sandbox::profiles::ProfileConfig {
                image,
                ..scriptgate::sandbox::profiles::builtin_data()
            });
    }
    // The variable a spawned service reads: the suite can run with enforcement on by default.
    if std::env::var("SCRIPTGATE_POLICY__ENFORCE_DEFAULT").is_ok_and(|v| v == "true") {
        config.policy.enforce_default = true;
    }
    tweak(&mut config);
    config
}

/// Runs that name no policy are not enforced, whatever the suite's `enforce_default`: for tests
/// whose subject is what happens without a policy.
pub fn unenforced_by_default(config: &mut Config) {
    config.policy.enforce_default = false;
}

/// What a test's service starts with beyond [`test_config`]: policy files and changes to the
/// configuration, in order; then [`Setup::start`] (the real engine) or [`Setup::fake`].
#[derive(Default)]
pub struct Setup {
    policies: Vec<(String, String)>,
    tweaks: Vec<Tweak>,
}

/// A change to a test service's configuration.
type Tweak = Box<dyn FnOnce(&mut Config) + Send>;

impl Setup {
    /// The policy file `<name>.yml` in the service's own policies directory.
    pub fn policy(mut self, name: &str, yaml: &str) -> Setup {
        self.policies.push((name.into(), yaml.into()));
        self
    }

    /// A change to the configuration (applied after the policies directory is set).
    pub fn config(mut self, tweak: impl FnOnce(&mut Config) + Send + 'static) -> Setup {
        self.tweaks.push(Box::new(tweak));
        self
    }

    /// The service on the real engine.
    pub async fn start(self) -> Service {
        Service::start(|c| self.apply(c)).await
    }

    /// The service over `runner`: no engine (contract tests).
    pub async fn fake(self, runner: FakeRunner) -> Service {
        Service::fake(runner, |c| self.apply(c)).await
    }

    fn apply(self, config: &mut Config) {
        if !self.policies.is_empty() {
            let dir = tempfile::tempdir().expect("policies dir").keep();
            for (name, yaml) in &self.policies {
                std::fs::write(dir.join(format!("{name}.yml")), yaml).expect("policy file");
            }
            config.policy.policies_dir = Some(dir);
        }
        for tweak in self.tweaks {
            tweak(config);
        }
    }
}

/// A bearer token `token` named `name`, as the configuration lists it.
pub fn token(name: &str, token: &str) -> scriptgate::auth::TokenSpec {
    scriptgate::auth::TokenSpec {
        name: name.into(),
        token: Some(token.into()),
        sha256: None,
    }
}

/// Two agents: `research-bot` (`agent`), who may select any policy, and `ci-bot` (`ci`), whose
/// runs default to `strict` and who may select `audit` besides.
pub fn two_agents(config: &mut Config, agent: &str, ci: &str) {
    config.agent_tokens = vec![token("research-bot", agent), token("ci-bot", ci)];
    config.policy.agents.insert(
        "ci-bot".into(),
        scriptgate::policy::AgentPolicy {
            default: Some("strict".into()),
            selectable: vec!["audit".into()],
        },
    );
}

impl Service {
    /// A service with policy files or configuration changes: `Service::setup().policy(…).start()`.
    pub fn setup() -> Setup {
        Setup::default()
    }

    /// The service on the real engine, with the pool off (cold runs) unless `tweak` says otherwise.
    pub async fn start(tweak: impl FnOnce(&mut Config)) -> Service {
        let config = test_config(tweak);
        let listener = bind().await;
        let (tx, rx) = oneshot::channel::<()>();
        let mut service = Service::new(&config, &listener, tx, None);
        service.task = Some(tokio::spawn(scriptgate::run(config, listener, async {
            let _ = rx.await;
        })));
        service.wait_healthy().await;
        service
    }

    /// The real service over `runner`: no engine, no containers (contract tests).
    pub async fn fake(runner: FakeRunner, tweak: impl FnOnce(&mut Config)) -> Service {
        let config = test_config(tweak);
        let runner = Arc::new(runner);
        let validator = scriptgate::validator(&config).expect("rules");
        let app = scriptgate::App::with_runner(&config, validator, Arc::new(Fake(runner.clone())))
            .await
            .expect("the app starts");
        let listener = bind().await;
        let (tx, rx) = oneshot::channel::<()>();
        let mut service = Service::new(&config, &listener, tx, Some(runner));
        service.task = Some(tokio::spawn(scriptgate::serve(app, listener, async {
            let _ = rx.await;
        })));
        service.wait_healthy().await;
        service
    }

    fn new(
        config: &Config,
        listener: &tokio::net::TcpListener,
        shutdown: oneshot::Sender<()>,
        fake: Option<Arc<FakeRunner>>,
    ) -> Service {
        Service {
            url: format!("http://{}", listener.local_addr().expect("addr")),
            instance: config.sandbox.instance.clone(),
            data_dir: config.data_dir(),
            client: reqwest::Client::new(),
            fake,
            shutdown: Some(shutdown),
            task: None,
        }
    }

    /// The fake runner under this service (a service on the real engine has none).
    pub fn runner(&self) -> &FakeRunner {
        self.fake
            .as_deref()
            .expect("a service over the fake runner")
    }

    /// Waits until `/healthz` answers (a hang bound, not a speed claim).
    async fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self
            .client
            .get(format!("{}/healthz", self.url))
            .send()
            .await
            .is_err()
        {
            assert!(Instant::now() < deadline, "service did not come up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let response = self
            .client
            .post(format!("{}{path}", self.url))
            .json(body)
            .send()
            .await
            .expect("request");
        let status = response.status().as_u16();
        let body = response.json().await.unwrap_or(Value::Null);
        (status, body)
    }

    pub async fn execute(&self, language: &str, script: &str, timeout: u64) -> Value {
        let (status, body) = self
            .post(
                "/v1/execute",
                &serde_json::json!({"script_content": script, "script_type": language, "timeout": timeout}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Waits until `n` warm containers are ready (as `/readyz` reports).
    pub async fn wait_pool(&self, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = self
                .client
                .get(format!("{}/readyz", self.url))
                .send()
                .await
                .ok();
            let body: Value = match ready {
                Some(r) => r.json().await.unwrap_or(Value::Null),
                None => Value::Null,
            };
            if body["pool_ready"].as_u64().unwrap_or(0) >= n {
                return;
            }
            assert!(Instant::now() < deadline, "pool did not fill: {body}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until one profile's warm pool (all its languages, `GET /v1/profiles`) holds `n`
    /// ready containers: the total of `/readyz` may be reached by other profiles first.
    pub async fn wait_profile_pool(&self, name: &str, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let listed: Value = match self
                .client
                .get(format!("{}/v1/profiles", self.url))
                .send()
                .await
            {
                Ok(r) => r.json().await.unwrap_or(Value::Null),
                Err(_) => Value::Null,
            };
            let ready = listed["profiles"]
                .as_array()
                .and_then(|ps| ps.iter().find(|p| p["name"] == name))
                .and_then(|p| p["pool_ready"].as_u64())
                .unwrap_or(0);
            if ready >= n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{name} pool did not fill: {listed}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Graceful shutdown; then nothing of this instance may remain (no container; over the fake
    /// runner, no lease).
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("service task").expect("service ran");
        }
        match &self.fake {
            Some(runner) => assert_eq!(runner.leased(), 0, "leases left after shutdown"),
            None => {
                let left = containers(&self.instance).await;
                assert!(left.is_empty(), "containers left after shutdown: {left:?}");
            }
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        // A failed test: the graceful shutdown may not get to run before the test process exits,
        // so this instance's containers are removed here, synchronously (only its own label).
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
            if self.fake.is_none() {
                remove_instance_now(&self.instance);
            }
        }
    }
}

async fn bind() -> tokio::net::TcpListener {
    tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port")
}

/// `docker rm -f` of every container of `instance`, without the async runtime (for `Drop`).
pub fn remove_instance_now(instance: &str) {
    let listed = std::process::Command::new("docker")
        .args(["ps", "-aq", "--filter", "label=scriptgate.managed=true"])
        .args(["--filter", &format!("label=scriptgate.instance={instance}")])
        .output();
    let Ok(listed) = listed else { return };
    let ids: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    if !ids.is_empty() {
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f"])
            .args(&ids)
            .output();
    }
}

/// The runner image to test, when not the default one: on an engine shared by several
/// checkouts, `RUNNER_IMAGE_UNDER_TEST` names the image built from this tree (by its hash tag).
/// (Not `SCRIPTGATE_…`: the service reads every variable with that prefix as configuration.)
pub fn runner_image() -> String {
    std::env::var("RUNNER_IMAGE_UNDER_TEST")
        .unwrap_or_else(|_| scriptgate::sandbox::docker::images::DEFAULT_IMAGE.to_string())
}

/// The sandbox alone: hostile scripts run here with validation bypassed, since the container is
/// the boundary and must hold on its own.
pub async fn sandbox(tweak: impl FnOnce(&mut DockerConfig)) -> DockerSandbox {
    let mut config = DockerConfig {
        instance: instance(),
        python_image: runner_image(),
        bash_image: runner_image(),
        ..DockerConfig::default()
    };
    config.pool.size = 0;
    tweak(&mut config);
    DockerSandbox::start(config).await.expect("sandbox starts")
}

/// A run of `script` that the test vouches for, without validation: the sandbox tests drive the
/// container with scripts validation would reject, because the container must hold on its own.
/// (The service only ever clears a run with the validator's verdict.)
pub fn vouched(language: Language, script: &str, timeout: u64) -> RunRequest {
    let work = ScriptRun::new(
        Script::new(language, script),
        String::new(),
        Duration::from_secs(timeout),
        DEFAULT_PROFILE.into(),
    );
    let vouched = Verdict {
        language,
        valid: true,
        layer: None,
        findings: Vec::new(),
    };
    RunRequest {
        execution_id: None,
        language,
        spec: RunSpec::cleared(&work, &vouched).expect("a passing verdict clears the run"),
    }
}

/// The Python of the test virtualenv (`scripts/test-deps.sh` builds it from
/// `tests/py/requirements.txt`), or `SCRIPTGATE_TEST_PYTHON`.
pub fn python() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("SCRIPTGATE_TEST_PYTHON") {
        return p.into();
    }
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/py-env/bin/python");
    assert!(
        p.exists(),
        "{} is missing: run scripts/test-deps.sh (scripts/test does)",
        p.display()
    );
    p
}

/// A script of `tests/py/`.
pub fn py_script(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/py")
        .join(name)
}

/// Runs a program to completion off the async runtime; panics with its output when it fails.
pub async fn run_ok(mut command: std::process::Command) -> String {
    let shown = format!("{command:?}");
    let out = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("join")
        .unwrap_or_else(|e| panic!("{shown}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{shown} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    stdout
}

/// Every managed container on the engine, with its labels.
pub async fn managed() -> Vec<(String, HashMap<String, String>)> {
    labelled(&["scriptgate.managed=true".to_string()])
        .await
        .expect("list containers")
        .into_iter()
        .filter_map(|c| Some((c.id?, c.labels.unwrap_or_default())))
        .collect()
}

/// Managed containers whose instance label starts with `prefix`.
pub async fn containers_with_prefix(prefix: &str) -> Vec<String> {
    managed()
        .await
        .into_iter()
        .filter(|(_, labels)| {
            labels
                .get("scriptgate.instance")
                .is_some_and(|i| i.starts_with(prefix))
        })
        .map(|(id, _)| id)
        .collect()
}

/// Gives the built-in `data` profile no warm pool, for tests that count what remains of the
/// default profile's pool after their load.
pub fn without_data_pool(config: &mut Config) {
    config.sandbox.profiles = vec![scriptgate::sandbox::profiles::ProfileConfig {
        pool_size: Some(0),
        ..scriptgate::sandbox::profiles::builtin_data()
    }];
}
