
for path in ["/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock",
             "/var/run/containerd/containerd.sock", "/run/podman/podman.sock"]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    attempt(f"unix:{path}", lambda: s.connect(path))
    s.close()
for path in ["@DATA_DIR@", "@REPO@", "/var/lib/docker", "/root/.docker/config.json", "/etc/shadow"]:
    attempt(f"stat:{path}", lambda: os.stat(path))
unix = open("/proc/net/unix").read().splitlines()[1:]
seen("unix-sockets", len(unix))
seen("engine-sockets", sum(1 for l in unix if "docker" in l or "containerd" in l))
seen("DOCKER_HOST", os.environ.get("DOCKER_HOST", "unset"))
print("DONE")
