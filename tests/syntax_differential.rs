//! Differential test of the syntax layer ([`syntax::check`], the syntax verdict alone) against the
//! real interpreters: CPython 3.11's `compile()` (parser and compiler, through
//! `tests/py/syntax_oracle.py`, one long-lived process) and `bash -n` (one process per script, two
//! at a time). Scripts are the corpus cases in `tests/corpus/*.yml`, short generated seeds for the
//! constructs where grammars and interpreters part ways, and mutants of both (random token
//! deletions, insertions, swaps and replacements from a seeded xorshift). Every disagreement is
//! reported, grouped by category; the Python test fails on any, the Bash one on more than the
//! open categories still give at the fixed seed (`BASH_KNOWN`).
//!
//! The default run (CI) uses a fixed seed and 2,500 mutants per language (about 5 s for Python and
//! 10 s for Bash in a debug build on a busy 2-core machine). Longer or different runs (seeds 1 to
//! 20 at 10,000 Python mutants each take about 20 s a seed):
//!
//! ```text
//! SYNTAX_DIFF_COUNT=50000 SYNTAX_DIFF_SEED=7 SYNTAX_DIFF_PRINT=100 \
//!     cargo test --test syntax_differential -- --include-ignored --nocapture
//! ```
//!
//! `SYNTAX_DIFF_SEED` (decimal or 0x-hex), `SYNTAX_DIFF_COUNT` (mutants per language),
//! `SYNTAX_DIFF_PRINT` (disagreements printed in full). Needs `python3` 3.11 (the runner's version)
//! and `bash` on the host; without them the test says so and passes.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;

use scriptgate::domain::script::{Language, Script};
use scriptgate::rules::RuleSet;
use scriptgate::validate::{ValidationConfig, Validator, syntax};
use serde::Deserialize;

/// Mutants per language in the bounded (CI) run.
const DEFAULT_COUNT: usize = 2500;
const DEFAULT_SEED: u64 = 0x5EED_0016;
/// Disagreements printed in full (all are counted); `SYNTAX_DIFF_PRINT` changes it.
const PRINT_AT_MOST: u64 = 40;

#[derive(Debug, Deserialize)]
struct Case {
    language: Language,
    script: String,
}

/// xorshift64*: small, deterministic, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| {
            let v = v.trim();
            v.strip_prefix("0x")
                .map_or_else(|| v.parse(), |h| u64::from_str_radix(h, 16))
                .unwrap_or_else(|e| panic!("{name}={v}: {e}"))
        })
        .unwrap_or(default)
}

fn load_cases() -> Vec<Case> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/corpus exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).expect("readable corpus file");
            serde_norway::from_str::<Vec<Case>>(&text)
                .unwrap_or_else(|e| panic!("{}: {e}", f.display()))
        })
        .collect()
}

