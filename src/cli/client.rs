//! `scriptgate session …` and `scriptgate exec`: the command-line client of a running service
//! (persistent sessions and one-shot runs over its HTTP API).
//!
//! The service's own configuration is every `SCRIPTGATE_*` variable (unknown names refuse to
//! start it), so the client's fallbacks are `SG_URL` and `SG_TOKEN`: exporting them in a shell
//! that also starts the service changes nothing there.
//!
//! Output: by default what a shell user wants (a command's stdout and stderr on the same
//! streams, its exit code as the process's); `--json` prints the API's answer; `--stream` (for
//! session commands, and for `exec`, which then runs in a session of its own: `oneshot.rs`)
//! prints output as the command produces it. Exit codes: the command's own, 1 for a command
//! that did not run to an exit (validation, timeout, kill), 2 for a request the service refused
//! or could not be reached.
//!
//! Just past 500 lines: the flags, the requests and the three output modes (plain, `--json`,
//! `--stream`) of one small client, which read best together.

mod oneshot;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use futures::StreamExt as _;
use serde_json::{Value, json};

/// Where the service is and who calls it.
#[derive(Debug, clap::Args)]
pub struct Target {
    /// The service's base URL.
    #[arg(
        long,
        env = "SG_URL",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    url: String,
    /// An agent (or, for list and show, operator) bearer token.
    #[arg(long, env = "SG_TOKEN", hide_env_values = true, global = true)]
    token: Option<String>,
    /// Print the API's JSON answers instead of plain output.
    #[arg(long, global = true)]
    json: bool,
}

/// What to run: a command line, a program without a shell, or a script file.
#[derive(Debug, clap::Args)]
pub struct Work {
    /// Run the words as a program and its arguments, without a shell (session commands only).
    #[arg(long)]
    argv: bool,
    /// A script file (`-` for stdin) instead of a command line; its language from `--language`
    /// or the extension (.py, .sh).
    #[arg(long, conflicts_with = "argv")]
    file: Option<PathBuf>,
    #[arg(long, value_parser = ["python", "bash"])]
    language: Option<String>,
    /// Seconds before the command is killed.
    #[arg(long)]
    timeout: Option<u64>,
    /// A file fed to standard input.
    #[arg(long)]
    stdin: Option<PathBuf>,
    /// The command line (its words joined by spaces), or with `--argv` the program and its
    /// arguments. Everything from the first word on belongs to it (`-l` included).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    words: Vec<String>,
}

#[derive(Debug, clap::Subcommand)]
pub enum SessionCommand {
    /// Start a session; prints its id.
    Create {
        /// The runner profile.
        #[arg(long)]
        profile: Option<String>,
        /// `NAME=VALUE`, exported to every command (repeatable).
        #[arg(long = "env", value_name = "NAME=VALUE")]
        env: Vec<String>,
        #[arg(long)]
        idle_timeout: Option<u64>,
        #[arg(long)]
        max_duration: Option<u64>,
    },
    /// List the sessions this token sees.
    List,
    /// A session's state, working directory, environment and counts.
    Show { id: String },
    /// Run a command in a session.
    Exec {
        id: String,
        /// Print output as it is produced (Server-Sent Events); with `--json`, every event as a
        /// JSON line.
        #[arg(long)]
        stream: bool,
        #[command(flatten)]
        work: Work,
    },
    /// Stop a session and remove its sandbox.
    Destroy { id: String },
}

/// A typed answer the service refused with, or a failure to reach it.
#[derive(Debug, thiserror::Error)]
enum ClientError {
    #[error("{kind}: {message}")]
    Api {
        status: u16,
        kind: String,
        message: String,
        body: Value,
    },
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Transport(#[from] reqwest::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

struct Client {
    http: reqwest::Client,
    target: Target,
}

impl Client {
    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let url = format!("{}{path}", self.target.url.trim_end_matches('/'));
        let request = self.http.request(method, url);
        match &self.target.token {
            Some(t) => request.bearer_auth(t),
            None => request,
        }
    }

    async fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, ClientError> {
        let response = request.send().await?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        Err(ClientError::Api {
            status,
            kind: body["error"]["type"]
                .as_str()
                .unwrap_or("http_error")
                .into(),
            message: body["error"]["message"]
                .as_str()
                .map_or_else(|| format!("HTTP {status}"), String::from),
            body,
        })
    }

    async fn json(&self, request: reqwest::RequestBuilder) -> Result<Value, ClientError> {
        let response = self.send(request).await?;
        if response.status() == reqwest::StatusCode::NO_CONTENT {
            return Ok(Value::Null);
        }
        Ok(response.json().await?)
    }
}

/// Runs a `session` subcommand.
pub fn session(command: SessionCommand, target: Target) -> anyhow::Result<ExitCode> {
    drive(target, |client| Box::pin(session_async(client, command)))
}

/// Runs `exec` (one-shot `/v1/execute`; with `stream`, in a session of its own so its output
/// arrives as it is produced).
pub fn exec(work: Work, target: Target, stream: bool) -> anyhow::Result<ExitCode> {
    if stream {
        return drive(target, |client| Box::pin(oneshot::streamed(client, work)));
    }
    drive(target, |client| Box::pin(exec_async(client, work)))
}

type Job<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<ExitCode, ClientError>> + 'a>>;

fn drive(
    target: Target,
    job: impl for<'a> FnOnce(&'a Client) -> Job<'a>,
) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the client's runtime")?;
    let json = target.json;
    let client = Client {
        http: reqwest::Client::new(),
        target,
    };
    match runtime.block_on(job(&client)) {
        Ok(code) => Ok(code),
        Err(ClientError::Api { body, .. }) if json && !body.is_null() => {
            println!("{}", serde_json::to_string_pretty(&body)?);
            Ok(ExitCode::from(2))
        }
        Err(e) => {
            eprintln!("scriptgate: {e}");
            Ok(ExitCode::from(2))
        }
    }
}

