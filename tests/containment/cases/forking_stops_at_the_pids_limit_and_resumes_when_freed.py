
import time
children = []
while len(children) < 10_000:
    try:
        pid = os.fork()
    except OSError as e:
        blocked("fork", e.errno)
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    children.append(pid)
seen("children", len(children))
for pid in children:
    os.kill(pid, 9)
for pid in children:
    os.waitpid(pid, 0)
pid = os.fork()
if pid == 0:
    os._exit(7)
seen("fork-after-freeing", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
print("DONE")
