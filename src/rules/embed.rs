//! Inline programs: code that a script hands to another interpreter (`python3 -c`, `bash -c "…"`,
//! `python3 - <<EOF`, `eval`, `subprocess.run(["bash", "-c", …])`).
//!
//! Checking only the outer script would make every nested interpreter a free bypass, so inline code
//! is extracted here and validated with its own language's rules. Code that is only known at run time
//! cannot be inspected and is reported by the builtin rules `bash-inline-code-dynamic` and
//! `python-inline-code-dynamic`.

mod awk;

use serde::Deserialize;
use tree_sitter::Node;

use super::bash::{BashSem, Invocation};
use super::grammar::text;
use super::matcher::{Cx, NameSet};
use super::python::PySem;
use super::{RuleError, RuleSet};
use crate::domain::script::Language;

pub const BASH_DYNAMIC: &str = "bash-inline-code-dynamic";
pub const PYTHON_DYNAMIC: &str = "python-inline-code-dynamic";
pub const BASH_BIDI: &str = "bash-bidi-control";
pub const PYTHON_BIDI: &str = "python-bidi-control";
pub const BASH_DOWNLOAD_RUN: &str = "bash-download-then-run";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTable {
    interpreters: Vec<RawInterpreter>,
    python_process_calls: Vec<String>,
    #[serde(default)]
    shell_runners: Vec<RawShellRunner>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawShellRunner {
    names: Vec<String>,
    #[serde(default)]
    code_flags: Vec<String>,
    #[serde(default)]
    rest: bool,
    #[serde(default)]
    value_options: Vec<String>,
    #[serde(default)]
    until: Vec<String>,
}

/// A program that hands one of its arguments to a shell (`su -c CMD`, `watch CMD…`).
#[derive(Debug)]
pub struct ShellRunner {
    names: NameSet,
    /// The command follows one of these options.
    code_flags: Vec<String>,
    /// The command is every argument after the options (those in `value_options` take a value),
    /// up to one of `until`, joined with spaces.
    rest: bool,
    value_options: Vec<String>,
    until: Vec<String>,
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
}

#[derive(Debug)]
pub struct Interpreter {
    names: NameSet,
    /// `None` for languages scriptgate has no rules for (perl, ruby, node…).
    pub language: Option<Language>,
    pub code_flags: Vec<String>,
    pub module_flags: Vec<String>,
    pub stdin_markers: Vec<String>,
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
                    rest: r.rest,
                    value_options: r.value_options,
                    until: r.until,
                })
            })
            .collect::<Result<_, RuleError>>()?;
        Ok(Interpreters {
            table,
            runners,
            python_process_calls,
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
                    ["eval", "su"]
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
}

fn verbatim(src: &str, node: Node<'_>, code: &str) -> Option<usize> {
    let t = text(node, src);
    let offset = t.find(code)?;
    (!code.is_empty()).then_some(node.start_byte() + offset)
}

/// Inline programs started by a Bash `command` node.
pub fn bash_embedded<'t>(sem: &BashSem<'_>, cx: &Cx<'t>, command: Node<'t>) -> Vec<Embedded<'t>> {
    let Some(table) = sem.interpreters else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let (invocations, hot) = cx.bash_invocations(sem, command);
    if !hot {
        return found;
    }
    for inv in invocations.iter() {
        if inv.name == "eval" && !inv.args.is_empty() {
            let parts: Option<Vec<String>> = inv.args.iter().map(|a| sem.fold(*a)).collect();
            let code = parts.map(|p| p.join(" "));
            let at = code
                .as_deref()
                .and_then(|c| verbatim(sem.src, inv.args[0], c));
            found.push(Embedded {
                interpreter: "eval".into(),
                language: Some(Language::Bash),
                code,
                anchor: inv.args[0],
                verbatim_at: at,
            });
            continue;
        }
        if awk::AWKS.contains(&inv.name.as_str()) {
            found.extend(awk::commands(sem, inv));
            continue;
        }
        if let Some(runner) = table.runners.iter().find(|r| r.names.contains(&inv.name)) {
            found.extend(runner_command(sem, inv, runner));
            continue;
        }
        let Some(interp) = table.lookup(&inv.name) else {
            continue;
        };
        let flags: Vec<&str> = interp.code_flags.iter().map(String::as_str).collect();
        if let Some(e) = code_after_flag(sem, inv, &flags, &inv.name, interp.language)
            .or_else(|| attached_code(sem, inv, interp))
        {
            found.push(e);
        } else if sem.reads_program_from_stdin(inv) {
            found.push(stdin_program(sem, command, &inv.name, interp.language));
        }
    }
    found
}

