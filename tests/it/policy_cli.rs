//! `scriptgate policy …` and policy start-up errors, by running the real binary (no engine needed).

use std::path::Path;
use std::process::Command;

use scriptgate::policy::engine::Operation;
use scriptgate::policy::{Chooser, Policies, PolicySettings};

fn scriptgate(args: &[&str], config: Option<&Path>) -> (i32, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_scriptgate"));
    command.args(args).env_remove("SCRIPTGATE_CONFIG");
    if let Some(config) = config {
        command.env("SCRIPTGATE_CONFIG", config);
    }
    let out = command.output().expect("binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A config whose `policies_dir` holds `files`.
fn with_policies(files: &[(&str, &str)]) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).expect("mkdir");
    for (name, text) in files {
        std::fs::write(policies.join(name), text).expect("write policy");
    }
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[policy]\npolicies_dir = {:?}\n",
            policies.display().to_string()
        ),
    )
    .expect("write config");
    (dir, config)
}

const TEAM: &str = "version: 1\nname: team\ndescription: A team's own.\nfile_rules:\n  - name: tmp-only\n    paths: [/tmp/**]\n    operations: [\"*\"]\n    decision: allow\nnetwork_rules:\n  - name: pypi\n    domains: [\"*.pythonhosted.org\", pypi.org]\n    ports: [443]\n    decision: approve\n    message: \"{domain} needs an operator\"\n";

#[test]
fn list_names_every_policy_with_its_origin_and_the_default() {
    let (code, stdout, stderr) = scriptgate(&["policy", "list"], None);
    assert_eq!(code, 0, "{stderr}");
    let rows: Vec<&str> = stdout.lines().collect();
    assert_eq!(rows.len(), 3, "{stdout}");
    assert!(rows[0].starts_with("audit ") && rows[0].contains("built-in"));
    assert!(rows[1].starts_with("default ") && rows[1].ends_with("(default)"));
    assert!(rows[2].starts_with("strict "));

    let (_dir, config) = with_policies(&[("team.yml", TEAM)]);
    let (code, stdout, stderr) = scriptgate(&["policy", "list"], Some(&config));
    assert_eq!(code, 0, "{stderr}");
    let team = stdout
        .lines()
        .find(|l| l.starts_with("team "))
        .expect("the directory's policy is listed");
    assert!(
        team.contains("team.yml") && team.contains("A team's own."),
        "{team}"
    );
}

#[test]
fn show_prints_the_enforced_policy_which_reads_back() {
    let (code, stdout, stderr) = scriptgate(&["policy", "show", "default"], None);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("# default: built-in\n"), "{stdout}");
    let policy: scriptgate::policy::engine::Policy =
        serde_norway::from_str(&stdout).expect("the output is a policy file");
    assert_eq!(policy.name, "default");
    let (code, _, stderr) = scriptgate(&["policy", "show", "nope"], None);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("no policy `nope` (there are: audit, default, strict)"),
        "{stderr}"
    );
}

#[test]
fn validate_accepts_good_files_and_names_file_and_line_of_bad_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = dir.path().join("team.yml");
    std::fs::write(&good, TEAM).expect("write");
    let bad = dir.path().join("bad.yml");
    std::fs::write(
        &bad,
        "version: 1\nname: bad\ncommand_rules:\n  - name: r\n    commands: [pip]\n    decision: deny\n  - name: r\n    commands: [curl]\n    decision: deny\n",
    )
    .expect("write");
    let (code, stdout, stderr) =
        scriptgate(&["policy", "validate", &good.display().to_string()], None);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("team.yml: ok (policy `team`"), "{stdout}");

    let misnamed = dir.path().join("other.yml");
    std::fs::write(&misnamed, TEAM).expect("write");
    let unknown_rule = dir.path().join("raise.yml");
    std::fs::write(
        &unknown_rule,
        "version: 1\nname: raise\nvalidation_rules: [{name: r, rules: [pyhton-*], decision: deny}]\n",
    )
    .expect("write");
    let paths = [&good, &bad, &misnamed, &unknown_rule].map(|p| p.display().to_string());
    let mut args = vec!["policy", "validate"];
    args.extend(paths.iter().map(String::as_str));
    let (code, stdout, stderr) = scriptgate(&args, None);
    assert_eq!(code, 1, "{stdout}");
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(stdout.contains("team.yml: ok"), "{stdout}");
    let errors: Vec<&str> = stderr.lines().collect();
    assert_eq!(errors.len(), 3, "{stderr}");
    assert!(
        errors[0].starts_with(&format!("{}:7:11: ", paths[1])),
        "{stderr}"
    );
    assert!(errors[0].contains("duplicate rule name `r`"), "{stderr}");
    assert!(
        errors[1].starts_with(&format!("{}:2:1: the policy is named `team`", paths[2])),
        "{stderr}"
    );
    assert!(
        errors[2].starts_with(&paths[3]) && errors[2].contains("`pyhton-*` names no rule"),
        "{stderr}"
    );
}

