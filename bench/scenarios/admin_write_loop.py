"""admin-write-loop: Admin API writes at 50,000 routes while the proxy is under load.

The loop a Kong 2.2 user reported stalling their gateway (every write rebuilt the router in
every worker; memory climbed until OOM): create a service and a route on it, list services,
delete the route (and the service, so the configuration keeps its size). It runs on the load
core, one request at a time on keep-alive connections, against a node holding 50,000 routes
(gateway pinned to its own core).

Measured:
- proxy p99 with and without the write loop, in interleaved rounds (wrk, random route);
- write-to-visible latency: from sending `POST /services/{s}/routes` until the proxy answers
  the new route's path with the origin's 200 (a 2xx from the Admin API should already mean
  live, so this is the POST's own latency plus one proxy request);
- gateway RSS before the first write and after 10,000 writes.

Run alone: `bench/run admin-write-loop` (`--quick`: 5,000 routes, 400 writes, short loads).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from lab import loadgen, stats, systems
from lab.configgen import ConfigSpec, write_config
from lab.context import RunContext
from lab.procs import memory_kib
from lab.strait_admin import KeepAlive
from lab.registry import Goal, Rendered
from lab.report import fmt, table
from lab.rounds import run_rounds, summarize_contender

NAME = "admin-write-loop"
TITLE = "admin-write-loop: Admin API writes under proxy load at 50,000 routes"
ROUTES = 50_000
WRITES = 10_000
WRITES_PER_ITERATION = 4  # POST service, POST route, DELETE route, DELETE service


class Writer(threading.Thread):
    """The write loop, pinned to the load core, until stopped or `limit` writes are done."""

    def __init__(self, node: systems.System, origin_url: str, cpus: str, first: int = 0):
        super().__init__(daemon=True)
        self.admin, self.proxy = KeepAlive(node.admin_port), KeepAlive(node.h1_port)
        self.origin_url = origin_url
        self.cpus = {int(c) for c in cpus.replace("-", ",").split(",") if c.strip().isdigit()}
        self.stop_event = threading.Event()
        self.limit: int | None = None
        self.iteration = first
        self.writes = 0
        self.visible_ms: list[float] = []
        self.write_ms: dict[str, list[float]] = {"create service": [], "create route": [],
                                                  "list services": [], "delete route": [],
                                                  "delete service": []}
        self.failures: list[str] = []

    def timed(self, what: str, method: str, path: str, body: dict | None = None) -> int:
        started = time.perf_counter()
        status, answer = self.admin.send(method, path, body)
        self.write_ms[what].append((time.perf_counter() - started) * 1000)
        if status >= 300 and len(self.failures) < 20:
            self.failures.append(f"{what}: {status} {answer[:200]!r}")
        return status

    def one_iteration(self) -> None:
        name = f"loop-{self.iteration}"
        path = f"/admin-loop/{self.iteration}"
        self.timed("create service", "POST", "/services", {"name": name, "url": self.origin_url})
        started = time.perf_counter()
        self.timed("create route", "POST", f"/services/{name}/routes", {"name": f"{name}-r", "paths": [path]})
        while self.proxy.send("GET", path)[0] == 404 and time.perf_counter() - started < 10:
            time.sleep(0.001)
        self.visible_ms.append((time.perf_counter() - started) * 1000)
        self.timed("list services", "GET", "/services?size=100")
        self.timed("delete route", "DELETE", f"/routes/{name}-r")
        self.timed("delete service", "DELETE", f"/services/{name}")
        self.iteration += 1
        self.writes += WRITES_PER_ITERATION

    def run(self) -> None:
        if self.cpus:
            os.sched_setaffinity(0, self.cpus)  # this thread only (Linux)
        while not self.stop_event.is_set() and (self.limit is None or self.writes < self.limit):
            try:
                self.one_iteration()
            except Exception as error:  # noqa: BLE001 - recorded and reported, the loop goes on
                if len(self.failures) < 20:
                    self.failures.append(f"iteration {self.iteration}: {error}")
                self.iteration += 1


def _next_iteration(writers: list[Writer]) -> int:
    return writers[-1].iteration if writers else 0


def _memory_kib(pid: int | None) -> dict:
    """VmRSS, and its anonymous (heap) and file-backed (LMDB's map) parts."""
    out = {"rss": None, "anon": None, "file": None}
    if not pid:
        return out
    out["rss"] = memory_kib(pid)["rss_kib"]
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        for key, field in (("RssAnon:", "anon"), ("RssFile:", "file")):
            if line.startswith(key):
                out[field] = int(line.split()[1])
    return out


def _proxy_load(ctx: RunContext, node: systems.System, targets: Path, duration: int):
    def load(tag: str) -> dict:
        return loadgen.run(loadgen.Load(port=node.h1_port, duration_s=duration, targets=targets,
                                        cpus=ctx.load_cpus, work_dir=ctx.scenario_work(NAME)),
                           node.pid, tag)
    return load


def _with_writes(ctx: RunContext, node: systems.System, targets: Path, origin_url: str, writers: list[Writer]):
    quiet = _proxy_load(ctx, node, targets, ctx.timing.duration_s)

    def load(tag: str) -> dict:
        writer = Writer(node, origin_url, ctx.load_cpus, first=_next_iteration(writers))
        writers.append(writer)
        writer.start()
        try:
            sample = quiet(tag)
        finally:
            writer.stop_event.set()
            writer.join()
        sample["writes"] = writer.writes
        return sample
    return load


def _summarize_writers(writers: list[Writer]) -> dict:
    visible = sorted(v for w in writers for v in w.visible_ms)
    per_op = {}
    for what in (writers[0].write_ms if writers else {}):
        values = sorted(v for w in writers for v in w.write_ms[what])
        per_op[what] = {"n": len(values), "p50_ms": stats.percentile(values, 50) if values else None,
                        "p99_ms": stats.percentile(values, 99) if values else None}
    return {
        "writes": sum(w.writes for w in writers),
        "visible_ms": {"n": len(visible), "p50": stats.percentile(visible, 50) if visible else None,
                       "p99": stats.percentile(visible, 99) if visible else None,
                       "max": visible[-1] if visible else None},
        "per_operation_ms": per_op,
        "failures": [f for w in writers for f in w.failures][:20],
    }


def run(ctx: RunContext) -> dict:
    folder = ctx.scenario_work(NAME)
    routes, target_writes = (5_000, 400) if ctx.quick else (ROUTES, WRITES)
    origin = systems.start_origin(ctx.procs, folder, ctx.load_cpus)
    origin_url = f"http://127.0.0.1:{origin.h1_port}"
    config = write_config(ConfigSpec(routes=routes, service_url=origin_url), folder / "routes.json")
    node = systems.start_strait(ctx.procs, ctx.strait_bin, folder, ctx.gateway_cpus, name="strait-write-loop",
                                config=config.path)
    _proxy_load(ctx, node, config.targets, ctx.timing.warmup_s)("warmup")
    rss_before = _memory_kib(node.pid)
    writers: list[Writer] = []
    contenders = {"without writes": _proxy_load(ctx, node, config.targets, ctx.timing.duration_s),
                  "with write loop": _with_writes(ctx, node, config.targets, origin_url, writers)}
    rounds = run_rounds(ctx, contenders, ctx.timing.rounds, NAME)
    finisher = Writer(node, origin_url, ctx.load_cpus, first=_next_iteration(writers))
    finisher.limit = max(0, target_writes - sum(w.writes for w in writers))
    ctx.log(f"{NAME}: {sum(w.writes for w in writers):,} writes under load; {finisher.limit:,} more without load")
    started = time.monotonic()
    finisher.start()
    finisher.join()
    writers.append(finisher)
    time.sleep(1.0)  # let the compiler drop retired snapshots
    rss_after = _memory_kib(node.pid)
    ctx.procs.stop_all()
    return {
        "routes": routes, "config": config.describe(), "rounds": rounds,
        "load": f"wrk -t1 -c32, random route per request, {ctx.timing.duration_s} s per sample",
        "summary": {name: summarize_contender(rounds, name) for name in contenders},
        "p99_ratio": stats.paired_ratios(rounds, "with write loop", "without writes", "p99_us"),
        "writes": _summarize_writers(writers), "finish_s": time.monotonic() - started,
        "rss_kib": {"before": rss_before, "after": rss_after},
    }


# ---------------------------------------------------------------- report

def _goals(result: dict) -> list[Goal]:
    ratio = result["p99_ratio"]
    visible = result["writes"]["visible_ms"]
    before, after = result["rss_kib"]["before"], result["rss_kib"]["after"]
    growth = (after["rss"] / before["rss"] - 1) if before["rss"] and after["rss"] else None
    return [
        Goal("proxy p99 with the write loop", "within 10% of p99 without",
             f"{(ratio['mean'] - 1) * 100:+.1f}%" if ratio["n"] else "not measured",
             ratio["mean"] <= 1.10 if ratio["n"] else None),
        Goal("write-to-visible latency p99", "< 100 ms",
             f"{visible['p99']:.1f} ms" if visible["p99"] is not None else "not measured",
             visible["p99"] < 100 if visible["p99"] is not None else None),
        Goal(f"gateway RSS growth over {result['writes']['writes']:,} writes", "< 5%",
             f"{growth * 100:+.1f}%" if growth is not None else "not measured",
             growth < 0.05 if growth is not None else None),
    ]


def render(result: dict, plot_dir: Path) -> Rendered:
    rows = []
    for name, summary in result["summary"].items():
        rows.append([name, fmt(summary["rps"]["mean"]), fmt(summary["p50_us"]["median"]),
                     fmt(summary["p99_us"]["median"]), fmt(summary["p99_9_us"]["median"]),
                     summary["errors"] + summary["non_2xx"]])
    writes = result["writes"]
    text = (f"{result['routes']:,} routes (one service proxying to the origin); load: {result['load']}; "
            f"{len(result['rounds'])} interleaved rounds. The write loop runs on the load core: "
            "create service, create route on it, list services, delete route, delete service.\n\n")
    text += table(["proxy load", "RPS mean", "p50 µs", "p99 µs", "p99.9 µs", "errors + non-2xx"], rows)
    ops = [[what, op["n"], fmt(op["p50_ms"], 2), fmt(op["p99_ms"], 2)]
           for what, op in writes["per_operation_ms"].items()]
    text += "\n" + table(["admin request", "count", "p50 ms", "p99 ms"], ops)
    visible, rss = writes["visible_ms"], result["rss_kib"]
    text += (f"\nWrite-to-visible (POST route sent -> proxy serves it), {visible['n']:,} routes: "
             f"p50 {fmt(visible['p50'], 2)} ms, p99 {fmt(visible['p99'], 2)} ms, max {fmt(visible['max'], 2)} ms.\n\n")
    mib = lambda kib: fmt((kib or 0) / 1024, 1)  # noqa: E731
    text += table(["gateway memory", "before the first write MiB", f"after {writes['writes']:,} writes MiB"],
                  [[label, mib(rss["before"][key]), mib(rss["after"][key])]
                   for label, key in (("RSS", "rss"), ("anonymous (heap)", "anon"), ("file-backed (LMDB map)", "file"))])
    if writes["failures"]:
        text += "\nFailures (first 20): " + "; ".join(writes["failures"]) + "\n"
    return Rendered(text, [], _goals(result))
