//! Decisions: first matching rule of a section wins, none matching denies. No allocation on the
//! way (messages render only when read), so the supervisor can decide every operation.

use std::borrow::Cow;
use std::fmt;
use std::net::IpAddr;

use crate::compiled::{CompiledPolicy, RuleInfo};
use crate::glob::SplitPath;
use crate::model::{Decision, Operation};
use crate::net;
use crate::template::{Placeholder, Subject};

/// A decision, the rule that made it, and what it was about (for its message).
#[derive(Debug, Clone, Copy)]
pub struct Verdict<'p, S> {
    pub decision: Decision,
    /// The operation decided.
    pub subject: S,
    rule: &'p RuleInfo,
}

impl<'p, S: Subject> Verdict<'p, S> {
    /// The name of the rule that matched; `None` when none did (the section's default: deny).
    pub fn rule(&self) -> Option<&'p str> {
        self.rule.name.as_deref()
    }

    /// The rule's message rendered for this operation (rendering happens when it is displayed);
    /// `None` when the matching rule has none. The default denial always has one.
    pub fn message(&self) -> Option<Message<'_, 'p, S>> {
        self.rule
            .message
            .as_ref()
            .map(|_| Message { verdict: self })
    }
}

/// A rule message, rendered when displayed (`to_string()` allocates; `write!` need not).
pub struct Message<'v, 'p, S> {
    verdict: &'v Verdict<'p, S>,
}

impl<S: Subject> fmt::Display for Message<'_, '_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.verdict.rule.message {
            Some(template) => template.render(&self.verdict.subject, f),
            None => Ok(()),
        }
    }
}

impl<S: Subject> fmt::Debug for Message<'_, '_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.to_string())
    }
}

/// A file operation: `{path}`, `{operation}`.
#[derive(Debug, Clone, Copy)]
pub struct FileSubject<'i> {
    pub operation: Operation,
    /// As given (matching uses its normalised form).
    pub path: &'i [u8],
}

/// An execution: `{command}`, `{args}`.
#[derive(Debug, Clone, Copy)]
pub struct CommandSubject<'i, A> {
    /// The program as executed (a path, or a bare name before the run).
    pub program: &'i str,
    /// The whole argument vector, `argv[0]` included.
    pub argv: &'i [A],
}

/// A connection: `{domain}`, `{ip}`, `{port}`.
#[derive(Debug, Clone, Copy)]
pub struct NetworkSubject<'i> {
    pub domain: Option<&'i str>,
    pub ip: Option<IpAddr>,
    pub port: u16,
}

/// A static validation finding: `{rule}`.
#[derive(Debug, Clone, Copy)]
pub struct FindingSubject<'i> {
    pub rule_id: &'i str,
}

impl Subject for FileSubject<'_> {
    fn write_placeholder(&self, p: Placeholder, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        match p {
            Placeholder::Path => write_lossy(self.path, out),
            Placeholder::Operation => out.write_str(self.operation.as_str()),
            _ => Ok(()),
        }
    }
}