/// The command a [`ShellRunner`] hands to the shell.
fn runner_command<'t>(
    sem: &BashSem<'_>,
    inv: &Invocation<'t>,
    runner: &ShellRunner,
) -> Option<Embedded<'t>> {
    if !runner.code_flags.is_empty() {
        let flags: Vec<&str> = runner.code_flags.iter().map(String::as_str).collect();
        return code_after_flag(sem, inv, &flags, &inv.name, Some(Language::Bash));
    }
    if !runner.rest {
        return None;
    }
    let mut i = 0;
    while let Some(arg) = inv.args.get(i) {
        let a = sem.fold(*arg).unwrap_or_default();
        if a == "--" {
            i += 1;
            break;
        }
        if !a.starts_with('-') || a.len() == 1 {
            break;
        }
        i += if runner.value_options.contains(&a) {
            2
        } else {
            1
        };
    }
    let words: Vec<Node<'t>> = inv.args[i.min(inv.args.len())..]
        .iter()
        .copied()
        .take_while(|a| sem.fold(*a).is_none_or(|v| !runner.until.contains(&v)))
        .collect();
    let anchor = *words.first()?;
    let code: Option<Vec<String>> = words.iter().map(|w| sem.fold(*w)).collect();
    let code = code.map(|c| c.join(" "));
    let verbatim_at = code.as_deref().and_then(|c| verbatim(sem.src, anchor, c));
    Some(Embedded {
        interpreter: inv.name.clone(),
        language: Some(Language::Bash),
        code,
        anchor,
        verbatim_at,
    })
}

/// `bash -c CODE`, `python3 -c CODE`, `bash -lc CODE`.
fn code_after_flag<'t>(
    sem: &BashSem<'_>,
    inv: &Invocation<'t>,
    flags: &[&str],
    interpreter: &str,
    language: Option<Language>,
) -> Option<Embedded<'t>> {
    let at = inv
        .args
        .iter()
        .position(|a| sem.fold(*a).is_some_and(|v| is_code_flag(flags, &v)))?;
    let anchor = *inv.args.get(at + 1).unwrap_or(&inv.args[at]);
    let code = inv.args.get(at + 1).and_then(|n| sem.fold(*n));
    let verbatim_at = code.as_deref().and_then(|c| verbatim(sem.src, anchor, c));
    Some(Embedded {
        interpreter: interpreter.to_string(),
        language,
        code,
        anchor,
        verbatim_at,
    })
}

/// `python3 -c'print(1)'`: the code glued to the flag.
fn attached_code<'t>(
    sem: &BashSem<'_>,
    inv: &Invocation<'t>,
    interp: &Interpreter,
) -> Option<Embedded<'t>> {
    for arg in &inv.args {
        let value = sem.fold(*arg)?;
        for flag in &interp.code_flags {
            if let Some(code) = value
                .strip_prefix(flag.as_str())
                .filter(|c| !c.is_empty() && flag.len() == 2 && !value.starts_with("--"))
            {
                // Only for interpreters whose flag takes the rest of the word (python, perl, ruby).
                if interp.language != Some(Language::Bash) {
                    return Some(Embedded {
                        interpreter: inv.name.clone(),
                        language: interp.language,
                        code: Some(code.to_string()),
                        anchor: *arg,
                        verbatim_at: verbatim(sem.src, *arg, code),
                    });
                }
            }
        }
        if !value.starts_with('-') {
            return None;
        }
    }
    None
}

