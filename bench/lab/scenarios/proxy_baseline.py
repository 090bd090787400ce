"""proxy-baseline: one route, no plugins, a 12-byte response from the origin.

HTTP/1.1 keep-alive (wrk -c32) and HTTP/2 h2c prior knowledge (h2load -c32 -m10) against
Strait, nginx (reverse proxy, 1 worker, upstream keepalive), Envoy (--concurrency 1) and
direct-to-origin, all started once and loaded in interleaved rounds.

Strait and nginx run twice: stripped (`strait`, `nginx`: no access log) and as configured by
default (`strait-default`: Strait's default `proxy_access_log` and Kong's headers, as Kong
ships; `nginx-default`: an access log in Kong's format, `buffer=64k`), so the stripped figure
is never mistaken for what a user gets.
"""

from __future__ import annotations

import json
from pathlib import Path

from lab import loadgen, plots, stats, systems
from lab.context import RunContext
from lab.registry import Goal, Rendered
from lab.report import fmt, percent, table
from lab.rounds import good_samples, run_rounds, summarize_contender
from lab.strait_admin import request

NAME = "proxy-baseline"
TITLE = "proxy-baseline: one route, no plugins"
PROTOCOLS = {"h1": "HTTP/1.1 (wrk, keep-alive)", "h2": "HTTP/2 (h2load, h2c)"}
GATEWAYS = ("strait", "nginx", "envoy", "strait-default", "nginx-default")
# Strait against each other gateway, within each round: stripped against stripped, default
# against default.
PAIRS = (("strait", "nginx"), ("strait", "envoy"), ("strait-default", "nginx-default"))


def _strait_config(folder: Path, origin: systems.System) -> Path:
    path = folder / "strait-baseline.json"
    path.write_text(json.dumps({"_format_version": "3.0", "services": [{
        "name": "origin", "url": f"http://127.0.0.1:{origin.h1_port}",
        "routes": [{"name": "all", "paths": ["/"]}]}]}))
    return path


def _start_all(ctx: RunContext, folder: Path) -> tuple[dict, dict]:
    origin = systems.start_origin(ctx.procs, folder, ctx.load_cpus)
    config = _strait_config(folder, origin)
    started = {"strait": systems.start_strait(ctx.procs, ctx.strait_bin, folder, ctx.gateway_cpus,
                                              config=config),
               "nginx": systems.start_nginx_proxy(ctx.procs, folder, ctx.gateway_cpus, origin),
               "strait-default": systems.start_strait(ctx.procs, ctx.strait_bin, folder, ctx.gateway_cpus,
                                                      name="strait-default", config=config,
                                                      extra_env={"STRAIT_PROXY_ACCESS_LOG": "logs/access.log"}),
               "nginx-default": systems.start_nginx_proxy(ctx.procs, folder, ctx.gateway_cpus, origin,
                                                          name="nginx-default", access_log=True)}
    unavailable = {}
    envoy_bin, reason = systems.envoy_binary(ctx.bench_dir)
    if envoy_bin:
        try:
            started["envoy"] = systems.start_envoy(ctx.procs, folder, ctx.gateway_cpus, origin, envoy_bin)
        except RuntimeError as error:
            unavailable["envoy"] = f"Envoy did not start: {str(error)[-300:]}"
    else:
        unavailable["envoy"] = reason
    started["direct"] = origin
    for name, system in started.items():
        code, body = request(system.h1_port, "GET", "/", timeout=5)
        if code != 200 or body != systems.ORIGIN_BODY.encode():
            raise RuntimeError(f"{name} answered {code} {body[:100]!r} instead of the origin's body")
    return started, unavailable


def _contender(ctx: RunContext, system: systems.System, protocol: str, folder: Path, duration: int):
    port = system.h1_port if protocol == "h1" else system.h2_port

    def load(tag: str) -> dict:
        return loadgen.run(loadgen.Load(port=port, protocol=protocol, duration_s=duration,
                                        cpus=ctx.load_cpus, work_dir=folder), system.pid, tag)
    return load


