//! Inline programs: code that a script hands to another interpreter (`python3 -c`, `bash -c "…"`,
//! `python3 - <<EOF`, `eval`, `subprocess.run(["bash", "-c", …])`).
//!
//! Checking only the outer script would make every nested interpreter a free bypass, so inline code
//! is extracted here and validated with its own language's rules. Code that is only known at run time
//! cannot be inspected and is reported by the builtin rules `bash-inline-code-dynamic` and
//! `python-inline-code-dynamic`.
//!
//! This module owns the interpreter table (`patterns/interpreters.yml`) and what an inline program
//! is ([`Embedded`]); `from_bash` finds them in Bash commands, `from_python` in Python calls.

mod awk;
mod from_bash;
mod from_python;
mod perl;
mod planted;
mod runner;
mod words;
mod written;

use serde::Deserialize;
use tree_sitter::Node;

use super::grammar::text;
use super::matcher::NameSet;
use super::{RuleError, RuleSet};
use crate::domain::script::Language;
pub use from_bash::bash_embedded;
pub use from_python::python_embedded;

pub const BASH_DYNAMIC: &str = "bash-inline-code-dynamic";
pub const PYTHON_DYNAMIC: &str = "python-inline-code-dynamic";
pub const BASH_BIDI: &str = "bash-bidi-control";
pub const PYTHON_BIDI: &str = "python-bidi-control";
pub const BASH_DOWNLOAD_RUN: &str = "bash-download-then-run";
/// Gaining privileges and writing system files are this host's concern only: in a command another
/// host runs (`ssh host "sudo systemctl restart app"`, `ssh host 'sudo sed -i … /etc/ssh/sshd_config'`)
/// these rules' findings are dropped ([`Origin::Remote`]); destroying data or running downloaded
/// code there still counts.
pub const REMOTE_ADMINISTRATION: &[&str] = &["bash-privilege-escalation", "bash-system-file-write"];
/// The interpreter named for a command rewritten with the arrays it expands
/// (`words::array_expansion`): the same command again, seen without the script's variables.
pub const ARRAY_EXPANSION: &str = "array expansion";
/// The same for a command rewritten with unquoted expansions split into their words
/// (`words::word_splitting`).
pub const WORD_SPLITTING: &str = "word splitting";

/// Where an inline program comes from, which decides which of its findings concern the script
/// that holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Code the script runs here (`bash -c CODE`, a heredoc, `eval`, `python3 -c`): every finding
    /// stands.
    Local,
    /// A command another host runs (`ssh HOST CMD`, `ssh HOST bash -s <<EOF`): administering that
    /// host ([`REMOTE_ADMINISTRATION`]) is not this sandbox's concern.
    Remote,
    /// One of the script's own commands rewritten with values the script gave it (arrays
    /// expanded, unquoted expansions split): it lost the script's other variables, so whether what
    /// it runs is run-time code is judged on the command itself, where they are known — except
    /// code that is a command's output (`"${runner[@]}" "$(wget -qO- …)"`), run-time in either.
    Rewritten,
}

impl Origin {
    /// Whether a finding of `rule`, at the start of `rest` (the program from the finding on),
    /// concerns the script holding the program.
    pub fn keeps(self, rule: &str, rest: &str) -> bool {
        match self {
            Origin::Local => true,
            Origin::Remote => !REMOTE_ADMINISTRATION.contains(&rule),
            Origin::Rewritten => rule != BASH_DYNAMIC || is_command_output(rest),
        }
    }
}