/// The program an interpreter reads on stdin: a heredoc, a here-string, or the previous pipeline stage.
fn stdin_program<'t>(
    sem: &BashSem<'_>,
    command: Node<'t>,
    name: &str,
    language: Option<Language>,
) -> Embedded<'t> {
    let k = sem.k;
    let dynamic = |anchor| Embedded {
        interpreter: name.to_string(),
        language,
        code: None,
        anchor,
        verbatim_at: None,
    };
    // here-string: a child of the command itself
    for child in crate::rules::grammar::children(command) {
        if child.kind_id() == k.herestring_redirect {
            let value = child.named_child(0);
            let code = value.and_then(|v| sem.fold(v));
            let anchor = value.unwrap_or(child);
            let at = code.as_deref().and_then(|c| verbatim(sem.src, anchor, c));
            return Embedded {
                interpreter: name.to_string(),
                language,
                code,
                anchor,
                verbatim_at: at,
            };
        }
    }
    // heredoc: `cmd <<EOF` (redirected_statement parent), or `cat <<EOF | cmd` (pipeline inside the heredoc)
    let mut node = command;
    while let Some(parent) = node.parent() {
        if parent.kind_id() == k.redirected_statement || parent.kind_id() == k.heredoc_redirect {
            let redirect = if parent.kind_id() == k.heredoc_redirect {
                Some(parent)
            } else {
                parent
                    .children(&mut parent.walk())
                    .find(|c| c.kind_id() == k.heredoc_redirect)
            };
            if let Some(body) = redirect.and_then(|r| {
                crate::rules::grammar::children(r).find(|c| c.kind_id() == k.heredoc_body)
            }) {
                let code = text(body, sem.src).to_string();
                return Embedded {
                    interpreter: name.to_string(),
                    language,
                    verbatim_at: Some(body.start_byte()),
                    code: Some(code),
                    anchor: body,
                };
            }
        }
        if parent.kind_id() == k.pipeline {
            return piped_program(sem, parent, node, name, language)
                .unwrap_or_else(|| dynamic(command));
        }
        if parent.kind_id() != k.redirected_statement {
            break;
        }
        node = parent;
    }
    dynamic(command)
}

/// `echo 'code' | python3`: the constant output of the stage before.
fn piped_program<'t>(
    sem: &BashSem<'_>,
    pipeline: Node<'t>,
    stage: Node<'t>,
    name: &str,
    language: Option<Language>,
) -> Option<Embedded<'t>> {
    let mut previous = None;
    for child in crate::rules::grammar::children(pipeline).filter(|c| c.is_named()) {
        if child.id() == stage.id() {
            break;
        }
        previous = Some(child);
    }
    let previous = previous?;
    if previous.kind_id() != sem.k.command {
        return None;
    }
    let inv = sem.invocations(previous).into_iter().next()?;
    let args: Vec<String> = inv
        .args
        .iter()
        .map(|a| sem.fold(*a))
        .collect::<Option<_>>()?;
    let code = match inv.name.as_str() {
        "echo" => args
            .iter()
            .map(String::as_str)
            .skip_while(|a| matches!(*a, "-e" | "-n" | "-E"))
            .collect::<Vec<_>>()
            .join(" "),
        "printf" if args.len() == 1 => super::codec::decode_c_escapes(&args[0]),
        _ => return None,
    };
    let anchor = inv.args.last().copied().unwrap_or(previous);
    Some(Embedded {
        interpreter: name.to_string(),
        language,
        verbatim_at: verbatim(sem.src, anchor, &code),
        code: Some(code),
        anchor,
    })
}

