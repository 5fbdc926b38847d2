
env = [e.split(b"=", 1)[0].decode() for e in open("/proc/self/environ", "rb").read().split(b"\0") if e]
seen("env", ",".join(sorted(env)))
for name, value in sorted(os.environ.items()):
    print(f"ENV:{name}={value}")
attempt("pid1-environ", lambda: open("/proc/1/environ", "rb").read())
print("DONE")
