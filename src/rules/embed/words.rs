//! Word splitting: an unquoted `$cmd` (or `$(…)`) as a command's name whose value is a whole
//! command line is split as the shell splits it (on blanks, and on the separators a constant
//! `IFS=…` adds), so the line can be checked as Bash code. The same holds for an alias (its value
//! is put in front of the arguments), for a function that runs its arguments (`run() { "$@"; };
//! run rm -rf /`) and for arrays expanded into a command (`cmd=(rm -rf); "${cmd[@]}"
//! "${dirs[@]}"`) and for the words `xargs` reads from an `echo` (`echo ~/.ssh | xargs rm -rf`).

use tree_sitter::Node;

use super::{Embedded, Origin};
use crate::domain::script::Language;
use crate::rules::bash::BashSem;
use crate::rules::grammar::{children_in_field, text};

/// Whether a word is an unquoted expansion the shell splits into words: `$x`, `${x}`, and
/// `$(…)` or backquotes (`$(printf '\162\155 …')` runs the words it prints).
fn splits_into_words(word: Node<'_>) -> bool {
    matches!(
        word.kind(),
        "simple_expansion" | "expansion" | "command_substitution"
    )
}

/// `$cmd` as a command's name, where `cmd` holds a whole command line (`cmd="rm -rf /home"`, or
/// words joined by the separator a constant `IFS=,` names): the shell splits the value into a
/// program and its arguments, so the line (with the command's own arguments after it) is checked
/// as Bash code. A quoted `"$cmd"` is one word and is not split.
pub(super) fn split_command_line<'t>(sem: &BashSem<'_>, command: Node<'t>) -> Option<Embedded<'t>> {
    let name = command.child_by_field_id(sem.k.f_name)?;
    let word = name.named_child(0)?;
    if !splits_into_words(word) {
        return None;
    }
    let (value, origin) = match sem.fold(word) {
        Some(v) => (v, Origin::Local),
        None => (assigned_shape(sem, word)?, Origin::Rewritten),
    };
    let separators = ifs(sem.src);
    let line: String = value
        .chars()
        .map(|c| if separators.contains(c) { ' ' } else { c })
        .collect();
    if !line.trim().contains(' ') {
        return None;
    }
    // The arguments as the script knows them: a loop variable over `~/*` is a path under the
    // home directory there, not in the line checked on its own.
    let mut rest = String::new();
    let mut at = name.end_byte();
    for arg in children_in_field(command, sem.k.f_argument) {
        rest.push_str(&sem.src[at..arg.start_byte()]);
        match known_word(sem, arg) {
            Some(value) => rest.push_str(&value),
            None => rest.push_str(text(arg, sem.src)),
        }
        at = arg.end_byte();
    }
    rest.push_str(&sem.src[at..command.end_byte()]);
    Some(Embedded {
        interpreter: text(word, sem.src).to_string(),
        language: Some(Language::Bash),
        code: Some(format!("{}{rest}", line.trim())),
        anchor: word,
        verbatim_at: None,
        origin,
    })
}

/// `wp="wp --path=$root --allow-root"; $wp plugin deactivate …`: the value of a variable assigned
/// once, with the parts only known at run time standing as one plain word each, so the shape of
/// the command line it holds is still seen.
fn assigned_shape(sem: &BashSem<'_>, word: Node<'_>) -> Option<String> {
    let name = text(word, sem.src)
        .strip_prefix('$')?
        .trim_start_matches('{')
        .trim_end_matches('}');
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    let &[(start, end)] = sem.facts.assigned_ranges.get(name)?.as_slice() else {
        return None;
    };
    let value = crate::rules::grammar::node_spanning(word, start, end)?;
    sem.fold_with(value, super::runner::RUNTIME_WORD)
}

/// A word's value when the script knows it, or the leading part all its values share, quoted
/// as one word; `None` for a plain word (kept as written) or one nothing is known of.
fn known_word(sem: &BashSem<'_>, arg: Node<'_>) -> Option<String> {
    if arg.kind() == "word" {
        return None;
    }
    let value = sem.fold(arg).or_else(|| {
        let prefixes = sem.prefixes(arg);
        let (first, others) = prefixes.split_first()?;
        let mut common = first.as_str();
        for p in others {
            let len = common
                .char_indices()
                .zip(p.chars())
                .take_while(|((_, a), b)| a == b)
                .last()
                .map_or(0, |((i, a), _)| i + a.len_utf8());
            common = &common[..len];
        }
        (!common.is_empty()).then(|| common.to_string())
    })?;
    Some(format!("'{}'", value.replace('\'', "'\\''")))
}

