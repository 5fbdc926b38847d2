//! Inline programs a Python call starts: a shell command line (`os.system`, `shell=True`), an
//! interpreter with inline code in an argv (`["bash", "-c", code]`), or a constant argv checked
//! as a Bash command line; and the scripts a call writes out for later (a `#!` script, a
//! Dockerfile's `RUN` lines, a pipeline's commands, Python code).

use tree_sitter::Node;

use super::{Embedded, Interpreters, Origin, planted, verbatim, written};
use crate::domain::script::Language;
use crate::rules::bash::base_name;
use crate::rules::grammar::{children, text};
use crate::rules::matcher::Cx;
use crate::rules::python::{Binding, PySem};

/// Inline programs started by a Python call (`subprocess.run(["bash", "-c", code])`).
pub fn python_embedded<'t>(
    sem: &PySem<'t>,
    cx: &Cx<'t>,
    table: &Interpreters,
    call: Node<'t>,
) -> Vec<Embedded<'t>> {
    let written = written_scripts(sem, call);
    if !written.is_empty() {
        return written;
    }
    let (names, hot) = cx.callee(call, || sem.callee_names(call));
    if !hot {
        return Vec::new();
    }
    if names
        .iter()
        .any(|n| matches!(n.as_str(), "eval" | "exec" | "compile"))
    {
        return constant_code(sem, call).into_iter().collect();
    }
    if !names.iter().any(|n| table.python_process_calls.contains(n)) {
        return Vec::new();
    }
    let args = sem.effective_positional(call);
    if let Some(lines) = shell_command_lines(sem, &names, call, &args) {
        return lines;
    }
    // a function's `*args` spliced into the argv (`["git", *args]`), or the argv itself
    // (`subprocess.run(args)`): the argv each call of the function gives
    if let Some(first) = args.first() {
        let forwarded = if first.kind() == "list" {
            sem.forwarded_lists(*first)
        } else {
            sem.forwarded_rest(*first)
        };
        if !forwarded.is_empty() {
            return forwarded
                .into_iter()
                .map(|(call, argv)| argv_embedded(call, command_line(&argv)))
                .collect();
        }
    }
    // a parameter of the enclosing function: the argv lists its callers pass
    if let Some(first) = args.first() {
        let lines: Vec<Embedded<'t>> = sem
            .forwarded_args(*first)
            .into_iter()
            .filter_map(|(call, passed)| Some((call, sem.list_items(passed)?)))
            .flat_map(|(call, items)| {
                argv_lines(sem, &items)
                    .into_iter()
                    .map(move |code| argv_embedded(call, code))
            })
            .collect();
        if !lines.is_empty() {
            return lines;
        }
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
    if let Some(first) = args.first()
        && let Some(lines) = split_command_lines(sem, *first)
    {
        return lines
            .into_iter()
            .map(|code| argv_embedded(*first, code))
            .collect();
    }
    // Otherwise a constant argv is a command line: check it with the Bash rules (crontab, rm …).
    match args.iter().find(|a| sem.list_items(**a).is_some()) {
        Some(list) if !items.is_empty() => argv_lines(sem, &items)
            .into_iter()
            .map(|code| argv_embedded(*list, code))
            .collect(),
        _ => args
            .first()
            .map(|argv| looped_argvs(sem, *argv))
            .unwrap_or_default(),
    }
}

/// A script a call writes out for later (`hook.write_text(HOOK)`, `f.write(SCRIPT)`): a constant
/// that starts with a shell's or Python's `#!` line is checked as that program; a Dockerfile's
/// `RUN` instructions and a pipeline's commands as shell lines; Python code as Python. When the
/// value written does not fold (`text.replace(marker, marker + STEP)`, `"".join(lines)` after
/// `lines.insert(i, HOOK)`), each multi-line constant it is made of is.
fn written_scripts<'t>(sem: &PySem<'t>, call: Node<'t>) -> Vec<Embedded<'t>> {
    let Some((_, method)) = crate::rules::python::method_call(sem.k, call) else {
        return Vec::new();
    };
    if !matches!(text(method, sem.src), "write_text" | "write" | "writelines") {
        return Vec::new();
    }
    let Some(content) = sem.positional(call).first().copied() else {
        return Vec::new();
    };
    written_texts(sem, content)
        .into_iter()
        .filter_map(|(anchor, code)| {
            let (interpreter, language, code) = match written::shebang_language(&code) {
                Some(language) => ("the script written", language, code),
                None => planted::configured_program(&code)?,
            };
            Some(Embedded {
                interpreter: interpreter.into(),
                language: Some(language),
                verbatim_at: None,
                origin: Origin::Local,
                code: Some(code),
                anchor,
            })
        })
        .collect()
}

