//! Inline programs a Bash command starts: `eval`, a `trap` handler, `bash -c CODE`, code glued to
//! its flag, shell runners (`su -c`, `watch`), awk's commands, and programs read from a heredoc, a
//! here-string or the previous pipeline stage.

use tree_sitter::Node;

use super::runner::{
    RUNTIME_WORD, RuntimeCode, command_words, runtime_code, runtime_parts_are_arguments,
    shell_quote, words_after_dashes,
};
use super::{
    Embedded, Interpreter, Origin, ShellRunner, awk, is_code_flag, verbatim, words, written,
};
use crate::domain::script::Language;
use crate::rules::bash::{BashSem, Invocation};
use crate::rules::codec::decode_c_escapes;
use crate::rules::grammar::text;
use crate::rules::matcher::Cx;

/// Inline programs started by a Bash `command` node.
pub fn bash_embedded<'t>(sem: &BashSem<'_>, cx: &Cx<'t>, command: Node<'t>) -> Vec<Embedded<'t>> {
    let Some(table) = sem.interpreters else {
        return Vec::new();
    };
    let mut found: Vec<Embedded<'t>> = words::split_command_line(sem, command)
        .into_iter()
        .chain(words::alias_expansion(sem, command))
        .chain(words::function_runs_arguments(sem, command))
        .chain(words::array_expansion(sem, command))
        .chain(words::word_splitting(sem, command))
        .chain(words::xargs_input(sem, command))
        .chain(written::written_script(sem, cx, command))
        .collect();
    let (invocations, hot) = cx.bash_invocations(sem, command);
    if !hot {
        return found;
    }
    for inv in invocations.iter() {
        if inv.name == "eval"
            && !inv.args.is_empty()
            && inv
                .args
                .iter()
                .all(|a| table.is_shell_setup(text(*a, sem.src)))
        {
            // `eval "$(pyenv init -)"`: the set-up an installed tool prints, not code to check.
            continue;
        }
        if inv.name == "eval" && !inv.args.is_empty() {
            let parts: Option<Vec<String>> = inv.args.iter().map(|a| sem.fold(*a)).collect();
            let code = parts.map(|p| p.join(" "));
            // `eval "count_${e}=0"` for each `e` a loop or a `case` branch allows: each code
            if code.is_none()
                && let [arg] = inv.args[..]
                && let Some(codes) = sem.possible_values(arg)
            {
                found.extend(codes.into_iter().map(|code| Embedded {
                    interpreter: "eval".into(),
                    language: Some(Language::Bash),
                    code: Some(code),
                    anchor: arg,
                    verbatim_at: None,
                    origin: Origin::Local,
                }));
                continue;
            }
            let at = code
                .as_deref()
                .and_then(|c| verbatim(sem.src, inv.args[0], c));
            found.push(Embedded {
                interpreter: "eval".into(),
                language: Some(Language::Bash),
                code,
                anchor: inv.args[0],
                verbatim_at: at,
                origin: Origin::Local,
            });
            continue;
        }
        // `trap 'curl -F f=@~/.kube/config …' EXIT`: the handler is code the shell runs later
        // (not `trap - EXIT`, `trap '' INT` or `trap -p`, which only reset, ignore or list)
        if inv.name == "trap" {
            found.extend(trap_handler(sem, inv));
            continue;
        }
        if awk::AWKS.contains(&inv.name.as_str()) {
            found.extend(awk::commands(sem, inv));
            continue;
        }
        if let Some(runner) = table.runners.iter().find(|r| r.names.contains(&inv.name)) {
            found.extend(
                remote_stdin_program(sem, command, inv, runner)
                    .map(|e| vec![e])
                    .unwrap_or_else(|| runner_command(sem, inv, runner)),
            );
            continue;
        }
        let Some(interp) = table.lookup(&inv.name) else {
            continue;
        };
        let flags: Vec<&str> = interp.code_flags.iter().map(String::as_str).collect();
        if let Some(mut e) = code_after_flag(sem, inv, &flags, &inv.name, interp.language)
            .or_else(|| attached_code(sem, inv, interp))
        {
            // `xargs -I CMD sh -c "CMD"`: the code is xargs' input, known only at run time
            if let (Some(code), Some(replace)) = (&e.code, xargs_replace(sem, &invocations))
                && code
                    .trim_start()
                    .split([' ', ';', '|', '&'])
                    .next()
                    .is_some_and(|first| first.trim_matches(['"', '\'']) == replace)
            {
                e.code = None;
                e.verbatim_at = None;
                found.push(e);
                continue;
            }
            if e.code.is_none() {
                let runtime = runtime_code(sem, &e, &inv.name, interp.language);
                match runtime {
                    RuntimeCode::Values(codes) => {
                        found.extend(codes.into_iter().map(|code| Embedded {
                            code: Some(code),
                            verbatim_at: None,
                            ..e.clone()
                        }));
                        continue;
                    }
                    RuntimeCode::Checkable(code) => e.code = Some(code),
                    RuntimeCode::Unknown => {}
                }
            }
            found.push(e);
        } else if sem.reads_program_from_stdin(inv)
            && !takes_operands(&invocations, inv)
            && !on_a_terminal(sem, &invocations, inv)
        {
            found.push(stdin_program(sem, command, &inv.name, interp.language));
        }
    }
    found
}