/// The characters unquoted expansions are split on: the default blanks, and those of a constant
/// `IFS=…` assignment standing alone anywhere in the script (`IFS=,`; a prefix such as
/// `IFS=, read -r a b` applies to that command only and is not one).
fn ifs(src: &str) -> String {
    let mut chars = String::from(" \t\n");
    for line in src.lines() {
        let line = line.trim_start();
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some(value) = line.strip_prefix("IFS=") else {
            continue;
        };
        let value = value.split(';').next().unwrap_or_default().trim_end();
        if value.contains(char::is_whitespace) && !value.starts_with(['\'', '"']) {
            continue;
        }
        let value = value.trim_matches(['\'', '"']);
        if !value.contains('$') && !value.contains('\\') {
            chars.push_str(value);
        }
    }
    chars
}

/// A command named by an alias the script defines (`alias tidy='rm -rf'; tidy ~/`): the alias's
/// value with the command's arguments after it, checked as Bash code.
pub(super) fn alias_expansion<'t>(sem: &BashSem<'_>, command: Node<'t>) -> Option<Embedded<'t>> {
    let name = command.child_by_field_id(sem.k.f_name)?;
    let value = sem.facts.aliases.get(text(name, sem.src))?.as_ref()?;
    let rest = &sem.src[name.end_byte()..command.end_byte()];
    Some(Embedded {
        interpreter: text(name, sem.src).to_string(),
        language: Some(Language::Bash),
        code: Some(format!("{value}{rest}")),
        anchor: name,
        verbatim_at: None,
        origin: Origin::Local,
    })
}

/// A call of a function that runs its arguments (`step rm -rf /usr`, where `step` passes `"$@"` to
/// a function whose body is `"$@"`): the arguments, checked as the command they are.
pub(super) fn function_runs_arguments<'t>(
    sem: &BashSem<'_>,
    command: Node<'t>,
) -> Option<Embedded<'t>> {
    let name = command.child_by_field_id(sem.k.f_name)?;
    if !sem.facts.runners.contains(text(name, sem.src)) {
        return None;
    }
    let rest = sem.src[name.end_byte()..command.end_byte()].trim();
    (!rest.is_empty()).then(|| Embedded {
        interpreter: text(name, sem.src).to_string(),
        language: Some(Language::Bash),
        code: Some(rest.to_string()),
        anchor: name,
        verbatim_at: None,
        origin: Origin::Local,
    })
}

/// `opts="-rf --no-preserve-root"; rm $opts $target`: an unquoted expansion of a variable assigned
/// once to a constant splits into words, which the command then takes as separate options and
/// operands. The command with such expansions replaced by their words (and the other arguments by
/// their values, where known), checked as Bash code.
pub(super) fn word_splitting<'t>(sem: &BashSem<'_>, command: Node<'t>) -> Option<Embedded<'t>> {
    // most commands expand nothing: their text says so without collecting their arguments
    if !sem.src[command.byte_range()].contains('$') {
        return None;
    }
    let args = children_in_field(command, sem.k.f_argument);
    let bare = |n: &Node<'_>| splits_into_words(*n);
    if !args.iter().any(bare) {
        return None;
    }
    let name = command.child_by_field_id(sem.k.f_name)?;
    let mut split = false;
    let mut words: Vec<String> = Vec::with_capacity(args.len() + 1);
    for arg in std::iter::once(name).chain(args) {
        split |= push_word(sem, arg, &mut words)?;
    }
    split.then(|| Embedded {
        interpreter: super::WORD_SPLITTING.into(),
        language: Some(Language::Bash),
        code: Some(words.join(" ")),
        anchor: command,
        verbatim_at: None,
        origin: Origin::Rewritten,
    })
}

