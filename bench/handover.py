#!/usr/bin/env python3
"""handover: `strait restart` hand-overs in a row under steady load, every failure counted.

Loads, all at once, for the whole run (127.0.0.1 only, bounded in time):

- wrk, keep-alive: 32 connections reused (an HTTP/1.1 client opens a new one when an answer
  says `Connection: close`);
- wrk, a new connection per request (`Connection: close` asked by the client);
- h2load over TLS (h2, 4 connections x 8 streams);
- ghz, unary gRPC calls over h2c (grpc-go reconnects after GOAWAY);
- ghz, one long bidi stream (`--stream-call-count` messages, one every 10 ms), begun before the
  first hand-over: it must finish on the process that took it, within its grace.

Meanwhile `strait restart` runs ROUNDS times, EVERY seconds apart. Reported: each load's
requests, failures by kind, resets; each restart's exit status and time; the CPU of every
Strait process of the chain (this script is their subreaper, so each old process is reaped here
with its rusage) per request, beside the request rate.

h2load does not open a new connection after a GOAWAY: a client whose connection got one stops
(`clients_stopped_after_goaway`), so its count is mostly what it sent before the first
hand-over; in count mode (`-n`) it fails what it had left. That is the client's, not the
hand-over's (docs/operations.md). ghz fails the calls in flight when its time is up
(`cut_at_end_of_load`), through any gateway: not counted as failures.

Usage: python3 bench/handover.py --strait target/release/strait \\
           [--grpc-origin target/release/grpc-origin] [--rounds 10] [--every 2] [--out DIR]
ghz comes from bench/.venv/bin (bench/setup.sh); without it the gRPC loads are skipped and
the report says so.
"""

from __future__ import annotations

import argparse
import base64
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))
from lab.procs import free_port  # noqa: E402
from scenarios.grpc import plain_proto  # noqa: E402

SERVICE = "strait.test.Stream"
PAYLOAD = base64.b64encode(b"m" * 64).decode()


def wait_port(port: int, limit: float = 20.0) -> None:
    """`lab.procs.wait_for_port` for processes this script starts itself."""
    deadline = time.time() + limit
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


def subreaper() -> None:
    PR_SET_CHILD_SUBREAPER = 36
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def wrk_result(text: str) -> dict:
    requests = int(re.search(r"(\d+) requests in", text).group(1)) if "requests in" in text else 0
    socket_errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    errors = dict(zip(["connect", "read", "write", "timeout"], map(int, socket_errors.groups()))) if socket_errors else {}
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    return {"requests": requests, "socket_errors": errors, "non_2xx": int(non_2xx.group(1)) if non_2xx else 0,
            "failed": sum(errors.values()) + (int(non_2xx.group(1)) if non_2xx else 0)}


def h2load_result(text: str) -> dict:
    match = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored", text)
    if not match:
        return {"error": text[-800:]}
    total, started, done, ok, failed, errored = map(int, match.groups())
    # h2load ends a client whose connection got GOAWAY and opens no new one.
    stopped = len(re.findall(r"Process Request Failure", text))
    return {"total": total, "started": started, "done": done, "succeeded": ok, "failed": failed, "errored": errored,
            "clients_stopped_after_goaway": stopped}


# ghz fails the calls in flight when its time is up, as it closes its connections (through any
# gateway, or none): not failures of the hand-over (bench/scenarios/grpc.py counts them so too).
END_OF_LOAD = ("the client connection is closing", "use of closed network connection")


def ghz_result(text: str) -> dict:
    try:
        report = json.loads(text)
    except json.JSONDecodeError:
        return {"error": text[-800:]}
    codes = report.get("statusCodeDistribution") or {}
    kinds = report.get("errorDistribution") or {}
    cut = sum(n for message, n in kinds.items() if any(mark in message for mark in END_OF_LOAD))
    ended_at_time_up = report.get("endReason") == "timeout"
    return {"calls": report.get("count"), "ok": codes.get("OK", 0),
            "failed": sum(n for code, n in codes.items() if code != "OK") - (cut if ended_at_time_up else 0),
            "cut_at_end_of_load": cut if ended_at_time_up else 0,
            "errors": kinds, "total_s": (report.get("total") or 0) / 1e9}


