
params = (ctypes.c_char * 120)()
syscall("io_uring_setup", 425, 8, params)
syscall("io_uring_register", 427, -1, 0, None, 0)
seen("io_uring_disabled", open("/proc/sys/kernel/io_uring_disabled").read().strip() if os.path.exists("/proc/sys/kernel/io_uring_disabled") else "absent")
print("DONE")
