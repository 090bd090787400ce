"""metrics-scrape: what a Prometheus scrape every 100 ms costs the proxy with 10k routes.

One Strait node with 10,000 routes (one service, the origin), prometheus on every route with
status-code, latency and bandwidth metrics. wrk sends every request to a random route
(`lua/random_route.lua`), so every route has series (the worst case for a scrape: 10k routes x
status x 3 histograms + bandwidth). The Admin API thread runs on the gateway's core like the
proxy worker: the scrape competes with requests for that core, as it would in a node sized to
its CPUs. Contenders on the same node, in interleaved rounds, at two load levels:

- saturated (`not-scraped`, `scraped`): wrk -c32 closed loop, the worker's core is the limit;
- paced (`paced`, `paced-scraped`): each wrk connection waits 1 ms after every response, so
  the node runs at about 40% of its capacity, the load at which latency is normally judged.

`scraped` runs a scraper on the load core that GETs the Admin API's `/metrics` every 100 ms
for the whole load. `direct` (wrk straight to the origin) checks the layout.

Reported: RPS, p99 and gateway CPU per request for each, the paired ratios scraped / not
scraped at each level, and the scrape time (median, p99, max) and size. Goal at each level:
p99 scraped / not scraped <= 1.10.

Run alone: `bench/run metrics-scrape` (`--quick`: short loads).
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

from lab import loadgen, stats, systems
from lab.configgen import ConfigSpec, route_path, write_config
from lab.context import RunContext
from lab.registry import Goal, Rendered
from lab.report import fmt, table
from lab.rounds import run_rounds, summarize_contender
from lab.strait_admin import request

NAME = "metrics-scrape"
TITLE = "metrics-scrape: p99 with 10k routes while /metrics is scraped every 100 ms"
ROUTES = 10_000
CONTENDERS = ("not-scraped", "scraped", "paced", "paced-scraped", "direct")
# The paced loads: each of wrk's 32 connections waits 1 ms after every response, so the node
# runs at about 40% of its capacity (a node sized with headroom, as production nodes are).
PACE_MS = 1
INTERVAL_S = 0.1


class Scraper:
    """GETs /metrics every INTERVAL_S until stopped; records each scrape's time and size."""

    def __init__(self, port: int):
        self.port = port
        self.times_ms: list[float] = []
        self.sizes: list[int] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                code, size = _scrape(self.port)
                if code == 200:
                    self.times_ms.append((time.monotonic() - started) * 1000)
                    self.sizes.append(size)
                else:
                    self.failures += 1
            except OSError:
                self.failures += 1
            next_at += INTERVAL_S
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def __enter__(self) -> "Scraper":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=15)


