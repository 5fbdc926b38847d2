
import time
quota = int(open("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read())
period = int(open("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read())
seen("quota-cpus", quota / period)
t0, c0 = time.monotonic(), os.times()
pids = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        end = time.monotonic() + 2.5
        while time.monotonic() < end:
            pass
        os._exit(0)
    pids.append(pid)
for pid in pids:
    os.waitpid(pid, 0)
c1, wall = os.times(), time.monotonic() - t0
cpu = (c1.children_user + c1.children_system) - (c0.children_user + c0.children_system)
seen("cpu-per-wall", round(cpu / wall, 3))
print("DONE")