/// A command that expands arrays the script assigned once (`cmd=(rm -rf --); "${cmd[@]}" "${t[@]}"`):
/// the command with each `"${a[@]}"` replaced by the words the array was assigned, checked as
/// Bash code. Each word keeps its own quoting, as the expansion keeps the words apart. The
/// command's other words that fold to constants are replaced by their values (`a=$(printf
/// '\x72\x6d'); $a -rf -- "${targets[@]}"`), as the check does not see the script's variables.
pub(super) fn array_expansion<'t>(sem: &BashSem<'_>, command: Node<'t>) -> Option<Embedded<'t>> {
    let line = &sem.src[command.byte_range()];
    if !line.contains("[@]}") && !line.contains("[*]}") {
        return None;
    }
    let name = command.child_by_field_id(sem.k.f_name)?;
    let args = children_in_field(command, sem.k.f_argument);
    let mut expanded = false;
    let mut words: Vec<String> = Vec::with_capacity(args.len() + 1);
    for word in std::iter::once(name).chain(args) {
        let t = text(word, sem.src);
        if t.contains("[@]}") || t.contains("[*]}") {
            let (code, any) = expand_arrays(sem, t);
            expanded |= any;
            words.push(code);
        } else {
            // (an unquoted expansion of an empty value is no word at all)
            let _ = push_word(sem, word, &mut words);
        }
    }
    expanded.then(|| Embedded {
        interpreter: super::ARRAY_EXPANSION.into(),
        language: Some(Language::Bash),
        code: Some(words.join(" ")),
        anchor: command,
        verbatim_at: None,
        origin: Origin::Rewritten,
    })
}

/// A command's word as the shell passes it on, pushed to `words`: its value where it folds to a
/// constant (an unquoted expansion split into its words, each quoted as needed), else its text.
/// Whether it split into more than one word; `None`, pushing nothing, for an unquoted expansion
/// whose value is empty.
fn push_word(sem: &BashSem<'_>, word: Node<'_>, words: &mut Vec<String>) -> Option<bool> {
    let t = text(word, sem.src);
    if !t.contains('$') {
        words.push(t.to_string());
        return Some(false);
    }
    match sem.fold(word) {
        Some(v) if splits_into_words(word) => {
            let mut parts = v.split_whitespace().peekable();
            parts.peek()?;
            let many = v.split_whitespace().nth(1).is_some();
            words.extend(parts.map(|w| super::shell_word(w, true)));
            Some(many)
        }
        Some(v) => {
            words.push(super::shell_word(&v, true));
            Some(false)
        }
        None => {
            words.push(t.to_string());
            Some(false)
        }
    }
}

/// A word with each `${a[@]}` of an array the script assigned once replaced by the array's words,
/// and whether there was one.
fn expand_arrays(sem: &BashSem<'_>, word: &str) -> (String, bool) {
    let mut code = String::with_capacity(word.len());
    let mut rest = word;
    let mut expanded = false;
    while let Some(start) = rest.find("${") {
        let (before, from) = rest.split_at(start);
        let Some(end) = from.find('}') else { break };
        let inner = &from[2..end];
        let words = inner
            .strip_suffix("[@]")
            .or_else(|| inner.strip_suffix("[*]"))
            .and_then(|name| sem.facts.array_texts.get(name))
            .and_then(Option::as_ref);
        // `"${a[@]}"`: the quotes go with the expansion.
        let quoted = before.ends_with('"') && from[end + 1..].starts_with('"');
        match words {
            Some(words) => {
                code.push_str(if quoted {
                    &before[..before.len() - 1]
                } else {
                    before
                });
                code.push_str(words);
                rest = &from[end + 1 + usize::from(quoted)..];
                expanded = true;
            }
            None => {
                code.push_str(before);
                code.push_str(&from[..=end]);
                rest = &from[end + 1..];
            }
        }
    }
    code.push_str(rest);
    (code, expanded)
}

/// `echo "$HOME/.ssh /srv" | xargs rm -rf`: xargs appends the words it reads to its command, so
/// the command with the words `echo` (or `printf '%s\n'`, or `ls -d`) writes into the pipe after it is checked
/// as Bash code. The words are folded (`printf '%s\n' $roots` writes each word of `$roots`). With a
/// replacement string (`xargs -I{} sh -c 'find "{}" …'`) the command is checked once per word, the
/// word in place of the string. NUL-separated input is left to the wrapper's own check.
pub(super) fn xargs_input<'t>(sem: &BashSem<'_>, command: Node<'t>) -> Vec<Embedded<'t>> {
    const MAX_WORDS: usize = 16;
    let Some(found) = xargs_parts(sem, command) else {
        return Vec::new();
    };
    let (program, replace, input) = found;
    let tail = &sem.src[program.start_byte()..command.end_byte()];
    let codes: Vec<String> = match replace {
        Some(r) => input
            .iter()
            .take(MAX_WORDS)
            .map(|w| tail.replace(r.as_str(), w))
            .collect(),
        None => vec![format!("{tail} {}", input.join(" "))],
    };
    codes
        .into_iter()
        .map(|code| Embedded {
            interpreter: "xargs".into(),
            language: Some(Language::Bash),
            code: Some(code),
            anchor: command,
            verbatim_at: None,
            origin: Origin::Local,
        })
        .collect()
}

