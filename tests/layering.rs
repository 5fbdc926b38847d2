//! The layering of `src/`: which top-level module may use which. Every `crate::…` (and every
//! `super::…` that climbs to the crate root) in `src/**/*.rs` is checked against [`LAYERS`], and
//! ARCHITECTURE.md shows the same table, so a new upward import fails here, and so does a table
//! that drifts from the document. `lib.rs` (the composition root), `main.rs` and `cli/` (the
//! command line, part of the binary) wire everything together and are not checked.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level module → the top-level modules it may use. Top to bottom: the edge, the lifecycle,
/// what the lifecycle is configured and observed with, decisions and infrastructure, plain data.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "http",
        &[
            "executions",
            "sessions",
            "config",
            "metrics",
            "auth",
            "artifacts",
            "sandbox",
            "domain",
        ],
    ),
    (
        "executions",
        &[
            "config",
            "metrics",
            "validate",
            "policy",
            "sandbox",
            "store",
            "artifacts",
            "auth",
            "domain",
        ],
    ),
    (
        "sessions",
        &[
            "config",
            "metrics",
            "validate",
            "policy",
            "sandbox",
            "store",
            "artifacts",
            "auth",
            "domain",
        ],
    ),
    (
        "config",
        &[
            "validate",
            "policy",
            "sandbox",
            "artifacts",
            "auth",
            "domain",
        ],
    ),
    ("metrics", &["sandbox", "domain"]),
    ("validate", &["rules", "domain"]),
    ("policy", &["rules", "auth", "domain"]),
    ("rules", &["domain"]),
    ("sandbox", &["domain"]),
    ("store", &["domain"]),
    ("artifacts", &["domain"]),
    ("auth", &["domain"]),
    ("domain", &[]),
];

/// Uses the table does not allow, each with its reason. Test code only.
const EXCEPTIONS: &[(&str, &str, &str)] = &[(
    "src/rules/rule_tests.rs",
    "validate",
    "the rules' data tests run every rule through the validator",
)];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src/") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file: `src/a/b.rs` and `src/a/b/mod.rs` are `[a, b]`.
fn module_path(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .iter()
        .skip(1)
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The code of a file without its comments (doc links are not uses).
fn code(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The top-level modules a file's code names: `crate::x`, `crate::{x, y::z}`, and `super::…`
/// chains long enough to reach the crate root from a file `depth` modules deep.
fn used_modules(code: &str, depth: usize) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let before = code[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut level = 0;
            let mut start = 0;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => level += 1,
                    '}' if level == 0 => {
                        used.insert(ident(group[start..].trim_start()).to_string());
                        break;
                    }
                    '}' => level -= 1,
                    ',' if level == 0 => {
                        used.insert(ident(group[start..].trim_start()).to_string());
                        start = j + 1;
                    }
                    _ => {}
                }
            }
        } else {
            used.insert(ident(rest).to_string());
        }
    }
    let climb = "super::".repeat(depth);
    for (i, _) in code.match_indices(&climb) {
        if code[..i].ends_with("super::") {
            continue;
        }
        let mut rest = &code[i + climb.len()..];
        while let Some(r) = rest.strip_prefix("super::") {
            rest = r;
        }
        used.insert(ident(rest).to_string());
    }
    used.retain(|m| !m.is_empty() && m != "self");
    used
}

fn table() -> BTreeMap<&'static str, BTreeSet<&'static str>> {
    LAYERS
        .iter()
        .map(|(m, allowed)| (*m, allowed.iter().copied().collect()))
        .collect()
}