/// What can still be checked of an interpreter's code only known at run time.
/// Whether `inv` runs under `xargs` (or `parallel`), which appends the words it reads as
/// operands: `… | xargs bash` runs the files named on its input, it does not read a program there.
fn takes_operands(chain: &[Invocation<'_>], inv: &Invocation<'_>) -> bool {
    chain
        .iter()
        .take_while(|i| !std::ptr::eq(*i, inv))
        .any(|i| matches!(i.name.as_str(), "xargs" | "parallel"))
}

/// Whether `inv` runs under a job launcher that gives it a terminal (`srun --pty bash -l`): its
/// standard input is the person at that terminal, an interactive session, not a program.
fn on_a_terminal(sem: &BashSem<'_>, chain: &[Invocation<'_>], inv: &Invocation<'_>) -> bool {
    chain
        .iter()
        .take_while(|i| !std::ptr::eq(*i, inv))
        .any(|i| {
            i.name == "srun"
                && i.args
                    .iter()
                    .any(|a| sem.fold(*a).is_some_and(|w| w == "--pty"))
        })
}

/// `ssh HOST bash -s -- ARGS <<'EOF' … EOF`: the remote command is an interpreter reading its
/// program from standard input, which is the heredoc or here-string; the words after it are that
/// program's arguments, not code. `None` unless the program is there and constant.
fn remote_stdin_program<'t>(
    sem: &BashSem<'_>,
    command: Node<'t>,
    inv: &Invocation<'t>,
    runner: &ShellRunner,
) -> Option<Embedded<'t>> {
    if !runner.rest {
        return None;
    }
    let table = sem.interpreters?;
    // The remote command must be the interpreter itself, with its options known.
    let words = command_words(sem, inv, runner);
    let name = sem.fold(*words.first()?)?;
    let name = name.rsplit('/').next().unwrap_or(&name).to_string();
    let interp = table.lookup(&name)?;
    let mut options = Vec::new();
    for w in &words[1..] {
        match sem.fold(*w) {
            Some(o) if o == "--" => break,
            Some(o) if o.starts_with('-') => options.push(o),
            _ => break,
        }
    }
    let reads_stdin = options.iter().all(|o| !interp.takes_code(o))
        && (words.len() == 1 || options.iter().any(|o| interp.stdin_markers.contains(o)));
    if !reads_stdin {
        return None;
    }
    let mut program = stdin_program(sem, command, &name, interp.language);
    if runner.remote {
        program.origin = Origin::Remote;
    }
    program.code.is_some().then_some(program)
}

/// The replace string of an `xargs -I R` (or `-i`, `--replace`) in a wrapper chain.
fn xargs_replace(sem: &BashSem<'_>, chain: &[Invocation<'_>]) -> Option<String> {
    let xargs = chain.iter().find(|inv| inv.name == "xargs")?;
    let args: Vec<String> = xargs
        .args
        .iter()
        .map(|a| sem.fold(*a).unwrap_or_default())
        .collect();
    args.iter().enumerate().find_map(|(i, a)| match a.as_str() {
        "-I" => args.get(i + 1).cloned(),
        "-i" | "--replace" => Some("{}".to_string()),
        _ => a
            .strip_prefix("--replace=")
            .or_else(|| a.strip_prefix("-I").filter(|r| !r.is_empty()))
            .or_else(|| a.strip_prefix("-i").filter(|r| !r.is_empty()))
            .map(str::to_string),
    })
}