/// The program xargs runs (its first operand), its replacement string, and the words the
/// `echo`/`printf` before it in the pipeline writes.
fn xargs_parts<'t>(
    sem: &BashSem<'_>,
    command: Node<'t>,
) -> Option<(Node<'t>, Option<String>, Vec<String>)> {
    let name = command.child_by_field_id(sem.k.f_name)?;
    if sem.fold(name)? != "xargs" {
        return None;
    }
    command.parent().filter(|p| p.kind() == "pipeline")?;
    let mut writer = command.prev_named_sibling()?;
    let writer_name = loop {
        // `ls -d … 2>/dev/null | xargs …`
        if writer.kind() == "redirected_statement" {
            writer = writer.child_by_field_name("body")?;
        }
        let name = writer.child_by_field_id(sem.k.f_name)?;
        // `ls -A | grep -v … | xargs …`: a stage that only drops or reorders lines passes on
        // (some of) the words before it
        if matches!(
            sem.fold(name)?.as_str(),
            "grep" | "egrep" | "sort" | "uniq" | "head" | "tail" | "cat"
        ) && writer.prev_named_sibling().is_some()
        {
            writer = writer.prev_named_sibling()?;
            continue;
        }
        break name;
    };
    let mut words: Vec<Node<'_>> = children_in_field(writer, sem.k.f_argument);
    match sem.fold(writer_name)?.as_str() {
        "echo" => words.retain(|w| !matches!(text(*w, sem.src), "-n" | "-e" | "-E")),
        "printf"
            if words
                .first()
                .is_some_and(|f| text(*f, sem.src).trim_matches(['\'', '"']) == "%s\\n") =>
        {
            words.remove(0);
        }
        // `ls -d /home/*/` writes the paths its operands name
        "ls" if words.iter().any(|w| {
            let t = text(*w, sem.src);
            t == "--directory" || (t.starts_with('-') && !t.starts_with("--") && t.contains('d'))
        }) =>
        {
            words.retain(|w| !text(*w, sem.src).starts_with('-'));
        }
        _ => return None,
    }
    // The words as xargs reads them: split on blanks, without the quotes the shell removed; an
    // unquoted expansion splits into its words.
    let mut input: Vec<String> = Vec::new();
    for w in words {
        let t = text(w, sem.src);
        match sem.fold(w) {
            Some(v) if w.kind() == "string" || w.kind() == "raw_string" => input.push(v),
            Some(v) => input.extend(v.split_whitespace().map(str::to_string)),
            None => input.push(
                t.strip_prefix('"')
                    .and_then(|w| w.strip_suffix('"'))
                    .unwrap_or(t)
                    .to_string(),
            ),
        }
    }
    if input.is_empty() {
        return None;
    }
    xargs_program(sem, command, input)
}

/// xargs' program (its first operand that is not one of its options) and its replacement string,
/// with the words it reads.
fn xargs_program<'t>(
    sem: &BashSem<'_>,
    command: Node<'t>,
    input: Vec<String>,
) -> Option<(Node<'t>, Option<String>, Vec<String>)> {
    let mut replace = None;
    let mut args = children_in_field(command, sem.k.f_argument).into_iter();
    while let Some(a) = args.next() {
        let t = text(a, sem.src);
        if matches!(t, "-0" | "--null") {
            return None;
        }
        if t == "-I" {
            replace = args.next().and_then(|r| sem.fold(r));
        } else if let Some(r) = t
            .strip_prefix("--replace=")
            .or_else(|| t.strip_prefix("-I"))
        {
            replace = Some(r.to_string());
        } else if matches!(t, "-i" | "--replace") {
            replace = Some("{}".to_string());
        } else if matches!(t, "-n" | "-P" | "-L" | "-d" | "-s" | "-a" | "-E") {
            args.next();
        } else if !t.starts_with('-') {
            return Some((a, replace.filter(|r| !r.is_empty()), input));
        }
    }
    None
}
