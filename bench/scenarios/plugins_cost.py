"""plugins-cost: what key-auth + acl + request-transformer, and key-auth + rate-limiting +
prometheus, cost per request.

Three Strait nodes with the same 100 routes (one service, the origin) and 100 consumers
(each with a key-auth credential): one runs key-auth, acl (allow the consumers' group) and
request-transformer (add a header and a query argument, remove a header) on every route,
one key-auth, rate-limiting (`local`, by consumer, per second and per hour, limits never
reached: every request takes the counting path) and prometheus (status-code, latency and
bandwidth metrics), the other no plugins. wrk sends every request to a random route with a random consumer's
key (`lua/random_route.lua`), to both nodes and straight to the origin, in interleaved
rounds. The gateway is alone on its core; origin and load generator share the other, and
`direct` shows they can go well past what the gateway does (the layout is valid when
direct >= 1.5x the gateway without plugins).

Reported: RPS, gateway CPU µs per request and p99 for each, and the with/without ratios
computed within each round. Goals: throughput with plugins >= 0.90 of without, for each
plugin set (Kong's published ratio with key-auth + rate-limiting is 0.72).

Run alone: `bench/run plugins-cost` (`--quick`: short loads).
"""

from __future__ import annotations

from pathlib import Path

from lab import loadgen, stats, systems
from lab.configgen import ConfigSpec, route_path, consumer_key, write_config
from lab.context import RunContext
from lab.registry import Goal, Rendered
from lab.report import CONTENDER_HEADER, contender_row, fmt, table
from lab.rounds import run_rounds, summarize_contender
from lab.strait_admin import request

NAME = "plugins-cost"
TITLE = "plugins-cost: key-auth + acl + request-transformer, 100 routes / 100 consumers"
ROUTES = CONSUMERS = 100
CONTENDERS = ("with-plugins", "with-limits-metrics", "without-plugins", "direct")


def _check(name: str, system: systems.System) -> None:
    """Each node proxies a keyed request to the origin; only the plugin node refuses a keyless one."""
    code, body = request(system.h1_port, "GET", route_path(7), None, {"apikey": consumer_key(7)}, timeout=5)
    if code != 200 or body != systems.ORIGIN_BODY.encode():
        raise RuntimeError(f"{name} answered {code} {body[:200]!r} to a keyed request")
    code, _ = request(system.h1_port, "GET", route_path(7), None, {}, timeout=5)
    expected = 200 if name == "without-plugins" else 401
    if code != expected:
        raise RuntimeError(f"{name} answered {code} to a request without a key (expected {expected})")


def run(ctx: RunContext) -> dict:
    folder = ctx.scenario_work(NAME)
    origin = systems.start_origin(ctx.procs, folder, ctx.load_cpus)
    url = f"http://127.0.0.1:{origin.h1_port}"
    with_plugins = write_config(ConfigSpec(routes=ROUTES, consumers=CONSUMERS, key_auth=True, acl=True,
                                           request_transformer=True, service_url=url),
                                folder / "with-plugins.json")
    rate_limited = write_config(ConfigSpec(routes=ROUTES, consumers=CONSUMERS, key_auth=True, rate_limiting=True,
                                           prometheus=True, service_url=url),
                                folder / "with-limits-metrics.json")
    without = write_config(ConfigSpec(routes=ROUTES, consumers=CONSUMERS, service_url=url),
                           folder / "without-plugins.json")
    try:
        nodes = {
            "with-plugins": systems.start_strait(ctx.procs, ctx.strait_bin, folder, ctx.gateway_cpus,
                                                 name="strait-with-plugins", config=with_plugins.path),
            "with-limits-metrics": systems.start_strait(ctx.procs, ctx.strait_bin, folder, ctx.gateway_cpus,
                                                        name="strait-with-limits-metrics", config=rate_limited.path),
            "without-plugins": systems.start_strait(ctx.procs, ctx.strait_bin, folder, ctx.gateway_cpus,
                                                    name="strait-without-plugins", config=without.path),
        }
        for name, node in nodes.items():
            _check(name, node)

        def contender(port: int, pid: int | None, duration: int):
            def load(tag: str) -> dict:
                return loadgen.run(loadgen.Load(port=port, duration_s=duration, targets=with_plugins.targets,
                                                cpus=ctx.load_cpus, work_dir=folder), pid, tag)
            return load

        systems_by_name = {**nodes, "direct": origin}
        for name, system in systems_by_name.items():
            contender(system.h1_port, system.pid, ctx.timing.warmup_s)(f"{NAME}-warmup-{name}")
        contenders = {name: contender(system.h1_port, system.pid, ctx.timing.duration_s)
                      for name, system in systems_by_name.items()}
        rounds = run_rounds(ctx, contenders, ctx.timing.rounds, NAME)
    finally:
        ctx.procs.stop_all()
    ratios = {
        "with/without": {key: stats.paired_ratios(rounds, "with-plugins", "without-plugins", key)
                         for key in ("rps", "cpu_us_per_request", "p99_us")},
        "limits+metrics/without": {key: stats.paired_ratios(rounds, "with-limits-metrics", "without-plugins", key)
                                   for key in ("rps", "cpu_us_per_request", "p99_us")},
        "direct/without": {"rps": stats.paired_ratios(rounds, "direct", "without-plugins", "rps")},
        "direct/with": {"rps": stats.paired_ratios(rounds, "direct", "with-plugins", "rps")},
    }
    return {"rounds": rounds, "ratios": ratios,
            "summary": {name: summarize_contender(rounds, name) for name in CONTENDERS},
            "configs": {"with-plugins": with_plugins.describe(), "with-limits-metrics": rate_limited.describe(),
                        "without-plugins": without.describe()},
            "load": "wrk -t1 -c32, random route and consumer key per request",
            "duration_s": ctx.timing.duration_s, "rounds_count": ctx.timing.rounds}