def _measure_protocol(ctx: RunContext, started: dict, protocol: str, folder: Path) -> dict:
    warmups = {name: _contender(ctx, s, protocol, folder, ctx.timing.warmup_s) for name, s in started.items()}
    for name, warm in warmups.items():
        warm(f"{protocol}-warmup-{name}")
    contenders = {name: _contender(ctx, s, protocol, folder, ctx.timing.duration_s)
                  for name, s in started.items()}
    rounds = run_rounds(ctx, contenders, ctx.timing.rounds, f"{NAME} {protocol}")
    ratios = {}
    for ours, other in PAIRS:
        if ours in started and other in started:
            ratios[f"{ours}/{other}"] = {
                "rps": stats.paired_ratios(rounds, ours, other, "rps"),
                "p99": stats.paired_ratios(rounds, ours, other, "p99_us"),
                "cpu_per_request": stats.paired_ratios(rounds, ours, other, "cpu_us_per_request"),
            }
    return {"rounds": rounds, "ratios": ratios,
            "summary": {name: summarize_contender(rounds, name) for name in started}}


def run(ctx: RunContext) -> dict:
    folder = ctx.scenario_work(NAME)
    started, unavailable = _start_all(ctx, folder)
    result = {"systems": list(started), "unavailable": unavailable, "protocols": {},
              "load": {"h1": f"wrk -t{loadgen.load_threads()} -c32",
                       "h2": f"h2load -t{loadgen.load_threads()} -c32 -m10"},
              "duration_s": ctx.timing.duration_s, "rounds": ctx.timing.rounds}
    try:
        for protocol in PROTOCOLS:
            result["protocols"][protocol] = _measure_protocol(ctx, started, protocol, folder)
    finally:
        ctx.procs.stop_all()
    return result


# ---------------------------------------------------------------- report

def _system_rows(data: dict) -> list[list]:
    rows = []
    for name, summary in data["summary"].items():
        rps, cpu = summary["rps"], summary["cpu_us_per_request"]
        rows.append([f"**{name}**" if name.startswith("strait") else name,
                     fmt(rps["mean"]), fmt(rps["median"]), fmt(rps["stdev"]),
                     f"{fmt(rps['min'])} – {fmt(rps['max'])}",
                     *(fmt(summary[key]["median"]) for key in ("p50_us", "p90_us", "p99_us", "p99_9_us")),
                     fmt(cpu["mean"], 1),
                     *(fmt(summary.get(key, {}).get("mean"), digits)
                       for key, digits in (("user_us_per_request", 2), ("system_us_per_request", 2),
                                           ("sleeps_per_request", 3))),
                     percent(summary.get("gateway_core_busy", {}).get("mean")),
                     fmt((summary["peak_rss_kib"] or 0) / 1024, 1) if summary["peak_rss_kib"] else "–",
                     summary["errors"] + summary["non_2xx"]])
    return rows


def _ratio_rows(data: dict) -> list[list]:
    rows = []
    for pair, ratios in data["ratios"].items():
        rps, p99, cpu = ratios["rps"], ratios["p99"], ratios["cpu_per_request"]
        rows.append([pair, fmt(rps["mean"], 3), f"{fmt(rps['min'], 3)} – {fmt(rps['max'], 3)}",
                     fmt(p99["mean"], 3), fmt(cpu["mean"], 3)])
    return rows


def _protocol_markdown(protocol: str, data: dict, plot_names: dict) -> str:
    header = ["system", "RPS mean", "RPS median", "RPS stdev", "RPS min – max", "p50 µs", "p90 µs",
              "p99 µs", "p99.9 µs", "gateway CPU µs/req", "user µs/req", "system µs/req", "sleeps/req",
              "gateway core busy", "peak RSS MiB", "errors"]
    text = f"#### {PROTOCOLS[protocol]}\n\n" + table(header, _system_rows(data))
    text += ("\n`strait` and `nginx` are stripped (no access log); `strait-default` and `nginx-default` "
             "run as configured by default (Strait: its access log and Kong's headers, as Kong ships; "
             "nginx: an access log in Kong's format, `buffer=64k`), the figures a user gets. "
             "Latency percentiles are the median over rounds; `direct` is the load generator "
             "straight to the origin (the ceiling of this layout, no gateway CPU). \"Gateway core busy\" "
             "is the gateway's CPU time over the sample's length: near 100% means the gateway's core "
             "limited the throughput; well below means the load-generator core did, and CPU per "
             "request is the fairer comparison. User and system µs split the CPU per request "
             "(utime and stime); sleeps/req are the gateway threads' voluntary context switches "
             "per request (a worker that found nothing to do and waited in epoll_wait).\n\n")
    text += "Ratios, computed pair by pair within each round (mean, and the range over rounds):\n\n"
    text += table(["pair", "RPS ratio", "RPS ratio range", "p99 ratio (lower is better)",
                   "CPU/req ratio (lower is better)"], _ratio_rows(data))
    for key in ("cdf", "rps"):
        if plot_names.get(key):
            text += f"\n![{protocol} {key}](IMG/{plot_names[key]})\n"
    return text + "\n"


