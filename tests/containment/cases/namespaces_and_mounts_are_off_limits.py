
check_rc("mount-tmpfs", _libc.mount(b"none", b"/mnt", b"tmpfs", 0, None))
check_rc("remount-root-rw", _libc.mount(None, b"/", None, 32 | 4096, None))  # MS_REMOUNT|MS_BIND
check_rc("umount-tmp", _libc.umount2(b"/tmp", 2))
for name, flag in [("user", 0x10000000), ("mnt", 0x00020000), ("net", 0x40000000), ("pid", 0x20000000), ("cgroup", 0x02000000)]:
    check_rc(f"unshare-{name}", _libc.unshare(flag))
fd = os.open("/proc/self/ns/net", os.O_RDONLY)
check_rc("setns-own-net", _libc.setns(fd, 0))
check_rc("chroot", _libc.chroot(b"/tmp"))
syscall("pivot_root", 155, b"/tmp", b"/tmp")
check_rc("sethostname", _libc.sethostname(b"pwned", 5))
seen("hostname", socket.gethostname())
import subprocess
r = subprocess.run(["unshare", "-r", "id", "-u"], capture_output=True, text=True)
print(f"BLOCKED:unshare-cli:{'EPERM' if 'Operation not permitted' in r.stderr else r.stdout + r.stderr}")
print("DONE")
