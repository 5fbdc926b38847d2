
def status(pid):
    return {k: v.split() for k, _, v in (l.partition(":") for l in open(f"/proc/{pid}/status"))}
me, sup = status("self"), status(1)
seen("script-uids", ",".join(sorted(set(me["Uid"] + me["Gid"]))))
seen("script-groups", ",".join(me.get("Groups", [])))
seen("supervisor-uids", ",".join(sorted(set(sup["Uid"] + sup["Gid"]))))
seen("supervisor-caps", f'{sup["CapEff"][0]}/{sup["CapPrm"][0]}/{sup["CapBnd"][0]}')
seen("script-caps", "/".join(me[k][0] for k in ("CapEff", "CapPrm", "CapBnd", "CapInh")))
check_rc("setuid-0", _libc.setuid(0))
check_rc("setresuid-supervisor", _libc.setresuid(1999999999, 1999999999, 1999999999))
check_rc("setgroups-0", _libc.setgroups(1, (ctypes.c_uint * 1)(0)))
header = (ctypes.c_uint32 * 2)(0x20080522, 0)
data = (ctypes.c_uint32 * 6)(0xFFFFFFFF, 0xFFFFFFFF, 0, 0xFFFFFFFF, 0xFFFFFFFF, 0)
syscall("capset-all", 126, header, data)
print("DONE")
