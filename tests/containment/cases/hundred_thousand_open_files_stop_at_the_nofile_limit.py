
import resource
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
seen("nofile", f"{soft}/{hard}")
fds = []
try:
    while len(fds) < 100_000:
        fds.append(os.open("/dev/null", os.O_RDONLY))
    escaped("open-files", len(fds))
except OSError as e:
    blocked("open-files", e.errno)
seen("opened", len(fds))
for fd in fds:
    os.close(fd)
socks = []
try:
    while len(socks) < 100_000:
        socks.extend(socket.socketpair())
    escaped("socketpairs", len(socks))
except OSError as e:
    blocked("socketpairs", e.errno)
print("DONE")
