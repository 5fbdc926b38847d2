
seen("limit-mib", int(open("/sys/fs/cgroup/memory/memory.limit_in_bytes").read()) >> 20)
chunks = []
while 32 * len(chunks) < 2 * @MEMORY_MIB@:
    chunks.append(b"\x01" * (32 << 20))
    seen("held-mib", 32 * len(chunks))
escaped("memory", f"held {32 * len(chunks)} MiB")