def _plots(result: dict, plot_dir: Path) -> tuple[dict, list[Path]]:
    names, written = {}, []
    groups = {}
    for protocol, data in result["protocols"].items():
        curves = {name: s["cdf_us"] for name, s in data["summary"].items() if s["cdf_us"]}
        path = plots.latency_cdf(curves, f"proxy-baseline {PROTOCOLS[protocol]}: latency CDF",
                                 plot_dir / f"lab-proxy-baseline-cdf-{protocol}.png")
        names.setdefault(protocol, {})["cdf"] = path.name if path else None
        written += [path] if path else []
        groups[PROTOCOLS[protocol]] = {name: [s["rps"] for s in good_samples(data["rounds"], name)]
                                       for name in data["summary"]}
    path = plots.bars_with_spread(groups, "requests / s", "proxy-baseline: RPS per round (bar = mean, "
                                  "whisker = min..max)", plot_dir / "lab-proxy-baseline-rps.png")
    if path:
        written.append(path)
        last = list(result["protocols"])[-1]
        names[last]["rps"] = path.name
    return names, written


# The layout is valid for RPS ratios only where the load generator and origin could go much
# faster than any gateway: `direct` (the same load straight to the origin) at least this many
# times the fastest gateway's median RPS, in the same run.
LAYOUT_HEADROOM = 1.5
# CPU per request against nginx, the headline per protocol (issue 10's targets).
CPU_TARGETS = {"h1": 1.0, "h2": 0.85}


def layout_check(data: dict) -> tuple[float | None, str]:
    """(direct's median RPS over the fastest gateway's, which gateway): None without direct."""
    summary = data.get("summary", {})
    direct = (summary.get("direct") or {}).get("rps", {}).get("median")
    gateways = {name: (summary.get(name) or {}).get("rps", {}).get("median") for name in GATEWAYS}
    gateways = {name: rps for name, rps in gateways.items() if rps}
    if not direct or not gateways:
        return None, ""
    fastest = max(gateways, key=gateways.get)
    return direct / gateways[fastest], fastest


def layout_problem(data: dict) -> str | None:
    """Why this protocol's RPS ratios cannot be judged in this run, or None when they can
    (or when there is no `direct` to tell)."""
    headroom, fastest = layout_check(data)
    if headroom is None or headroom >= LAYOUT_HEADROOM:
        return None
    if headroom < 1.0:
        # Slower than a gateway, direct is no ceiling: over HTTP/2, h2load speaks h2c to
        # the origin directly, which costs that core more than the gateways' HTTP/1.1.
        return (f"layout not verified: direct reached {headroom:.2f}x the RPS of the fastest gateway "
                f"({fastest}); slower than a gateway, it is no ceiling for this protocol. Compare "
                "gateway CPU µs per request")
    return (f"layout invalid for RPS ratios: direct reached only {headroom:.2f}x the RPS of the fastest "
            f"gateway ({fastest}), short of {LAYOUT_HEADROOM}x, so the load generator and origin's core "
            "may have held the gateways back and RPS ratios are compressed toward 1. Compare gateway "
            "CPU µs per request")


