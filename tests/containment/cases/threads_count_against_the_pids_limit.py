
import threading, time
threads = []
try:
    while len(threads) < 10_000:
        t = threading.Thread(target=time.sleep, args=(30,), daemon=True)
        t.start()
        threads.append(t)
    escaped("threads", len(threads))
except RuntimeError as e:
    print(f"BLOCKED:threads:{type(e).__name__}", flush=True)
seen("threads", len(threads))
print("DONE")
os._exit(0)
