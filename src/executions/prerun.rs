//! The run's policy before the run (enforcement point 1): every command the script runs, as
//! validation names it (`Validator::commands`), decided by the policy's `command_rules`, and every
//! validation finding its `validation_rules` raise to `approve` or `deny`.
//!
//! `deny` refuses the run with `policy_violation` (the rule and its message); `approve` holds it
//! for an operator (the existing approval flow); every decision other than `allow` is kept in the
//! record (`policy_checks`) and audited. Approved work is checked again when a worker takes it:
//! a `deny` still refuses it, an `approve` was what the operator decided.

use scriptgate_policy::{CompiledPolicy, Decision, Subject, Verdict as PolicyVerdict};

use crate::domain::record::{ErrorKind, ExecutionError, PolicyCheck, PolicyCheckKind};
use crate::domain::script::Script;
use crate::domain::verdict::{Severity, Verdict};
use crate::validate::Validator;

/// At most this many decisions are kept per run (the first ones; a `deny` always refuses).
const MAX_CHECKS: usize = 64;

/// What the policy decided about one script before its run.
#[derive(Debug, Default)]
pub(crate) struct Review {
    /// Every decision other than `allow`, in the order found, without repeats.
    pub checks: Vec<PolicyCheck>,
    /// The first `deny`, as the record's error.
    pub refusal: Option<ExecutionError>,
}

impl Review {
    /// An operator decides before it runs.
    pub(crate) fn holds(&self) -> bool {
        self.checks.iter().any(|c| c.decision == Decision::Approve)
    }

    pub(super) fn add(&mut self, check: PolicyCheck, policy: &str) {
        if check.decision == Decision::Deny && self.refusal.is_none() {
            self.refusal = Some(ExecutionError::new(
                ErrorKind::PolicyViolation,
                denial(&check, policy),
            ));
        }
        let repeated = self.checks.iter().any(|c| {
            c.kind == check.kind
                && c.target == check.target
                && c.decision == check.decision
                && c.rule == check.rule
        });
        if !repeated && self.checks.len() < MAX_CHECKS {
            self.checks.push(check);
        }
    }
}

/// The policy `name` (`policy`) on `script`, whose validation gave `verdict`: the findings it
/// raises to `deny` become blocking in `verdict`.
pub(crate) fn review(
    validator: &Validator,
    policy: &CompiledPolicy,
    name: &str,
    script: &Script,
    verdict: &mut Verdict,
) -> Review {
    let mut review = Review::default();
    raise_findings(policy, name, verdict, &mut review);
    for command in validator.commands(script) {
        let argv = command.argv();
        let decided = policy.decide_command(&command.name, &argv);
        if decided.decision == Decision::Allow {
            continue;
        }
        let check = PolicyCheck {
            kind: PolicyCheckKind::Command,
            target: command.line_text(),
            decision: decided.decision,
            rule: decided.rule().map(str::to_string),
            message: rendered(&decided),
            line: command.line,
            column: command.column,
            // What an operator approves is not asked again at run time (`approved_commands`).
            argv: (command.constant && decided.decision == Decision::Approve).then(|| argv.clone()),
        };
        review.add(check, name);
    }
    review
}

/// `validation_rules`: a `warn` finding raised to `deny` blocks (the verdict rejects the script),
/// one raised to `approve` holds the run. A finding that blocks already stays as it is.
fn raise_findings(policy: &CompiledPolicy, name: &str, verdict: &mut Verdict, review: &mut Review) {
    for finding in &mut verdict.findings {
        if finding.severity == Severity::Block {
            continue;
        }
        let Some(raised) = policy.decide_finding(&finding.rule) else {
            continue;
        };
        if raised.decision == Decision::Deny {
            finding.severity = Severity::Block;
            finding.message = format!(
                "{} (raised to deny by the policy `{name}`, rule `{}`)",
                finding.message,
                raised.rule().unwrap_or("?")
            );
            verdict.valid = false;
            verdict.layer = Some(
                verdict
                    .layer
                    .map_or(finding.layer, |l| l.min(finding.layer)),
            );
        }
        let check = PolicyCheck {
            kind: PolicyCheckKind::Finding,
            target: finding.rule.clone(),
            decision: raised.decision,
            rule: raised.rule().map(str::to_string),
            message: rendered(&raised),
            line: finding.line,
            column: finding.column,
            argv: None,
        };
        review.add(check, name);
    }
}

fn rendered<S: Subject>(verdict: &PolicyVerdict<'_, S>) -> Option<String> {
    verdict.message().map(|m| m.to_string())
}