def _goals(result: dict) -> list[Goal]:
    goals = []
    invalid = {}
    for protocol, data in result["protocols"].items():
        headroom, fastest = layout_check(data)
        label = f"{PROTOCOLS[protocol].split(' ')[0]} layout: load core not the limit"
        target = f"direct >= {LAYOUT_HEADROOM}x the fastest gateway's RPS"
        problem = layout_problem(data)
        if problem:
            invalid[protocol] = problem
        if headroom is None:
            goals.append(Goal(label, target, "not measured", None, "no direct or no gateway sample",
                              kind="layout"))
        elif headroom < 1.0:
            goals.append(Goal(label, target, f"{headroom:.2f}x ({fastest}): direct is no ceiling here",
                              None, kind="layout"))
        else:
            goals.append(Goal(label, target, f"{headroom:.2f}x ({fastest})", headroom >= LAYOUT_HEADROOM,
                              kind="layout"))
    for protocol, bound in CPU_TARGETS.items():
        for pair, what in (("strait/nginx", ""), ("strait-default/nginx-default", ", default configurations")):
            ratio = result["protocols"].get(protocol, {}).get("ratios", {}).get(pair)
            if pair != "strait/nginx" and ratio is None:
                continue  # a result from before the default rows
            label = f"{PROTOCOLS[protocol].split(' ')[0]} CPU per request vs nginx{what}"
            target = f"<= {bound:.2f}x nginx's"
            if not ratio or ratio["cpu_per_request"]["mean"] is None:
                goals.append(Goal(label, target, "not measured", None))
                continue
            cpu = ratio["cpu_per_request"]
            goals.append(Goal(label, target, f"{cpu['mean']:.3f}x (rounds {cpu['min']:.3f}–{cpu['max']:.3f})",
                              cpu["mean"] <= bound))
    wanted = [("h1", "nginx", 1.0, ">="), ("h1", "envoy", 1.0, ">"), ("h2", "nginx", 1.0, ">"),
              ("h2", "envoy", 1.0, ">")]
    for protocol, other, bound, op in wanted:
        ratio = result["protocols"].get(protocol, {}).get("ratios", {}).get(f"strait/{other}")
        target = f"{op} {bound:.1f}x {other}" if op == ">=" else f"ahead of {other} (> 1.0x)"
        label = f"{PROTOCOLS[protocol].split(' ')[0]} RPS vs {other}"
        if not ratio or ratio["rps"]["mean"] is None:
            note = result["unavailable"].get(other, "")
            goals.append(Goal(label, target, "not measured", None, note))
            continue
        value = ratio["rps"]["mean"]
        met = value >= bound if op == ">=" else value > bound
        measured = f"{value:.3f}x (rounds {ratio['rps']['min']:.3f}–{ratio['rps']['max']:.3f})"
        if protocol in invalid:
            # Not a verdict: the layout could not show it. The measured ratio stays visible.
            goals.append(Goal(label, target, measured, None, invalid[protocol], invalid=True))
        else:
            goals.append(Goal(label, target, measured, met))
    return goals


def _comparisons(result: dict) -> list[Goal]:
    """Secondary measures where Strait trails a competitor (lower is better for both)."""
    found = []
    for protocol, data in result["protocols"].items():
        for pair, ratios in data["ratios"].items():
            other = pair.split("/")[1]
            for key, what in (("p99", "p99 latency"), ("cpu_per_request", "gateway CPU per request")):
                if key == "cpu_per_request" and other in ("nginx", "nginx-default"):
                    continue  # a goal of its own (CPU_TARGETS)
                value = ratios[key]["mean"]
                if value is not None:
                    found.append(Goal(f"{PROTOCOLS[protocol].split(' ')[0]} {what} vs {other}",
                                      f"<= {other}'s", f"{value:.2f}x {other}'s", value <= 1.0,
                                      kind="comparison"))
    return found


def render(result: dict, plot_dir: Path) -> Rendered:
    names, written = _plots(result, plot_dir)
    text = (f"Load: {result['load']['h1']} for HTTP/1.1, {result['load']['h2']} for HTTP/2; "
            f"{result['duration_s']} s per sample, {result['rounds']} interleaved rounds "
            f"(order rotated each round). Systems: {', '.join(result['systems'])}.\n\n")
    for name, reason in result["unavailable"].items():
        text += f"**{name} unavailable**: {reason}\n\n"
    for protocol, data in result["protocols"].items():
        problem = layout_problem(data)
        if problem:
            text += f"**{PROTOCOLS[protocol].split(' ')[0]}: {problem}** (RPS goals marked invalid).\n\n"
        text += _protocol_markdown(protocol, data, names.get(protocol, {}))
    return Rendered(text, written, _goals(result) + _comparisons(result))
