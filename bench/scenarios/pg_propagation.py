"""pg-propagation: how soon a write through one node is live on another node sharing
PostgreSQL, with 10,000 routes and 100,000 consumers loaded.

Kong's nodes on PostgreSQL learn about changes by polling a cluster-events table every
`db_update_frequency` (5 s by default). Strait's nodes `LISTEN` for the `NOTIFY` every write
transaction sends and apply the change log as deltas (docs/architecture.md#postgresql-store).

Layout: a throwaway PostgreSQL server (initdb in the run's folder, fsync on) and the origin
on the load core; nodes A and B (`database = postgres`, one worker each) on the gateway core.
The set is loaded with `strait config db_import` (timed). Then:

1. single writes: create a route through A's Admin API, then ask B's proxy for the route's
   path until it answers (1 ms apart); write-to-live is from sending the POST to B's
   first 200;
2. 100 writes/s for 30 s through A (open loop, one route each) while a watcher on the load
   core follows B's proxy route by route; write-to-live as above, from each write's due time;
3. database queries per proxied request: PostgreSQL's transaction count over 10 s of wrk
   load on B with no writes, against the same 10 s with no load (the two nodes'
   once-a-second follower polls); what the load added, divided by its requests.

Run alone: `bench/run pg-propagation` (`--quick`: 500 routes and 5,000 consumers, fewer
writes).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

from lab import loadgen, stats, systems
from lab.configgen import ConfigSpec, write_config
from lab.context import RunContext
from lab.postgres import PgServer
from lab.registry import Goal, Rendered
from lab.strait_admin import KeepAlive
from lab.report import fmt, table

NAME = "pg-propagation"
TITLE = "pg-propagation: write-to-live on another node sharing PostgreSQL (10k routes, 100k consumers)"
def _until_live(proxy: KeepAlive, path: str, limit_s: float = 10.0) -> float:
    """Poll `path` until it answers 200; the time it did (perf_counter)."""
    deadline = time.perf_counter() + limit_s
    while True:
        if proxy.send("GET", path)[0] == 200:
            return time.perf_counter()
        if time.perf_counter() > deadline:
            raise RuntimeError(f"{path} never went live")
        time.sleep(0.001)


def _pin(cpus: str) -> None:
    os.sched_setaffinity(0, {int(c) for c in cpus.replace("-", ",").split(",") if c.strip().isdigit()})


def _summary(values_ms: list[float]) -> dict:
    ordered = sorted(values_ms)
    pick = lambda p: stats.percentile(ordered, p) if ordered else None  # noqa: E731
    return {"n": len(ordered), "p50_ms": pick(50), "p99_ms": pick(99), "max_ms": ordered[-1] if ordered else None}


def run(ctx: RunContext) -> dict:
    folder = ctx.scenario_work(NAME)
    routes, consumers = (500, 5_000) if ctx.quick else (10_000, 100_000)
    singles, rate_s = (20, 5) if ctx.quick else (200, 30)
    origin = systems.start_origin(ctx.procs, folder, ctx.load_cpus)
    origin_url = f"http://127.0.0.1:{origin.h1_port}"
    config = write_config(ConfigSpec(routes=routes, consumers=consumers, service_url=origin_url),
                          folder / "set.json")
    pg = PgServer(ctx, folder / "postgres")
    env = dict(os.environ, **pg.env())
    subprocess.run([str(ctx.strait_bin), "migrations", "bootstrap"], env=env, check=True, capture_output=True)
    started = time.monotonic()
    imported = subprocess.run([str(ctx.strait_bin), "config", "db_import", str(config.path)], env=env,
                              capture_output=True, text=True, timeout=1800)
    import_s = time.monotonic() - started
    if imported.returncode != 0:
        raise RuntimeError(f"db_import failed: {imported.stderr[-2000:]}")
    ctx.log(f"{NAME}: imported {config.total_objects:,} objects in {import_s:.1f} s")
    nodes = [systems.start_strait(ctx.procs, ctx.strait_bin, folder, ctx.gateway_cpus, name=f"strait-{n}",
                                  extra_env=pg.env()) for n in ("a", "b")]
    a, b = nodes
    _pin(ctx.load_cpus)
    writer, proxy = KeepAlive(a.admin_port), KeepAlive(b.h1_port)
    if writer.send("POST", "/services", {"name": "prop", "url": origin_url})[0] != 201:
        raise RuntimeError("could not create the service")

    # 1. single writes
    single_ms = []
    for i in range(singles):
        sent = time.perf_counter()
        status, _ = writer.send("POST", "/services/prop/routes",
                                {"name": f"single-{i}", "paths": [f"/single/{i}/"]})
        if status != 201:
            raise RuntimeError(f"write {i}: {status}")
        single_ms.append((_until_live(proxy, f"/single/{i}/") - sent) * 1000)
    ctx.log(f"{NAME}: single writes: {_summary(single_ms)}")

    # 2. 100 writes/s, open loop, a watcher following B route by route
    count = 100 * rate_s
    due = [0.0] * count
    failures = []

    def write_loop() -> None:
        _pin(ctx.load_cpus)
        client = KeepAlive(a.admin_port)
        start = time.perf_counter() + 0.05
        for i in range(count):
            due[i] = start + i / 100
            delay = due[i] - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            status, _ = client.send("POST", "/services/prop/routes",
                                    {"name": f"rate-{i}", "paths": [f"/rate/{i}/"]})
            if status != 201 and len(failures) < 10:
                failures.append(f"write {i}: {status}")

    thread = threading.Thread(target=write_loop, daemon=True)
    thread.start()
    live = []
    for i in range(count):
        live.append(_until_live(proxy, f"/rate/{i}/", limit_s=rate_s + 30))
    thread.join()
    rate_ms = [(live[i] - due[i]) * 1000 for i in range(count)]
    ctx.log(f"{NAME}: 100 writes/s: {_summary(rate_ms)}")

    # 3. database transactions per proxied request
    count_query = f"SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = '{DATABASE}'"
    # Backends flush their statistics within 10 s of going idle: wait that
    # long on both sides so the window holds exactly the load's transactions.
    time.sleep(11)
    idle_before = int(pg.sql(count_query))
    time.sleep(10)  # the same window without load: what the nodes do by themselves
    time.sleep(11)
    idle = int(pg.sql(count_query)) - idle_before
    before = int(pg.sql(count_query))
    sample = loadgen.run(loadgen.Load(port=b.h1_port, path="/single/0/", duration_s=10, cpus=ctx.load_cpus,
                                      work_dir=folder), b.pid, "proxy")
    time.sleep(11)
    transactions = int(pg.sql(count_query)) - before
    ctx.procs.stop_all()
    shutil.rmtree(folder / "postgres", ignore_errors=True)
    return {
        "routes": routes, "consumers": consumers, "objects": config.total_objects, "import_s": import_s,
        "single": _summary(single_ms), "rate": {**_summary(rate_ms), "writes": count, "failures": failures},
        "proxy": {"requests": sample["requests"], "rps": sample["rps"], "transactions": transactions,
                  "idle_transactions": idle,
                  # What the load added over the same window idle, per request.
                  "per_request": max(0, transactions - idle) / sample["requests"] if sample["requests"] else None},
    }


def _goals(result: dict) -> list[Goal]:
    single, rate = result["single"], result["rate"]
    return [
        Goal("write-to-live on the other node, single writes, p99", "< 1 s (goal < 200 ms)",
             f"{single['p99_ms']:.1f} ms", single["p99_ms"] < 200),
        Goal("write-to-live on the other node at 100 writes/s, p99", "< 1 s (goal < 200 ms)",
             f"{rate['p99_ms']:.1f} ms", rate["p99_ms"] < 200),
        Goal("database queries per proxied request", "0",
             f"{result['proxy']['per_request']:.6f}", result["proxy"]["per_request"] < 0.001),
    ]


def render(result: dict, plot_dir: Path) -> Rendered:
    text = (f"{result['routes']:,} routes and {result['consumers']:,} consumers ({result['objects']:,} objects) "
            f"loaded with `strait config db_import` in {result['import_s']:.1f} s. Two nodes on one PostgreSQL "
            "(gateway core); the database, origin and clients on the load core. Write-to-live: from sending "
            "(or the due time, at 100/s) a route's POST to node A until node B's proxy answers its path.\n\n")
    rows = [[name, part["n"], fmt(part["p50_ms"], 1), fmt(part["p99_ms"], 1), fmt(part["max_ms"], 1)]
            for name, part in (("single writes", result["single"]), ("100 writes/s", result["rate"]))]
    text += table(["writes through node A", "count", "p50 ms", "p99 ms", "max ms"], rows)
    proxy = result["proxy"]
    text += (f"\nDatabase transactions (all sessions, `pg_stat_database`) in 10 s of proxy load on node B "
             f"({proxy['requests']:,} requests, {fmt(proxy['rps'])} req/s): {proxy['transactions']}; in 10 s with "
             f"no load: {proxy['idle_transactions']} (the two nodes' once-a-second follower polls). What the load "
             f"added, per request: {proxy['per_request']:.6f}. The proxy never queries the database.\n")
    if result["rate"]["failures"]:
        text += "\nFailed writes: " + "; ".join(result["rate"]["failures"]) + "\n"
    return Rendered(text, [], _goals(result))