/// The command a [`ShellRunner`] hands to the shell.
fn runner_command<'t>(
    sem: &BashSem<'_>,
    inv: &Invocation<'t>,
    runner: &ShellRunner,
) -> Vec<Embedded<'t>> {
    if let Some(e) = code_in_word(sem, inv, &runner.code_prefixes) {
        return vec![e];
    }
    if !runner.code_flags.is_empty() {
        let flags: Vec<&str> = runner.code_flags.iter().map(String::as_str).collect();
        return code_after_flag(sem, inv, &flags, &inv.name, Some(Language::Bash))
            .into_iter()
            .collect();
    }
    if !runner.rest {
        return Vec::new();
    }
    let words = if runner.after_dashes {
        words_after_dashes(sem, inv, runner)
    } else {
        command_words(sem, inv, runner)
    };
    let Some(&anchor) = words.first() else {
        return Vec::new();
    };
    let origin = if runner.remote {
        Origin::Remote
    } else {
        Origin::Local
    };
    // A remote shell (ssh's, `skip`ping the host) runs the words on another machine: their
    // run-time parts stand as one word there, so the command's shape is what is checked. A
    // container runtime (`after_dashes`) passes the words as they are, with no shell between:
    // each stays one word (quoted) in the code checked.
    let fold = |w: &Node<'t>| {
        if runner.after_dashes {
            sem.fold_with(*w, RUNTIME_WORD).map(|v| shell_quote(&v))
        } else if runner.skip > 0 {
            sem.fold_with(*w, RUNTIME_WORD)
        } else {
            sem.fold(*w)
        }
    };
    let code: Option<Vec<String>> = words.iter().map(fold).collect();
    let code = code
        .map(|c| c.join(" "))
        .filter(|c| (runner.skip == 0 && !runner.after_dashes) || runtime_parts_are_arguments(c));
    // One word naming the whole command, set to one of a few constants by a loop or by the
    // branches of a `case` (`case $platform in ios) cmd="show running-config" ;; …`): each.
    if code.is_none()
        && let [word] = words[..]
        && let Some(values) = sem
            .possible_values(word)
            .or_else(|| sem.assigned_alternatives(word))
    {
        return values
            .into_iter()
            .map(|value| Embedded {
                interpreter: inv.name.clone(),
                language: Some(Language::Bash),
                code: Some(value),
                anchor,
                verbatim_at: None,
                origin,
            })
            .collect();
    }
    let verbatim_at = code.as_deref().and_then(|c| verbatim(sem.src, anchor, c));
    vec![Embedded {
        interpreter: inv.name.clone(),
        language: Some(Language::Bash),
        code,
        anchor,
        verbatim_at,
        origin,
    }]
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
    let mut code = inv.args.get(at + 1).and_then(|n| sem.fold(*n));
    let verbatim_at = code.as_deref().and_then(|c| verbatim(sem.src, anchor, c));
    if language == Some(Language::Bash)
        && let Some(c) = code.as_mut()
    {
        let params: Vec<Option<String>> = inv.args[(at + 2).min(inv.args.len())..]
            .iter()
            .map(|a| sem.fold(*a))
            .collect();
        bind_positional(c, &params);
    }
    Some(Embedded {
        interpreter: interpreter.to_string(),
        language,
        code,
        anchor,
        verbatim_at,
        origin: Origin::Local,
    })
}