/// The constant texts a value written out is made of: the value itself when it folds, else each
/// constant of more than one line among its parts, the values the names in it are bound to and
/// what their lists grew by, at most three names deep.
fn written_texts<'t>(sem: &PySem<'t>, content: Node<'t>) -> Vec<(Node<'t>, String)> {
    if let Some(code) = sem.fold(content) {
        return vec![(content, code)];
    }
    let k = sem.k;
    let mut out = Vec::new();
    let mut stack = vec![(content, 0u8)];
    let mut visited = 0usize;
    while let Some((node, depth)) = stack.pop() {
        visited += 1;
        if visited > 256 {
            break;
        }
        let kind = node.kind_id();
        if matches!(node.kind(), "string" | "concatenated_string") {
            if let Some(value) = sem.fold(node)
                && value.trim().contains('\n')
            {
                out.push((node, value));
            }
        } else if kind == k.identifier {
            if depth < 3 {
                if let Some(Binding::Value(value)) = sem.binding_of(node) {
                    stack.push((value, depth + 1));
                }
                stack.extend(sem.grown(node).iter().map(|g| (g.node, depth + 1)));
            }
        } else {
            stack.extend(children(node).filter(|c| c.is_named()).map(|c| (c, depth)));
        }
    }
    out
}

/// `eval("2 + 3")`, `exec(code)` with `code` a constant, `eval(compile(ast.parse(expr, mode="eval"),
/// …))`: the code, checked as Python like any other program (what is only known at run time is
/// `python-code-exec`'s).
fn constant_code<'t>(sem: &PySem<'t>, call: Node<'t>) -> Option<Embedded<'t>> {
    let mut code = *sem.effective_positional(call).first()?;
    // through `compile(source, …)` and `ast.parse(source, …)`
    for _ in 0..2 {
        if code.kind_id() != sem.k.call {
            break;
        }
        let func = crate::rules::python::function_of(code)?;
        if !sem
            .names(func)
            .iter()
            .any(|n| matches!(n.as_str(), "compile" | "ast.parse"))
        {
            return None;
        }
        code = *sem.positional(code).first()?;
    }
    let text = sem.fold(code)?;
    Some(Embedded {
        interpreter: "exec".into(),
        language: Some(Language::Python),
        verbatim_at: verbatim(sem.src, code, &text),
        origin: Origin::Local,
        code: Some(text),
        anchor: code,
    })
}

/// `subprocess.run(cmd.split())`, `shlex.split(cmd)`: an argv made by splitting a command line
/// that is a constant or takes constant values in a loop (`for cmd in CMDS`); the command lines
/// themselves, to be checked as Bash. A conditional argument (`c.split() if … else …`) is
/// looked at in its first branch.
fn split_command_lines(sem: &PySem<'_>, argv: Node<'_>) -> Option<Vec<String>> {
    const MAX_LINES: usize = 16;
    let mut node = argv;
    if node.kind() == "conditional_expression" {
        node = node.named_child(0)?;
    }
    if node.kind_id() != sem.k.call {
        return None;
    }
    let func = crate::rules::python::function_of(node)?;
    let line = if func.kind() == "attribute"
        && text(func.child_by_field_name("attribute")?, sem.src) == "split"
        && sem.positional(node).is_empty()
    {
        func.child_by_field_name("object")?
    } else if sem.names(func).iter().any(|n| n == "shlex.split") {
        *sem.positional(node).first()?
    } else {
        return None;
    };
    let mut values = sem.possible_values(line)?;
    values.truncate(MAX_LINES);
    Some(values)
}

fn argv_embedded(anchor: Node<'_>, code: String) -> Embedded<'_> {
    Embedded {
        interpreter: "argv".into(),
        language: Some(Language::Bash),
        code: Some(code),
        anchor,
        verbatim_at: None,
        origin: Origin::Local,
    }
}

/// The command lines of an argv; an item taken from a loop over constants (`["rm", "-rf", d]` in
/// `for d in DIRS`) gives one line per value (several such items, their combinations, at most
/// `MAX_LINES`); other run-time items stay run-time words, after the constant text they are known
/// to start with (`f"of=/dev/{disk}"` is `of=/dev/"$…"`, as a Bash script would spell it).
fn argv_lines(sem: &PySem<'_>, items: &[(Node<'_>, Option<String>)]) -> Vec<String> {
    const MAX_LINES: usize = 16;
    let mut lines: Vec<Vec<Word>> = vec![
        items
            .iter()
            .map(|(_, v)| v.clone().map_or(Word::Runtime, Word::Known))
            .collect(),
    ];
    for (at, (node, value)) in items.iter().enumerate() {
        if value.is_some() {
            continue;
        }
        // a string whose run-time parts all pass through shlex.quote: each a quoted word
        if let Some(v) = sem.fold_shell(*node) {
            for line in &mut lines {
                line[at] = Word::Known(v.clone());
            }
            continue;
        }
        let values: Vec<Word> = match sem.possible_values(*node) {
            Some(values) => values.into_iter().map(Word::Known).collect(),
            None => sem
                .prefixes(*node)
                .into_iter()
                .filter(|p| !p.is_empty())
                .map(Word::Prefix)
                .collect(),
        };
        if values.is_empty() {
            continue;
        }
        lines = lines
            .iter()
            .flat_map(|line| {
                values.iter().map(move |v| {
                    let mut line = line.clone();
                    line[at] = v.clone();
                    line
                })
            })
            .take(MAX_LINES)
            .collect();
    }
    lines.iter().map(|line| words_line(line)).collect()
}

