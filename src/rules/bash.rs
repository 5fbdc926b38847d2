//! Bash semantics for rules: constant folding of words and the effective commands of a command line.
//!
//! `'r''m' -rf /`, `\rm`, `/bin/rm`, `$'\x72m'`, `c=$(printf '\x72\x6d'); $c` and `sudo env X=1 rm`
//! all run `rm`; rules see them that way. Variables are constants only when assigned once to a
//! constant (flow-insensitive, like the Python side).
//!
//! (Over 500 lines: word folding and command resolution call each other through `$(…)` and wrappers.)

use rustc_hash::FxHashMap;

use tree_sitter::Node;

use super::codec::decode_c_escapes;

mod download;
mod flow;
use super::embed::Interpreters;
use super::grammar::{Grammar, children_in_field, text};
use super::matcher::{CommandSpec, Cx, NameSet};
pub use download::downloaded_then_run;

const MAX_FOLD_DEPTH: u8 = 40;
const MAX_FOLD_LEN: usize = 64 * 1024;

#[derive(Debug, Clone)]
pub struct BashKinds {
    pub command: u16,
    pub command_name: u16,
    word: u16,
    string: u16,
    raw_string: u16,
    ansi_c_string: u16,
    translated_string: u16,
    concatenation: u16,
    simple_expansion: u16,
    expansion: u16,
    command_substitution: u16,
    string_content: u16,
    number: u16,
    variable_assignment: u16,
    for_statement: u16,
    pub function_definition: u16,
    pub pipeline: u16,
    pub redirected_statement: u16,
    pub heredoc_redirect: u16,
    pub heredoc_body: u16,
    pub herestring_redirect: u16,
    pub f_name: u16,
    pub f_argument: u16,
    f_value: u16,
    f_variable: u16,
    f_body: u16,
    pub f_redirect: u16,
}

impl BashKinds {
    pub fn new(g: &Grammar) -> Self {
        let k = |n| g.known_kind(n);
        let f = |n| g.known_field(n);
        BashKinds {
            command: k("command"),
            command_name: k("command_name"),
            word: k("word"),
            string: k("string"),
            raw_string: k("raw_string"),
            ansi_c_string: k("ansi_c_string"),
            translated_string: k("translated_string"),
            concatenation: k("concatenation"),
            simple_expansion: k("simple_expansion"),
            expansion: k("expansion"),
            command_substitution: k("command_substitution"),
            string_content: k("string_content"),
            number: k("number"),
            variable_assignment: k("variable_assignment"),
            for_statement: k("for_statement"),
            function_definition: k("function_definition"),
            pipeline: k("pipeline"),
            redirected_statement: k("redirected_statement"),
            heredoc_redirect: k("heredoc_redirect"),
            heredoc_body: k("heredoc_body"),
            herestring_redirect: k("herestring_redirect"),
            f_name: f("name"),
            f_argument: f("argument"),
            f_value: f("value"),
            f_variable: f("variable"),
            f_body: f("body"),
            f_redirect: f("redirect"),
        }
    }
}

/// Variables assigned in a script.
#[derive(Debug, Default)]
pub struct BashFacts {
    consts: FxHashMap<String, Option<String>>,
    /// Loop variables of `for v in WORDS`: the words' values when all are constants.
    loops: FxHashMap<String, Option<Vec<String>>>,
}