/// Whether code starts with a command substitution (`"$(wget -qO- …)"`, `` `cat f` ``).
fn is_command_output(code: &str) -> bool {
    let code = code.trim_start_matches('"');
    code.starts_with("$(") || code.starts_with('`')
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTable {
    interpreters: Vec<RawInterpreter>,
    python_process_calls: Vec<String>,
    #[serde(default)]
    shell_runners: Vec<RawShellRunner>,
    #[serde(default)]
    shell_setup: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawShellRunner {
    names: Vec<String>,
    #[serde(default)]
    code_flags: Vec<String>,
    #[serde(default)]
    code_prefixes: Vec<String>,
    #[serde(default)]
    rest: bool,
    #[serde(default)]
    value_options: Vec<String>,
    #[serde(default)]
    until: Vec<String>,
    #[serde(default)]
    skip: usize,
    #[serde(default)]
    remote: bool,
    #[serde(default)]
    subcommands: Vec<String>,
    #[serde(default)]
    after_dashes: bool,
}

/// A program that hands one of its arguments to a shell (`su -c CMD`, `watch CMD…`).
#[derive(Debug)]
pub struct ShellRunner {
    names: NameSet,
    /// The command follows one of these options.
    code_flags: Vec<String>,
    /// The command is the rest of a word starting with one of these
    /// (`--checkpoint-action=exec=CMD`).
    code_prefixes: Vec<String>,
    /// The command is every argument after the options (those in `value_options` take a value),
    /// up to one of `until`, joined with spaces.
    rest: bool,
    value_options: Vec<String>,
    until: Vec<String>,
    /// Positional words between the options and the command (`ssh HOST CMD…`: 1).
    skip: usize,
    /// The command runs on another host ([`Origin::Remote`]).
    remote: bool,
    /// Only these subcommands run a command (`kubectl exec`, `kubectl debug`); empty: all.
    subcommands: Vec<String>,
    /// The command is every word after the first `--` (`kubectl exec POD -- CMD…`).
    after_dashes: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInterpreter {
    names: Vec<String>,
    language: String,
    #[serde(default)]
    code_flags: Vec<String>,
    #[serde(default)]
    module_flags: Vec<String>,
    #[serde(default)]
    stdin_markers: Vec<String>,
    #[serde(default = "yes")]
    bare_reads_stdin: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug)]
pub struct Interpreter {
    names: NameSet,
    /// `None` for languages scriptgate has no rules for (perl, ruby, node…).
    pub language: Option<Language>,
    pub code_flags: Vec<String>,
    pub module_flags: Vec<String>,
    pub stdin_markers: Vec<String>,
    /// Without a program argument it reads one from standard input (`bash`, `python3`; not
    /// `source`, which then fails).
    pub bare_reads_stdin: bool,
}

impl Interpreter {
    /// `-c`, or a cluster ending in it (`bash -lc`).
    pub fn takes_code(&self, arg: &str) -> bool {
        is_code_flag(&self.code_flags, arg)
    }
}

fn is_code_flag<S: AsRef<str>>(flags: &[S], arg: &str) -> bool {
    flags.iter().map(AsRef::as_ref).any(|f| {
        arg == f
            || (f.len() == 2
                && arg.starts_with('-')
                && !arg.starts_with("--")
                && arg.len() > 2
                && arg[1..].chars().all(|c| c.is_ascii_alphabetic())
                && arg.ends_with(&f[1..]))
    })
}

/// Programs that take code inline, the programs that hand an argument to a shell, and the Python
/// calls that start processes.
#[derive(Debug)]
pub struct Interpreters {
    table: Vec<Interpreter>,
    runners: Vec<ShellRunner>,
    python_process_calls: NameSet,
    /// Installed programs whose output is shell set-up meant for `eval` (`pyenv init -`).
    shell_setup: NameSet,
}

impl Interpreters {
    pub fn parse(file: &str, text: &str) -> Result<Self, RuleError> {
        let raw: RawTable =
            serde_norway::from_str(text).map_err(|e| RuleError::new(file, e.to_string()))?;
        let mut table = Vec::new();
        for (i, r) in raw.interpreters.into_iter().enumerate() {
            let language = match r.language.as_str() {
                "other" => None,
                l => Some(l.parse().map_err(|e: String| {
                    RuleError::new(file, format!("interpreters[{i}].language: {e}"))
                })?),
            };
            table.push(Interpreter {
                names: NameSet::new(&r.names)
                    .map_err(|e| RuleError::new(file, format!("interpreters[{i}].names: {e}")))?,
                language,
                code_flags: r.code_flags,
                module_flags: r.module_flags,
                stdin_markers: r.stdin_markers,
                bare_reads_stdin: r.bare_reads_stdin,
            });
        }
        let python_process_calls = NameSet::new(&raw.python_process_calls)
            .map_err(|e| RuleError::new(file, format!("python_process_calls: {e}")))?;
        let runners = raw
            .shell_runners
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                Ok(ShellRunner {
                    names: NameSet::new(&r.names).map_err(|e| {
                        RuleError::new(file, format!("shell_runners[{i}].names: {e}"))
                    })?,
                    code_flags: r.code_flags,
                    code_prefixes: r.code_prefixes,
                    rest: r.rest,
                    value_options: r.value_options,
                    until: r.until,
                    skip: r.skip,
                    remote: r.remote,
                    subcommands: r.subcommands,
                    after_dashes: r.after_dashes,
                })
            })
            .collect::<Result<_, RuleError>>()?;
        let shell_setup = NameSet::new(&raw.shell_setup)
            .map_err(|e| RuleError::new(file, format!("shell_setup: {e}")))?;
        Ok(Interpreters {
            table,
            runners,
            python_process_calls,
            shell_setup,
        })
    }

    /// Every program and call name inline code can hide behind (for the name prefilter).
    pub fn names(&self, language: Language) -> Vec<String> {
        match language {
            Language::Python => self.python_process_calls.patterns().to_vec(),
            Language::Bash => {
                let mut names: Vec<String> = self
                    .table
                    .iter()
                    .flat_map(|i| i.names.patterns().to_vec())
                    .chain(
                        self.runners
                            .iter()
                            .flat_map(|r| r.names.patterns().to_vec()),
                    )
                    .collect();
                names.extend(
                    ["eval", "trap", "su"]
                        .iter()
                        .chain(awk::AWKS)
                        .map(|n| n.to_string()),
                );
                names
            }
        }
    }

    pub fn lookup(&self, name: &str) -> Option<&Interpreter> {
        self.table.iter().find(|i| i.names.contains(name))
    }

    /// Whether `arg` (an `eval` argument's source text) is `"$(PROGRAM ARGS…)"` for a
    /// `shell_setup` program with constant arguments: no pipe, no nested expansion, no other
    /// command, so what `eval` runs is that installed program's own set-up output.
    pub fn is_shell_setup(&self, arg: &str) -> bool {
        let quoted = arg.strip_prefix('"').and_then(|a| a.strip_suffix('"'));
        let Some(inner) = quoted
            .unwrap_or(arg)
            .strip_prefix("$(")
            .and_then(|a| a.strip_suffix(')'))
        else {
            return false;
        };
        let mut words = inner.split_whitespace();
        let mut program = words.next();
        if program == Some("command") {
            program = words.next();
        }
        // constant words, and the tool's error messages silenced (`direnv export bash 2>/dev/null`)
        program.is_some_and(|p| self.shell_setup.contains(p))
            && words.all(|w| {
                w == "2>/dev/null"
                    || w.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_.=/:".contains(c))
            })
    }
}

