
import time
if os.fork() == 0:
    os.setsid()  # out of the script's process group, so only the container's end stops it
    while True:
        try:
            os.fork()
        except OSError:
            time.sleep(0.01)
time.sleep(1.5)
print("DONE", flush=True)
os._exit(0)