impl<A: AsRef<str>> Subject for CommandSubject<'_, A> {
    fn write_placeholder(&self, p: Placeholder, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        match p {
            Placeholder::Command => out.write_str(self.program),
            Placeholder::Args => {
                for (i, arg) in self.argv.iter().skip(1).enumerate() {
                    if i > 0 {
                        out.write_str(" ")?;
                    }
                    out.write_str(arg.as_ref())?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

impl Subject for NetworkSubject<'_> {
    fn write_placeholder(&self, p: Placeholder, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (p, self.domain, self.ip) {
            (Placeholder::Domain, Some(d), _) => out.write_str(d),
            (Placeholder::Domain | Placeholder::Ip, _, Some(ip)) => write!(out, "{ip}"),
            (Placeholder::Domain | Placeholder::Ip, _, None) => out.write_str("?"),
            (Placeholder::Port, _, _) => write!(out, "{}", self.port),
            _ => Ok(()),
        }
    }
}

impl Subject for FindingSubject<'_> {
    fn write_placeholder(&self, p: Placeholder, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        match p {
            Placeholder::Rule => out.write_str(self.rule_id),
            _ => Ok(()),
        }
    }
}

/// Bytes as text, invalid sequences as U+FFFD (paths need not be UTF-8).
fn write_lossy(bytes: &[u8], out: &mut fmt::Formatter<'_>) -> fmt::Result {
    for chunk in bytes.utf8_chunks() {
        out.write_str(chunk.valid())?;
        if !chunk.invalid().is_empty() {
            out.write_str("\u{FFFD}")?;
        }
    }
    Ok(())
}

/// Arguments joined by single spaces, on the stack when they are short (almost always).
// The large variant is the point: it lives on the stack for the length of one decision.
#[allow(clippy::large_enum_variant)]
enum Joined {
    Stack([u8; JOIN_STACK], usize),
    Heap(Vec<u8>),
}

const JOIN_STACK: usize = 2048;

impl Joined {
    fn new<A: AsRef<str>>(args: &[A]) -> Joined {
        let len = args.iter().map(|a| a.as_ref().len() + 1).sum::<usize>();
        if len <= JOIN_STACK {
            let mut buf = [0u8; JOIN_STACK];
            let mut n = 0;
            for (i, arg) in args.iter().enumerate() {
                if i > 0 {
                    buf[n] = b' ';
                    n += 1;
                }
                let a = arg.as_ref().as_bytes();
                buf[n..n + a.len()].copy_from_slice(a);
                n += a.len();
            }
            Joined::Stack(buf, n)
        } else {
            let mut v = Vec::with_capacity(len);
            for (i, arg) in args.iter().enumerate() {
                if i > 0 {
                    v.push(b' ');
                }
                v.extend_from_slice(arg.as_ref().as_bytes());
            }
            Joined::Heap(v)
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Joined::Stack(buf, n) => &buf[..*n],
            Joined::Heap(v) => v,
        }
    }
}

/// `path` with `.`, `..` and repeated `/` folded away; borrowed when it has none (the usual case).
/// `..` at the root stays at the root. Lexical only: the caller resolves symlinks.
pub(crate) fn normalize(path: &[u8]) -> Cow<'_, [u8]> {
    let body = path.strip_prefix(b"/").unwrap_or(path);
    let normal = body.is_empty()
        || body
            .split(|&b| b == b'/')
            .all(|c| !c.is_empty() && c != b"." && c != b"..");
    if normal {
        return Cow::Borrowed(path);
    }
    let absolute = path.first() == Some(&b'/');
    let mut parts: Vec<&[u8]> = Vec::new();
    for c in body.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." if parts.last().is_some_and(|&p| p != b"..") => {
                parts.pop();
            }
            b".." if absolute => {}
            _ => parts.push(c),
        }
    }
    let mut out = Vec::with_capacity(path.len());
    if absolute {
        out.push(b'/');
    }
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            out.push(b'/');
        }
        out.extend_from_slice(p);
    }
    if out.is_empty() {
        out.push(b'.');
    }
    Cow::Owned(out)
}

fn basename(program: &str) -> &str {
    program.rsplit('/').next().unwrap_or(program)
}

impl CompiledPolicy {
    /// A file operation on `path`: absolute and resolved by the caller (symlinks followed; `.`,
    /// `..` and `//` are folded here). A relative path matches only `**` globs.
    pub fn decide_file<'p, 'i, P>(
        &'p self,
        operation: Operation,
        path: &'i P,
    ) -> Verdict<'p, FileSubject<'i>>
    where
        P: AsRef<[u8]> + ?Sized,
    {
        let path = path.as_ref();
        let subject = FileSubject { operation, path };
        let normalized = normalize(path);
        let split = SplitPath::new(&normalized);
        let bit = operation.bit();
        for rule in &self.files {
            if rule.operations & bit != 0 && rule.globs.iter().any(|g| g.matches_path(&split)) {
                return Verdict {
                    decision: rule.decision,
                    subject,
                    rule: &rule.info,
                };
            }
        }
        self.deny(&self.defaults.file, subject)
    }

    /// An execution of `program` (the path execve was given, or a bare name before the run) with
    /// `argv` (`argv[0]` included). Name globs match the program's file name, path globs its
    /// (normalised) path, `args_pattern` globs the arguments after `argv[0]` joined by spaces.
    pub fn decide_command<'p, 'i, A: AsRef<str>>(
        &'p self,
        program: &'i str,
        argv: &'i [A],
    ) -> Verdict<'p, CommandSubject<'i, A>> {
        let subject = CommandSubject { program, argv };
        let name = basename(program).as_bytes();
        let normalized = normalize(program.as_bytes());
        let path = SplitPath::new(&normalized);
        let args = argv.get(1..).unwrap_or_default();
        let mut joined: Option<Joined> = None;
        for rule in &self.commands {
            let program_matches = rule.names.iter().any(|g| g.matches(name))
                || rule.paths.iter().any(|g| g.matches_path(&path));
            if !program_matches {
                continue;
            }
            if let Some(globs) = &rule.args {
                let text = joined.get_or_insert_with(|| Joined::new(args)).bytes();
                if !globs.iter().any(|g| g.matches(text)) {
                    continue;
                }
            }
            return Verdict {
                decision: rule.decision,
                subject,
                rule: &rule.info,
            };
        }
        self.deny(&self.defaults.command, subject)
    }

