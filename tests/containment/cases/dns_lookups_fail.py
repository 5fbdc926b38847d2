
codes = {socket.EAI_AGAIN: "EAI_AGAIN", socket.EAI_NONAME: "EAI_NONAME", socket.EAI_FAIL: "EAI_FAIL"}
for name in ["example.com", "host.docker.internal", "metadata.google.internal"]:
    try:
        escaped(f"dns-{name}", socket.getaddrinfo(name, 80))
    except socket.gaierror as e:
        print(f"BLOCKED:dns-{name}:{codes.get(e.errno, e.errno)}", flush=True)
servers = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")]
for server in servers:
    family = socket.AF_INET6 if ":" in server else socket.AF_INET
    attempt("dns-server", lambda: socket.socket(family, socket.SOCK_DGRAM).sendto(b"\0" * 12, (server, 53)))
seen("nameservers", len(servers))
print("DONE")
