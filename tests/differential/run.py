#!/usr/bin/env python3
"""HTTP/1 differential test: every case of corpus.py sent to Strait and to nginx, each a proxy in
front of an origin of its own that records what reaches it; the verdicts compared.

A verdict is what the client saw (the status of each answer, in order, and whether the
connection was closed) and what the origin received (method, target and body of each
request, bodies decoded from their framing). Two verdicts agree when both proxies refused the
request (any 4xx/5xx, nothing forwarded) or forwarded the same requests.

Differences are classified:

- `strait-stricter`: Strait refused, nginx forwarded;
- `strait-lenient`: Strait forwarded what nginx refused, or forwarded more or other requests;
- `status`: both refused, with different statuses (informational).

`known.json` lists each difference that stays, with its reason (docs/security.md gives them);
`--check` fails on a difference that is not listed, a listed one that is gone, and any
`/smuggled` request reaching Strait's origin.

Usage: python3 tests/differential/run.py --strait target/debug/strait [--nginx /usr/sbin/nginx]
           [--check] [--report FILE] [--only NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import cases  # noqa: E402

HERE = Path(__file__).resolve().parent
# Cases that are not HTTP/1 at all, nor the HTTP/2 preface.
NOT_HTTP = ["garbage", "random-binary", "tls-client-hello", "ssh-banner", "json", "h2-preface-lower",
            "h2-preface-wrong-body", "h2-preface-http11"]
IDLE = 0.25  # seconds without bytes after which a kept-open connection's answer is complete


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, limit: float = 30.0) -> None:
    deadline = time.time() + limit
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


class Origin:
    """An HTTP/1.1 origin that records each request (method, target, decoded body) and answers
    `200` with `Content-Length`; keep-alive. Strict enough to frame what proxies send."""

    def __init__(self) -> None:
        self.port = free_port()
        self.seen: list[dict] = []
        self.lock = threading.Lock()
        self.server = socket.socket()
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind(("127.0.0.1", self.port))
        self.server.listen(256)
        threading.Thread(target=self.accept, daemon=True).start()

    def take(self) -> list[dict]:
        with self.lock:
            seen, self.seen = self.seen, []
        return seen

    def accept(self) -> None:
        while True:
            conn, _ = self.server.accept()
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn: socket.socket) -> None:
        buf = b""
        conn.settimeout(30)
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, buf = buf.split(b"\r\n\r\n", 1)
                lines = head.split(b"\r\n")
                parts = lines[0].split(b" ")
                headers = [l.split(b":", 1) for l in lines[1:] if b":" in l]
                names = {n.strip().lower(): v.strip() for n, v in headers}
                body = b""
                if names.get(b"transfer-encoding", b"").lower() == b"chunked":
                    while True:
                        while b"\r\n" not in buf:
                            buf += conn.recv(65536)
                        size_line, buf = buf.split(b"\r\n", 1)
                        size = int(size_line.split(b";")[0], 16)
                        if size == 0:
                            while b"\r\n\r\n" not in buf and not buf.startswith(b"\r\n"):
                                buf += conn.recv(65536)
                            buf = buf[2:] if buf.startswith(b"\r\n") else buf.split(b"\r\n\r\n", 1)[1]
                            break
                        while len(buf) < size + 2:
                            buf += conn.recv(65536)
                        body += buf[:size]
                        buf = buf[size + 2:]
                elif b"content-length" in names:
                    length = int(names[b"content-length"])
                    while len(buf) < length:
                        buf += conn.recv(65536)
                    body, buf = buf[:length], buf[length:]
                with self.lock:
                    self.seen.append({"method": parts[0].decode("latin-1"),
                                      "target": parts[1].decode("latin-1") if len(parts) > 1 else "",
                                      "body": body.decode("latin-1")})
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok")
        except (OSError, ValueError, IndexError):
            return
        finally:
            conn.close()


def send(port: int, raw: bytes) -> dict:
    """Send `raw` on a fresh connection; the statuses answered and whether the proxy closed."""
    conn = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        conn.sendall(raw)
    except OSError:
        pass
    conn.settimeout(IDLE)
    data, closed, reset = b"", False, False
    deadline = time.time() + 5
    while time.time() < deadline:
        try:
            chunk = conn.recv(65536)
        except socket.timeout:
            break
        except ConnectionResetError:
            closed = reset = True
            break
        except OSError:
            closed = True
            break
        if not chunk:
            closed = True
            break
        data += chunk
    conn.close()
    statuses = []
    for piece in data.split(b"HTTP/1.")[1:]:
        words = piece.split(b" ", 2)
        if len(words) > 1 and words[1][:3].isdigit():
            statuses.append(int(words[1][:3]))
    return {"statuses": statuses, "closed": closed, "reset": reset, "bytes": len(data)}


def verdict(answer: dict, forwarded: list[dict]) -> dict:
    return {**answer, "forwarded": [{"method": f["method"], "target": f["target"], "body": f["body"]} for f in forwarded]}


def classify(strait: dict, nginx: dict) -> str | None:
    s_fwd, n_fwd = strait["forwarded"], nginx["forwarded"]
    # The target as each proxy forwards it is not compared: nginx forwards what it received
    # (`proxy_pass` without a URI), Strait its normalized path (docs/routing.md).
    shape = lambda fwd: [(f["method"], f["body"]) for f in fwd]  # noqa: E731
    if shape(s_fwd) == shape(n_fwd):
        if not s_fwd and strait["statuses"][:1] != nginx["statuses"][:1]:
            return "status"
        return None
    if not s_fwd:
        return "strait-stricter"
    if len(s_fwd) < len(n_fwd) and shape(s_fwd) == shape(n_fwd)[: len(s_fwd)]:
        return "strait-stricter"
    return "strait-lenient"


def nginx_conf(work: Path, port: int, origin: int) -> Path:
    conf = work / "nginx.conf"
    conf.write_text(
        f"worker_processes 1; error_log {work}/nginx-error.log; pid {work}/nginx.pid;\n"
        "events { worker_connections 1024; }\n"
        f"http {{ access_log off; client_body_temp_path {work}/body; proxy_temp_path {work}/proxy;\n"
        "  upstream origin { server 127.0.0.1:%d; keepalive 8; }\n"
        "  server { listen 127.0.0.1:%d;\n"
        "    location / { proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection \"\"; } } }\n"
        % (origin, port))
    return conf


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strait", required=True)
    parser.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--report", default=None)
    parser.add_argument("--only", default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="strait-differential-"))
    procs: list[subprocess.Popen] = []
    try:
        strait_origin, nginx_origin = Origin(), Origin()
        nginx_port, strait_port, admin_port = free_port(), free_port(), free_port()
        procs.append(subprocess.Popen([args.nginx, "-c", str(nginx_conf(work, nginx_port, nginx_origin.port)),
                                       "-g", "daemon off;"], stderr=subprocess.DEVNULL))
        (work / "kong.json").write_text(json.dumps({"_format_version": "3.0", "services": [{
            "name": "origin", "url": f"http://127.0.0.1:{strait_origin.port}",
            "routes": [{"name": "all", "paths": ["/"], "strip_path": False}]}]}))
        env = {k: v for k, v in os.environ.items() if not k.startswith("STRAIT_")}
        env.update({"STRAIT_PREFIX": str(work / "strait"), "STRAIT_PROXY_LISTEN": f"127.0.0.1:{strait_port}",
                    "STRAIT_ADMIN_LISTEN": f"127.0.0.1:{admin_port}", "STRAIT_STATUS_LISTEN": "off",
                    "STRAIT_ADMIN_GUI_LISTEN": "off", "STRAIT_DECLARATIVE_CONFIG": str(work / "kong.json"),
                    "STRAIT_PROXY_ACCESS_LOG": "off", "STRAIT_PROXY_ERROR_LOG": str(work / "strait-error.log"),
                    "STRAIT_WORKER_THREADS": "1"})
        procs.append(subprocess.Popen([args.strait, "start"], env=env))
        wait_port(nginx_port)
        wait_port(strait_port)
        corpus = [(name, raw) for name, raw in cases() if not args.only or name == args.only]
        results = {}
        with ThreadPoolExecutor(max_workers=2) as pool:
            for name, raw in corpus:
                strait_future = pool.submit(send, strait_port, raw)
                nginx_future = pool.submit(send, nginx_port, raw)
                strait_answer, nginx_answer = strait_future.result(), nginx_future.result()
                time.sleep(0.05)
                strait, nginx = verdict(strait_answer, strait_origin.take()), verdict(nginx_answer, nginx_origin.take())
                results[name] = {"strait": strait, "nginx": nginx, "difference": classify(strait, nginx)}
        known = json.loads((HERE / "known.json").read_text())
        differences = {name: r["difference"] for name, r in results.items() if r["difference"]}
        # `/smuggled` reaching Strait's origin when nginx's did not see it.
        smuggled = [name for name, r in results.items()
                    if any("/smuggled" in f["target"] for f in r["strait"]["forwarded"])
                    and not any("/smuggled" in f["target"] for f in r["nginx"]["forwarded"])]
        counts: dict[str, int] = {}
        for kind in differences.values():
            counts[kind] = counts.get(kind, 0) + 1
        summary = {"cases": len(results), "agree": len(results) - len(differences), "differences": counts,
                   "smuggled_through_strait": smuggled}
        report = {"summary": summary, "cases": results}
        if args.report:
            Path(args.report).write_text(json.dumps(report, indent=2))
        print(json.dumps(summary, indent=2))
        failures = []
        for name, kind in sorted(differences.items()):
            listed = known.get(name)
            if not listed or listed.get("kind") != kind:
                r = results[name]
                failures.append(f"{name}: {kind} (not in known.json)\n    strait: {json.dumps(r['strait'])[:400]}\n"
                                f"    nginx:  {json.dumps(r['nginx'])[:400]}")
        if not args.only:
            for name in sorted(set(known) - set(differences)):
                failures.append(f"{name}: listed in known.json, but Strait and nginx now agree: remove it")
        for name in smuggled:
            failures.append(f"{name}: a /smuggled request reached Strait's origin")
        # Not HTTP at all: 400 and a closed connection. The exact HTTP/2 preface, and only it,
        # makes the connection HTTP/2 (Strait answers with frames, no HTTP/1 status).
        for name in NOT_HTTP:
            answer = results.get(name, {}).get("strait")
            if answer and (answer["statuses"][:1] != [400] or not answer["closed"]):
                failures.append(f"{name}: not HTTP, so 400 and a closed connection, got {answer}")
        preface = results.get("h2-preface", {}).get("strait")
        if preface and (preface["statuses"] or preface["bytes"] == 0):
            failures.append(f"h2-preface: the exact preface starts HTTP/2 (frames, no HTTP/1 status), got {preface}")
        if failures:
            print("\n".join(failures))
        print(f"{len(results)} cases: {summary['agree']} agree, {counts}; "
              f"{len(failures)} not accounted for")
        return 1 if args.check and failures else 0
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
