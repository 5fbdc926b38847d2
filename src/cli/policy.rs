//! `scriptgate policy …`: list, show, validate and test policies from the command line.
//!
//! `test` answers from the same compiled policy and the same evaluators the supervisor uses, so its
//! decision is the run-time decision for the same operation.

use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use scriptgate_policy::{CompiledPolicy, Operation, Subject, Verdict};
use serde::Serialize;

use scriptgate::config::Config;
use scriptgate::policy::{Policies, check_rule_ids, parse_policy_file, read_bounded};

#[derive(Debug, clap::Subcommand)]
pub enum PolicyCommand {
    /// List the policies (built-in and from `policy.policies_dir`).
    List,
    /// Print a policy as it is enforced (YAML, domain names normalised).
    Show { name: String },
    /// Check policy files; errors name the file and line. Exit 0 when all are valid, 1 otherwise.
    Validate {
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Print the decision and the rule that made it for each operation: `file:OP:PATH`
    /// (OP: read, write, create, delete, list, stat, exec), `command:"pip install requests"`
    /// (a bare program name matches name rules; give a path, `/usr/bin/pip …`, for path rules),
    /// `net:HOST:PORT` (a domain or an address, `[::1]:80` for IPv6), `rule:RULE-ID` (what the
    /// policy raises a static finding of that validation rule to).
    Test {
        name: String,
        #[arg(required = true)]
        operations: Vec<String>,
        /// One JSON object per operation.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a `policy` subcommand with the configuration at `config` (its `policy` section and
/// validation rules).
pub fn run(command: PolicyCommand, config: Option<&Path>) -> anyhow::Result<ExitCode> {
    let config = Config::load(config)?;
    let mut out = std::io::stdout().lock();
    match command {
        PolicyCommand::List => list(&config, &mut out),
        PolicyCommand::Show { name } => show(&config, &name, &mut out),
        PolicyCommand::Validate { files } => validate(&config, &files, &mut out),
        PolicyCommand::Test {
            name,
            operations,
            json,
        } => test(&config, &name, &operations, json, &mut out),
    }
}

fn load(config: &Config) -> anyhow::Result<Policies> {
    Ok(Policies::load(&config.policy)?)
}

fn list(config: &Config, out: &mut impl Write) -> anyhow::Result<ExitCode> {
    let policies = load(config)?;
    for (name, loaded) in policies.iter() {
        let p = loaded.policy.policy();
        let default = if name == config.policy.default {
            " (default)"
        } else {
            ""
        };
        writeln!(
            out,
            "{name:<16} {:<10} files {:>3}  commands {:>3}  network {:>3}  validation {:>3}  {}{default}",
            loaded.origin.to_string(),
            p.file_rules.len(),
            p.command_rules.len(),
            p.network_rules.len(),
            p.validation_rules.len(),
            p.description,
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

fn show(config: &Config, name: &str, out: &mut impl Write) -> anyhow::Result<ExitCode> {
    let policies = load(config)?;
    let loaded = policies
        .get(name)
        .with_context(|| unknown(&policies, name))?;
    writeln!(out, "# {name}: {}", loaded.origin)?;
    out.write_all(serde_norway::to_string(loaded.policy.policy())?.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

fn unknown(policies: &Policies, name: &str) -> String {
    format!(
        "no policy `{name}` (there are: {})",
        policies.names().collect::<Vec<_>>().join(", ")
    )
}

fn validate(config: &Config, files: &[PathBuf], out: &mut impl Write) -> anyhow::Result<ExitCode> {
    let parsed: Vec<(String, Result<CompiledPolicy, String>)> = files
        .iter()
        .map(|path| {
            let shown = path.display().to_string();
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default();
            let policy = read_bounded(path)
                .map_err(|e| format!("{shown}: cannot read: {e}"))
                .and_then(|text| parse_policy_file(&shown, stem, &text).map_err(|e| e.to_string()));
            (shown, policy)
        })
        .collect();
    // The validation rules take a while to compile: only when some policy raises one.
    let raises = parsed.iter().any(|(_, p)| {
        p.as_ref()
            .is_ok_and(|p| !p.policy().validation_rules.is_empty())
    });
    let validator = raises.then(|| scriptgate::validator(config)).transpose()?;
    let mut all_valid = true;
    for (shown, policy) in parsed {
        let checked = policy.and_then(|policy| match &validator {
            Some(v) => check_rule_ids(&policy, &shown, v.rules())
                .map(|()| policy)
                .map_err(|e| e.to_string()),
            None => Ok(policy),
        });
        match checked {
            Ok(policy) => {
                let p = policy.policy();
                writeln!(
                    out,
                    "{shown}: ok (policy `{}`: {} file, {} command, {} network, {} validation rules)",
                    p.name,
                    p.file_rules.len(),
                    p.command_rules.len(),
                    p.network_rules.len(),
                    p.validation_rules.len()
                )?;
            }
            Err(message) => {
                all_valid = false;
                eprintln!("{message}");
            }
        }
    }
    Ok(if all_valid {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

const UNCHANGED: &str = "unchanged";

/// One answered operation.
#[derive(Debug, Serialize)]
struct Answer<'a> {
    operation: &'a str,
    /// A decision, or `unchanged` for a finding no validation rule raises.
    decision: &'static str,
    rule: Option<&'a str>,
    message: Option<String>,
}

fn answer<'a, S: Subject>(operation: &'a str, v: &Verdict<'a, S>) -> Answer<'a> {
    Answer {
        operation,
        decision: v.decision.as_str(),
        rule: v.rule(),
        message: v.message().map(|m| m.to_string()),
    }
}

fn test(
    config: &Config,
    name: &str,
    operations: &[String],
    json: bool,
    out: &mut impl Write,
) -> anyhow::Result<ExitCode> {
    let policies = load(config)?;
    let policy = &policies
        .get(name)
        .with_context(|| unknown(&policies, name))?
        .policy;
    // Every operation is read before any answer is printed: a usage error leaves no half output.
    let queries = operations
        .iter()
        .map(|op| Query::parse(op).map(|q| (op.as_str(), q)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    for (text, query) in &queries {
        let a = query.decide(policy, text);
        if json {
            serde_json::to_writer(&mut *out, &a)?;
            writeln!(out)?;
        } else {
            let rule = match (a.rule, a.decision) {
                (Some(r), _) => format!("rule `{r}`"),
                (None, UNCHANGED) => "no rule".to_string(),
                (None, _) => "no rule matched: the section's default".to_string(),
            };
            write!(out, "{:<9} {text}  ({rule})", a.decision)?;
            match &a.message {
                Some(m) => writeln!(out, ": {m}")?,
                None => writeln!(out)?,
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// An operation given on the command line.
#[derive(Debug, PartialEq)]
enum Query {
    File(Operation, String),
    Command(Vec<String>),
    Net(Option<String>, Option<IpAddr>, u16),
    Rule(String),
}

impl Query {
    fn parse(text: &str) -> anyhow::Result<Query> {
        let (kind, rest) = text.split_once(':').with_context(|| {
            format!("`{text}`: expected file:OP:PATH, command:CMD, net:HOST:PORT or rule:ID")
        })?;
        match kind {
            "file" => {
                let (op, path) = rest
                    .split_once(':')
                    .with_context(|| format!("`{text}`: expected file:OP:PATH"))?;
                let op = op.parse::<Operation>().map_err(anyhow::Error::msg)?;
                Ok(Query::File(op, path.to_string()))
            }
            "command" => {
                let words = shlex::split(rest)
                    .filter(|w| !w.is_empty())
                    .with_context(|| {
                        format!("`{text}`: not a command line (unbalanced quotes, or empty)")
                    })?;
                Ok(Query::Command(words))
            }
            "net" => parse_net(rest).with_context(|| format!("`{text}`: expected net:HOST:PORT")),
            "rule" if !rest.is_empty() => Ok(Query::Rule(rest.to_string())),
            _ => bail!("`{text}`: expected file:OP:PATH, command:CMD, net:HOST:PORT or rule:ID"),
        }
    }

    fn decide<'a>(&self, policy: &'a CompiledPolicy, text: &'a str) -> Answer<'a> {
        match self {
            Query::File(op, path) => answer(text, &policy.decide_file(*op, path.as_str())),
            Query::Command(words) => answer(text, &policy.decide_command(&words[0], words)),
            Query::Net(domain, ip, port) => {
                answer(text, &policy.decide_network(domain.as_deref(), *ip, *port))
            }
            Query::Rule(id) => match policy.decide_finding(id) {
                Some(v) => answer(text, &v),
                None => Answer {
                    operation: text,
                    decision: UNCHANGED,
                    rule: None,
                    message: Some(format!(
                        "no validation rule of the policy names `{id}`: its findings keep their own severity"
                    )),
                },
            },
        }
    }
}

fn parse_net(rest: &str) -> anyhow::Result<Query> {
    let (host, port) = rest.rsplit_once(':').context("no port")?;
    let port: u16 = port.parse().context("the port is a number 0-65535")?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() {
        bail!("no host");
    }
    Ok(match host.parse::<IpAddr>() {
        Ok(ip) => Query::Net(None, Some(ip), port),
        Err(_) => Query::Net(Some(host.to_string()), None, port),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use scriptgate::policy::PolicySettings;

    #[test]
    fn operations_parse_from_their_command_line_form() {
        assert_eq!(
            Query::parse("file:write:/etc/passwd").expect("file"),
            Query::File(Operation::Write, "/etc/passwd".into())
        );
        assert_eq!(
            Query::parse("file:read:/tmp/a:b").expect("colon in path"),
            Query::File(Operation::Read, "/tmp/a:b".into())
        );
        assert_eq!(
            Query::parse("command:pip install 'requests==2.*'").expect("command"),
            Query::Command(vec!["pip".into(), "install".into(), "requests==2.*".into()])
        );
        assert_eq!(
            Query::parse("net:example.com:443").expect("net"),
            Query::Net(Some("example.com".into()), None, 443)
        );
        assert_eq!(
            Query::parse("net:[::1]:80").expect("v6"),
            Query::Net(None, Some("::1".parse().expect("ip")), 80)
        );
        assert_eq!(
            Query::parse("rule:python-fork").expect("rule"),
            Query::Rule("python-fork".into())
        );
    }

    /// `policies/tests/expectations.yml`: what each built-in policy decides, including every file
    /// operation real Python and Bash performed in the runner image.
    #[test]
    fn the_built_in_policies_decide_as_their_expectations_say() {
        #[derive(serde::Deserialize)]
        struct Expectations {
            ordinary: Vec<String>,
            policies:
                std::collections::BTreeMap<String, std::collections::BTreeMap<String, Expected>>,
        }
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Expected {
            Proceeds(String),
            Operations(Vec<String>),
        }
        let text = include_str!("../../policies/tests/expectations.yml");
        let expectations: Expectations = serde_norway::from_str(text).expect("expectations parse");
        let policies = Policies::load(&PolicySettings::default()).expect("built-ins");
        let mut checked = 0;
        for (name, decisions) in &expectations.policies {
            let policy = &policies.get(name).expect("a built-in policy").policy;
            for (decision, expected) in decisions {
                let exact = [decision.as_str()];
                let (operations, allowed): (&[String], &[&str]) = match expected {
                    Expected::Proceeds(p) => {
                        assert_eq!((decision.as_str(), p.as_str()), ("ordinary", "proceeds"));
                        (&expectations.ordinary, &["allow", "log"])
                    }
                    Expected::Operations(ops) => (ops, &exact),
                };
                for op in operations {
                    let query = Query::parse(op).unwrap_or_else(|e| panic!("{op}: {e}"));
                    let answer = query.decide(policy, op);
                    assert!(
                        allowed.contains(&answer.decision),
                        "{name}: {op} is {} by {:?}, expected {allowed:?}",
                        answer.decision,
                        answer.rule
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked > 2 * expectations.ordinary.len(), "{checked}");
    }

    #[test]
    fn malformed_operations_are_usage_errors() {
        for bad in [
            "file:wirte:/x",
            "file:/x",
            "command:",
            "command:'unbalanced",
            "net:example.com",
            "net::80",
            "net:example.com:http",
            "socket:x",
            "nothing",
        ] {
            assert!(Query::parse(bad).is_err(), "{bad}");
        }
    }
}
