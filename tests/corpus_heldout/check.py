#!/usr/bin/env python3
"""Structural self-check for the held-out scriptgate corpus.

Never executes any corpus script. Python scripts are only parsed
(ast.parse / compile without exec); Bash scripts are only parsed with
`bash -n`, which reads the script without running any command.

Checks:
  * every *.yml file is a YAML list of mappings with exactly the keys
    name, language, expect, why, script (all non-empty strings);
  * language in {python, bash}; expect in {valid, syntax, language,
    secrets, dangerous}; names are unique kebab-case across all files;
  * valid / secrets / dangerous scripts parse in their declared language
    (python: ast.parse and compile(); bash: `bash -n` exit 0, empty stderr);
  * syntax scripts are rejected by the declared parser (python: ast.parse
    error -- a compile()-only error is accepted but reported; bash:
    `bash -n` non-zero exit or any stderr output);
  * language scripts parse cleanly as the *other* language.

Usage: python3 check.py [-v]
Exit status 0 when all checks pass.
"""
import ast
import collections
import os
import re
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
KEYS = {"name", "language", "expect", "why", "script"}
LANGS = {"python", "bash"}
EXPECTS = {"valid", "syntax", "language", "secrets", "dangerous"}
NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
OTHER = {"python": "bash", "bash": "python"}
# Each file of this corpus holds a single label.
FILE_LABEL = {
    "benign_tricky.yml": "valid",
    "secrets_hard.yml": "secrets",
    "dangerous_evasive.yml": "dangerous",
    "syntax_hard.yml": "syntax",
    "language_hard.yml": "language",
}


def py_parse(src):
    """Return (ast_ok, compile_ok, message)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. invalid escape sequence warnings
        try:
            ast.parse(src)
        except (SyntaxError, ValueError) as e:
            return False, False, f"{type(e).__name__}: {e}"
        try:
            compile(src, "<corpus>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as e:
            return True, False, f"{type(e).__name__}: {e}"
    return True, True, ""


def bash_parse(src):
    """Return (clean, message): clean means `bash -n` exit 0 and no stderr."""
    with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False, encoding="utf-8") as fh:
        fh.write(src)
        path = fh.name
    try:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
        p = subprocess.run(["bash", "-n", path], capture_output=True, text=True, env=env, timeout=20)
    finally:
        os.unlink(path)
    err = p.stderr.replace(path, "<script>").strip()
    return (p.returncode == 0 and not err), f"rc={p.returncode} {err}".strip()


def parses(lang, src):
    """Return (ok, message) for a strict parse in `lang`."""
    if lang == "python":
        a, c, msg = py_parse(src)
        return a and c, msg
    return bash_parse(src)


def main():
    verbose = "-v" in sys.argv[1:]
    errors, notes = [], []
    seen = {}
    counts = collections.OrderedDict()
    files = sorted(HERE.glob("*.yml"))
    if not files:
        print("no *.yml files found", file=sys.stderr)
        return 1

    for f in files:
        try:
            cases = yaml.safe_load(f.read_text(encoding="utf-8"))
        except yaml.YAMLError as e:
            errors.append(f"{f.name}: YAML error: {e}")
            continue
        if not isinstance(cases, list):
            errors.append(f"{f.name}: top level is not a list")
            continue
        per = counts.setdefault(f.name, collections.Counter())
        for i, case in enumerate(cases):
            where = f"{f.name}[{i}]"
            if not isinstance(case, dict):
                errors.append(f"{where}: case is not a mapping")
                continue
            keys = set(case)
            if keys != KEYS:
                errors.append(f"{where}: keys missing {sorted(KEYS - keys)} extra {sorted(keys - KEYS)}")
                continue
            if not all(isinstance(case[k], str) and case[k].strip() for k in KEYS):
                errors.append(f"{where}: every key must be a non-empty string")
                continue
            name, lang, expect, script = case["name"], case["language"], case["expect"], case["script"]
            where = f"{f.name}:{name}"
            if not NAME_RE.match(name):
                errors.append(f"{where}: name is not kebab-case")
            if name in seen:
                errors.append(f"{where}: duplicate name (also in {seen[name]})")
            seen[name] = f.name
            if lang not in LANGS:
                errors.append(f"{where}: bad language {lang!r}")
                continue
            if expect not in EXPECTS:
                errors.append(f"{where}: bad expect {expect!r}")
                continue
            if f.name in FILE_LABEL and expect != FILE_LABEL[f.name]:
                errors.append(f"{where}: expect {expect!r} but this file holds {FILE_LABEL[f.name]!r} cases")
            if "\n" in case["why"].strip():
                errors.append(f"{where}: why must be one line")
            per[(lang, expect)] += 1

            if expect in ("valid", "secrets", "dangerous"):
                ok, msg = parses(lang, script)
                if not ok:
                    errors.append(f"{where}: expected to parse as {lang}: {msg}")
            elif expect == "syntax":
                if lang == "python":
                    a, c, msg = py_parse(script)
                    if a and c:
                        errors.append(f"{where}: expected a Python syntax error, but it parses")
                    elif a and not c:
                        notes.append(f"{where}: rejected only by compile(), not ast.parse ({msg})")
                    elif verbose:
                        print(f"  {where}: {msg}")
                else:
                    ok, msg = bash_parse(script)
                    if ok:
                        errors.append(f"{where}: expected bash -n to fail or warn, but it is clean")
                    else:
                        rc0 = msg.startswith("rc=0 ")
                        if rc0:
                            notes.append(f"{where}: bash -n exits 0 and only prints: {msg[5:]}")
                        elif verbose:
                            print(f"  {where}: {msg}")
            elif expect == "language":
                other = OTHER[lang]
                ok, msg = parses(other, script)
                if not ok:
                    errors.append(f"{where}: expected to parse as {other}: {msg}")
                own_ok, own_msg = parses(lang, script)
                if own_ok:
                    notes.append(f"{where}: also parses as declared {lang} (syntax layer cannot catch it)")
                elif verbose:
                    print(f"  {where}: declared-language parse fails: {own_msg.splitlines()[0]}")

    print("counts (file: language/expect = n)")
    grand = collections.Counter()
    for fname, per in counts.items():
        total = sum(per.values())
        detail = ", ".join(f"{l}/{e}={n}" for (l, e), n in sorted(per.items()))
        print(f"  {fname}: {total}  ({detail})")
        for (l, e), n in per.items():
            grand[e] += n
    print("  by label:", ", ".join(f"{e}={grand[e]}" for e in sorted(grand)), f"| total={sum(grand.values())}")
    for n in notes:
        print("NOTE", n)
    for e in errors:
        print("ERROR", e)
    print("FAILED" if errors else "OK")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