#[test]
fn test_prints_the_decision_and_the_rule_that_made_it() {
    let (code, stdout, stderr) = scriptgate(
        &[
            "policy",
            "test",
            "default",
            "file:write:/etc/passwd",
            "command:pip install requests",
            "net:example.com:443",
        ],
        None,
    );
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(
        lines[0].starts_with("deny      file:write:/etc/passwd  (rule `no-writes-outside-scratch`): write of /etc/passwd refused"),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with("log       command:pip install requests  (rule `package-installs`)"),
        "{stdout}"
    );
    assert!(
        lines[2].starts_with("deny      net:example.com:443  (rule `no-network`)"),
        "{stdout}"
    );
}

#[test]
fn test_in_json_gives_the_runtime_decision_for_each_operation() {
    let (_dir, config) = with_policies(&[("team.yml", TEAM)]);
    let operations = [
        "file:read:/tmp/data.csv",
        "file:read:/etc/hostname",
        "net:files.pythonhosted.org:443",
        "net:[::ffff:127.0.0.1]:80",
        "command:/usr/bin/ls -l",
    ];
    let mut args = vec!["policy", "test", "team", "--json"];
    args.extend(operations);
    let (code, stdout, stderr) = scriptgate(&args, Some(&config));
    assert_eq!(code, 0, "{stderr}");
    let answers: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(answers.len(), operations.len());

    // The same compiled policy the service and the supervisor decide with.
    let settings = PolicySettings {
        policies_dir: Some(config.parent().expect("dir").join("policies")),
        ..PolicySettings::default()
    };
    let policies = Policies::load(&settings).expect("loads");
    let team = &policies
        .select(Chooser::Anyone, Some("team"))
        .expect("selectable")
        .expect("exists")
        .policy;
    let runtime = [
        team.decide_file(Operation::Read, "/tmp/data.csv").rule(),
        team.decide_file(Operation::Read, "/etc/hostname").rule(),
        team.decide_network(Some("files.pythonhosted.org"), None, 443)
            .rule(),
        team.decide_network(None, Some("127.0.0.1".parse().expect("ip")), 80)
            .rule(),
        team.decide_command("/usr/bin/ls", &["/usr/bin/ls", "-l"])
            .rule(),
    ];
    for (answer, rule) in answers.iter().zip(runtime) {
        assert_eq!(answer["rule"].as_str(), rule, "{answer}");
    }
    assert_eq!(answers[0]["decision"], "allow");
    assert_eq!(answers[1]["decision"], "deny");
    assert!(answers[1]["rule"].is_null());
    assert_eq!(answers[2]["decision"], "approve");
    assert_eq!(
        answers[2]["message"],
        "files.pythonhosted.org needs an operator"
    );
    assert_eq!(answers[3]["decision"], "deny");
    assert_eq!(answers[4]["decision"], "deny");
}

#[test]
fn malformed_operations_are_usage_errors_with_nothing_printed() {
    let (code, stdout, stderr) = scriptgate(
        &["policy", "test", "default", "file:read:/x", "file:raed:/x"],
        None,
    );
    assert_eq!(code, 2);
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("unknown operation `raed`"), "{stderr}");
}

#[test]
fn a_malformed_policy_stops_start_up_naming_its_file_and_line() {
    let (dir, config) = with_policies(&[(
        "broken.yml",
        "version: 1\nname: broken\nfile_rules:\n  - name: r\n    paths: [/tmp/**]\n    operations: [read, raed]\n    decision: allow\n",
    )]);
    let out = Command::new(env!("CARGO_BIN_EXE_scriptgate"))
        .args(["serve", "--insecure-no-auth", "--listen", "127.0.0.1:0"])
        .env("SCRIPTGATE_CONFIG", &config)
        .env("SCRIPTGATE_DATA_DIR", dir.path())
        .output()
        .expect("binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let expected = format!(
        "{}:6:24: ",
        dir.path().join("policies").join("broken.yml").display()
    );
    assert!(stderr.contains(&expected), "{stderr}");
    assert!(stderr.contains("unknown variant `raed`"), "{stderr}");
}
