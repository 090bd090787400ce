"""many-routes: RPS and p99 at 1, 100, 10,000 and 50,000 routes.

One Strait node per route count (all on the gateway core, loaded one at a time in
interleaved rounds), each with N routes (`/r000001` ...) on one service that proxies to
the origin; wrk picks a random route per request. A router whose match cost does not
grow with the number of routes gives a flat curve.

Every node is loaded from a targets file of the same length (50,000 lines cycling through
its N routes): wrk formats one request per line and picks one at random per request, and
picking among 50,000 costs the load generator's core more than picking among one, which
showed as a lower RPS for the larger route counts whatever the gateway did.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from lab import loadgen, plots, stats, systems
from lab.configgen import ConfigSpec, write_config, write_cycled_targets
from lab.context import RunContext
from lab.registry import Goal, Rendered
from lab.report import fmt, table
from lab.rounds import good_samples, run_rounds, summarize_contender

NAME = "many-routes"
TITLE = "many-routes: throughput against the number of routes"
ROUTE_COUNTS = (1, 100, 10_000, 50_000)


START_SAMPLES = 3


def label(count: int) -> str:
    return f"{count:,} route" + ("" if count == 1 else "s")


def _start_nodes(ctx: RunContext, folder: Path, origin: systems.System) -> tuple[dict, dict]:
    nodes, startup = {}, {}
    for count in ROUTE_COUNTS:
        spec = ConfigSpec(routes=count, service_url=f"http://127.0.0.1:{origin.h1_port}")
        config = write_config(spec, folder / f"routes-{count}.json")
        # Started START_SAMPLES times from a fresh prefix (the last start is kept for the
        # loads): one start is one sample of a noisy quantity, the median is the figure.
        samples = []
        for attempt in range(START_SAMPLES):
            if attempt:
                ctx.procs.stop(node.process)
            started = time.monotonic()
            node = systems.start_strait(ctx.procs, ctx.strait_bin, folder, ctx.gateway_cpus,
                                        name=f"strait-routes-{count}", config=config.path)
            samples.append(time.monotonic() - started)
        startup[str(count)] = {"seconds_to_listen": statistics.median(samples), "samples_s": samples,
                               "config_bytes": config.bytes}
        ctx.log(f"{NAME}: {label(count)} node up in "
                f"{', '.join(f'{s:.2f}' for s in samples)} s")
        # As many request lines for every node: what differs between them is the gateway.
        targets = write_cycled_targets(count, max(ROUTE_COUNTS), folder / f"routes-{count}.load.targets")
        nodes[count] = (node, targets)
    return nodes, startup


def _contender(ctx: RunContext, node: systems.System, targets: Path, duration: int):
    def load(tag: str) -> dict:
        return loadgen.run(loadgen.Load(port=node.h1_port, duration_s=duration, targets=targets,
                                        cpus=ctx.load_cpus, work_dir=ctx.scenario_work(NAME)),
                           node.pid, tag)
    return load


def run(ctx: RunContext) -> dict:
    folder = ctx.scenario_work(NAME)
    origin = systems.start_origin(ctx.procs, folder, ctx.load_cpus)
    nodes, startup = _start_nodes(ctx, folder, origin)
    for count, (node, targets) in nodes.items():
        _contender(ctx, node, targets, ctx.timing.warmup_s)(f"warmup-{count}")
    contenders = {label(count): _contender(ctx, node, targets, ctx.timing.duration_s)
                  for count, (node, targets) in nodes.items()}
    rounds = run_rounds(ctx, contenders, ctx.timing.rounds, NAME)
    ctx.procs.stop_all()
    base = label(ROUTE_COUNTS[0])
    return {
        "route_counts": list(ROUTE_COUNTS), "startup": startup, "rounds": rounds,
        "load": f"wrk -t{loadgen.load_threads()} -c32, random route per request from {max(ROUTE_COUNTS):,} request lines, "
                f"{ctx.timing.duration_s} s",
        "summary": {name: summarize_contender(rounds, name) for name in contenders},
        "ratio_to_one_route": {name: stats.paired_ratios(rounds, name, base, "rps") for name in contenders},
    }


# ---------------------------------------------------------------- report

def render(result: dict, plot_dir: Path) -> Rendered:
    counts = result["route_counts"]
    rows = []
    for count in counts:
        name = label(count)
        summary, ratio = result["summary"][name], result["ratio_to_one_route"][name]
        startup = result["startup"][str(count)]
        rps = summary["rps"]
        rows.append([f"{count:,}", fmt(rps["mean"]), fmt(rps["stdev"]), f"{fmt(rps['min'])} – {fmt(rps['max'])}",
                     f"{ratio['mean']:.3f}" if ratio["n"] else "–", fmt(summary["p50_us"]["median"]),
                     fmt(summary["p99_us"]["median"]), fmt(summary["cpu_us_per_request"]["mean"], 1),
                     fmt((summary["peak_rss_kib"] or 0) / 1024, 1), f"{startup['seconds_to_listen']:.2f}",
                     summary["errors"] + summary["non_2xx"]])
    text = (f"Load: {result['load']}; {len(result['rounds'])} interleaved rounds. Every route proxies to "
            "the origin; the ratio is RPS at N routes over RPS at 1 route, computed within each round. "
            "Every node's wrk script picks among the same number of request lines (50,000, cycling "
            "through its routes), so the load generator's work per request is the same for all.\n\n")
    text += table(["routes", "RPS mean", "RPS stdev", "RPS min – max", "ratio to 1 route", "p50 µs", "p99 µs",
                   "CPU µs/req", "peak RSS MiB", "start to listening s (median of 3)", "errors + non-2xx"], rows)
    samples = [[s["rps"] for s in good_samples(result["rounds"], label(c))] or [0.0] for c in counts]
    p99 = [(result["summary"][label(c)]["p99_us"]["median"] or 0) / 1000 for c in counts]
    path = plots.curve_with_spread(counts, samples, "requests / s", ("p99 ms", p99),
                                   "many-routes: RPS (mean, min..max) and p99 against routes",
                                   "routes (log scale)", plot_dir / "lab-many-routes.png")
    if path:
        text += f"\n![many-routes curve](IMG/{path.name})\n"
    top = result["ratio_to_one_route"][label(counts[-1])]
    goal = Goal(f"RPS at {counts[-1]:,} routes", ">= 95% of RPS at 1 route",
                f"{top['mean'] * 100:.1f}%" if top["n"] else "not measured",
                top["mean"] >= 0.95 if top["n"] else None)
    largest = result["startup"][str(counts[-1])]
    samples = largest.get("samples_s", [largest["seconds_to_listen"]])
    start = Goal(f"start serving {counts[-1]:,} routes from a declarative file", "< 1 s",
                 f"{largest['seconds_to_listen']:.2f} s, median of {len(samples)} starts "
                 f"(max {max(samples):.2f} s; process start to proxy and Admin API listening)",
                 largest["seconds_to_listen"] < 1.0)
    return Rendered(text, [path] if path else [], [goal, start])
