
import subprocess, time
check_rc("setuid-0", _libc.setuid(0))
check_rc("setgid-0", _libc.setgid(0))
check_rc("setresuid-0", _libc.setresuid(0, 0, 0))
groups = (ctypes.c_uint * 1)(0)
check_rc("setgroups-0", _libc.setgroups(1, groups))
# capset: ask for every capability (v3 header, pid 0 = self).
header = (ctypes.c_uint32 * 2)(0x20080522, 0)
data = (ctypes.c_uint32 * 6)(0xFFFFFFFF, 0xFFFFFFFF, 0, 0xFFFFFFFF, 0xFFFFFFFF, 0)
syscall("capset-all", 126, header, data)
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
for key in ["CapEff", "CapPrm", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp"]:
    seen(key, status[key].strip())
seen("uid", f"{os.getuid()}/{os.geteuid()}")
# A setuid-root binary of the image gains nothing under no_new_privs.
su = subprocess.Popen(["/usr/bin/su", "root", "-c", "id"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
time.sleep(0.3)
uid_line = [l for l in open(f"/proc/{su.pid}/status") if l.startswith("Uid:")][0].split()
seen("su-euid", uid_line[2])
su.kill()
su.communicate()
print("DONE")