/// The error of a run a `deny` refused: what, where, which rule, and the rule's message.
fn denial(check: &PolicyCheck, policy: &str) -> String {
    let what = match check.kind {
        PolicyCheckKind::Command => format!("the command `{}` (line {})", check.target, check.line),
        PolicyCheckKind::Finding => format!("the finding `{}` (line {})", check.target, check.line),
        PolicyCheckKind::File => match check.target.split_once(' ') {
            Some((operation, path)) => format!("{operation} of {path}"),
            None => check.target.clone(),
        },
    };
    let rule = match &check.rule {
        Some(rule) => format!("rule `{rule}`"),
        None => "no rule matched (the section denies)".to_string(),
    };
    let mut message = format!("the policy `{policy}` denies {what}: {rule}");
    if let Some(m) = &check.message {
        message.push_str(": ");
        message.push_str(m);
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::script::Language;

    fn policy(yaml: &str) -> CompiledPolicy {
        crate::policy::parse_policy("test.yml", yaml).expect("a valid policy")
    }

    const COMMANDS: &str = "version: 1\nname: t\ncommand_rules:\n\
        - {name: no-pip, commands: [pip], args_pattern: ['install{, *}'], decision: deny, message: '{command} {args}: no installs'}\n\
        - {name: ask-curl, commands: [curl], decision: approve, message: 'fetch with {command}?'}\n\
        - {name: note-rm, commands: [rm], decision: log}\n\
        - {name: rest, commands: ['*'], decision: allow}\n";

    fn reviewed(policy: &CompiledPolicy, language: Language, text: &str) -> (Review, Verdict) {
        let validator = Validator::builtin();
        let script = Script::new(language, text);
        let mut verdict = validator.validate(&script);
        let review = review(&validator, policy, "t", &script, &mut verdict);
        (review, verdict)
    }

    #[test]
    fn a_denied_nested_command_refuses_with_the_rule_and_its_message() {
        let p = policy(COMMANDS);
        let (review, _) = reviewed(
            &p,
            Language::Bash,
            "echo hi\nls | xargs sh -c 'pip install requests'\n",
        );
        let error = review.refusal.clone().expect("refused");
        assert_eq!(error.kind, ErrorKind::PolicyViolation);
        assert_eq!(
            error.message,
            "the policy `t` denies the command `pip install requests` (line 2): rule `no-pip`: \
             pip install requests: no installs"
        );
        assert!(!review.holds());
    }

    #[test]
    fn approve_holds_log_is_kept_and_allow_leaves_nothing() {
        let p = policy(COMMANDS);
        let (review, verdict) = reviewed(
            &p,
            Language::Bash,
            "rm -f /tmp/a\nfind /tmp -exec curl -s x \\;\nrm -f /tmp/a\npip list\n",
        );
        assert!(verdict.valid && review.refusal.is_none() && review.holds());
        let seen: Vec<(&str, Decision, Option<&str>)> = review
            .checks
            .iter()
            .map(|c| (c.target.as_str(), c.decision, c.message.as_deref()))
            .collect();
        assert_eq!(
            seen,
            [
                ("rm -f /tmp/a", Decision::Log, None),
                ("curl -s x", Decision::Approve, Some("fetch with curl?")),
            ]
        );
    }

    #[test]
    fn a_held_command_keeps_its_argv_only_when_every_word_is_known_before_the_run() {
        let p = policy(COMMANDS);
        let (review, _) = reviewed(
            &p,
            Language::Bash,
            "curl -s 'http://x/a b'\ncurl \"$(tr s r <<< -s)\"\n",
        );
        let argvs: Vec<Option<Vec<String>>> =
            review.checks.iter().map(|c| c.argv.clone()).collect();
        assert_eq!(
            argvs,
            [
                Some(vec!["curl".into(), "-s".into(), "http://x/a b".into()]),
                None
            ]
        );
    }

    #[test]
    fn no_matching_command_rule_denies() {
        let p = policy(
            "version: 1\nname: t\ncommand_rules:\n- {name: only-ls, commands: [ls], decision: allow}\n",
        );
        let (review, _) = reviewed(&p, Language::Bash, "ls\nwhoami\n");
        let error = review.refusal.clone().expect("refused");
        assert!(
            error.message.starts_with(
                "the policy `t` denies the command `whoami` (line 2): no rule matched (the section denies)"
            ),
            "{}",
            error.message
        );
    }

    #[test]
    fn validation_rules_raise_a_warn_finding_to_deny_or_approve() {
        let script = "import os\npid = os.fork()\n";
        let validator = Validator::builtin();
        let before = validator.validate(&Script::new(Language::Python, script));
        let fork = before
            .findings
            .iter()
            .find(|f| f.rule == "python-fork")
            .expect("a fork finding");
        assert_eq!(fork.severity, Severity::Warn);
        assert!(before.valid);
        let rules = |decision: &str| {
            policy(&format!(
                "version: 1\nname: t\ncommand_rules: [{{name: all, commands: ['*'], decision: allow}}]\n\
                 validation_rules: [{{name: forks, rules: [python-fork], decision: {decision}, message: '{{rule}} needs a look'}}]\n"
            ))
        };
        let (review, verdict) = reviewed(&rules("deny"), Language::Python, script);
        assert!(!verdict.valid);
        let raised = verdict.findings.iter().find(|f| f.rule == "python-fork");
        assert_eq!(raised.map(|f| f.severity), Some(Severity::Block));
        let error = review.refusal.clone().expect("refused");
        assert!(
            error.message.contains("the finding `python-fork`")
                && error
                    .message
                    .contains("rule `forks`: python-fork needs a look"),
            "{}",
            error.message
        );
        let (review, verdict) = reviewed(&rules("approve"), Language::Python, script);
        assert!(verdict.valid && review.refusal.is_none() && review.holds());
        assert_eq!(review.checks[0].kind, PolicyCheckKind::Finding);
    }
}
