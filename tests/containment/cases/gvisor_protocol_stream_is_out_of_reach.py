
import json, struct
frame = bytes([5]) + struct.pack(">I", 34) + json.dumps({"message": "FORGED BY THE SCRIPT"}).encode()
def forge():
    with open("/proc/1/fd/1", "wb") as f:
        return f.write(frame)
attempt("write-protocol-stream", forge)
attempt("read-job-stream", lambda: open("/proc/1/fd/0", "rb").read(1))
attempt("read-supervisor-memory", lambda: open("/proc/1/mem", "rb").read(1))
attempt("signal-supervisor", lambda: os.kill(1, 0))
# Observed, not required: gVisor (2022 release) lets any uid list /proc/<pid>/fd and read
# environ. The numbers give nothing to act on (opening them is refused above), and the
# supervisor's environment is the script's own: the host forwards none of its environment.
def observe(key, fn):
    try:
        seen(key, fn())
    except OSError as e:
        seen(key, _errname(e.errno))
observe("supervisor-fds", lambda: len(os.listdir("/proc/1/fd")))
observe("supervisor-environ-is-the-scripts", lambda: set(open("/proc/1/environ", "rb").read().split(b"\0")) - {b""} == {b"%s=%s" % kv for kv in os.environb.items()})
print("DONE")
