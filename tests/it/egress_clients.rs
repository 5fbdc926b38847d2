//! The `data` profile's own clients through the egress proxy on the real engine: `requests` and
//! curl over `http://`, and through a `CONNECT` tunnel (the way pip fetches) to a TLS upstream of
//! the test's own, whose certificate reaches the client untouched. Needs the data image of this
//! tree (`DATA_IMAGE_UNDER_TEST`), which has curl.

use serde_json::{Value, json};

use super::egress_service::{Upstreams, docker, lines, ops, service, wait_ready};

/// An HTTPS upstream (`tls.test`, port 8443) whose certificate a CA of the test's own signed.
const TLS_UPSTREAM: &str = r#"
import http.server, ssl
class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"hello over tls\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("0.0.0.0", 8443), Hello)
tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
tls.load_cert_chain("/certs/server.pem", "/certs/server.key")
server.socket = tls.wrap_socket(server.socket, server_side=True)
print("ready", flush=True)
server.serve_forever()
"#;

/// The TLS upstream container and its certificates; removed on drop.
struct TlsUpstream {
    id: String,
    ip: String,
    ca: String,
    _certs: tempfile::TempDir,
}

impl Drop for TlsUpstream {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f", &self.id])
            .output();
    }
}

fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl TlsUpstream {
    /// A CA and a certificate for `tls.test` (made here with openssl), served on `network`.
    fn start(network: &str) -> TlsUpstream {
        use std::os::unix::fs::PermissionsExt;
        let certs = tempfile::tempdir().expect("cert dir");
        let dir = certs.path();
        std::fs::write(dir.join("san.ext"), "subjectAltName=DNS:tls.test\n").expect("ext");
        for args in [
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=scriptgate test CA",
            ][..],
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=tls.test",
            ],
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "server.pem",
                "-days",
                "2",
                "-extfile",
                "san.ext",
            ],
        ] {
            openssl(dir, args);
        }
        // The upstream runs as nobody.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        for f in ["server.pem", "server.key"] {
            std::fs::set_permissions(dir.join(f), std::fs::Permissions::from_mode(0o644))
                .expect("chmod");
        }
        let mount = format!("{}:/certs:ro", dir.display());
        let id = docker(&[
            "run",
            "-d",
            "--network",
            network,
            "--read-only",
            "--user",
            "65534:65534",
            "--label",
            "scriptgate.test=egress",
            "-v",
            &mount,
            "--entrypoint",
            "python3",
            "scriptgate-base:latest",
            "-c",
            TLS_UPSTREAM,
        ]);
        let up = TlsUpstream {
            ip: docker(&[
                "inspect",
                "-f",
                "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                &id,
            ]),
            ca: std::fs::read_to_string(dir.join("ca.pem")).expect("ca"),
            id,
            _certs: certs,
        };
        wait_ready(&up.id);
        up
    }
}

/// The data profile's own clients: `requests` and curl over plain HTTP and through `CONNECT`
/// to the TLS upstream (the way pip fetches), trusting the test's CA; curl without it fails
/// verification, so the certificate it saw was the upstream's (the proxy does not intercept).
const CLIENTS: &str = r#"
import os, subprocess, requests
os.environ["REQUESTS_CA_BUNDLE"] = "/workspace/ca.pem"
r = requests.get("http://allowed.test:8080/hello", timeout=20)
print("requests", r.status_code, r.text.strip().replace(" ", "_"))
r = requests.get("https://tls.test:8443/hello", timeout=20)
print("requests_tls", r.status_code, r.text.strip().replace(" ", "_"))
def curl(*args):
    p = subprocess.run(["curl", "-sS", "--max-time", "20", *args], capture_output=True, text=True)
    return f"{p.returncode} {p.stdout.strip().replace(' ', '_')}"
print("curl", curl("http://allowed.test:8080/hello"))
print("curl_tls", curl("--cacert", "/workspace/ca.pem", "https://tls.test:8443/hello"))
print("curl_untrusted", curl("https://tls.test:8443/hello"))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn requests_and_curl_reach_an_allowed_name_over_http_and_through_connect() {
    let up = Upstreams::start(&["allowed"]);
    let tls = TlsUpstream::start(&up.network);
    let ip = tls.ip.clone();
    let s = service(&up, move |c| {
        c.egress.hosts.insert("tls.test".into(), vec![ip.clone()]);
        c.egress.allow_private_ranges.push(format!("{ip}/32"));
    })
    .await;
    let body = json!({
        "script_content": CLIENTS, "script_type": "python", "timeout": 90, "profile": "data",
        "files": [{"path": "/workspace/ca.pem", "content": tls.ca}],
        "network": {"allowed_domains": ["allowed.test", "tls.test"], "allowed_ports": [8080, 8443]},
    });
    let (status, result) = s.post("/v1/execute", &body).await;
    assert_eq!(status, 200, "{result}");
    let out = lines(&result);
    assert_eq!(
        out["requests"], "200 hello_from_allowed_port_8080",
        "{result}"
    );
    assert_eq!(out["requests_tls"], "200 hello_over_tls", "{result}");
    assert_eq!(out["curl"], "0 hello_from_allowed_port_8080", "{result}");
    assert_eq!(out["curl_tls"], "0 hello_over_tls", "{result}");
    assert!(
        out["curl_untrusted"].starts_with("60 "),
        "curl without the CA refuses the upstream's certificate: {result}"
    );
    let tunnels: Vec<&Value> = ops(&result, "net_connect")
        .into_iter()
        .filter(|c| c["domain"] == "tls.test")
        .collect();
    assert_eq!(tunnels.len(), 3, "{result}");
    for t in tunnels {
        assert_eq!(
            (t["protocol"].as_str(), t["decision"].as_str()),
            (Some("connect"), Some("allow")),
            "{t}"
        );
        assert_eq!(t["remote"], tls.ip.as_str(), "{t}");
        assert!(
            t["bytes_received"].as_u64() > Some(500),
            "a TLS handshake came back: {t}"
        );
    }
    s.stop().await;
}
