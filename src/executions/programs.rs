//! What program a command line runs, read the way its interpreter reads its arguments: the inline
//! program of `python3 -c` or `bash -c`, a script file, or a program on standard input. Only the
//! interpreters validation has layers for are read; anything else runs no program of ours to see.

use crate::domain::script::Language;

/// The program a command runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Program<'a> {
    /// `-c CODE`: the code, and the index of the argument that holds it.
    Inline { code: &'a str, arg: usize },
    /// A script file, as named on the command line.
    File(&'a str),
    /// The program comes on standard input (no operand, `-`, or `bash -s`).
    Stdin,
    /// Something the command line does not show (`python3 -m module`, `-c` without code).
    Unseen,
}

/// The language `command`'s program is in, when it is an interpreter validation knows: `python`,
/// `python3`, `python3.12`, …; `bash`, `sh`, `dash`.
pub(super) fn interpreter(command: &str) -> Option<Language> {
    let name = command.rsplit('/').next().unwrap_or(command);
    let version = |rest: &str| rest.chars().all(|c| c.is_ascii_digit() || c == '.');
    if let Some(rest) = name.strip_prefix("python") {
        return version(rest).then_some(Language::Python);
    }
    matches!(name, "bash" | "sh" | "dash" | "rbash").then_some(Language::Bash)
}

/// What `args` make `language`'s interpreter run.
pub(super) fn program(language: Language, args: &[String]) -> Program<'_> {
    match language {
        Language::Python => python(args),
        Language::Bash => bash(args),
    }
}

/// CPython's options: `-c` and `-m` end the options; `-W` and `-X` take a value (attached or
/// next); the first operand is the script (`-` is standard input).
fn python(args: &[String]) -> Program<'_> {
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        if arg == "-" {
            return Program::Stdin;
        }
        if arg == "--" {
            return args.get(i + 1).map_or(Program::Stdin, |a| Program::File(a));
        }
        if arg.starts_with("--") {
            i += if arg == "--check-hash-based-pycs" {
                2
            } else {
                1
            };
            continue;
        }
        let Some(flags) = arg.strip_prefix('-') else {
            return Program::File(arg);
        };
        let mut skip = 1;
        for (at, flag) in flags.char_indices() {
            let attached = &flags[at + flag.len_utf8()..];
            match flag {
                'c' if !attached.is_empty() => {
                    return Program::Inline {
                        code: attached,
                        arg: i,
                    };
                }
                'c' => {
                    return args
                        .get(i + 1)
                        .map_or(Program::Unseen, |code| Program::Inline { code, arg: i + 1 });
                }
                'm' => return Program::Unseen,
                'W' | 'X' => {
                    skip = if attached.is_empty() { 2 } else { 1 };
                    break;
                }
                _ => {}
            }
        }
        i += skip;
    }
    Program::Stdin
}

/// Bash's options: `-c` (anywhere among the flags) takes its code from the first operand, `-s`
/// reads standard input; `-o`/`+o`, `-O`/`+O`, `--rcfile` and `--init-file` take a value.
fn bash(args: &[String]) -> Program<'_> {
    let (mut inline, mut stdin) = (false, false);
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        if arg == "--" || arg == "-" {
            i += 1;
            break;
        }
        if arg.starts_with("--") {
            i += if arg == "--rcfile" || arg == "--init-file" {
                2
            } else {
                1
            };
            continue;
        }
        let Some(flags) = arg.strip_prefix('-').or_else(|| arg.strip_prefix('+')) else {
            break;
        };
        inline |= flags.contains('c') && arg.starts_with('-');
        stdin |= flags.contains('s') && arg.starts_with('-');
        i += if flags.contains(['o', 'O']) { 2 } else { 1 };
    }
    match (inline, args.get(i)) {
        (true, Some(code)) => Program::Inline { code, arg: i },
        (true, None) => Program::Unseen,
        (false, Some(_)) if stdin => Program::Stdin,
        (false, Some(file)) => Program::File(file),
        (false, None) => Program::Stdin,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn interpreters_are_known_by_name_only() {
        assert_eq!(interpreter("python3"), Some(Language::Python));
        assert_eq!(interpreter("/usr/bin/python3.12"), Some(Language::Python));
        assert_eq!(interpreter("python"), Some(Language::Python));
        assert_eq!(interpreter("sh"), Some(Language::Bash));
        assert_eq!(interpreter("bash"), Some(Language::Bash));
        assert_eq!(interpreter("pythonista"), None);
        assert_eq!(interpreter("git"), None);
    }

    #[test]
    fn python_reads_its_options_as_cpython_does() {
        let p = |list: &[&str]| python(&args(list)).clone_owned();
        assert_eq!(p(&["-c", "print(1)"]), Owned::Inline("print(1)".into(), 1));
        assert_eq!(
            p(&["-I", "-u", "-c", "x", "y"]),
            Owned::Inline("x".into(), 3)
        );
        assert_eq!(p(&["-Ic", "x"]), Owned::Inline("x".into(), 1));
        assert_eq!(p(&["-cprint(2)"]), Owned::Inline("print(2)".into(), 0));
        assert_eq!(p(&["-W", "ignore", "app.py"]), Owned::File("app.py".into()));
        assert_eq!(
            p(&["-Wignore", "app.py", "-c"]),
            Owned::File("app.py".into())
        );
        assert_eq!(p(&["-X", "dev", "-m", "http.server"]), Owned::Unseen);
        assert_eq!(p(&[]), Owned::Stdin);
        assert_eq!(p(&["-"]), Owned::Stdin);
        assert_eq!(p(&["-u"]), Owned::Stdin);
        assert_eq!(p(&["--", "-c.py"]), Owned::File("-c.py".into()));
        assert_eq!(p(&["-c"]), Owned::Unseen);
    }

    #[test]
    fn bash_reads_its_options_as_bash_does() {
        let p = |list: &[&str]| bash(&args(list)).clone_owned();
        assert_eq!(p(&["-c", "echo hi"]), Owned::Inline("echo hi".into(), 1));
        assert_eq!(
            p(&["-ec", "echo hi", "name"]),
            Owned::Inline("echo hi".into(), 1)
        );
        assert_eq!(p(&["-c", "-e", "echo"]), Owned::Inline("echo".into(), 2));
        assert_eq!(
            p(&["-o", "pipefail", "-c", "x"]),
            Owned::Inline("x".into(), 3)
        );
        assert_eq!(p(&["--norc", "run.sh", "-c"]), Owned::File("run.sh".into()));
        assert_eq!(
            p(&["--rcfile", "rc.sh", "run.sh"]),
            Owned::File("run.sh".into())
        );
        assert_eq!(p(&["-s", "arg"]), Owned::Stdin);
        assert_eq!(p(&[]), Owned::Stdin);
        assert_eq!(p(&["-x"]), Owned::Stdin);
        assert_eq!(p(&["-c"]), Owned::Unseen);
        assert_eq!(p(&["+x", "a.sh"]), Owned::File("a.sh".into()));
    }

    #[derive(Debug, PartialEq, Eq)]
    enum Owned {
        Inline(String, usize),
        File(String),
        Stdin,
        Unseen,
    }

    impl Program<'_> {
        fn clone_owned(&self) -> Owned {
            match self {
                Program::Inline { code, arg } => Owned::Inline(code.to_string(), *arg),
                Program::File(f) => Owned::File(f.to_string()),
                Program::Stdin => Owned::Stdin,
                Program::Unseen => Owned::Unseen,
            }
        }
    }
}