# ---------------------------------------------------------------- report

def render(result: dict, plot_dir: Path) -> Rendered:
    rows = [contender_row(name, result["summary"][name]) for name in CONTENDERS]
    text = (f"Load: {result['load']}; {result['duration_s']} s per sample, {result['rounds_count']} "
            "interleaved rounds. Both nodes: one worker on the gateway core, 100 routes on one service "
            "(the origin), 100 consumers with a key-auth credential; `with-plugins` adds key-auth + acl + "
            "request-transformer on every route, `with-limits-metrics` key-auth + rate-limiting (`local`, by "
            "consumer, limits never reached) + prometheus (status-code, latency and bandwidth metrics). `direct` is wrk straight to the origin (no gateway).\n\n")
    text += table(CONTENDER_HEADER, rows)
    with_without = result["ratios"]["with/without"]
    direct = result["ratios"]["direct/without"]["rps"]
    text += "\nRatios, computed within each round (mean, and the range over rounds):\n\n"
    limited = result["ratios"].get("limits+metrics/without")
    ratio_rows = []
    for label, ratios in (("with/without", with_without), ("limits+metrics/without", limited)):
        if not ratios:
            continue
        ratio_rows += [[f"{label} {what}", fmt(ratios[key]["mean"], 3),
                        f"{fmt(ratios[key]['min'], 3)} – {fmt(ratios[key]['max'], 3)}"]
                       for key, what in (("rps", "RPS"), ("cpu_us_per_request", "CPU per request"),
                                         ("p99_us", "p99"))]
    ratio_rows.append(["direct/without RPS (layout check)", fmt(direct["mean"], 3),
                       f"{fmt(direct['min'], 3)} – {fmt(direct['max'], 3)}"])
    text += table(["ratio", "mean", "range"], ratio_rows)
    goals = []
    rps = with_without["rps"]["mean"]
    cpu = with_without["cpu_us_per_request"]["mean"]
    if rps is not None:
        goals.append(Goal("plugins-cost: RPS with key-auth + acl + request-transformer / without",
                          ">= 0.90", f"{rps:.3f} (CPU per request {cpu:.3f}x)" if cpu else f"{rps:.3f}",
                          rps >= 0.90))
    if limited and limited["rps"]["mean"] is not None:
        rl_rps, rl_cpu = limited["rps"]["mean"], limited["cpu_us_per_request"]["mean"]
        goals.append(Goal("plugins-cost: RPS with key-auth + rate-limiting (local) + prometheus / without", ">= 0.90",
                          f"{rl_rps:.3f} (CPU per request {rl_cpu:.3f}x)" if rl_cpu else f"{rl_rps:.3f}",
                          rl_rps >= 0.90))
    if direct["mean"] is not None:
        valid = direct["mean"] >= 1.5
        goals.append(Goal("plugins-cost layout: direct RPS / gateway RPS", ">= 1.5", f"{direct['mean']:.2f}", valid,
                          "" if valid else "below 1.5 the load generator's core, not the gateway, limits the RPS"))
    return Rendered(text, [], goals)
