
import signal, time
for s in signal.valid_signals():
    try:
        signal.signal(s, signal.SIG_IGN)
    except (OSError, ValueError, RuntimeError):
        pass
if os.fork() == 0:
    os.setsid()
    while True:
        time.sleep(0.05)
print("ARMED", flush=True)
while True:
    time.sleep(0.05)
