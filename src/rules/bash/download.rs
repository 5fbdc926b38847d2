//! The rule written in code rather than data: a file downloaded by one command and run by a later
//! one (`curl -o x.sh URL; bash x.sh`), which relates two commands and so is beyond the tree-rule
//! language's single-node matchers.

use tree_sitter::Node;

use super::{BashSem, Invocation};
use crate::rules::matcher::Cx;

/// Programs that run the file named by their first non-option argument.
const RUNNERS: &[&str] = &[
    "bash", "sh", "dash", "zsh", "ksh", "source", ".", "python", "python3", "perl", "ruby", "node",
    "php",
];

/// The file a downloader writes (`curl -o F`, `curl --output F`, `wget -O F`), as written; with
/// no output named, the last segment of the URL where the tool saves there by default (`wget
/// URL`, `curl -O URL`).
fn download_target(sem: &BashSem<'_>, inv: &Invocation<'_>) -> Option<String> {
    let (short, long) = match inv.name.as_str() {
        "curl" => ('o', "--output"),
        "wget" => ('O', "--output-document"),
        _ => return None,
    };
    let args: Vec<Option<String>> = inv.args.iter().map(|a| file_ref(sem, *a)).collect();
    named_output(&args, short, long).or_else(|| default_output(&inv.name, &args))
}

/// `wget URL` saves under the URL's last path segment, and so does `curl -O URL`.
fn default_output(tool: &str, args: &[Option<String>]) -> Option<String> {
    let remote_name = args.iter().flatten().any(|a| {
        a == "--remote-name" || (a.starts_with('-') && !a.starts_with("--") && a[1..].contains('O'))
    });
    if tool == "curl" && !remote_name {
        return None;
    }
    // `wget -qO- URL` writes to its output, not a file
    let short_o = |a: &String| a.starts_with('-') && !a.starts_with("--") && a.contains('O');
    if tool == "wget" && args.iter().flatten().any(short_o) {
        return None;
    }
    let url = args.iter().flatten().find(|a| a.contains("://"))?;
    let path = url.split(['?', '#']).next()?;
    let name = path
        .split("://")
        .nth(1)?
        .split_once('/')?
        .1
        .rsplit('/')
        .next()?;
    if name.is_empty() {
        return None;
    }
    // `wget -P DIR URL`
    let dir = args
        .iter()
        .enumerate()
        .find_map(|(i, a)| match a.as_deref() {
            Some("-P") => args.get(i + 1).cloned().flatten(),
            Some(a) => a.strip_prefix("--directory-prefix=").map(str::to_string),
            None => None,
        });
    Some(match dir {
        Some(dir) if tool == "wget" => format!("{}/{name}", dir.trim_end_matches('/')),
        _ => name.to_string(),
    })
}

fn named_output(args: &[Option<String>], short: char, long: &str) -> Option<String> {
    for (i, arg) in args.iter().enumerate() {
        let Some(a) = arg else { continue };
        if let Some(v) = a.strip_prefix(&format!("{long}=")) {
            return Some(v.to_string());
        }
        let cluster = a.starts_with('-')
            && !a.starts_with("--")
            && a[1..].chars().all(|c| c.is_ascii_alphanumeric());
        if a == long || (cluster && a.ends_with(short)) {
            return args.get(i + 1).cloned().flatten();
        }
        if cluster && a.len() > 2 && a[1..].starts_with(short) {
            return Some(a[2..].to_string());
        }
    }
    None
}

/// A file as a command line names it: its value when constant, else the variable that holds it
/// (`"$f"` after `f=$(mktemp)`), written `${f}` so that `$f`, `"$f"` and `${f}` are the same file.
fn file_ref(sem: &BashSem<'_>, node: Node<'_>) -> Option<String> {
    if let Some(v) = sem.fold(node) {
        return Some(v);
    }
    let t = crate::rules::grammar::text(node, sem.src).trim_matches('"');
    let name = t.strip_prefix('$')?;
    let name = name
        .strip_prefix('{')
        .and_then(|n| n.strip_suffix('}'))
        .unwrap_or(name);
    (!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .then(|| format!("${{{name}}}"))
}

fn same_file(a: &str, b: &str) -> bool {
    a.trim_start_matches("./") == b.trim_start_matches("./")
}

/// Commands that run a file an earlier command downloaded (`curl -o x.sh …; bash x.sh`).
pub fn downloaded_then_run<'t>(
    sem: &BashSem<'_>,
    cx: &Cx<'t>,
    commands: &[Node<'t>],
) -> Vec<Node<'t>> {
    let mut downloaded: Vec<String> = Vec::new();
    let mut runs = Vec::new();
    for &command in commands {
        let (invocations, _) = cx.bash_invocations(sem, command);
        // The command's name as written (`./x.sh`), folded only once something was downloaded.
        let runs_download = !downloaded.is_empty()
            && command
                .child_by_field_id(sem.k.f_name)
                .and_then(|n| file_ref(sem, n))
                .is_some_and(|name| downloaded.iter().any(|d| same_file(d, &name)));
        if runs_download {
            runs.push(command);
            continue;
        }
        // a wrapper runs it (`nohup ./x &`, `timeout 60 ./x`); wrapped programs are known by
        // their base name
        let wrapped = invocations.iter().skip(1).any(|inv| {
            downloaded
                .iter()
                .any(|d| d.rsplit('/').next() == Some(inv.name.as_str()))
        }) || (invocations.get(1).is_some_and(|inv| inv.name.is_empty())
            // (a program only known at run time, `nohup "$t" &`: the wrapper's word that names
            // the downloaded file)
            && invocations[0]
                .args
                .iter()
                .filter_map(|a| file_ref(sem, *a))
                .any(|a| downloaded.iter().any(|d| same_file(d, &a))));
        if wrapped {
            runs.push(command);
            continue;
        }
        for inv in invocations.iter() {
            if let Some(target) = download_target(sem, inv) {
                downloaded.push(target);
            } else if matches!(inv.name.as_str(), "curl" | "wget")
                && let Some(target) = redirected_to(sem, command)
            {
                // `curl -s URL > /tmp/x`: what it prints lands in the file
                downloaded.push(target);
            } else if RUNNERS.contains(&inv.name.as_str()) || inv.name.starts_with("python3.") {
                let script = inv
                    .args
                    .iter()
                    .filter_map(|a| file_ref(sem, *a))
                    .find(|a| !a.starts_with('-'));
                if script.is_some_and(|s| downloaded.iter().any(|d| same_file(d, &s))) {
                    runs.push(command);
                }
            }
        }
    }
    runs
}

/// The file a command's standard output is redirected to (`… > /tmp/x`, `>> x`), as written.
fn redirected_to(sem: &BashSem<'_>, command: Node<'_>) -> Option<String> {
    let statement = command
        .parent()
        .filter(|p| p.kind_id() == sem.k.redirected_statement)?;
    let mut cursor = statement.walk();
    let redirect = statement
        .children_by_field_name("redirect", &mut cursor)
        .find(|r| {
            let t = crate::rules::grammar::text(*r, sem.src);
            t.starts_with('>') || t.starts_with("1>") || t.starts_with(">>")
        })?;
    let destination = redirect.child_by_field_name("destination")?;
    file_ref(sem, destination)
}