async fn session_async(client: &Client, command: SessionCommand) -> Result<ExitCode, ClientError> {
    use reqwest::Method;
    let json = client.target.json;
    match command {
        SessionCommand::Create {
            profile,
            env,
            idle_timeout,
            max_duration,
        } => {
            let mut environment = serde_json::Map::new();
            for pair in env {
                let (k, v) = pair.split_once('=').ok_or_else(|| {
                    ClientError::Usage(format!("--env `{pair}`: expected NAME=VALUE"))
                })?;
                environment.insert(k.into(), json!(v));
            }
            let mut body = json!({"environment": environment});
            for (key, value) in [
                ("profile", profile.map(Value::from)),
                ("idle_timeout_secs", idle_timeout.map(Value::from)),
                ("max_duration_secs", max_duration.map(Value::from)),
            ] {
                if let Some(v) = value {
                    body[key] = v;
                }
            }
            let out = client
                .json(client.request(Method::POST, "/v1/sessions").json(&body))
                .await?;
            print_or(json, &out, || {
                out["session_id"].as_str().unwrap_or("").to_string()
            })
        }
        SessionCommand::List => {
            let out = client
                .json(client.request(Method::GET, "/v1/sessions"))
                .await?;
            print_or(json, &out, || {
                let rows: Vec<String> = out["sessions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|s| {
                        format!(
                            "{}\t{}\t{}\t{}",
                            s["session_id"].as_str().unwrap_or(""),
                            s["state"].as_str().unwrap_or(""),
                            s["command_count"],
                            s["cwd"].as_str().unwrap_or("")
                        )
                    })
                    .collect();
                rows.join("\n")
            })
        }
        SessionCommand::Show { id } => {
            let out = client
                .json(client.request(Method::GET, &format!("/v1/sessions/{id}")))
                .await?;
            print_or(json, &out, || {
                let mut lines = Vec::new();
                for key in [
                    "session_id",
                    "state",
                    "reason",
                    "cwd",
                    "command_count",
                    "created_at",
                    "last_activity_at",
                    "expires_at",
                ] {
                    if !out[key].is_null() {
                        let v = out[key]
                            .as_str()
                            .map_or_else(|| out[key].to_string(), String::from);
                        lines.push(format!("{key}: {v}"));
                    }
                }
                if let Some(env) = out["environment"].as_object() {
                    for (k, v) in env {
                        lines.push(format!("env {k}={}", v.as_str().unwrap_or("")));
                    }
                }
                lines.join("\n")
            })
        }
        SessionCommand::Destroy { id } => {
            client
                .json(client.request(Method::DELETE, &format!("/v1/sessions/{id}")))
                .await?;
            Ok(ExitCode::SUCCESS)
        }
        SessionCommand::Exec { id, stream, work } => {
            let body = work.session_body()?;
            if stream {
                let path = format!("/v1/sessions/{id}/exec/stream");
                let response = client
                    .send(client.request(Method::POST, &path).json(&body))
                    .await?;
                return relay(response, json).await;
            }
            let path = format!("/v1/sessions/{id}/exec");
            let out = client
                .json(client.request(Method::POST, &path).json(&body))
                .await?;
            report(json, &out)
        }
    }
}

async fn exec_async(client: &Client, work: Work) -> Result<ExitCode, ClientError> {
    if work.argv {
        return Err(ClientError::Usage(
            "--argv is for session commands; a one-shot run takes a script".into(),
        ));
    }
    let mut body = work.script_body()?;
    if let Some(t) = work.timeout {
        body["timeout"] = json!(t);
    }
    if let Some(s) = work.stdin_text()? {
        body["stdin"] = json!(s);
    }
    let out = client
        .json(
            client
                .request(reqwest::Method::POST, "/v1/execute")
                .json(&body),
        )
        .await?;
    report(client.target.json, &out)
}

impl Work {
    fn stdin_text(&self) -> Result<Option<String>, ClientError> {
        self.stdin.as_ref().map(|p| read(p)).transpose()
    }