/// `sh -c 'rm -rf "$1"/*' _ /`: the words after the code are `$0`, `$1`, …; each constant one is
/// put in place of `$N` / `${N}` (and `$@` / `$*` when all are constant), so the code is checked
/// with the values it will run with. A value holding quoting or expansion characters is left
/// out: substituting it could change how the code parses.
fn bind_positional(code: &mut String, params: &[Option<String>]) {
    fn plain(v: &str) -> bool {
        !v.contains(['"', '\'', '\\', '$', '`'])
    }
    if params.is_empty() || !code.contains('$') {
        return;
    }
    let value = |n: usize| {
        params
            .get(n)
            .and_then(|v| v.as_deref())
            .filter(|v| plain(v))
    };
    let all: Option<Vec<&str>> = params
        .iter()
        .skip(1)
        .map(|v| v.as_deref().filter(|v| plain(v)))
        .collect();
    let mut out = String::with_capacity(code.len());
    let mut rest = code.as_str();
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let escaped = out.ends_with('\\');
        let (n, len) = if let Some(d) = after.chars().next().filter(char::is_ascii_digit) {
            (Some(d as usize - '0' as usize), 1)
        } else if let Some(inner) = after.strip_prefix('{').and_then(|a| a.split_once('}')) {
            (
                inner.0.parse::<usize>().ok().filter(|n| *n < 10),
                inner.0.len() + 2,
            )
        } else {
            (None, 0)
        };
        let replacement = match (n, after.chars().next()) {
            (Some(n), _) => value(n).map(|v| (v.to_string(), len)),
            (None, Some('@' | '*')) => all.as_ref().map(|a| (a.join(" "), 1)),
            _ => None,
        };
        match replacement.filter(|_| !escaped) {
            Some((v, len)) => {
                out.push_str(&v);
                rest = &after[len..];
            }
            None => {
                out.push('$');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    *code = out;
}

/// `tar … --checkpoint-action=exec='sh x.sh'`: the command is the rest of a word starting with
/// one of `prefixes`.
fn code_in_word<'t>(
    sem: &BashSem<'_>,
    inv: &Invocation<'t>,
    prefixes: &[String],
) -> Option<Embedded<'t>> {
    if prefixes.is_empty() {
        return None;
    }
    inv.args.iter().find_map(|arg| {
        let value = sem.fold(*arg);
        let word = value.as_deref().unwrap_or_else(|| text(*arg, sem.src));
        let code = prefixes
            .iter()
            .find_map(|p| word.strip_prefix(p.as_str()))?;
        Some(Embedded {
            interpreter: inv.name.clone(),
            language: Some(Language::Bash),
            code: value.as_ref().map(|_| code.to_string()),
            anchor: *arg,
            verbatim_at: value.as_ref().and_then(|_| verbatim(sem.src, *arg, code)),
            origin: Origin::Local,
        })
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
                        origin: Origin::Local,
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
        origin: Origin::Local,
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
                origin: Origin::Local,
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
                    origin: Origin::Local,
                    code: Some(code),
                    anchor: body,
                };
            }
        }
        if parent.kind_id() == k.pipeline {
            return piped_program(sem, parent, node, name, language)
                .unwrap_or_else(|| dynamic(command));
        }
        // `a || python3 - <<EOF`: the heredoc redirects the list, and belongs to its last command
        let ends_list = parent.kind_id() == k.list
            && parent
                .named_child(
                    u32::try_from(parent.named_child_count().saturating_sub(1)).unwrap_or(0),
                )
                .is_some_and(|last| last.id() == node.id());
        if parent.kind_id() != k.redirected_statement && !ends_list {
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
        "printf" if args.len() == 1 => decode_c_escapes(&args[0]),
        _ => return None,
    };
    let anchor = inv.args.last().copied().unwrap_or(previous);
    Some(Embedded {
        interpreter: name.to_string(),
        language,
        verbatim_at: verbatim(sem.src, anchor, &code),
        origin: Origin::Local,
        code: Some(code),
        anchor,
    })
}

/// The handler a `trap HANDLER SIGNAL…` sets, as Bash code.
fn trap_handler<'t>(sem: &BashSem<'_>, inv: &Invocation<'t>) -> Option<Embedded<'t>> {
    let [handler, _signal, ..] = inv.args[..] else {
        return None;
    };
    // (a handler only known at run time, `trap "rm -rf $work" EXIT` after `work=$(mktemp -d)`,
    // is the script's own clean-up: it is not refused as dynamic code)
    let code = sem.fold(handler)?;
    // (`trap cleanup EXIT`: one word names a function, whose body the script's check covers)
    let one_word = code
        .trim()
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ':'));
    if one_word || code.starts_with('-') {
        return None;
    }
    let at = verbatim(sem.src, handler, &code);
    Some(Embedded {
        interpreter: "trap".into(),
        language: Some(Language::Bash),
        code: Some(code),
        anchor: handler,
        verbatim_at: at,
        origin: Origin::Local,
    })
}

#[cfg(test)]
mod tests {
    use super::bind_positional;

    fn bound(code: &str, params: &[&str]) -> String {
        let mut c = code.to_string();
        let p: Vec<Option<String>> = params.iter().map(|p| Some(p.to_string())).collect();
        bind_positional(&mut c, &p);
        c
    }

    #[test]
    fn positional_parameters_take_the_words_after_the_code() {
        assert_eq!(bound("rm -rf \"$1\"/*", &["_", "/"]), "rm -rf \"/\"/*");
        assert_eq!(bound("echo ${2} $0", &["sh", "a", "b"]), "echo b sh");
        assert_eq!(
            bound("rm -rf $@", &["_", "/etc", "/usr"]),
            "rm -rf /etc /usr"
        );
        assert_eq!(
            bound("echo \\$1 $HOME $9", &["_", "x"]),
            "echo \\$1 $HOME $9"
        );
        assert_eq!(bound("echo \"$1\"", &["_", "a\"b"]), "echo \"$1\"");
    }
}