impl BashFacts {
    pub fn observe(&mut self, k: &BashKinds, node: Node<'_>, src: &str) {
        let kind = node.kind_id();
        if kind == k.variable_assignment {
            let Some(name) = node.child_by_field_id(k.f_name) else {
                return;
            };
            let name = text(name, src).to_string();
            let value = match node.child_by_field_id(k.f_value) {
                Some(v) => BashSem {
                    k,
                    facts: self,
                    src,
                    interpreters: None,
                }
                .fold(v),
                None => Some(String::new()),
            };
            // `x+="…"` after `x="…"` (in document order) is still a constant.
            let appends = src
                .get(node.start_byte()..)
                .is_some_and(|t| t[name.len().min(t.len())..].starts_with("+="));
            let value = match (self.consts.get(&name), appends) {
                (None, false) => value,
                (Some(Some(before)), true) => value.map(|v| format!("{before}{v}")),
                _ => None,
            };
            self.consts.insert(name, value);
        } else if kind == k.for_statement {
            if let Some(var) = node.child_by_field_id(k.f_variable) {
                let name = text(var, src).to_string();
                let sem = BashSem {
                    k,
                    facts: self,
                    src,
                    interpreters: None,
                };
                let words: Option<Vec<String>> = children_in_field(node, k.f_value)
                    .into_iter()
                    .map(|w| sem.fold(w))
                    .collect();
                let values = if self.loops.contains_key(&name) {
                    None
                } else {
                    words.filter(|w| !w.is_empty())
                };
                self.loops.insert(name.clone(), values);
                self.consts.insert(name, None);
            }
        } else if kind == k.command {
            // `read x`, `mapfile x`, `printf -v x`: run-time values.
            let name = node.child_by_field_id(k.f_name).map(|n| text(n, src));
            if name == Some("printf")
                && let Some((var, value)) = self.printf_to_variable(k, node, src)
            {
                let value = if self.consts.contains_key(&var) {
                    None
                } else {
                    value
                };
                self.consts.insert(var, value);
                return;
            }
            if matches!(
                name,
                Some("read" | "mapfile" | "readarray" | "printf" | "getopts")
            ) {
                for arg in children_in_field(node, k.f_argument) {
                    let t = text(arg, src);
                    if !t.starts_with('-') && t.chars().all(|c| c.is_alphanumeric() || c == '_') {
                        self.consts.insert(t.to_string(), None);
                    }
                }
            }
        }
    }
}

impl BashFacts {
    /// `printf -v var FORMAT ARGS…`: the variable, and its value when the format (with `%s`
    /// fields only) and the arguments are constants.
    fn printf_to_variable(
        &self,
        k: &BashKinds,
        command: Node<'_>,
        src: &str,
    ) -> Option<(String, Option<String>)> {
        let args = children_in_field(command, k.f_argument);
        let sem = BashSem {
            k,
            facts: self,
            src,
            interpreters: None,
        };
        if sem.fold(*args.first()?).as_deref() != Some("-v") {
            return None;
        }
        let var = sem.fold(*args.get(1)?)?;
        let values: Option<Vec<String>> = args[2..].iter().map(|a| sem.fold(*a)).collect();
        let value = values.and_then(|v| {
            let (format, rest) = v.split_first()?;
            let mut rest = rest.iter();
            let mut out = String::new();
            let mut pieces = format.split("%s");
            out.push_str(pieces.next()?);
            for piece in pieces {
                out.push_str(rest.next()?);
                out.push_str(piece);
            }
            (!out.contains('%')).then(|| decode_c_escapes(&out))
        });
        Some((var, value))
    }
}

/// One program a command line runs: `sudo env X=1 rm -rf /` runs `sudo`, `env` and `rm`.
#[derive(Debug, Clone)]
pub struct Invocation<'t> {
    /// The program's base name (`/bin/rm` → `rm`); empty when it is only known at run time.
    pub name: String,
    pub args: Vec<Node<'t>>,
}

#[derive(Debug, Clone, Copy)]
pub struct BashSem<'a> {
    pub k: &'a BashKinds,
    pub facts: &'a BashFacts,
    pub src: &'a str,
    pub interpreters: Option<&'a Interpreters>,
}

impl<'a> BashSem<'a> {
    /// Whether a node is constant by its kind alone: a word, a quoted string without expansions,
    /// or a command name that is one of those.
    pub fn is_literal(&self, node: Node<'_>) -> bool {
        let k = node.kind_id();
        if k == self.k.word || k == self.k.raw_string || k == self.k.number {
            return true;
        }
        k == self.k.command_name
            && node.named_child_count() == 1
            && node.named_child(0).is_some_and(|c| {
                let k = c.kind_id();
                k == self.k.word || k == self.k.raw_string
            })
    }