    /// `{script_content, script_type}` from `--file` or the words.
    fn script_body(&self) -> Result<Value, ClientError> {
        let (content, guessed) = match &self.file {
            Some(path) => {
                let guessed = match path.extension().and_then(|e| e.to_str()) {
                    Some("py") => Some("python"),
                    Some("sh" | "bash") => Some("bash"),
                    _ => None,
                };
                (read(path)?, guessed)
            }
            None if !self.words.is_empty() => (self.words.join(" "), Some("bash")),
            None => {
                return Err(ClientError::Usage(
                    "nothing to run: give a command line or --file".into(),
                ));
            }
        };
        let language = self.language.as_deref().or(guessed).ok_or_else(|| {
            ClientError::Usage("--language python|bash is needed for this file".into())
        })?;
        Ok(json!({"script_content": content, "script_type": language}))
    }

    /// The body of a session command.
    fn session_body(&self) -> Result<Value, ClientError> {
        let mut body = if self.argv {
            if self.words.is_empty() {
                return Err(ClientError::Usage("--argv needs a program".into()));
            }
            json!({"argv": self.words})
        } else if self.file.is_some() {
            self.script_body()?
        } else if self.words.is_empty() {
            return Err(ClientError::Usage(
                "nothing to run: give a command line, --argv or --file".into(),
            ));
        } else {
            json!({"command": self.words.join(" ")})
        };
        if let Some(t) = self.timeout {
            body["timeout"] = json!(t);
        }
        if let Some(s) = self.stdin_text()? {
            body["stdin"] = json!(s);
        }
        Ok(body)
    }
}

fn read(path: &std::path::Path) -> Result<String, ClientError> {
    if path == std::path::Path::new("-") {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin().lock(), &mut text)?;
        return Ok(text);
    }
    Ok(std::fs::read_to_string(path)?)
}

fn print_or(
    json: bool,
    value: &Value,
    plain: impl FnOnce() -> String,
) -> Result<ExitCode, ClientError> {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(value).unwrap_or_default()
        );
    } else {
        let text = plain();
        if !text.is_empty() {
            println!("{text}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A result (`/v1/execute`'s or a session command's): its output, and its exit code as ours.
fn report(json: bool, out: &Value) -> Result<ExitCode, ClientError> {
    if json {
        println!("{}", serde_json::to_string_pretty(out).unwrap_or_default());
    } else {
        print!("{}", out["stdout"].as_str().unwrap_or(""));
        eprint!("{}", out["stderr"].as_str().unwrap_or(""));
        std::io::stdout().flush()?;
        explain(out);
    }
    Ok(exit_code(out))
}

/// Why a command did not exit by itself, on stderr.
fn explain(out: &Value) {
    if out["validation_failed"] == true {
        eprintln!(
            "scriptgate: rejected by validation ({}):",
            out["validation"]["layer"].as_str().unwrap_or("?")
        );
        for f in out["validation"]["findings"]
            .as_array()
            .into_iter()
            .flatten()
        {
            eprintln!(
                "  line {}: {} ({})",
                f["line"],
                f["message"].as_str().unwrap_or(""),
                f["rule"].as_str().unwrap_or("")
            );
        }
    } else if out["exit_code"].is_null() && !out["error"].is_null() {
        eprintln!(
            "scriptgate: {}: {}",
            out["error"]["type"].as_str().unwrap_or("error"),
            out["error"]["message"].as_str().unwrap_or("")
        );
    }
}

fn exit_code(out: &Value) -> ExitCode {
    match out["exit_code"].as_i64() {
        Some(code) => ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1)),
        None => ExitCode::from(1),
    }
}

/// Prints a session command's Server-Sent Events as they arrive.
async fn relay(response: reqwest::Response, json: bool) -> Result<ExitCode, ClientError> {
    let mut body = response.bytes_stream();
    let mut pending = String::new();
    let mut code = ExitCode::from(1);
    while let Some(bytes) = body.next().await {
        let bytes = bytes?;
        pending.push_str(&String::from_utf8_lossy(&bytes));
        while let Some(end) = pending.find("\n\n") {
            let block: String = pending.drain(..end + 2).collect();
            let (mut name, mut data) = (String::from("message"), String::new());
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    name = v.trim().to_string();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.strip_prefix(' ').unwrap_or(v));
                }
            }
            let Ok(value) = serde_json::from_str::<Value>(&data) else {
                continue; // keep-alive comments
            };
            if json {
                println!("{}", json!({"event": name, "data": value}));
                std::io::stdout().flush()?;
            }
            match name.as_str() {
                "stdout" if !json => {
                    print!("{}", value["data"].as_str().unwrap_or(""));
                    std::io::stdout().flush()?;
                }
                "stderr" if !json => eprint!("{}", value["data"].as_str().unwrap_or("")),
                "result" => {
                    if !json {
                        explain(&value);
                    }
                    code = exit_code(&value);
                }
                _ => {}
            }
        }
    }
    Ok(code)
}
