"""Syntax oracle for the differential test: one long-lived CPython that compiles many scripts.

Protocol on stdin/stdout: the test writes `<byte length>\n<utf-8 script>`; the oracle answers one
line, `ok` or `err <first line of the error>`. Compilation is `compile(..., "exec")`, so errors the
compiler raises after parsing (`return` outside a function, `nonlocal` at module level, ...) count
like parser errors: the runner would refuse the script just the same.
"""

import sys
import warnings


def verdict(source: str) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            compile(source, "<script>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as e:
            return "err " + " ".join(str(e).split())[:200]
    return "ok"


def main() -> None:
    stdin = sys.stdin.buffer
    while True:
        header = stdin.readline()
        if not header:
            return
        body = stdin.read(int(header))
        try:
            source = body.decode("utf-8")
        except UnicodeDecodeError as e:
            answer = "err " + str(e)
        else:
            answer = verdict(source)
        sys.stdout.write(answer + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