    /// Whether [`BashSem::fold`] can succeed on a string or concatenation, decided without building
    /// its value: every expansion in it names a variable with a constant value.
    pub fn may_fold(&self, node: Node<'_>) -> bool {
        let k = node.kind_id();
        if k == self.k.simple_expansion || k == self.k.expansion {
            let t = text(node, self.src);
            let name = t
                .trim_start_matches('$')
                .trim_start_matches('{')
                .trim_end_matches('}');
            return matches!(self.facts.consts.get(name), Some(Some(_)));
        }
        if k == self.k.string || k == self.k.concatenation || k == self.k.translated_string {
            return super::grammar::children(node).all(|c| self.may_fold(c));
        }
        // literal parts, punctuation, and `$(…)` (which folding decides)
        !node.is_named()
            || k == self.k.word
            || k == self.k.raw_string
            || k == self.k.ansi_c_string
            || k == self.k.number
            || k == self.k.string_content
            || k == self.k.command_substitution
    }

    /// The constant value of a word, string or expansion, as the shell would see it.
    pub fn fold(&self, node: Node<'_>) -> Option<String> {
        self.fold_at(node, 0).filter(|v| v.len() <= MAX_FOLD_LEN)
    }

    fn fold_at(&self, node: Node<'_>, depth: u8) -> Option<String> {
        if depth > MAX_FOLD_DEPTH {
            return None;
        }
        let k = self.k;
        let d = depth + 1;
        let kind = node.kind_id();
        let t = text(node, self.src);
        if kind == k.word || kind == k.number {
            Some(unescape_word(t))
        } else if kind == k.raw_string {
            Some(t.get(1..t.len().saturating_sub(1))?.to_string())
        } else if kind == k.ansi_c_string {
            Some(decode_c_escapes(t.strip_prefix("$'")?.strip_suffix('\'')?))
        } else if kind == k.string || kind == k.translated_string {
            let inner_start = node.start_byte() + t.find('"')? + 1;
            let inner_end = node.end_byte().checked_sub(1)?;
            self.fold_parts(node, inner_start, inner_end, d, true)
        } else if kind == k.concatenation || kind == k.command_name {
            self.fold_parts(node, node.start_byte(), node.end_byte(), d, false)
        } else if kind == k.simple_expansion || kind == k.expansion {
            let name = t
                .trim_start_matches('$')
                .trim_start_matches('{')
                .trim_end_matches('}');
            match self.facts.consts.get(name) {
                Some(value) => value.clone(),
                // The home directory, as `~` (what path rules compare with).
                None if name == "HOME" => Some("~".into()),
                None => None,
            }
        } else if kind == k.command_substitution {
            self.fold_substitution(node, d)
        } else if kind == k.string_content {
            Some(unescape_dquoted(t))
        } else {
            None
        }
    }

    /// Folds the children of `node` between `start` and `end`, keeping the text between them.
    fn fold_parts(
        &self,
        node: Node<'_>,
        start: usize,
        end: usize,
        d: u8,
        quoted: bool,
    ) -> Option<String> {
        let mut out = String::new();
        let mut at = start;
        for child in super::grammar::children(node) {
            if child.end_byte() <= start || child.start_byte() >= end {
                continue;
            }
            let gap = self.src.get(at..child.start_byte().max(at))?;
            out.push_str(&if quoted {
                unescape_dquoted(gap)
            } else {
                unescape_word(gap)
            });
            out.push_str(&self.fold_at(child, d)?);
            at = child.end_byte();
        }
        let gap = self.src.get(at.min(end)..end)?;
        out.push_str(&if quoted {
            unescape_dquoted(gap)
        } else {
            unescape_word(gap)
        });
        Some(out)
    }

    /// `$(printf '\x72\x6d')` and `$(echo rm)`: the output of constant printf/echo commands.
    fn fold_substitution(&self, node: Node<'_>, d: u8) -> Option<String> {
        if node.named_child_count() != 1 {
            return None;
        }
        let inner = node.named_child(0)?;
        let output = if inner.kind_id() == self.k.pipeline {
            // `$(echo … | base64 -d)`: a constant output through decoders
            let mut stages = super::grammar::children(inner).filter(|c| c.is_named());
            let mut value = self.command_output(stages.next()?, None, d)?;
            for stage in stages {
                value = self.command_output(stage, Some(&value), d)?;
            }
            value
        } else {
            self.command_output(inner, None, d)?
        };
        Some(output.trim_end_matches('\n').to_string())
    }