def _scrape(port: int) -> tuple[int, int]:
    """GET /metrics, reading the body into one reused buffer (the scraper shares the load
    core with wrk and the origin: it must cost that core as little as it can)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(65536)
            if not chunk:
                return 0, 0
            head += chunk
        header, _, rest = head.partition(b"\r\n\r\n")
        code = int(header.split(b" ", 2)[1])
        size = len(rest)
        view = memoryview(_BUFFER)
        while True:
            n = conn.recv_into(view)
            if n == 0:
                return code, size
            size += n


_BUFFER = bytearray(1 << 20)


def _percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def run(ctx: RunContext) -> dict:
    folder = ctx.scenario_work(NAME)
    origin = systems.start_origin(ctx.procs, folder, ctx.load_cpus)
    url = f"http://127.0.0.1:{origin.h1_port}"
    config = write_config(ConfigSpec(routes=ROUTES, consumers=0, prometheus=True, service_url=url),
                          folder / "metrics-scrape.json")
    scrapes: list[dict] = []
    try:
        node = systems.start_strait(ctx.procs, ctx.strait_bin, folder, ctx.gateway_cpus,
                                    name="strait-metrics", config=config.path)
        code, _ = request(node.h1_port, "GET", route_path(7), timeout=5)
        if code != 200:
            raise RuntimeError(f"the node answered {code} on {route_path(7)}")

        def load(port: int, pid: int | None, duration: int, scraped: bool, pace_ms: int = 0):
            def one(tag: str) -> dict:
                job = loadgen.Load(port=port, duration_s=duration, targets=config.targets,
                                   cpus=ctx.load_cpus, work_dir=folder, pace_ms=pace_ms)
                if not scraped:
                    return loadgen.run(job, pid, tag)
                with Scraper(node.admin_port) as scraper:
                    sample = loadgen.run(job, pid, tag)
                scrapes.append({"times_ms": scraper.times_ms, "sizes": scraper.sizes,
                                "failures": scraper.failures, "paced": pace_ms > 0})
                sample["scrapes"] = len(scraper.times_ms)
                sample["scrape_ms_median"] = _percentile(scraper.times_ms, 50)
                return sample
            return one

        # Warm up until every route has its series (random routes, long enough to touch all).
        load(node.h1_port, node.pid, ctx.timing.warmup_s, False)(f"{NAME}-warmup")
        load(origin.h1_port, None, ctx.timing.warmup_s, False)(f"{NAME}-warmup-direct")
        contenders = {
            "not-scraped": load(node.h1_port, node.pid, ctx.timing.duration_s, False),
            "scraped": load(node.h1_port, node.pid, ctx.timing.duration_s, True),
            "paced": load(node.h1_port, node.pid, ctx.timing.duration_s, False, PACE_MS),
            "paced-scraped": load(node.h1_port, node.pid, ctx.timing.duration_s, True, PACE_MS),
            "direct": load(origin.h1_port, None, ctx.timing.duration_s, False),
        }
        rounds = run_rounds(ctx, contenders, ctx.timing.rounds, NAME)
        # A scrape at rest, after the load: the scrape's own cost, nothing competing.
        idle = []
        for _ in range(5):
            started = time.monotonic()
            code, body = request(node.admin_port, "GET", "/metrics", timeout=30)
            idle.append({"ms": (time.monotonic() - started) * 1000, "bytes": len(body), "code": code})
    finally:
        ctx.procs.stop_all()

    def scrape_stats(paced: bool) -> dict:
        chosen = [s for s in scrapes if s["paced"] == paced]
        times = [t for s in chosen for t in s["times_ms"]]
        return {"count": len(times), "failures": sum(s["failures"] for s in chosen),
                "ms_median": _percentile(times, 50), "ms_p99": _percentile(times, 99),
                "ms_max": max(times) if times else None}
    sizes = [n for s in scrapes for n in s["sizes"]]
    def paired(scraped: str, plain: str) -> dict:
        return {key: stats.paired_ratios(rounds, scraped, plain, key)
                for key in ("rps", "cpu_us_per_request", "p99_us")}

    return {
        "rounds": rounds, "ratios": paired("scraped", "not-scraped"),
        "paced_ratios": paired("paced-scraped", "paced"),
        "direct/not-scraped": stats.paired_ratios(rounds, "direct", "not-scraped", "rps"),
        "summary": {name: summarize_contender(rounds, name) for name in CONTENDERS},
        "scrape": {**scrape_stats(False), "paced": scrape_stats(True),
                   "bytes_median": _percentile([float(n) for n in sizes], 50),
                   "idle_ms": [i["ms"] for i in idle], "idle_bytes": idle[-1]["bytes"] if idle else None},
        "config": config.describe(), "load": "wrk -t1 -c32, random route per request",
        "duration_s": ctx.timing.duration_s, "rounds_count": ctx.timing.rounds,
    }


def _ratio_rows(ratios: dict) -> list[list]:
    return [[what, fmt(ratios[key]["mean"], 3), f"{fmt(ratios[key]['min'], 3)} – {fmt(ratios[key]['max'], 3)}"]
            for key, what in (("p99_us", "p99"), ("rps", "RPS"), ("cpu_us_per_request", "CPU per request"))]


def _scrapes(scrape: dict) -> str:
    return (f"{scrape['count']} ({scrape['failures']} failed); time median {fmt(scrape['ms_median'], 1)} ms, "
            f"p99 {fmt(scrape['ms_p99'], 1)} ms, max {fmt(scrape['ms_max'], 1)} ms")


def render(result: dict, plot_dir: Path) -> Rendered:
    rows = []
    for name in CONTENDERS:
        summary = result["summary"][name]
        cpu = summary["cpu_us_per_request"]["mean"]
        rows.append([name, fmt(summary["rps"]["mean"]), fmt(summary["p99_us"]["median"]),
                     fmt(cpu, 1) if cpu else "–", summary["errors"] + summary["non_2xx"]])
    scrape = result["scrape"]
    text = (f"Load: {result['load']}; {result['duration_s']} s per sample, {result['rounds_count']} "
            "interleaved rounds. One node, one worker on the gateway core, 10,000 routes with prometheus "
            "(status-code, latency and bandwidth metrics) on each; every route has traffic. `scraped`: GET "
            "/metrics on the Admin API (same core) every 100 ms during the load. `paced`: each connection "
            f"waits {PACE_MS} ms after every response (the node at about 40% of its capacity). The gateway "
            "CPU per request of the scraped loads includes the scrapes' own work.\n\n")
    text += table(["contender", "RPS mean", "p99 µs (median)", "gateway CPU µs/req", "errors / non-2xx"], rows)
    ratios, paced = result["ratios"], result["paced_ratios"]
    direct = result["direct/not-scraped"]
    text += "\nRatios scraped / not scraped, saturated, within each round (mean, and the range over rounds):\n\n"
    text += table(["ratio", "mean", "range"], _ratio_rows(ratios) + [[
        "direct/not-scraped RPS (layout check)", fmt(direct["mean"], 3),
        f"{fmt(direct['min'], 3)} – {fmt(direct['max'], 3)}"]])
    text += "\nRatios paced-scraped / paced, within each round:\n\n"
    text += table(["ratio", "mean", "range"], _ratio_rows(paced))
    idle = ", ".join(f"{ms:.0f}" for ms in scrape["idle_ms"])
    text += (f"\nScrapes during the saturated loads: {_scrapes(scrape)}. During the paced loads: "
             f"{_scrapes(scrape['paced'])}. Size {fmt(scrape['bytes_median'])} bytes. At rest after the load: "
             f"{idle} ms.\n")
    goals = []
    for label, chosen, during in (("saturated", ratios, scrape), ("paced, ~40% load", paced, scrape["paced"])):
        p99 = chosen["p99_us"]["mean"]
        if p99 is not None:
            goals.append(Goal(f"metrics-scrape: p99 scraped every 100 ms / not scraped (10k routes, {label})",
                              "<= 1.10", f"{p99:.3f} (scrape median {fmt(during['ms_median'], 1)} ms)",
                              p99 <= 1.10))
    if direct["mean"] is not None:
        valid = direct["mean"] >= 1.5
        goals.append(Goal("metrics-scrape layout: direct RPS / gateway RPS", ">= 1.5", f"{direct['mean']:.2f}", valid,
                          "" if valid else "below 1.5 the load generator's core, not the gateway, limits the RPS"))
    return Rendered(text, [], goals)