class CpuSampler:
    """The CPU (user + system) of every node process (`BINARY start`), sampled every 50 ms
    from /proc: what an old process spent is known even if it was reaped elsewhere."""

    def __init__(self, binary: str) -> None:
        import threading
        self.binary = os.path.realpath(binary)
        self.seen: dict[int, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.tick = os.sysconf("SC_CLK_TCK")
        self.thread.start()

    def run(self) -> None:
        while not self.stop.is_set():
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    if os.path.realpath(f"/proc/{entry}/exe") != self.binary:
                        continue
                    # Nodes only, not the `strait restart`/`quit` commands.
                    if Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[1:2] != [b"start"]:
                        continue
                    fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                    self.seen[int(entry)] = (int(fields[11]) + int(fields[12])) / self.tick
                except (OSError, IndexError, ValueError):
                    continue
            self.stop.wait(0.05)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strait", required=True)
    parser.add_argument("--grpc-origin", default=str(REPO / "target" / "release" / "grpc-origin"))
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--every", type=float, default=2.0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    strait = str(Path(args.strait).resolve())
    work = Path(tempfile.mkdtemp(prefix="strait-handover-"))
    # The report outlives the working folder (removed at the end).
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="strait-handover-report-"))
    out.mkdir(parents=True, exist_ok=True)
    subreaper()
    procs: list[subprocess.Popen] = []
    ghz = BENCH / ".venv" / "bin" / "ghz"
    grpc = ghz.exists() and Path(args.grpc_origin).exists()
    try:
        origin_port = free_port()
        (work / "origin.conf").write_text(
            f"worker_processes 1; error_log {work}/origin-error.log; pid {work}/origin.pid;\n"
            "events { worker_connections 4096; }\n"
            "http { access_log off; keepalive_requests 1000000;\n"
            f"  server {{ listen 127.0.0.1:{origin_port} backlog=4096; location / {{ return 200 'ok'; }} }} }}\n")
        procs.append(subprocess.Popen(["nginx", "-c", str(work / "origin.conf"), "-g", "daemon off;"]))
        wait_port(origin_port)
        services = [{"name": "h1", "url": f"http://127.0.0.1:{origin_port}", "routes": [{"name": "h1", "paths": ["/h1"]}]}]
        if grpc:
            grpc_port = free_port()
            procs.append(subprocess.Popen([args.grpc_origin, f"127.0.0.1:{grpc_port}"], stderr=subprocess.DEVNULL))
            wait_port(grpc_port)
            services.append({"name": "stream", "url": f"grpc://127.0.0.1:{grpc_port}", "routes": [
                {"name": "stream", "paths": [f"/{SERVICE}/"], "protocols": ["grpc"], "strip_path": False}]})
        (work / "kong.json").write_text(json.dumps({"_format_version": "3.0", "services": services}))
        proxy, tls, admin = free_port(), free_port(), free_port()
        (work / "strait.conf").write_text(
            f"prefix = {work}/prefix\nproxy_listen = 127.0.0.1:{proxy}, 127.0.0.1:{tls} ssl http2\n"
            f"admin_listen = 127.0.0.1:{admin}\nstatus_listen = off\nadmin_gui_listen = off\n"
            f"declarative_config = {work}/kong.json\ngraceful_shutdown_timeout = 30s\n"
            f"proxy_access_log = off\nproxy_error_log = {work}/error.log\nlog_level = info\n")
        sampler = CpuSampler(strait)
        first = subprocess.Popen([strait, "start", "--conf", str(work / "strait.conf")])
        wait_port(proxy)
        duration = int(args.rounds * args.every + 8)
        loads = {
            "wrk keep-alive (32 connections)": ["wrk", "-t1", "-c32", f"-d{duration}s", f"http://127.0.0.1:{proxy}/h1"],
            "wrk new connection per request (8)": ["wrk", "-t1", "-c8", f"-d{duration}s", "-H", "Connection: close",
                                                   f"http://127.0.0.1:{proxy}/h1"],
            "h2load TLS (4 connections x 8 streams)": ["h2load", "-c4", "-m8", "-D", str(duration),
                                                       f"https://127.0.0.1:{tls}/h1"],
        }
        if grpc:
            proto = plain_proto(REPO / "tests" / "proto" / "stream.proto", work / "stream.proto")
            base = [str(ghz), "--insecure", "--proto", str(proto), "-d", json.dumps({"seq": 1, "payload": PAYLOAD}),
                    "--format", "json"]
            loads["ghz unary (8 calls at once, 2 connections)"] = base + [
                "--call", f"{SERVICE}.Unary", "-c", "8", "--connections", "2", "-z", f"{duration}s", f"127.0.0.1:{proxy}"]
            stream_messages = int((args.every * 3) / 0.01)
            loads[f"ghz bidi stream ({stream_messages} messages, one each 10 ms)"] = base + [
                "--call", f"{SERVICE}.Ack", "-c", "1", "-n", "1", "--stream-call-count", str(stream_messages),
                "--stream-interval", "10ms", f"127.0.0.1:{proxy}"]
        running = {name: subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                   for name, argv in loads.items()}
        time.sleep(2)
        restarts = []
        for round_ in range(args.rounds):
            started = time.time()
            done = subprocess.run([strait, "restart", "-p", str(work / "prefix")], capture_output=True, text=True,
                                  timeout=120)
            restarts.append({"round": round_ + 1, "exit": done.returncode, "seconds": round(time.time() - started, 3),
                             "output": (done.stdout + done.stderr).strip()[-300:]})
            time.sleep(max(0.0, args.every - (time.time() - started)))
        results = {}
        for name, proc in running.items():
            text, _ = proc.communicate(timeout=duration + 120)
            if name.startswith("ghz"):
                try:
                    parsed = json.loads(text)
                    parsed.pop("details", None)
                    text = json.dumps(parsed)
                except json.JSONDecodeError:
                    pass
            (out / (re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") + ".txt")).write_text(text)
            results[name] = (wrk_result(text) if name.startswith("wrk") else
                             h2load_result(text) if name.startswith("h2load") else ghz_result(text))
        serving = int((work / "prefix" / "pids" / "strait.pid").read_text())
        subprocess.run([strait, "quit", "-p", str(work / "prefix"), "--timeout", "40"], timeout=60)
        # Every Strait process of the chain: reaped here (their subreaper) with its exact CPU,
        # else what the sampler saw last.
        exact: dict[int, float] = {}
        deadline = time.time() + 30
        while time.time() < deadline and len(exact) < len(sampler.seen):
            try:
                pid, _, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                time.sleep(0.05)
                continue
            if pid in sampler.seen:
                exact[pid] = usage.ru_utime + usage.ru_stime
        sampler.stop.set()
        cpu_s = sum(exact.get(pid, seen) for pid, seen in sampler.seen.items())
        reaped = len(sampler.seen)
        requests = sum(r.get("requests", 0) for n, r in results.items() if n.startswith("wrk"))
        requests += sum(r.get("succeeded", 0) for n, r in results.items() if n.startswith("h2load"))
        requests += sum(r.get("ok", 0) for n, r in results.items() if n.startswith("ghz unary"))
        report = {"rounds": args.rounds, "every_s": args.every, "duration_s": duration, "restarts": restarts,
                  "loads": results, "strait_processes": reaped, "strait_processes_reaped_exactly": len(exact), "last_serving_pid": serving,
                  "strait_cpu_s": round(cpu_s, 3), "requests": requests,
                  "rps": round(requests / duration, 1),
                  "cpu_us_per_request": round(cpu_s * 1e6 / requests, 2) if requests else None,
                  "grpc": "run" if grpc else "skipped (ghz or grpc-origin missing: bench/setup.sh, "
                                             "cargo build --release -p strait-e2e --bin grpc-origin)"}
        (out / "handover.json").write_text(json.dumps(report, indent=2))
        print(json.dumps(report, indent=2))
        failed_restarts = [r for r in restarts if r["exit"] != 0]
        http1_failed = sum(r.get("failed", 0) for n, r in results.items() if n.startswith("wrk"))
        grpc_failed = sum(r.get("failed", 0) for n, r in results.items() if n.startswith("ghz"))
        print(f"\n{args.rounds} restarts ({len(failed_restarts)} failed); HTTP/1.1 failures {http1_failed}; "
              f"gRPC failures {grpc_failed}; {report['rps']} requests/s, {report['cpu_us_per_request']} CPU us/request "
              f"(all Strait processes); report: {out / 'handover.json'}")
        return 0 if not failed_restarts and http1_failed == 0 and grpc_failed == 0 else 1
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
