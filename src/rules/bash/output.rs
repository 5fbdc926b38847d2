//! The output of constant commands in `$(…)`: `printf`/`echo` of constants, decoders (`base64
//! -d`, `xxd -r -p`, `rev`) reading it, `which`/`command -v` of a name, `cd DIR && pwd`, and
//! arrays joined by a constant `IFS`.

use tree_sitter::Node;

use super::{BashSem, base_name};
use crate::rules::codec::{self, decode_c_escapes};
use crate::rules::grammar::{children, children_in_field, text};

impl BashSem<'_> {
    /// `$(printf '\x72\x6d')` and `$(echo rm)`: the output of constant printf/echo commands.
    pub(super) fn fold_substitution(&self, node: Node<'_>, d: u8) -> Option<String> {
        if node.named_child_count() == 2 {
            return self.joined_array(node);
        }
        if node.named_child_count() != 1 {
            return None;
        }
        let mut inner = node.named_child(0)?;
        // `$(cd "${DIR:-$HOME}" && pwd)`: the directory, made absolute (its known text is what
        // path rules compare)
        if let Some(dir) = self.cd_then_pwd(inner) {
            return self.fold_at(dir, d);
        }
        // `$(command -v busybox || echo /bin/busybox)`: a fallback names the same program
        if inner.kind_id() == self.k.list
            && children(inner).any(|c| !c.is_named() && text(c, self.src) == "||")
        {
            let first = inner.named_child(0)?;
            let lookup = first.kind_id() == self.k.command
                && first
                    .child_by_field_id(self.k.f_name)
                    .and_then(|n| self.fold_at(n, d))
                    .is_some_and(|n| matches!(base_name(&n), "which" | "command" | "type"));
            if !lookup {
                return None;
            }
            inner = first;
        }
        let output = if inner.kind_id() == self.k.pipeline {
            // `$(echo … | base64 -d)`: a constant output through decoders
            let mut stages = children(inner).filter(|c| c.is_named());
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

    /// The directory of `cd DIR && pwd` (`-P`/`-L` allowed on either).
    fn cd_then_pwd<'n>(&self, list: Node<'n>) -> Option<Node<'n>> {
        if list.kind_id() != self.k.list || list.named_child_count() != 2 {
            return None;
        }
        let (cd, pwd) = (list.named_child(0)?, list.named_child(1)?);
        let named = |c: Node<'_>, want: &str| {
            c.kind_id() == self.k.command
                && c.child_by_field_id(self.k.f_name)
                    .is_some_and(|n| text(n, self.src) == want)
        };
        if !named(cd, "cd")
            || !named(pwd, "pwd")
            || !children(list).any(|c| !c.is_named() && text(c, self.src) == "&&")
        {
            return None;
        }
        let args: Vec<Node<'n>> = children_in_field(cd, self.k.f_argument)
            .into_iter()
            .filter(|a| !matches!(text(*a, self.src), "-P" | "-L" | "--"))
            .collect();
        match args[..] {
            [dir] => Some(dir),
            _ => None,
        }
    }

    /// `$(IFS=; echo "${parts[*]}")`, `$(IFS=,; echo "${parts[*]}")`: an array of constants
    /// joined by the first character of the `IFS` set before it.
    fn joined_array(&self, node: Node<'_>) -> Option<String> {
        let (assignment, command) = (node.named_child(0)?, node.named_child(1)?);
        let name = assignment.child_by_field_id(self.k.f_name)?;
        if assignment.kind_id() != self.k.variable_assignment
            || text(name, self.src) != "IFS"
            || command.kind_id() != self.k.command
        {
            return None;
        }
        let ifs = match assignment.child_by_field_id(self.k.f_value) {
            Some(v) => self.fold(v)?,
            None => String::new(),
        };
        let program = command.child_by_field_id(self.k.f_name)?;
        let args = children_in_field(command, self.k.f_argument);
        let [words] = args[..] else {
            return None;
        };
        if text(program, self.src) != "echo" || !text(words, self.src).contains("[*]}") {
            return None;
        }
        let separator = ifs.chars().next().map(String::from).unwrap_or_default();
        Some(self.array_words(words)?.join(&separator))
    }

    /// What a constant `printf`/`echo` command prints (its format applied, its escapes decoded).
    pub(crate) fn printed(&self, command: Node<'_>) -> Option<String> {
        let name = self.fold(command.child_by_field_id(self.k.f_name)?)?;
        matches!(base_name(&name), "printf" | "echo")
            .then(|| self.command_output(command, None, 0))
            .flatten()
    }

    /// The output of a constant command: `printf`/`echo` of constants, a decoder (`base64 -d`,
    /// `xxd -r -p`, `rev`) reading `input`, or `which`/`command -v`/`type -P` of a name (the name:
    /// what path rules and interpreter lookups compare).
    fn command_output(&self, command: Node<'_>, input: Option<&str>, d: u8) -> Option<String> {
        if command.kind_id() != self.k.command {
            return None;
        }
        let name = self.fold_at(command.child_by_field_id(self.k.f_name)?, d)?;
        let mut args: Vec<String> = Vec::new();
        for a in children_in_field(command, self.k.f_argument) {
            match self.array_words(a) {
                Some(words) => args.extend(words),
                None => args.push(self.fold_at(a, d)?),
            }
        }
        let flags = |wanted: &[&str]| args.iter().any(|a| wanted.contains(&a.as_str()));
        let output = match (base_name(&name), input) {
            ("printf", None) => {
                let (format, rest) = args.split_first()?;
                printf_strings(&decode_c_escapes(format), rest)?
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
            // `dirname "$HOME/projects"` is `~`: one constant path, its parent
            ("dirname", None) if args.len() == 1 && !args[0].starts_with('-') => {
                parent_dir(&args[0])
            }
            ("base64", Some(data)) if flags(&["-d", "--decode", "-D"]) => {
                codec::decode_base64(data.trim(), data.contains(['-', '_']))?
            }
            ("base32", Some(data)) if flags(&["-d", "--decode"]) => {
                codec::decode_base32(data.trim())?
            }
            ("xxd", Some(data)) if flags(&["-r"]) && flags(&["-p", "-ps", "-plain"]) => {
                codec::decode_hex(&data.split_whitespace().collect::<String>())?
            }
            // `tr 'A-Za-z' 'N-ZA-Mn-za-m'` (rot13) and other letter substitutions
            ("tr", Some(data)) if args.len() == 2 && !args[0].starts_with('-') => {
                codec::translate(data, &args[0], &args[1])?
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
}

/// What `dirname` prints for a path: the path without its last component (trailing slashes
/// ignored); `.` for a bare name, `/` for the root.
fn parent_dir(path: &str) -> String {
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        return if path.is_empty() {
            ".".into()
        } else {
            "/".into()
        };
    }
    match trimmed.rfind('/') {
        None => ".".into(),
        Some(at) => {
            let parent = trimmed[..at].trim_end_matches('/');
            if parent.is_empty() {
                "/".into()
            } else {
                parent.into()
            }
        }
    }
}

/// `printf FORMAT ARGS…` when the format holds only `%s` and `%%` conversions (reused while
/// arguments remain, as printf does); `None` for any other conversion.
fn printf_strings(format: &str, args: &[String]) -> Option<String> {
    let mut out = String::new();
    let mut args = args.iter();
    loop {
        let mut used = false;
        let mut chars = format.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            match chars.next()? {
                '%' => out.push('%'),
                's' => {
                    used = true;
                    out.push_str(args.next().map_or("", String::as_str));
                }
                _ => return None,
            }
        }
        if !used || args.len() == 0 || out.len() > 64 * 1024 {
            break;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printf_folds_string_conversions_only() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            printf_strings("%s%s", &args(&["ab", "cd"])).as_deref(),
            Some("abcd")
        );
        assert_eq!(
            printf_strings("%s-", &args(&["a", "b"])).as_deref(),
            Some("a-b-")
        );
        assert_eq!(printf_strings("100%%", &[]).as_deref(), Some("100%"));
        assert_eq!(printf_strings("%d", &args(&["1"])), None);
    }

    #[test]
    fn dirname_is_the_parent_path() {
        for (path, parent) in [
            ("~/projects", "~"),
            ("/srv/app/", "/srv"),
            ("/srv", "/"),
            ("/", "/"),
            ("name", "."),
            ("a//b", "a"),
        ] {
            assert_eq!(parent_dir(path), parent, "{path}");
        }
    }
}
