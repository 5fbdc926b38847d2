
import fcntl, time
time.sleep(2.5)
fd = _libc.inotify_init1(0)
if fd < 0:
    blocked("inotify", ctypes.get_errno())
else:
    seen("inotify", "ok")
r, w = os.pipe()
seen("pipe-size", fcntl.fcntl(w, 1032))  # F_GETPIPE_SZ
print("DONE")
