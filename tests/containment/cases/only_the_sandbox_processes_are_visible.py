
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
seen("pids", len(pids))
uids = set()
for pid in pids:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("Uid:"):
                uids.add(line.split()[1])
    except OSError:
        pass
seen("uids", ",".join(sorted(uids)))
seen("host-init-visible", any(open(f"/proc/{p}/comm").read().strip() in ("systemd", "init", "dockerd", "containerd") for p in pids))
print("DONE")