pub(super) fn check_builtins(rules: &RuleSet) -> Result<(), RuleError> {
    for (tree, id) in [
        (&rules.bash, BASH_DYNAMIC),
        (&rules.python, PYTHON_DYNAMIC),
        (&rules.bash, BASH_BIDI),
        (&rules.python, PYTHON_BIDI),
        (&rules.bash, BASH_DOWNLOAD_RUN),
    ] {
        if tree.builtin(id).is_none() {
            return Err(RuleError::new(
                format!("patterns/{}/{id}.yml", tree.grammar.language),
                "this builtin rule is required (set `builtin: true`)",
            ));
        }
    }
    Ok(())
}

/// A program found inside another.
#[derive(Debug, Clone)]
pub struct Embedded<'t> {
    pub interpreter: String,
    pub language: Option<Language>,
    /// The inline code, or `None` when it is only known at run time.
    pub code: Option<String>,
    /// Where findings inside the code are reported when it is not a verbatim part of the source.
    pub anchor: Node<'t>,
    /// Byte offset of `code` in the outer source when it appears there verbatim (heredocs, quotes).
    pub verbatim_at: Option<usize>,
    /// Which of its findings concern the outer script.
    pub origin: Origin,
}

/// A word as a command line spells it: as is when it holds nothing the shell would interpret,
/// else single-quoted. With `glob`, `*`, `?` and `~` stay unquoted (a word that came from an
/// unquoted expansion is globbed; an argv item is not).
fn shell_word(w: &str, glob: bool) -> String {
    let plain = |b: u8| {
        b.is_ascii_alphanumeric() || b"_./:=@%+,-".contains(&b) || (glob && b"*?~".contains(&b))
    };
    if !w.is_empty() && w.bytes().all(plain) {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

fn verbatim(src: &str, node: Node<'_>, code: &str) -> Option<usize> {
    let t = text(node, src);
    let offset = t.find(code)?;
    (!code.is_empty()).then_some(node.start_byte() + offset)
}
