"""upstream-fault: steady load over an upstream of 4 targets while one target is killed and
restarted; what clients see.

Four origins (nginx, one process each with `master_process off`, so SIGKILL leaves nothing
answering on the port) on the load core, and one Strait node on the gateway core with an
upstream over them: round-robin, `retries` 3, passive checks ejecting a target on its first
TCP failure or timeout, active HTTP probes of unhealthy targets every second re-admitting one
after 2 good answers.

Each round runs five wrk loads back to back (paced: each of 32 connections waits 1 ms after
every response, about 40% of the node's capacity, the load at which latency is judged):

- `steady` (duration): all four targets up;
- `fault-settle` (3 s): starts the moment one target is SIGKILLed (its open connections reset);
- `fault` (duration): the target stays down;
- `recover-settle` (3 s): starts the moment the target listens again;
- `recovered` (duration): all four up again.

A thread polls `GET /upstreams/pool/health` every 50 ms to time the ejection (kill to
`UNHEALTHY`) and the re-admission (restart to `HEALTHY`).

Reported per phase: requests, errors seen by clients (socket errors + non-2xx), p50, p99.
Goals: zero errors in `fault` and `recovered` (after the retry/eject path settled), under
0.1% errors over all phases, and the p99 during the fault (settle included) against steady.

Run alone: `bench/run upstream-fault` (`--quick`: short loads, one round).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

from lab import loadgen, systems
from lab.context import RunContext
from lab.procs import Managed, free_port, wait_for_port
from lab.registry import Goal, Rendered
from lab.report import fmt, table
from lab.strait_admin import request
from lab.systems import ORIGIN_BODY, start_strait

NAME = "upstream-fault"
TITLE = "upstream-fault: one of 4 targets killed and restarted under load"
TARGETS = 4
VICTIM = 1
SETTLE_S = 3
PACE_MS = 1
PHASES = ("steady", "fault-settle", "fault", "recover-settle", "recovered")


def _origin_conf(work: Path, port: int) -> str:
    body = ORIGIN_BODY.replace("\n", "\\n")
    server = f'  server {{ listen 127.0.0.1:{port} backlog=4096 reuseport; location / {{ return 200 "{body}"; }} }}\n'
    return systems._nginx_conf(work, server, master=False)


def _start_origin(ctx: RunContext, folder: Path, index: int, port: int) -> Managed:
    work = folder / f"origin-{index}"
    work.mkdir(parents=True, exist_ok=True)
    (work / "nginx.conf").write_text(_origin_conf(work, port))
    process = ctx.procs.start(f"origin-{index}", ["nginx", "-p", str(work), "-e", str(work / "error.log"),
                                                  "-c", str(work / "nginx.conf")], ctx.load_cpus,
                              stop_signal=signal.SIGQUIT)
    wait_for_port(port, process)
    return process


def _config(ports: list[int]) -> dict:
    return {
        "_format_version": "3.0",
        "services": [{"name": "pool", "host": "pool", "port": 80, "retries": 3,
                      "connect_timeout": 1000, "routes": [{"name": "all", "paths": ["/"]}]}],
        "upstreams": [{
            "name": "pool",
            "targets": [{"target": f"127.0.0.1:{port}"} for port in ports],
            "healthchecks": {
                "passive": {"unhealthy": {"tcp_failures": 1, "timeouts": 1}},
                "active": {"type": "http", "http_path": "/", "timeout": 1,
                           "healthy": {"interval": 0, "successes": 2},
                           "unhealthy": {"interval": 1, "tcp_failures": 1}},
            },
        }],
    }


class HealthWatch:
    """Polls the victim's health until it reads `wanted`; records how long that took."""

    def __init__(self, admin_port: int, target: str, wanted: str):
        self.admin_port, self.target, self.wanted = admin_port, target, wanted
        self.started = time.monotonic()
        self.after_ms: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set() and time.monotonic() - self.started < 30:
            try:
                code, body = request(self.admin_port, "GET", "/upstreams/pool/health", timeout=5)
                if code == 200:
                    health = {t["target"]: t["health"] for t in json.loads(body)["data"]}
                    if health.get(self.target) == self.wanted:
                        self.after_ms = (time.monotonic() - self.started) * 1000
                        return
            except (OSError, ValueError, KeyError):
                pass
            self._stop.wait(0.05)

    def finish(self) -> float | None:
        self._thread.join(timeout=35)
        self._stop.set()
        return self.after_ms