/// Tokens: runs of word characters, runs of spaces/tabs, single newlines, and every other
/// character alone (so quotes, brackets and operator characters can be dropped one at a time).
fn tokens(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let class = |c: char| {
        if c.is_alphanumeric() || c == '_' {
            0
        } else if c == ' ' || c == '\t' {
            1
        } else {
            2
        }
    };
    let mut prev: Option<u8> = None;
    for (i, c) in text.char_indices() {
        let k = class(c);
        if prev.is_some() && (k == 2 || Some(k) != prev) {
            out.push(&text[start..i]);
            start = i;
        }
        prev = Some(k);
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

fn is_blank(t: &str) -> bool {
    t.chars().all(char::is_whitespace)
}

/// Extra tokens worth inserting, beyond those the scripts already contain.
fn extra_tokens(language: Language) -> &'static [&'static str] {
    match language {
        Language::Python => &[
            "def", "class", "lambda", "return", "yield", "await", "async", "del", "global",
            "nonlocal", "pass", "break", "continue", "else", "elif", "try", "except", "finally",
            "with", "as", "from", "import", "raise", "assert", "not", "in", "is", "and", "or",
            "None", "True", "*", "**", ":=", "->", "@", ":", ",", ";", "=", "+=", "(", ")", "[",
            "]", "{", "}", "\"", "'", "f\"{x}\"", "!r", "!z", "\\", "    ", "\t", "\n", "0", "1j",
            "0o7", "...", "*args", "**kw", "match", "case", "type", "print", "x",
        ],
        Language::Bash => &[
            "if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case",
            "esac", "in", "function", "{", "}", "(", ")", "((", "))", "[[", "]]", ";", ";;", "&",
            "&&", "||", "|", "!", "<", ">", ">>", "<<", "<<<", "<>", "2>&1", "$(", "`", "\"", "'",
            "$", "${", "=", "\n", "#", "select", "time", "coproc", "local", "x",
        ],
    }
}

/// One to three random edits of a seed script.
fn mutate(rng: &mut Rng, seed: &str, pool: &[&str]) -> String {
    let mut toks: Vec<&str> = tokens(seed);
    let edits = 1 + rng.below(3);
    for _ in 0..edits {
        if toks.is_empty() {
            toks.push(pool[rng.below(pool.len())]);
            continue;
        }
        // Mostly edit meaningful tokens; sometimes whitespace (indentation, line breaks).
        let mut at = rng.below(toks.len());
        if rng.chance(80) {
            for _ in 0..8 {
                if !is_blank(toks[at]) {
                    break;
                }
                at = rng.below(toks.len());
            }
        }
        match rng.below(4) {
            0 => {
                toks.remove(at);
            }
            1 => {
                let t = pool[rng.below(pool.len())];
                toks.insert(at, t);
                if rng.chance(50) {
                    toks.insert(at, " ");
                }
            }
            2 => {
                let other = if rng.chance(60) {
                    (at + 1 + rng.below(3)).min(toks.len() - 1)
                } else {
                    rng.below(toks.len())
                };
                toks.swap(at, other);
            }
            _ => toks[at] = pool[rng.below(pool.len())],
        }
    }
    toks.concat()
}

struct PythonOracle {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl PythonOracle {
    fn start() -> Option<Self> {
        let driver =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/syntax_oracle.py");
        let version = Command::new("python3")
            .args(["-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
            .output()
            .ok()?;
        let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
        assert_eq!(
            version, "3.11",
            "the oracle must be the runner's Python (3.11), found {version}"
        );
        let mut child = Command::new("python3")
            .arg("-I")
            .arg(driver)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .ok()?;
        let stdin = child.stdin.take()?;
        let stdout = BufReader::new(child.stdout.take()?);
        Some(PythonOracle {
            child,
            stdin,
            stdout,
        })
    }

    /// None when the script compiles, else CPython's message.
    fn check(&mut self, script: &str) -> Option<String> {
        write!(self.stdin, "{}\n{script}", script.len()).expect("oracle stdin");
        self.stdin.flush().expect("oracle flush");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("oracle answer");
        let line = line.trim_end();
        assert!(!line.is_empty(), "python oracle exited");
        line.strip_prefix("err ").map(str::to_string)
    }
}

impl Drop for PythonOracle {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `bash -n` on each script (2 at a time): None when bash accepts it, else its complaint. A
/// here-document that runs to end of file is only a warning for bash, but it swallows the rest of
/// the script, so it counts as an error (as in tests/corpus/syntax.yml); so does a syntax error bash
/// reports without failing (a malformed `[[ … ]]` too: bash drops that command when it runs).
fn bash_verdicts(scripts: &[String]) -> Vec<Option<String>> {
    let results = Mutex::new(vec![None; scripts.len()]);
    let next = Mutex::new(0usize);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let i = {
                        let mut n = next.lock().expect("lock");
                        *n += 1;
                        *n - 1
                    };
                    let Some(script) = scripts.get(i) else { break };
                    let verdict = bash_n(script);
                    results.lock().expect("lock")[i] = verdict;
                }
            });
        }
    });
    results.into_inner().expect("lock")
}

