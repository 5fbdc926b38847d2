
import json, struct
def frame(kind, payload):
    return bytes([kind]) + struct.pack(">I", len(payload)) + payload
exit_frame = frame(4, json.dumps({"nonce": "0" * 32, "exit_code": 0, "signal": None,
    "stdout_truncated": False, "stderr_truncated": False,
    "usage": {"cpu_time_ms": 0, "max_memory_bytes": 0, "oom_kills": 0}}).encode())
sys.stdout.buffer.write(frame(1, b'{"version":1,"language":"python"}') + exit_frame + b"\n")
sys.stdout.flush()
sys.stderr.buffer.write(frame(5, b'{"message":"FORGED-FAILURE"}') + b"\n")
sys.stderr.flush()
# The supervisor's own stdout (the host's protocol stream) is what would matter.
attempt("attach-stream", lambda: open("/proc/1/fd/1", "wb").write(exit_frame))
attempt("attach-stream-dev", lambda: open("/proc/1/fd/0", "rb"))
print("DONE", flush=True)
sys.exit(3)