/// Inline programs started by a Python call (`subprocess.run(["bash", "-c", code])`).
pub fn python_embedded<'t>(
    sem: &PySem<'t>,
    cx: &Cx<'t>,
    table: &Interpreters,
    call: Node<'t>,
) -> Vec<Embedded<'t>> {
    let (names, hot) = cx.callee(call, || sem.callee_names(call));
    if !hot || !names.iter().any(|n| table.python_process_calls.contains(n)) {
        return Vec::new();
    }
    let args = sem.effective_positional(call);
    if let Some(line) = shell_command_line(sem, &names, call, &args) {
        return vec![line];
    }
    // argv is the first list/tuple argument, or the string arguments themselves (os.execl style).
    let mut items: Vec<(Node<'t>, Option<String>)> = args
        .iter()
        .find_map(|a| sem.list_items(*a))
        .unwrap_or_else(|| args.iter().map(|a| (*a, sem.fold(*a))).collect());
    // `sys.executable` is the Python interpreter itself.
    for (node, value) in &mut items {
        if value.is_none() && sem.names(*node).iter().any(|n| n == "sys.executable") {
            *value = Some("python3".to_string());
        }
    }
    if let Some(inline) = inline_in_argv(sem, table, &items) {
        return vec![inline];
    }
    // Otherwise a constant argv is a command line: check it with the Bash rules (crontab, rm …).
    match args.iter().find(|a| sem.list_items(**a).is_some()) {
        Some(list) if !items.is_empty() => vec![Embedded {
            interpreter: "argv".into(),
            language: Some(Language::Bash),
            code: Some(command_line(&items)),
            anchor: *list,
            verbatim_at: None,
        }],
        _ => Vec::new(),
    }
}

/// A command string a shell runs (`subprocess.run(cmd, shell=True)`, `os.system(cmd)`), when it is
/// a constant or all its run-time parts are shell-quoted: checked as Bash (`rm -rf /` is no safer
/// in a string).
fn shell_command_line<'t>(
    sem: &PySem<'t>,
    names: &[String],
    call: Node<'t>,
    args: &[Node<'t>],
) -> Option<Embedded<'t>> {
    let through_shell = names.iter().any(|n| {
        matches!(
            n.as_str(),
            "os.system"
                | "os.popen"
                | "subprocess.getoutput"
                | "subprocess.getstatusoutput"
                | "asyncio.create_subprocess_shell"
                | "asyncio.subprocess.create_subprocess_shell"
        )
    }) || sem
        .effective_keywords(call)
        .into_iter()
        .any(|(name, value)| {
            name == "shell" && !matches!(text(value, sem.src), "False" | "None" | "0")
        });
    if !through_shell {
        return None;
    }
    let command = *args.first()?;
    let code = sem.fold_shell(command)?;
    let verbatim_at = verbatim(sem.src, command, &code);
    Some(Embedded {
        interpreter: "sh -c".into(),
        language: Some(Language::Bash),
        code: Some(code),
        anchor: command,
        verbatim_at,
    })
}

/// `["bash", "-c", code]`: the inline program in an argv list.
fn inline_in_argv<'t>(
    sem: &PySem<'_>,
    table: &Interpreters,
    items: &[(Node<'t>, Option<String>)],
) -> Option<Embedded<'t>> {
    let start = items.iter().position(|(_, v)| {
        v.as_deref()
            .is_some_and(|v| table.lookup(super::bash::base_name(v)).is_some())
    })?;
    let interp_name = super::bash::base_name(items[start].1.as_deref().unwrap_or("")).to_string();
    let interp = table.lookup(&interp_name)?;
    let rest = &items[start + 1..];
    let flag_at = rest
        .iter()
        .position(|(_, v)| v.as_deref().is_some_and(|v| interp.takes_code(v)))?;
    let (anchor, code) = match rest.get(flag_at + 1) {
        Some((node, value)) => (*node, value.clone()),
        None => (rest[flag_at].0, None),
    };
    let verbatim_at = code.as_deref().and_then(|c| verbatim(sem.src, anchor, c));
    Some(Embedded {
        interpreter: interp_name,
        language: interp.language,
        code,
        anchor,
        verbatim_at,
    })
}

/// An argv as a shell command line; items only known at run time become a quoted variable.
fn command_line(items: &[(Node<'_>, Option<String>)]) -> String {
    let word = |v: &Option<String>| match v {
        None => "\"$SCRIPTGATE_RUNTIME_VALUE\"".to_string(),
        Some(s)
            if !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_./:=@%+,-".contains(&b)) =>
        {
            s.clone()
        }
        Some(s) => format!("'{}'", s.replace('\'', "'\\''")),
    };
    items
        .iter()
        .map(|(_, v)| word(v))
        .collect::<Vec<_>>()
        .join(" ")
}