    /// Whether any arguments could let `program` (a resolved path) run: the first rule that
    /// matches the program and has no `args_pattern` decides, and a rule with `args_pattern` that
    /// does not deny makes it possible. The run-time enforcement derives its fail-closed floor
    /// (the files a script may execute at all) from this.
    pub fn program_may_run(&self, program: &str) -> bool {
        let name = basename(program).as_bytes();
        let normalized = normalize(program.as_bytes());
        let path = SplitPath::new(&normalized);
        for rule in &self.commands {
            let program_matches = rule.names.iter().any(|g| g.matches(name))
                || rule.paths.iter().any(|g| g.matches_path(&path));
            if !program_matches {
                continue;
            }
            match (&rule.args, rule.decision) {
                (None, decision) => return decision != Decision::Deny,
                (Some(_), Decision::Deny) => {}
                (Some(_), _) => return true,
            }
        }
        false
    }

    /// A connection to `port` of `domain` (when the name is known: from the DNS answer or the
    /// request) and/or `ip`. Names compare case-insensitively, Unicode names in punycode;
    /// IPv4-mapped IPv6 addresses as IPv4.
    pub fn decide_network<'p, 'i>(
        &'p self,
        domain: Option<&'i str>,
        ip: Option<IpAddr>,
        port: u16,
    ) -> Verdict<'p, NetworkSubject<'i>> {
        let subject = NetworkSubject { domain, ip, port };
        let name = domain.and_then(net::query_name);
        let ip = ip.map(|ip| ip.to_canonical());
        for rule in &self.network {
            let by_name = match (&rule.domains, &name) {
                (Some(patterns), Some(n)) => patterns.iter().any(|p| p.matches(n)),
                _ => false,
            };
            let by_ip = match (&rule.cidrs, ip) {
                (Some(cidrs), Some(ip)) => cidrs.iter().any(|c| c.contains(ip)),
                _ => false,
            };
            let anywhere = rule.domains.is_none() && rule.cidrs.is_none();
            let port_ok = rule
                .ports
                .as_ref()
                .is_none_or(|ports| ports.iter().any(|p| p.contains(port)));
            if (anywhere || by_name || by_ip) && port_ok {
                return Verdict {
                    decision: rule.decision,
                    subject,
                    rule: &rule.info,
                };
            }
        }
        self.deny(&self.defaults.network, subject)
    }

    /// What the policy raises a static finding of validation rule `rule_id` to: the strictest
    /// matching `validation_rules` entry (`deny` over `approve`, then the first), `None` when
    /// no entry names it (the finding keeps its own severity).
    pub fn decide_finding<'p, 'i>(
        &'p self,
        rule_id: &'i str,
    ) -> Option<Verdict<'p, FindingSubject<'i>>> {
        let mut best: Option<&crate::compiled::RaiseC> = None;
        for raise in self.raises.iter() {
            if raise.ids.iter().any(|p| p.matches(rule_id))
                && best.is_none_or(|b| raise.raise > b.raise)
            {
                best = Some(raise);
            }
        }
        best.map(|r| Verdict {
            decision: r.raise.into(),
            subject: FindingSubject { rule_id },
            rule: &r.info,
        })
    }

    fn deny<'p, S>(&'p self, info: &'p RuleInfo, subject: S) -> Verdict<'p, S> {
        Verdict {
            decision: Decision::Deny,
            subject,
            rule: info,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_normalised_lexically_and_only_when_needed() {
        let n = |p: &str| String::from_utf8(normalize(p.as_bytes()).into_owned()).expect("utf8");
        assert!(matches!(normalize(b"/usr/lib/x"), Cow::Borrowed(_)));
        assert!(matches!(normalize(b"/"), Cow::Borrowed(_)));
        assert_eq!(n("/tmp/../etc/passwd"), "/etc/passwd");
        assert_eq!(n("/../../etc"), "/etc");
        assert_eq!(n("//etc///./shadow/"), "/etc/shadow");
        assert_eq!(n("a/../../b"), "../b");
        assert_eq!(n("./"), ".");
    }
}