    /// The output of a constant command: `printf`/`echo` of constants, a decoder (`base64 -d`,
    /// `xxd -r -p`, `rev`) reading `input`, or `which`/`command -v`/`type -P` of a name (the name:
    /// what path rules and interpreter lookups compare).
    fn command_output(&self, command: Node<'_>, input: Option<&str>, d: u8) -> Option<String> {
        if command.kind_id() != self.k.command {
            return None;
        }
        let name = self.fold_at(command.child_by_field_id(self.k.f_name)?, d)?;
        let args: Vec<String> = children_in_field(command, self.k.f_argument)
            .into_iter()
            .map(|a| self.fold_at(a, d))
            .collect::<Option<_>>()?;
        let flags = |wanted: &[&str]| args.iter().any(|a| wanted.contains(&a.as_str()));
        let output = match (base_name(&name), input) {
            ("printf", None) => {
                let (format, rest) = args.split_first()?;
                if !rest.is_empty() || format.contains('%') {
                    return None;
                }
                decode_c_escapes(format)
            }
            ("echo", None) => {
                let interpret = args.first().is_some_and(|a| a == "-e");
                let words: Vec<&str> = args
                    .iter()
                    .map(String::as_str)
                    .skip_while(|a| matches!(*a, "-e" | "-n" | "-E"))
                    .collect();
                let joined = words.join(" ");
                if interpret {
                    decode_c_escapes(&joined)
                } else {
                    joined
                }
            }
            ("which" | "command" | "type", None) => {
                let program = args.iter().find(|a| !a.starts_with('-'))?;
                if base_name(&name) != "which" && !flags(&["-v", "-p", "-P"]) {
                    return None;
                }
                program.clone()
            }
            ("base64", Some(data)) if flags(&["-d", "--decode", "-D"]) => {
                super::codec::decode_base64(data.trim(), data.contains(['-', '_']))?
            }
            ("base32", Some(data)) if flags(&["-d", "--decode"]) => {
                super::codec::decode_base32(data.trim())?
            }
            ("xxd", Some(data)) if flags(&["-r"]) && flags(&["-p", "-ps", "-plain"]) => {
                super::codec::decode_hex(&data.split_whitespace().collect::<String>())?
            }
            ("rev", Some(data)) => data
                .lines()
                .map(|l| l.chars().rev().collect::<String>())
                .collect::<Vec<_>>()
                .join("\n"),
            _ => return None,
        };
        Some(output)
    }

    /// The name a `command_name` node spells: plain words (the common case) without folding.
    fn command_name(&self, name: Node<'_>) -> Option<String> {
        if name.named_child_count() == 1
            && let Some(word) = name.named_child(0)
            && word.kind_id() == self.k.word
        {
            let t = text(word, self.src);
            if !t.contains('\\') {
                return Some(base_name(t).to_string());
            }
        }
        self.fold(name).map(|n| base_name(&n).to_string())
    }

    /// Whether a command can run a program named in `names`, from its name as written: a plain
    /// word that is neither a wrapper nor in `names` cannot (anything else might).
    pub fn may_run(&self, command: Node<'_>, names: &NameSet) -> bool {
        // The name is the first child unless assignments or redirections come before it.
        let first = command.child(0);
        let name = match first {
            Some(n) if n.kind_id() == self.k.command_name => n,
            _ => match command.child_by_field_id(self.k.f_name) {
                Some(n) => n,
                None => return true,
            },
        };
        let word = match (name.child_count(), name.child(0)) {
            (1, Some(w)) if w.kind_id() == self.k.word => text(w, self.src),
            _ => return true,
        };
        if word.contains('\\') {
            return true;
        }
        let base = base_name(word);
        wrapper(base).is_some() || names.contains(base)
    }

