# An upstream for the egress tests, run in a container of the base image on a network the test
# creates: `/hello` names the server and port, `/bytes/N` streams N bytes, `/stats` reports what
# the other requests did (connections and bytes on the wire, counted here) and is not counted.
import http.server
import json
import sys
import threading

NAME = sys.argv[1]
PORTS = [int(p) for p in sys.argv[2:]]
stats = {"connections": 0, "requests": 0, "bytes_in": 0, "bytes_out": 0}
lock = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    counted = False

    def log_message(self, *args):
        pass

    def reply(self, status, body):
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        return len(body)

    def do_GET(self):
        if self.path == "/stats":
            with lock:
                body = json.dumps(stats).encode()
            self.close_connection = True
            self.reply(200, body)
            return
        with lock:
            if not self.counted:
                stats["connections"] += 1
                self.counted = True
            stats["requests"] += 1
            stats["bytes_in"] += len(self.requestline) + 2 + len(str(self.headers)) + 2
        if self.path.startswith("/bytes/"):
            n = int(self.path[len("/bytes/"):])
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            chunk = b"x" * 65536
            left = n
            try:
                while left:
                    k = min(left, len(chunk))
                    self.wfile.write(chunk[:k])
                    left -= k
            finally:
                with lock:
                    stats["bytes_out"] += n - left
            return
        port = self.server.server_address[1]
        sent = self.reply(200, f"hello from {NAME} port {port}\n".encode())
        with lock:
            stats["bytes_out"] += sent


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


servers = [Server(("0.0.0.0", p), Handler) for p in PORTS]
for s in servers[1:]:
    threading.Thread(target=s.serve_forever, daemon=True).start()
print("ready", flush=True)
servers[0].serve_forever()
