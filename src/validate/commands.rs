//! The command invocations of a script, as validation sees them before the run: every program a
//! Bash command line runs (wrappers, `xargs`, `find -exec`, pipelines, command substitutions) and
//! those of the programs it hands to a shell (`bash -c`, `xargs sh -c`, `eval`, heredocs), and the
//! processes a Python script starts with a constant argv or shell command (the rules'
//! `python_process_calls`: `subprocess.*`, `os.system`, `os.popen`, `os.exec*`, `os.spawn*`, …),
//! which the rules already read as Bash command lines. Python 2's `commands.getoutput` is not
//! among those calls (the `python-os-command` rule flags every use): its constant command strings
//! are read as Bash here too.
//!
//! Names and arguments come from the rules' own Bash semantics (`rules::bash`: folding, wrappers,
//! `find -exec`) and inline-program extraction (`rules::embed`); this module only walks them. A
//! program whose name is only known at run time is not listed (the run-time enforcement decides
//! its `execve`), nor are the functions a script defines and calls.

use std::collections::HashSet;

use tree_sitter::{Node, Tree};

use super::Validator;
use super::dangerous::semantics;
use super::verdict::Positions;
use super::walk::{self, Walk};
use crate::domain::script::{Language, Script};
use crate::rules::embed::{self, Embedded, Origin};
use crate::rules::grammar::text;
use crate::rules::matcher::{Cx, Sem};
use crate::rules::python::PySem;

/// Inline programs are followed this deep (as the dangerous-pattern layer does).
const MAX_NESTING: u8 = 4;
/// At most this many invocations are listed for one script (a 10,000-character script has far
/// fewer; the cap bounds what nesting could multiply).
pub const MAX_COMMANDS: usize = 4096;

/// One program a script runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandInvocation {
    /// The program's name as the script spells it, without its directory (`/bin/rm` → `rm`).
    pub name: String,
    /// The arguments after the name; a word only known at run time is its source text
    /// (`"$f"`), and `constant` is false.
    pub args: Vec<String>,
    /// Every argument is a constant.
    pub constant: bool,
    /// 1-based line and column in the script (for a nested program: where its code starts, or
    /// the word that holds it).
    pub line: u32,
    pub column: u32,
}

impl CommandInvocation {
    /// The argument vector, the name as `argv[0]`.
    pub fn argv(&self) -> Vec<String> {
        std::iter::once(self.name.clone())
            .chain(self.args.iter().cloned())
            .collect()
    }

    /// The command line, as shown in messages.
    pub fn line_text(&self) -> String {
        self.argv().join(" ")
    }
}

/// An invocation before its position is known: at a byte offset of the outermost script.
struct Found {
    name: String,
    args: Vec<String>,
    constant: bool,
    at: usize,
}

impl Validator {
    /// Every program `script` runs that validation can name, in the order they appear, at most
    /// [`MAX_COMMANDS`]. No I/O; a script that does not parse lists what its parsed parts run.
    pub fn commands(&self, script: &Script) -> Vec<CommandInvocation> {
        let mut found = Vec::new();
        collect(self, script.language, &script.text, 0, &mut found);
        found.truncate(MAX_COMMANDS);
        let pos = Positions::new(&script.text);
        found
            .into_iter()
            .map(|f| {
                let (line, column) = pos.at(f.at);
                CommandInvocation {
                    name: f.name,
                    args: f.args,
                    constant: f.constant,
                    line,
                    column,
                }
            })
            .collect()
    }
}

/// The invocations of `src` (a script or an inline program in `language`), offsets in `src`.
fn collect(v: &Validator, language: Language, script: &str, nesting: u8, out: &mut Vec<Found>) {
    let rules = v.rules().tree(language);
    let (parsed, tree) = super::parse(&rules.grammar, script);
    let src: &str = &parsed;
    let pos = Positions::new(src);
    let walk = walk::run(v.kinds(), rules, &tree, src, &pos);
    let cx = Cx::new(
        src,
        semantics(v, &walk, src),
        &rules.names,
        &walk.sites,
        rules.slots,
        &rules.literals,
        &walk.present,
    )
    .with_parents(&walk.parents);
    match &cx.sem {
        Sem::Bash(sh) => {
            let functions = functions(v, &tree, src);
            for &site in &walk.sites {
                if out.len() >= MAX_COMMANDS {
                    return;
                }
                for inv in sh.invocations(site) {
                    if inv.name.is_empty() || functions.contains(inv.name.as_str()) {
                        continue;
                    }
                    let folded: Vec<Option<String>> =
                        inv.args.iter().map(|a| sh.fold(*a)).collect();
                    out.push(Found {
                        name: inv.name.clone(),
                        constant: folded.iter().all(Option::is_some),
                        args: folded
                            .into_iter()
                            .zip(&inv.args)
                            .map(|(f, a)| f.unwrap_or_else(|| text(*a, src).to_string()))
                            .collect(),
                        at: site.start_byte(),
                    });
                }
                let programs = embed::bash_embedded(sh, &cx, site);
                nested_programs(v, &programs, nesting, out);
            }
            heredoc_regions(v, &walk, src, nesting, out);
        }
        Sem::Python(py) => {
            for &site in &walk.sites {
                if out.len() >= MAX_COMMANDS {
                    return;
                }
                let mut programs = embed::python_embedded(py, &cx, &v.rules().interpreters, site);
                programs.extend(shell_call(py, site));
                nested_programs(v, &programs, nesting, out);
            }
        }
    }
}

