
import stat
def read(path):
    data = open(path, "rb").read(1)
    if not data:  # masked with an empty file
        raise OSError(errno.ENODATA, path)
    return data
for path in ["/proc/kcore", "/dev/mem", "/dev/kmem", "/dev/port", "/dev/kmsg", "/proc/kmsg"]:
    attempt(f"read:{path}", lambda: read(path))
seen("proc-keys-bytes", len(open("/proc/keys").read()))
seen("timer-list-bytes", len(open("/proc/timer_list").read()))
seen("firmware-entries", len(os.listdir("/sys/firmware")))
seen("dev", ",".join(sorted(os.listdir("/dev"))))
special = []
for root, dirs, files in os.walk("/dev"):
    for name in files + dirs:
        mode = os.lstat(os.path.join(root, name)).st_mode
        if stat.S_ISBLK(mode):
            special.append(os.path.join(root, name))
seen("block-devices", len(special))
attempt("tty", lambda: os.open("/dev/tty", os.O_RDWR))
print("DONE")
