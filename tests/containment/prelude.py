import ctypes, errno, os, socket, sys

def _errname(n):
    return errno.errorcode.get(n, str(n))

def blocked(probe, n):
    print(f"BLOCKED:{probe}:{_errname(n)}", flush=True)

def escaped(probe, detail):
    print(f"ESCAPED:{probe}:{str(detail)[:200]!r}", flush=True)

def seen(key, value):
    print(f"SEEN:{key}:{value}", flush=True)

def attempt(probe, fn):
    try:
        result = fn()
    except OSError as e:
        blocked(probe, e.errno)
    else:
        escaped(probe, result)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

def check_rc(probe, rc):
    if rc == -1:
        blocked(probe, ctypes.get_errno())
    else:
        escaped(probe, f"returned {rc}")

def syscall(probe, nr, *args):
    args = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    ctypes.set_errno(0)
    check_rc(probe, _libc.syscall(ctypes.c_long(nr), *args))