def run(ctx: RunContext) -> dict:
    folder = ctx.scenario_work(NAME)
    ports = [free_port() for _ in range(TARGETS)]
    origins = [_start_origin(ctx, folder, i, port) for i, port in enumerate(ports)]
    config_path = folder / "upstream-fault.json"
    config_path.write_text(json.dumps(_config(ports)))
    duration = ctx.timing.duration_s
    rounds_count = 1 if ctx.quick else min(ctx.timing.rounds, 3)
    victim = f"127.0.0.1:{ports[VICTIM]}"
    rounds = []
    try:
        node = start_strait(ctx.procs, ctx.strait_bin, folder, ctx.gateway_cpus, name="strait-fault",
                            config=config_path)
        code, _ = request(node.h1_port, "GET", "/", timeout=5)
        if code != 200:
            raise RuntimeError(f"the node answered {code} on /")

        def load(tag: str, seconds: int) -> dict:
            job = loadgen.Load(port=node.h1_port, duration_s=seconds, cpus=ctx.load_cpus,
                               work_dir=folder, pace_ms=PACE_MS)
            return loadgen.run(job, node.pid, tag)

        load(f"{NAME}-warmup", ctx.timing.warmup_s)
        for number in range(rounds_count):
            ctx.log(f"{NAME}: round {number + 1}/{rounds_count}")
            phases = {"steady": load(f"{NAME}-steady", duration)}
            os.kill(origins[VICTIM].pid, signal.SIGKILL)
            ctx.procs.stop(origins[VICTIM])
            eject = HealthWatch(node.admin_port, victim, "UNHEALTHY")
            phases["fault-settle"] = load(f"{NAME}-fault-settle", SETTLE_S)
            phases["fault"] = load(f"{NAME}-fault", duration)
            origins[VICTIM] = _start_origin(ctx, folder, VICTIM, ports[VICTIM])
            readmit = HealthWatch(node.admin_port, victim, "HEALTHY")
            phases["recover-settle"] = load(f"{NAME}-recover-settle", SETTLE_S)
            phases["recovered"] = load(f"{NAME}-recovered", duration)
            rounds.append({"phases": phases, "eject_ms": eject.finish(), "readmit_ms": readmit.finish()})
    finally:
        ctx.procs.stop_all()
    return {"rounds": rounds, "duration_s": duration, "settle_s": SETTLE_S, "targets": TARGETS,
            "load": f"wrk -t1 -c32, each connection waiting {PACE_MS} ms after every response"}


def _errors(sample: dict) -> int:
    return sample["errors"] + sample["non_2xx"]


def render(result: dict, plot_dir: Path) -> Rendered:
    rows = []
    totals = {"requests": 0, "errors": 0}
    for number, one in enumerate(result["rounds"], 1):
        for phase in PHASES:
            sample = one["phases"][phase]
            errors = _errors(sample)
            totals["requests"] += sample["requests"]
            totals["errors"] += errors
            share = errors / sample["requests"] * 100 if sample["requests"] else 0.0
            cpu, busy = sample.get("cpu_us_per_request"), sample.get("gateway_core_busy")
            rows.append([number, phase, fmt(sample["rps"]), fmt(cpu, 1) if cpu else "–",
                         f"{busy * 100:.0f}%" if busy is not None else "–", sample["requests"], errors,
                         f"{share:.3f}%", fmt(sample["p50_us"]), fmt(sample["p99_us"])])
    text = (f"Load: {result['load']}; `steady`, `fault` and `recovered` {result['duration_s']} s each, the "
            f"settle phases {result['settle_s']} s. One Strait node (one worker, gateway core) over "
            f"{result['targets']} nginx targets (load core); target {VICTIM + 1} is SIGKILLed at the start of "
            "`fault-settle` and listens again at the start of `recover-settle`. Errors are what wrk saw: "
            "socket errors plus non-2xx answers. The load is paced on purpose (the gateway's core is about 40% "
            "busy, shown per phase): this measures what clients see during a fault, not throughput, so "
            "no direct-to-origin contender runs.\n\n")
    text += table(["round", "phase", "RPS", "gateway CPU µs/req", "gateway core busy", "requests", "errors",
                   "error share", "p50 µs", "p99 µs"], rows)
    ejects = [r["eject_ms"] for r in result["rounds"]]
    readmits = [r["readmit_ms"] for r in result["rounds"]]
    text += ("\nTarget marked `UNHEALTHY` after the kill (ms, per round): "
             + ", ".join(fmt(v, 0) if v is not None else "never" for v in ejects)
             + "; `HEALTHY` again after the restart: "
             + ", ".join(fmt(v, 0) if v is not None else "never" for v in readmits) + ".\n")
    settled = sum(_errors(r["phases"][p]) for r in result["rounds"] for p in ("fault", "recovered"))
    overall = totals["errors"] / totals["requests"] * 100 if totals["requests"] else 0.0
    steady = [r["phases"]["steady"]["p99_us"] for r in result["rounds"]]
    during = [max(r["phases"]["fault-settle"]["p99_us"], r["phases"]["fault"]["p99_us"]) for r in result["rounds"]]
    ratio = max(d / s for d, s in zip(during, steady) if s) if steady else None
    goals = [
        Goal("upstream-fault: client errors once ejection settled (fault and recovered phases)", "0",
             str(settled), settled == 0),
        Goal("upstream-fault: client errors over the whole run", "< 0.1%", f"{overall:.4f}%", overall < 0.1),
        Goal("upstream-fault: target ejected and re-admitted", "both, every round",
             "eject " + ", ".join(fmt(v, 0) for v in ejects if v is not None) + " ms; re-admit "
             + ", ".join(fmt(v, 0) for v in readmits if v is not None) + " ms",
             all(v is not None for v in ejects + readmits)),
    ]
    if ratio is not None:
        goals.append(Goal("upstream-fault: p99 during the fault / steady p99 (worst round)", "report",
                          f"{ratio:.2f} ({fmt(max(during))} µs against {fmt(min(steady))} µs)", True))
    return Rendered(text, [], goals)