    /// The programs a `command` node runs, outermost first.
    pub fn invocations<'t>(&self, command: Node<'t>) -> Vec<Invocation<'t>> {
        self.invocations_with(command, &mut command.walk())
    }

    /// [`BashSem::invocations`] with a cursor to reuse (tree-sitter allocates per new cursor).
    pub fn invocations_with<'t>(
        &self,
        command: Node<'t>,
        cursor: &mut tree_sitter::TreeCursor<'t>,
    ) -> Vec<Invocation<'t>> {
        let name = command
            .child_by_field_id(self.k.f_name)
            .and_then(|n| self.command_name(n))
            .unwrap_or_default();
        let mut args: Vec<Node<'t>> = Vec::new();
        cursor.reset(command);
        if cursor.goto_first_child() {
            loop {
                if cursor.field_id().map(|f| f.get()) == Some(self.k.f_argument) {
                    args.push(cursor.node());
                }
                if !cursor.goto_next_sibling() {
                    break;
                }
            }
        }
        let mut chain = vec![Invocation { name, args }];
        while chain.len() < 8 {
            let last = chain.last().expect("chain is never empty");
            let Some(next) = self.unwrap_wrapper(last) else {
                break;
            };
            chain.push(next);
        }
        chain
    }

    /// For wrappers (`sudo`, `env`, `timeout 5`, `xargs -n1` …) the program they run.
    fn unwrap_wrapper<'t>(&self, inv: &Invocation<'t>) -> Option<Invocation<'t>> {
        if inv.name == "find" {
            return self.find_exec(inv);
        }
        let spec = wrapper(&inv.name)?;
        let mut i = 0;
        let mut positional_to_skip = spec.positional;
        while i < inv.args.len() {
            let arg = self.fold(inv.args[i]).unwrap_or_default();
            if arg == "--" {
                i += 1;
                break;
            }
            // `env -i PATH="$PATH" cmd`: an assignment is one by its spelling, whatever its value.
            if spec.env_assignments
                && (is_assignment(&arg) || is_assignment(text(inv.args[i], self.src)))
            {
                i += 1;
            } else if arg.starts_with('-') && arg.len() > 1 {
                if spec.stop_options.contains(&arg.as_str()) {
                    return None;
                }
                let takes_value = spec.value_options.iter().any(|o| *o == arg);
                i += if takes_value { 2 } else { 1 };
            } else if positional_to_skip > 0 {
                positional_to_skip -= 1;
                i += 1;
            } else {
                break;
            }
        }
        let name_node = *inv.args.get(i)?;
        let name = self.fold(name_node).unwrap_or_default();
        Some(Invocation {
            name: base_name(&name).to_string(),
            args: inv.args[i + 1..].to_vec(),
        })
    }

    /// `find … -exec cmd args {} \;` (or `-execdir`, `-ok`, `-okdir`, ending in `;` or `+`): the
    /// command find runs.
    fn find_exec<'t>(&self, inv: &Invocation<'t>) -> Option<Invocation<'t>> {
        let folded: Vec<Option<String>> = inv.args.iter().map(|a| self.fold(*a)).collect();
        let at = folded
            .iter()
            .position(|a| matches!(a.as_deref(), Some("-exec" | "-execdir" | "-ok" | "-okdir")))?;
        let name = folded.get(at + 1)?.clone().unwrap_or_default();
        let end = folded[at + 2..]
            .iter()
            .position(|a| matches!(a.as_deref(), Some(";" | "+")))
            .map_or(inv.args.len(), |p| at + 2 + p);
        Some(Invocation {
            name: base_name(&name).to_string(),
            args: inv.args[(at + 2).min(end)..end].to_vec(),
        })
    }

    pub fn command_matches<'t>(&self, node: Node<'t>, spec: &CommandSpec, cx: &Cx<'t>) -> bool {
        let (invocations, hot) = cx.bash_invocations(self, node);
        hot && invocations.iter().any(|inv| {
            spec.name.contains(&inv.name)
                && (spec.flags.is_empty() || self.has_flag(inv, &spec.flags, cx))
                && spec
                    .arg
                    .as_ref()
                    .is_none_or(|m| inv.args.iter().any(|a| m.matches(*a, cx)))
                && spec
                    .last_arg
                    .as_ref()
                    .is_none_or(|m| inv.args.last().is_some_and(|a| m.matches(*a, cx)))
                && (!spec.stdin_program || self.reads_program_from_stdin(inv))
        })
    }

    /// Whether an option appears before `--`; `-r` matches inside clusters such as `-rf`.
    pub fn has_flag<'t>(&self, inv: &Invocation<'t>, flags: &[String], cx: &Cx<'t>) -> bool {
        for arg in &inv.args {
            let Some(a) = cx.fold(*arg) else { continue };
            let a: &str = &a;
            if a == "--" {
                return false;
            }
            for flag in flags {
                let hit = if flag.starts_with("--") || flag.len() > 2 {
                    a == flag
                        || a.strip_prefix(flag.as_str())
                            .is_some_and(|r| r.starts_with('='))
                } else {
                    let letter = &flag[1..];
                    a.starts_with('-')
                        && !a.starts_with("--")
                        && a[1..].chars().all(|c| c.is_ascii_alphanumeric())
                        && a[1..].contains(letter)
                };
                if hit {
                    return true;
                }
            }
        }
        false
    }

    /// An interpreter with neither inline code nor a script file reads its program from stdin.
    pub fn reads_program_from_stdin(&self, inv: &Invocation<'_>) -> bool {
        let Some(interp) = self.interpreters.and_then(|t| t.lookup(&inv.name)) else {
            return false;
        };
        for arg in &inv.args {
            let Some(a) = self.fold(*arg) else {
                return false;
            };
            if interp.stdin_markers.contains(&a) {
                return true;
            }
            if interp.takes_code(&a) || interp.module_flags.contains(&a) {
                return false;
            }
            if !a.starts_with('-') {
                return false;
            }
        }
        true
    }

    pub fn is_recursive<'t>(&self, node: Node<'t>, cx: &Cx<'t>) -> bool {
        let (Some(name), Some(body)) = (
            node.child_by_field_id(self.k.f_name),
            node.child_by_field_id(self.k.f_body),
        ) else {
            return false;
        };
        let name = text(name, self.src);
        if !text(body, self.src).contains(name) {
            return false;
        }
        // Depth-first over the body with one pooled cursor.
        cx.with_cursor(body, |cursor| {
            let mut depth = 0usize;
            loop {
                let n = cursor.node();
                // Not the memoized invocations: those leave out names no rule mentions, and a
                // function's own name is one.
                if n.kind_id() == self.k.command
                    && text(n, self.src).contains(name)
                    && self.invocations(n).iter().any(|i| i.name == name)
                {
                    return true;
                }
                if cursor.goto_first_child() {
                    depth += 1;
                    continue;
                }
                loop {
                    if depth == 0 {
                        return false;
                    }
                    if cursor.goto_next_sibling() {
                        break;
                    }
                    cursor.goto_parent();
                    depth -= 1;
                }
            }
        })
    }
}