/// `for cmd in (["iptables", "-F"], ["iptables", "-X"]): subprocess.run(cmd)`: each argv the
/// loop variable takes.
fn looped_argvs<'t>(sem: &PySem<'t>, argv: Node<'t>) -> Vec<Embedded<'t>> {
    let Some(lists) = sem.loop_argv_lists(argv) else {
        return Vec::new();
    };
    lists
        .into_iter()
        .filter_map(|list| sem.list_items(list))
        .filter(|items| !items.is_empty())
        .flat_map(|items| argv_lines(sem, &items))
        .map(|code| argv_embedded(argv, code))
        .collect()
}

/// A command string a shell runs (`subprocess.run(cmd, shell=True)`, `os.system(cmd)`, or a
/// remote host's shell: paramiko's `exec_command`, fabric's `run`), when it is a constant or all
/// its run-time parts are shell-quoted: checked as Bash (`rm -rf /` is no safer in a string, nor
/// on another machine).
fn shell_command_lines<'t>(
    sem: &PySem<'t>,
    names: &[String],
    call: Node<'t>,
    args: &[Node<'t>],
) -> Option<Vec<Embedded<'t>>> {
    const MAX_LINES: usize = 16;
    let through_shell = names.iter().any(|n| {
        matches!(
            n.as_str(),
            "os.system"
                | "os.popen"
                | "subprocess.getoutput"
                | "subprocess.getstatusoutput"
                | "asyncio.create_subprocess_shell"
                | "asyncio.subprocess.create_subprocess_shell"
                | "paramiko.SSHClient.exec_command"
                | "paramiko.client.SSHClient.exec_command"
                | "fabric.Connection.run"
                | "fabric.Connection.sudo"
                | "fabric.connection.Connection.run"
                | "fabric.connection.Connection.sudo"
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
    let line = |code: String, anchor: Node<'t>| Embedded {
        interpreter: "sh -c".into(),
        language: Some(Language::Bash),
        verbatim_at: verbatim(sem.src, anchor, &code),
        origin: Origin::Local,
        code: Some(code),
        anchor,
    };
    // a constant, or each of the constants a loop variable takes (`for cmd in CMDS`)
    if let Some(code) = sem.fold_shell(command) {
        return Some(vec![line(code, command)]);
    }
    if let Some(mut values) = sem.possible_values(command) {
        values.truncate(MAX_LINES);
        return Some(values.into_iter().map(|code| line(code, command)).collect());
    }
    // a parameter of the enclosing function (`def sh(cmd): subprocess.run(cmd, shell=True)`):
    // the command line each of the script's calls passes, checked where it is written
    let passed: Vec<Embedded<'t>> = sem
        .forwarded_args(command)
        .into_iter()
        .filter_map(|(_, passed)| Some(line(sem.fold_shell(passed)?, passed)))
        .take(MAX_LINES)
        .collect();
    (!passed.is_empty()).then_some(passed)
}

/// `["bash", "-c", code]`: the inline program in an argv list.
fn inline_in_argv<'t>(
    sem: &PySem<'_>,
    table: &Interpreters,
    items: &[(Node<'t>, Option<String>)],
) -> Option<Embedded<'t>> {
    let start = items.iter().position(|(_, v)| {
        v.as_deref()
            .is_some_and(|v| table.lookup(base_name(v)).is_some())
    })?;
    let interp_name = base_name(items[start].1.as_deref().unwrap_or("")).to_string();
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
        origin: Origin::Local,
    })
}

/// An argv as a shell command line; items only known at run time become a quoted variable.
fn command_line(items: &[(Node<'_>, Option<String>)]) -> String {
    words_line(
        &items
            .iter()
            .map(|(_, v)| v.clone().map_or(Word::Runtime, Word::Known))
            .collect::<Vec<_>>(),
    )
}

/// An argv item as a command line spells it.
#[derive(Debug, Clone)]
enum Word {
    Known(String),
    /// Known to start with this text, the rest only known at run time.
    Prefix(String),
    Runtime,
}

/// An argv's words as a command line: constants quoted as needed, run-time values as a quoted
/// variable.
fn words_line(words: &[Word]) -> String {
    const RUNTIME: &str = "\"$SCRIPTGATE_RUNTIME_VALUE\"";
    let quoted = |s: &str| super::shell_word(s, false);
    let word = |w: &Word| match w {
        Word::Runtime => RUNTIME.to_string(),
        Word::Known(s) => quoted(s),
        Word::Prefix(p) => format!("{}{RUNTIME}", quoted(p)),
    };
    words.iter().map(word).collect::<Vec<_>>().join(" ")
}
