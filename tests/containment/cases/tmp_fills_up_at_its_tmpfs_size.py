
def fill(directory, files, mib_each):
    written = []
    try:
        for i in range(files):
            path = f"{directory}/fill{i}"
            written.append(path)
            with open(path, "wb") as f:
                for _ in range(mib_each):
                    f.write(b"x" * (1 << 20))
                    f.flush()
        escaped(f"fill-{directory}", f"wrote {files * mib_each} MiB")
        err = None
    except OSError as e:
        err = e.errno
    total = sum(os.path.getsize(p) for p in written if os.path.exists(p))
    for p in written:
        if os.path.exists(p):
            os.remove(p)
    return err, total

# Twice the tmpfs size: in 8 MiB files, then in a single file.
err, total = fill("/tmp", @TMPFS_MIB@ // 4 + 1, 8)
blocked("tmp-total", err)
seen("tmp-total-bytes", total)
err, total = fill("/tmp", 1, 2 * @TMPFS_MIB@)
blocked("tmp-one-file", err)
seen("tmp-one-file-bytes", total)
print("DONE")