struct Wrapper {
    /// Options that take a separate value (`sudo -u root`).
    value_options: &'static [&'static str],
    /// Options after which the rest is not a command (`command -v ls`).
    stop_options: &'static [&'static str],
    /// Positional arguments before the command (`timeout 5 cmd`, `chroot /new cmd`).
    positional: usize,
    /// `env X=1 cmd`
    env_assignments: bool,
}

fn wrapper(name: &str) -> Option<Wrapper> {
    let w = |value_options, positional| Wrapper {
        value_options,
        stop_options: &[],
        positional,
        env_assignments: false,
    };
    Some(match name {
        "sudo" => w(
            &[
                "-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U", "-T", "-R",
            ],
            0,
        ),
        "doas" => w(&["-u", "-C"], 0),
        "env" => Wrapper {
            value_options: &["-u", "-C", "-S", "--unset", "--chdir", "--split-string"],
            stop_options: &[],
            positional: 0,
            env_assignments: true,
        },
        "nice" => w(&["-n", "--adjustment"], 0),
        "ionice" => w(&["-c", "-n", "--class", "--classdata"], 0),
        "timeout" => w(&["-s", "-k", "--signal", "--kill-after"], 1),
        "nohup" | "setsid" | "builtin" | "unbuffer" | "caffeinate" => w(&[], 0),
        "stdbuf" => w(&["-i", "-o", "-e"], 0),
        "time" => w(&["-f", "-o", "--format", "--output"], 0),
        "command" => Wrapper {
            value_options: &[],
            stop_options: &["-v", "-V"],
            positional: 0,
            env_assignments: false,
        },
        "exec" => w(&["-a"], 0),
        "xargs" => w(
            &[
                "-a",
                "-d",
                "-E",
                "-e",
                "-I",
                "-i",
                "-L",
                "-l",
                "-n",
                "-P",
                "-s",
                "--arg-file",
                "--delimiter",
                "--max-args",
                "--max-procs",
                "--replace",
            ],
            0,
        ),
        // `parallel sh -c '…' ::: a b`: the program is the first word after the options.
        "parallel" | "sem" => w(
            &[
                "-j",
                "--jobs",
                "-S",
                "--sshlogin",
                "--delay",
                "--timeout",
                "--joblog",
                "-a",
                "--arg-file",
                "-d",
                "--delimiter",
                "-I",
                "--results",
                "--tmpdir",
                "-N",
                "-n",
                "--max-args",
            ],
            0,
        ),
        "chroot" => w(&["--userspec", "--groups"], 1),
        "busybox" | "watch" => w(&["-n", "--interval"], 0),
        "strace" | "ltrace" => w(&["-o", "-e", "-p", "-s", "-u"], 0),
        "flock" => w(&["-w", "-E", "--timeout", "--conflict-exit-code"], 1),
        "runuser" => w(&["-u", "-g", "-G", "--user", "--group"], 0),
        "taskset" => Wrapper {
            value_options: &[],
            stop_options: &["-p", "--pid"],
            positional: 1,
            env_assignments: false,
        },
        "chrt" => Wrapper {
            value_options: &["-T", "-P", "-D"],
            stop_options: &["-p", "--pid", "-m", "--max"],
            positional: 1,
            env_assignments: false,
        },
        "unshare" => w(
            &[
                "-S", "-G", "-R", "-w", "--setuid", "--setgid", "--root", "--wd",
            ],
            0,
        ),
        "nsenter" => w(
            &[
                "-t", "--target", "-S", "-G", "--setuid", "--setgid", "-r", "-w", "-N",
            ],
            0,
        ),
        "numactl" => w(&["-C", "-N", "-m", "-p", "-i", "-P"], 0),
        "cgexec" => w(&["-g"], 0),
        "setpriv" => w(
            &[
                "--reuid",
                "--regid",
                "--ruid",
                "--rgid",
                "--euid",
                "--egid",
                "--groups",
                "--inh-caps",
                "--ambient-caps",
                "--bounding-set",
                "--securebits",
            ],
            0,
        ),
        "prlimit" => w(&["-p", "--pid"], 0),
        "systemd-run" => w(
            &[
                "-u",
                "--unit",
                "-p",
                "--property",
                "-E",
                "--setenv",
                "--uid",
                "--gid",
                "-M",
                "--machine",
                "--slice",
                "--description",
                "--working-directory",
            ],
            0,
        ),
        "sg" | "faketime" => w(&[], 1),
        "firejail" | "proxychains" | "proxychains4" | "torsocks" | "tsocks" | "eatmydata"
        | "rlwrap" | "catchsegv" | "dbus-launch" | "ssh-agent" => w(&[], 0),
        "xvfb-run" => w(
            &["-n", "-s", "-f", "-e", "--server-num", "--server-args"],
            0,
        ),
        // `op run -- cmd`, `poetry run cmd`, `bundle exec cmd`: a subcommand, then the program.
        "op" | "doppler" | "poetry" | "pipenv" | "uv" | "bundle" | "conda" | "pdm" | "hatch" => {
            w(&["-n", "--name", "-p", "--prefix", "--project"], 1)
        }
        "aws-vault" => w(&[], 2),
        _ => return None,
    })
}

fn is_assignment(s: &str) -> bool {
    match s.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    }
}

/// `/usr/bin/rm` → `rm`.
pub fn base_name(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

/// An unquoted word: a backslash quotes the next character.
fn unescape_word(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('\n') | None => {}
                Some(n) => out.push(n),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Inside double quotes a backslash only quotes `$`, `` ` ``, `"`, `\` and newline.
fn unescape_dquoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.peek() {
                Some('$' | '`' | '"' | '\\') => out.extend(chars.next()),
                Some('\n') => {
                    chars.next();
                }
                _ => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_unescape_like_the_shell() {
        assert_eq!(unescape_word(r"\rm"), "rm");
        assert_eq!(unescape_dquoted(r#"a\$b\n"#), r"a$b\n");
        assert_eq!(base_name("/usr/bin/rm"), "rm");
        assert!(is_assignment("X=1"));
        assert!(!is_assignment("-u"));
        assert!(!is_assignment("1X=1"));
    }
}