/// Python calls that hand their first argument to `/bin/sh -c` and that the rules'
/// `python_process_calls` do not list (the `python-os-command` rule flags them instead).
const SHELL_CALLS: &[&str] = &["commands.getoutput", "commands.getstatusoutput"];

/// The command line `commands.getoutput(CMD)` runs, when
/// CMD is a constant (or its run-time parts are shell-quoted): a Bash program whose commands are
/// listed like those of `subprocess.run(CMD, shell=True)`.
fn shell_call<'t>(py: &PySem<'t>, call: Node<'t>) -> Option<Embedded<'t>> {
    let names = py.callee_names(call);
    if !names.iter().any(|n| SHELL_CALLS.contains(&n.as_str())) {
        return None;
    }
    let command = *py.effective_positional(call).first()?;
    let code = py.fold_shell(command)?;
    // Where the code sits verbatim inside the string literal, for positions of its commands.
    let verbatim_at = text(command, py.src)
        .find(code.as_str())
        .filter(|_| !code.is_empty())
        .map(|offset| command.start_byte() + offset);
    Some(Embedded {
        interpreter: "sh -c".into(),
        language: Some(Language::Bash),
        code: Some(code),
        anchor: command,
        verbatim_at,
        origin: Origin::Local,
    })
}

/// The invocations inside inline programs, at their place in the outer source.
fn nested_programs(v: &Validator, programs: &[Embedded<'_>], nesting: u8, out: &mut Vec<Found>) {
    if nesting >= MAX_NESTING {
        return;
    }
    for program in programs {
        let (Some(code), Some(language)) = (&program.code, program.language) else {
            continue;
        };
        let mut inner = Vec::new();
        collect(v, language, code, nesting + 1, &mut inner);
        out.extend(inner.into_iter().map(|mut f| {
            f.at = program
                .verbatim_at
                .map_or(program.anchor.start_byte(), |base| base + f.at);
            f
        }));
    }
}

/// Text the Bash grammar cannot place in the tree (after a heredoc in some positions), read on
/// its own as the dangerous-pattern layer does.
fn heredoc_regions(v: &Validator, walk: &Walk<'_>, src: &str, nesting: u8, out: &mut Vec<Found>) {
    if nesting >= MAX_NESTING {
        return;
    }
    for &(start, end) in &walk.regions {
        let mut inner = Vec::new();
        collect(v, Language::Bash, &src[start..end], nesting + 1, &mut inner);
        out.extend(inner.into_iter().map(|mut f| {
            f.at += start;
            f
        }));
    }
}

/// The names of the functions a Bash script defines: calling one runs no program.
fn functions<'s>(v: &Validator, tree: &Tree, src: &'s str) -> HashSet<&'s str> {
    let k = &v.kinds().sh;
    let mut names = HashSet::new();
    let mut cursor = tree.walk();
    let mut stack: Vec<Node<'_>> = vec![tree.root_node()];
    while let Some(node) = stack.pop() {
        if node.kind_id() == k.function_definition
            && let Some(name) = node.child_by_field_id(k.f_name)
        {
            names.insert(text(name, src));
        }
        stack.extend(node.named_children(&mut cursor));
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commands(language: Language, text: &str) -> Vec<(String, String)> {
        Validator::builtin()
            .commands(&Script::new(language, text))
            .into_iter()
            .map(|c| (c.name, c.args.join(" ")))
            .collect()
    }

    fn names(language: Language, text: &str) -> Vec<String> {
        commands(language, text).into_iter().map(|c| c.0).collect()
    }

    #[test]
    fn a_command_line_lists_every_program_it_runs() {
        assert_eq!(
            commands(Language::Bash, "sudo env X=1 /bin/rm -rf /tmp/x\n"),
            [
                ("sudo".into(), "env X=1 /bin/rm -rf /tmp/x".into()),
                ("env".into(), "X=1 /bin/rm -rf /tmp/x".into()),
                ("rm".into(), "-rf /tmp/x".into()),
            ]
        );
        assert_eq!(
            names(Language::Bash, "cat a | grep b | sort\necho \"$(date)\"\n"),
            ["cat", "grep", "sort", "echo", "date"]
        );
    }

    #[test]
    fn nested_runners_are_followed() {
        let found = names(
            Language::Bash,
            "find . -name '*.py' -exec python3 {} \\;\nls | xargs sh -c 'pip install requests'\nbash -c \"curl example.com\"\neval 'wget x'\n",
        );
        for want in [
            "find", "python3", "ls", "xargs", "sh", "pip", "bash", "curl", "eval", "wget",
        ] {
            assert!(found.iter().any(|n| n == want), "{want} in {found:?}");
        }
        let pip = commands(Language::Bash, "xargs sh -c 'pip install requests'\n");
        assert!(
            pip.contains(&("pip".into(), "install requests".into())),
            "{pip:?}"
        );
    }

    #[test]
    fn a_python_shell_call_lists_the_commands_of_its_constant_command_line() {
        let script = "import os, subprocess, commands\n\
            os.system('pip install requests && rm -rf /tmp/x')\n\
            p = os.popen(\"curl -s example.com | sh\")\n\
            subprocess.run('wget -q x', shell=True)\n\
            commands.getoutput('id -u')\n\
            os.system(cmd)\n";
        let found = commands(Language::Python, script);
        for want in [
            ("pip", "install requests"),
            ("rm", "-rf /tmp/x"),
            ("curl", "-s example.com"),
            ("sh", ""),
            ("wget", "-q x"),
            ("id", "-u"),
        ] {
            assert!(
                found.contains(&(want.0.to_string(), want.1.to_string())),
                "{want:?} in {found:?}"
            );
        }
        // Only what the strings run: a command only known at run time is decided at run time.
        assert_eq!(found.len(), 6, "{found:?}");
        let pip = Validator::builtin()
            .commands(&Script::new(
                Language::Python,
                "import os\nos.system('ls')\n",
            ))
            .remove(0);
        assert_eq!((pip.name.as_str(), pip.line, pip.column), ("ls", 2, 12));
    }

    #[test]
    fn folded_names_count_and_functions_and_dynamic_names_do_not() {
        assert_eq!(
            names(Language::Bash, "'r''m' -f x\n\\curl y\n"),
            ["rm", "curl"]
        );
        assert_eq!(names(Language::Bash, "f() { ls; }\nf\n$cmd a\n"), ["ls"]);
        let dynamic =
            Validator::builtin().commands(&Script::new(Language::Bash, "cp \"$src\" /tmp\n"));
        assert_eq!(dynamic[0].args, ["\"$src\"", "/tmp"]);
        assert!(!dynamic[0].constant);
        assert_eq!((dynamic[0].line, dynamic[0].column), (1, 1));
    }

    #[test]
    fn python_process_calls_with_constant_commands_are_invocations() {
        let found = commands(
            Language::Python,
            "import os, subprocess\nsubprocess.run(['pip', 'install', 'x'])\nsubprocess.run('curl -s example.com | sh', shell=True)\n",
        );
        assert!(
            found.contains(&("pip".into(), "install x".into())),
            "{found:?}"
        );
        assert!(found.iter().any(|c| c.0 == "curl"), "{found:?}");
        assert!(found.iter().any(|c| c.0 == "sh"), "{found:?}");
        assert!(names(Language::Python, "print('rm -rf /')\n").is_empty());
        // `os.system` is one of the rules' process calls: its command line is read once.
        assert_eq!(
            names(Language::Python, "import os\nos.system('ls')\n"),
            ["ls"]
        );
    }

    #[test]
    fn positions_point_into_the_outer_script() {
        let found = Validator::builtin().commands(&Script::new(
            Language::Bash,
            "echo start\nbash -c 'ls; pip install x'\n",
        ));
        let pip = found.iter().find(|c| c.name == "pip").expect("pip");
        assert_eq!(pip.line, 2);
        assert_eq!(pip.column, 14);
    }
}
