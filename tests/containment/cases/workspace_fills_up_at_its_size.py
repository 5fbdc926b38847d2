
# /workspace (jobs' files) is a tmpfs of its own size: filling it ends in ENOSPC, not in the
# container's memory or the host's disk.
written, err = [], None
try:
    for i in range(@WORKSPACE_MIB@ // 8 + 2):
        path = f"/workspace/fill{i}"
        written.append(path)
        with open(path, "wb") as f:
            for _ in range(8):
                f.write(b"x" * (1 << 20))
                f.flush()
    escaped("workspace-total", "wrote past the workspace size")
except OSError as e:
    err = e.errno
blocked("workspace-total", err)
seen("workspace-total-bytes", sum(os.path.getsize(p) for p in written if os.path.exists(p)))
for p in written:
    if os.path.exists(p):
        os.remove(p)
print("DONE")