#[test]
fn no_module_imports_a_layer_above_it() {
    let table = table();
    let top_level: BTreeSet<String> = LAYERS.iter().map(|(m, _)| m.to_string()).collect();
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let mut problems = Vec::new();
    for file in files {
        let relative = file.strip_prefix(root()).expect("under the root");
        let module = module_path(relative);
        let Some(top) = module.first() else { continue };
        if top == "lib" || top == "main" || top == "cli" {
            continue;
        }
        let Some(allowed) = table.get(top.as_str()) else {
            problems.push(format!(
                "{}: module `{top}` has no row in LAYERS (and ARCHITECTURE.md): give it a place",
                relative.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(&file).expect("read source");
        for used in used_modules(&code(&text), module.len()) {
            if used == *top || allowed.contains(used.as_str()) || !top_level.contains(&used) {
                continue;
            }
            let excepted = EXCEPTIONS
                .iter()
                .any(|(f, m, _)| relative == Path::new(f) && *m == used);
            if !excepted {
                problems.push(format!(
                    "{}: `{top}` uses `{used}`, which it may not (allowed: {allowed:?})",
                    relative.display()
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// External crates that belong to one place: the engine client to the Docker sandbox, the web
/// framework to the edge (and the root that serves it), SQL to the store, MCP to its front end.
const CRATES: &[(&str, &[&str])] = &[
    ("bollard", &["src/sandbox/docker/"]),
    ("axum", &["src/http/", "src/lib.rs"]),
    ("rusqlite", &["src/store/"]),
    ("rmcp", &["src/http/mcp/"]),
    ("tree_sitter", &["src/validate/", "src/rules/"]),
];

#[test]
fn infrastructure_crates_stay_in_their_module() {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let mut problems = Vec::new();
    for file in files {
        let relative = file.strip_prefix(root()).expect("under the root");
        let shown = relative.display().to_string();
        let code = code(&std::fs::read_to_string(&file).expect("read source"));
        for (krate, places) in CRATES {
            let named = code.match_indices(&format!("{krate}::")).any(|(i, _)| {
                !code[..i]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
            });
            if named && !places.iter().any(|p| shown.starts_with(p)) {
                problems.push(format!("{shown} uses {krate} (only {places:?} may)"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_layers_have_no_cycle() {
    let table = table();
    // Depth-first: a module reached again while it is on the path closes a cycle.
    fn visit<'a>(
        m: &'a str,
        table: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) {
        if done.contains(m) {
            return;
        }
        assert!(!path.contains(&m), "cycle: {path:?} -> {m}");
        path.push(m);
        for next in table.get(m).into_iter().flatten() {
            assert!(
                table.contains_key(next),
                "`{m}` may use `{next}`, which has no row"
            );
            visit(next, table, path, done);
        }
        path.pop();
        done.insert(m);
    }
    let mut done = BTreeSet::new();
    for m in table.keys() {
        visit(m, &table, &mut Vec::new(), &mut done);
    }
}

#[test]
fn architecture_md_shows_the_same_table() {
    let doc = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let mut rows = BTreeMap::new();
    for line in doc.lines() {
        // | `module` | `a`, `b` |
        if !line.starts_with("| `") {
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() == 4 {
            let module = cells[1].trim_matches(|c| c == '`' || c == '/');
            let allowed: BTreeSet<String> = cells[2]
                .split(',')
                .map(|c| c.trim().trim_matches(|c| c == '`' || c == '/').to_string())
                .filter(|c| !c.is_empty() && c != "—")
                .collect();
            rows.insert(module.to_string(), allowed);
        }
    }
    let want: BTreeMap<String, BTreeSet<String>> = LAYERS
        .iter()
        .map(|(m, a)| (m.to_string(), a.iter().map(|s| s.to_string()).collect()))
        .collect();
    assert_eq!(
        rows, want,
        "ARCHITECTURE.md's layer table differs from LAYERS"
    );
}

#[test]
fn the_scanner_sees_grouped_and_climbing_uses() {
    let sample = "use crate::{a::X, b, c::{d, e}};\nfn f() { crate::f::g(); my_crate::h(); }\n\
                  use super::super::i::J;\nuse super::k;";
    let used: Vec<String> = used_modules(sample, 2).into_iter().collect();
    assert_eq!(used, ["a", "b", "c", "f", "i"]);
    assert!(used_modules("// crate::x in a comment", 1).contains("x"));
    assert!(used_modules(&code("// crate::x in a comment"), 1).is_empty());
}
