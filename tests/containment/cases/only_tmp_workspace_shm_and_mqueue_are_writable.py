
writable, dirs_tried = [], 0
for root, dirs, files in os.walk("/"):
    if root in ("/proc", "/sys"):
        dirs[:] = []
        continue
    dirs_tried += 1
    probe = os.path.join(root, f".sg-write-probe-{os.getpid()}")
    try:
        fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except OSError:
        continue
    os.close(fd)
    os.unlink(probe)
    writable.append(root)
seen("dirs-tried", dirs_tried)
seen("writable", ",".join(sorted(writable)))
print("DONE")
