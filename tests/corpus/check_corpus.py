#!/usr/bin/env python3
"""Sanity checks for the labelled corpus (does not execute any script).

For every *.yml file next to this script:
  * the file is a YAML list of mappings with exactly the keys
    name, language, expect, why, script;
  * names are unique across the corpus;
  * language / expect take known values;
  * expect valid / secrets / dangerous: the script parses cleanly in its own
    language (python: ast.parse, no warning; bash: `bash -n`, exit 0 and
    nothing on stderr);
  * expect syntax: the script fails ast.parse (python), or `bash -n` exits
    non-zero or prints a warning (bash);
  * expect language: the script parses cleanly in the OTHER language;
  * files named in FILE_EXPECT hold only cases of their label (and language).

Usage: check_corpus.py [CORPUS_DIR]   (default: the directory of this script)

Scripts are only parsed: python via ast.parse in a child interpreter, bash via
`bash -n` (no execution). Exit status 0 when everything passes.
"""
from __future__ import annotations

import collections
import pathlib
import subprocess
import sys
import tempfile

import yaml

HERE = pathlib.Path(__file__).resolve().parent
KEYS = {"name", "language", "expect", "why", "script"}
LANGUAGES = {"python", "bash"}
EXPECTS = {"valid", "syntax", "language", "secrets", "dangerous", "size"}

PY_PARSE = "import ast,sys; ast.parse(sys.stdin.read())"

# files whose cases must all carry one label / language (other files are unconstrained)
FILE_EXPECT = {
    "benign_python.yml": ("valid", "python"),
    "benign_bash.yml": ("valid", "bash"),
    "secrets.yml": ("secrets", None),
    "dangerous_python.yml": ("dangerous", "python"),
    "dangerous_bash.yml": ("dangerous", "bash"),
    "syntax.yml": ("syntax", None),
    "language.yml": ("language", None),
}


def parse_python(script: str) -> tuple[bool, str]:
    """(clean, diagnostics): clean means ast.parse succeeded with no warning."""
    proc = subprocess.run(
        [sys.executable, "-W", "always", "-c", PY_PARSE],
        input=script,
        capture_output=True,
        text=True,
        timeout=30,
    )
    diag = proc.stderr.strip()
    if proc.returncode != 0:  # keep the exception line, drop the traceback
        diag = diag.splitlines()[-1] if diag else f"exit status {proc.returncode}"
    return proc.returncode == 0 and not diag, diag


def parse_bash(script: str) -> tuple[bool, str, bool]:
    """(clean, diagnostics, hard_error) from `bash -n` (parse only)."""
    with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as fh:
        fh.write(script)
        path = fh.name
    try:
        proc = subprocess.run(
            ["bash", "-n", path], capture_output=True, text=True, timeout=30
        )
    finally:
        pathlib.Path(path).unlink()
    diag = proc.stderr.strip().replace(path, "<script>")
    return proc.returncode == 0 and not diag, diag, proc.returncode != 0


def parses_clean(language: str, script: str) -> tuple[bool, str]:
    if language == "python":
        return parse_python(script)
    clean, diag, _ = parse_bash(script)
    return clean, diag


def main() -> int:
    corpus_dir = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else HERE
    files = sorted(corpus_dir.glob("*.yml"))
    if not files:
        print("no *.yml files found", file=sys.stderr)
        return 1

    errors: list[str] = []
    notes: list[str] = []
    names: dict[str, str] = {}
    per_file: dict[str, collections.Counter] = {}
    per_expect: collections.Counter = collections.Counter()
    per_lang: collections.Counter = collections.Counter()

    for path in files:
        try:
            cases = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            errors.append(f"{path.name}: YAML error: {exc}")
            continue
        if not isinstance(cases, list):
            errors.append(f"{path.name}: top level is not a list")
            continue
        counter = per_file.setdefault(path.name, collections.Counter())
        for idx, case in enumerate(cases):
            where = f"{path.name}[{idx}]"
            if not isinstance(case, dict):
                errors.append(f"{where}: case is not a mapping")
                continue
            keys = set(case)
            if keys != KEYS:
                missing, extra = KEYS - keys, keys - KEYS
                errors.append(f"{where}: keys missing={sorted(missing)} extra={sorted(extra)}")
                continue
            name = case["name"]
            where = f"{path.name}:{name}"
            for key in KEYS:
                if not isinstance(case[key], str) or not case[key].strip():
                    errors.append(f"{where}: {key} must be a non-empty string")
            if any(not isinstance(case[k], str) for k in KEYS):
                continue
            if name in names:
                errors.append(f"{where}: duplicate name (also in {names[name]})")
            names[name] = path.name
            language, expect, script = case["language"], case["expect"], case["script"]
            if "\n" in case["why"].strip():
                errors.append(f"{where}: why must be one line")
            if language not in LANGUAGES:
                errors.append(f"{where}: unknown language {language!r}")
                continue
            if expect not in EXPECTS:
                errors.append(f"{where}: unknown expect {expect!r}")
                continue
            want_expect, want_lang = FILE_EXPECT.get(path.name, (None, None))
            if want_expect and expect != want_expect:
                errors.append(f"{where}: expect {expect!r} in a file of {want_expect!r} cases")
            if want_lang and language != want_lang:
                errors.append(f"{where}: language {language!r} in a file of {want_lang!r} cases")
            counter[expect] += 1
            per_expect[expect] += 1
            per_lang[(language, expect)] += 1

            if expect in {"valid", "secrets", "dangerous"}:
                clean, diag = parses_clean(language, script)
                if not clean:
                    errors.append(f"{where}: expected a clean {language} parse:\n    {diag}")
            elif expect == "syntax":
                if language == "python":
                    clean, diag = parse_python(script)
                    if clean:
                        errors.append(f"{where}: python script parses, expected a syntax error")
                    elif "SyntaxError" not in diag and "TabError" not in diag and "IndentationError" not in diag:
                        errors.append(f"{where}: parse failed but not with a syntax error:\n    {diag}")
                else:
                    clean, diag, _hard = parse_bash(script)
                    if clean:
                        errors.append(f"{where}: bash -n accepts the script, expected a syntax error")
            elif expect == "language":
                other = "bash" if language == "python" else "python"
                clean, diag = parses_clean(other, script)
                if not clean:
                    errors.append(f"{where}: expected a clean parse as {other}:\n    {diag}")
                own_clean, _ = parses_clean(language, script)
                if own_clean:
                    notes.append(f"{where}: also parses as the declared language {language}")

    total = sum(per_expect.values())
    print(f"{total} cases in {len(files)} files")
    for fname, counter in per_file.items():
        detail = ", ".join(f"{k}={v}" for k, v in sorted(counter.items()))
        print(f"  {fname:24s} {sum(counter.values()):4d}  ({detail})")
    print("per expect label:")
    for label, count in sorted(per_expect.items()):
        langs = ", ".join(f"{lang}={per_lang[(lang, label)]}" for lang in sorted(LANGUAGES))
        print(f"  {label:10s} {count:4d}  ({langs})")
    for note in notes:
        print(f"note: {note}")
    if errors:
        print(f"\n{len(errors)} problem(s):", file=sys.stderr)
        for err in errors:
            print(f"  {err}", file=sys.stderr)
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