fn bash_n(script: &str) -> Option<String> {
    let mut child = Command::new("bash")
        .args(["--norc", "--noprofile", "-n"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bash runs");
    let mut stdin = child.stdin.take().expect("stdin");
    // Ignore a broken pipe: bash may stop reading at the first error.
    let _ = stdin.write_all(script.as_bytes());
    drop(stdin);
    let out = child.wait_with_output().expect("bash -n finishes");
    let err = String::from_utf8_lossy(&out.stderr);
    // `[[ -n x ]; then` makes bash print "syntax error in conditional expression" yet exit 0, and
    // `[[ a & b ]]` "unexpected token `&', conditional binary operator expected": in both cases
    // bash discards the command when it runs the script, so both count as errors.
    if !out.status.success()
        || err.contains("delimited by end-of-file")
        || err.contains("syntax error")
        || err.contains("unexpected token")
        || err.contains("conditional binary operator expected")
    {
        Some(err.lines().next().unwrap_or("").to_string())
    } else {
        None
    }
}

fn tools_present() -> bool {
    let ok = |cmd: &str, arg: &str| {
        Command::new(cmd)
            .arg(arg)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    ok("python3", "--version") && ok("bash", "--version")
}

struct Disagreement {
    language: Language,
    ours: Option<String>,
    theirs: Option<String>,
    script: String,
}

#[test]
fn python_syntax_agrees_with_cpython() {
    differential(Language::Python);
}

/// Open categories remain: the differential run still finds scripts the layer rejects and `bash
/// -n` accepts where the grammar cannot express bash without a parser of our own: operands inside
/// `[[ … ]]` (bash's own conditional parser), nested braces inside `${…}`, a word glued to `[` in
/// command position, arithmetic `for ((…))` headers bash reads to the first `))`, more words after
/// a here-document's start; and fewer the other way (a `case` pattern left empty, quotes and `$(`
/// left open across lines). Seeds 1 to 5 at the default count find 21–33 each (about 1 % of the
/// mutants). So the bounded run is a ratchet: it reports every disagreement and fails when the
/// fixed seed finds more than [`BASH_KNOWN`] — lower the bound when a category is closed.
#[test]
fn bash_syntax_agrees_with_bash_n() {
    differential(Language::Bash);
}

/// Disagreements the fixed seed still finds in Bash (all printed by the run); Python's bound is 0.
/// The mutants are drawn from the corpus, so the count follows it: with the corpus cases the
/// AO–AQ round added (none of them a disagreement) the fixed seed draws 27 (11 before), inside
/// the 21–33 other seeds find, all of the open categories above.
const BASH_KNOWN: usize = 27;

#[allow(clippy::print_stdout)] // the report is the point of this test
fn differential(language: Language) {
    if !tools_present() {
        println!("SKIPPED: python3 or bash is not installed on this host");
        return;
    }
    let seed = env_number("SYNTAX_DIFF_SEED", DEFAULT_SEED);
    let count = env_number("SYNTAX_DIFF_COUNT", DEFAULT_COUNT as u64) as usize;
    // One stream per language, so either test can run alone and see the same scripts.
    let stream = if language == Language::Python {
        1u64
    } else {
        2
    };
    let mut rng = Rng((seed ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15)).max(1));
    let validator = Validator::new(
        RuleSet::embedded().expect("rules compile"),
        ValidationConfig::default(),
    );
    let cases = load_cases();
    let seeds: Vec<&str> = cases
        .iter()
        .filter(|c| c.language == language)
        .map(|c| c.script.as_str())
        .chain(generated_seeds(language).iter().copied())
        .collect();
    let mut pool: Vec<&str> = seeds
        .iter()
        .flat_map(|s| tokens(s))
        .filter(|t| !is_blank(t))
        .collect();
    pool.sort_unstable();
    pool.dedup();
    pool.extend(extra_tokens(language));
    let mut scripts: Vec<String> = seeds.iter().map(|s| s.to_string()).collect();
    for _ in 0..count {
        let seed = seeds[rng.below(seeds.len())];
        scripts.push(mutate(&mut rng, seed, &pool));
    }
    scripts.sort();
    scripts.dedup();
    let mut checked = BTreeMap::new();
    checked.insert(language.as_str(), scripts.len());
    let theirs: Vec<Option<String>> = match language {
        Language::Python => {
            let mut oracle = PythonOracle::start().expect("python3 oracle starts");
            scripts.iter().map(|s| oracle.check(s)).collect()
        }
        Language::Bash => bash_verdicts(&scripts),
    };
    let mut disagreements = Vec::new();
    for (script, theirs) in scripts.into_iter().zip(theirs) {
        let ours = syntax::check(&validator, &Script::new(language, script.clone()))
            .first()
            .map(|f| format!("{} (line {}): {}", f.rule, f.line, f.message));
        if ours.is_some() != theirs.is_some() {
            disagreements.push(Disagreement {
                language,
                ours,
                theirs,
                script,
            });
        }
    }
    report(seed, &checked, &disagreements);
    // The bound holds for the default run only: another seed or count is a survey.
    let bound = match language {
        Language::Bash if seed == DEFAULT_SEED && count == DEFAULT_COUNT => BASH_KNOWN,
        _ => 0,
    };
    assert!(
        disagreements.len() <= bound,
        "{} disagreement(s) with the interpreter (seed {seed:#x}; at most {bound} are known)",
        disagreements.len()
    );
}

/// Short scripts for the constructs where the grammar and the interpreters part ways (version
/// features, f-strings, empty bodies, redirections, expansions), so mutants land near them.
fn generated_seeds(language: Language) -> &'static [&'static str] {
    match language {
        Language::Python => &[
            "def f(*, a, **kw):\n    return f\"{a!r:>10} {kw=}\"\n",
            "del (a, b), [c], d.e, f[0]\n",
            "try:\n    pass\nexcept* ValueError as e:\n    raise\n",
            "x: list[int] = [1]\nmatch x:\n    case [1, *rest] if rest:\n        pass\n    case _:\n        pass\n",
            "async def g():\n    async with a as b:\n        await b\n    return [i async for i in b]\n",
            "s = 'a\\\nb'\nt = f'{s}' f\"{s:{w}}\" '''\n'''\n",
            "@dec\nclass C(B, metaclass=M):\n    x = lambda self, *a, k=1: (yield)\n",
            "if (n := len(a)) > 3 and \\\n        b:\n    print(n); print(a)\n",
            "for i in x:\n    if i:\n        continue\nelse:\n    break\nwhile a:\n    def f():\n        break\n",
            "nonlocal a\nclass C:\n    nonlocal b\ndef f():\n    x = 1\n    def g():\n        nonlocal x\n",
            "with (open(a) as f,\n      open(b) as g):\n    global x\n    x = 0o17 + 1_000 + 1j\n",
        ],
        Language::Bash => &[
            "f() {\n  local x=$1\n  echo \"${x:-d}\" ${#x} ${x#p} $((16#ff + x))\n}\n",
            "if a; then b; elif c; then d; else e; fi\nwhile read -r l; do :; done < f\n",
            "exec 3<>/tmp/f\necho \"$(date)\" >&3\ncat <<'EOF' > /tmp/g\n$x\nEOF\n",
            "case $1 in\n  a|b) echo ab ;;\n  *) : ;;\nesac\n",
            "for ((i = 0; i < 3; i++)); do [ \"$i\" -gt 1 ] && break; done\n",
            "[[ -n $a && $b =~ ^x ]] || { echo no; exit 1; }\n! grep -q x f\n",
            "arr=(a b)\necho \"${arr[@]}\" | tr a b 2>&1 | sort -u >> out\n",
        ],
    }
}

#[allow(clippy::print_stdout)]
fn report(seed: u64, checked: &BTreeMap<&str, usize>, found: &[Disagreement]) {
    println!("syntax differential: seed {seed:#x}, scripts checked {checked:?}");
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    for d in found {
        let key = match (&d.ours, &d.theirs) {
            (Some(o), None) => format!("{} rejected only by us: {}", d.language.as_str(), rule(o)),
            (None, Some(t)) => format!("{} accepted only by us: {}", d.language.as_str(), t),
            _ => unreachable!("only disagreements are recorded"),
        };
        *by_kind.entry(key).or_default() += 1;
    }
    for (kind, n) in &by_kind {
        println!("  {n:5}  {kind}");
    }
    let print = env_number("SYNTAX_DIFF_PRINT", PRINT_AT_MOST) as usize;
    for d in found.iter().take(print) {
        println!(
            "---- {} | ours: {} | interpreter: {}\n{}",
            d.language.as_str(),
            d.ours.as_deref().unwrap_or("ok"),
            d.theirs.as_deref().unwrap_or("ok"),
            d.script
        );
    }
}

fn rule(message: &str) -> &str {
    message.split(' ').next().unwrap_or(message)
}
