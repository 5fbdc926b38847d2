
import struct
for name in ["environ", "mem", "maps", "auxv", "stack", "syscall"]:
    attempt(f"pid1-{name}", lambda: open(f"/proc/1/{name}", "rb").read(64))
attempt("pid1-fd", lambda: os.listdir("/proc/1/fd"))
attempt("pid1-root", lambda: os.listdir("/proc/1/root"))
attempt("pid1-exe", lambda: os.readlink("/proc/1/exe"))
attempt("pid1-ns", lambda: os.open("/proc/1/ns/mnt", os.O_RDONLY))
# The supervisor's stdout is the host's protocol stream.
attempt("pid1-stdout", lambda: open("/proc/1/fd/1", "wb"))
check_rc("ptrace-attach-1", _libc.ptrace(16, 1, None, None))
buf = ctypes.create_string_buffer(64)
local = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 64)
remote = (ctypes.c_void_p * 2)(0x400000, 64)
syscall("process_vm_readv-1", 310, 1, local, 1, remote, 1, 0)
seen("pid1", open("/proc/1/comm").read().strip())
print("DONE")
