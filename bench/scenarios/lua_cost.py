"""lua-cost: what one Lua plugin costs per request.

Four contenders on the same 100 routes (one service, the origin): a Strait node without
plugins, one with a `pre-function` on every route that reads one request header and sets
one upstream header (issue 60's measure), one with a custom Lua plugin (a `handler.lua` +
`schema.lua` folder loaded through `lua_package_path`) doing the same in its `access`
method, the pre-function and no-plugin nodes again with an access log (Kong's default
configuration; the others run without one, as the lab's stripped rows do), and `direct` (wrk
straight to the origin). wrk sends every request to a random
route (`lua/random_route.lua`), in interleaved rounds. The gateway is alone on its core;
origin and load generator share the other, and `direct` shows whether they can go well past
what the gateway does (the layout is valid when direct >= 1.5x the gateway without plugins).

Reported: RPS, gateway CPU µs per request and p99 for each, and the with/without ratios
computed within each round. Goals (issue 60): with the pre-function, throughput >= 0.93 of
without and CPU per request <= 1.08x; the custom plugin costs the same.

Run alone: `bench/run lua-cost` (`--quick`: short loads).
"""

from __future__ import annotations

from pathlib import Path

from lab import stats, systems
from lab.configgen import ConfigSpec, route_path, write_config
from lab.context import RunContext
from lab.registry import Goal, Rendered
from lab.report import CONTENDER_HEADER, contender_row, fmt, table
from lab.rounds import summarize_contender, wrk_rounds
from lab.strait_admin import request

NAME = "lua-cost"
TITLE = "lua-cost: one Lua plugin (pre-function, a custom plugin) reading one header and setting one, 100 routes"
ROUTES = 100
CONTENDERS = ("pre-function", "custom-plugin", "without-plugins", "pre-function-default",
              "without-plugins-default", "direct")
# Kong's default configuration writes an access log; the other nodes run without one, as the
# lab's stripped rows do.
DEFAULT_ENV = {"STRAIT_PROXY_ACCESS_LOG": "logs/access.log"}

# The same work, as a pre-function and as a custom plugin.
CODE = "kong.service.request.set_header('x-seen', kong.request.get_header('accept') or 'none')"
PLUGIN = "bench-seen"
HANDLER = f"""local Seen = {{ PRIORITY = 1000, VERSION = "1.0.0" }}

function Seen:access(conf)
  {CODE}
end

return Seen
"""
SCHEMA = f"""local typedefs = require "kong.db.schema.typedefs"

return {{
  name = "{PLUGIN}",
  fields = {{
    {{ consumer = typedefs.no_consumer }},
    {{ protocols = typedefs.protocols_http }},
    {{ config = {{ type = "record", fields = {{}} }} }},
  }},
}}
"""


def _check(name: str, system: systems.System) -> None:
    code, body = request(system.h1_port, "GET", route_path(7), None, {}, timeout=5)
    if code != 200 or body != systems.ORIGIN_BODY.encode():
        raise RuntimeError(f"{name} answered {code} {body[:200]!r}")


def run(ctx: RunContext) -> dict:
    folder = ctx.scenario_work(NAME)
    origin = systems.start_origin(ctx.procs, folder, ctx.load_cpus)
    url = f"http://127.0.0.1:{origin.h1_port}"
    plugin_dir = folder / "lua" / "kong" / "plugins" / PLUGIN
    plugin_dir.mkdir(parents=True, exist_ok=True)
    (plugin_dir / "handler.lua").write_text(HANDLER)
    (plugin_dir / "schema.lua").write_text(SCHEMA)
    configs = {
        "pre-function": write_config(ConfigSpec(routes=ROUTES, service_url=url, extra_plugins=[
            {"name": "pre-function", "config": {"access": [CODE]}}]), folder / "pre-function.json"),
        "custom-plugin": write_config(ConfigSpec(routes=ROUTES, service_url=url, extra_plugins=[
            {"name": PLUGIN, "config": {}}]), folder / "custom-plugin.json"),
        "without-plugins": write_config(ConfigSpec(routes=ROUTES, service_url=url), folder / "without-plugins.json"),
    }
    custom_env = {"STRAIT_PLUGINS": f"bundled,{PLUGIN}",
                  "STRAIT_LUA_PACKAGE_PATH": f"{folder / 'lua'}/?.lua;;"}
    layouts = {name: (configs[name], custom_env if name == "custom-plugin" else None) for name in configs}
    for name in ("pre-function", "without-plugins"):
        layouts[f"{name}-default"] = (configs[name], DEFAULT_ENV)
    try:
        nodes = {
            name: systems.start_strait(ctx.procs, ctx.strait_bin, folder, ctx.gateway_cpus, name=f"strait-{name}",
                                       config=config.path, extra_env=env)
            for name, (config, env) in layouts.items()
        }
        for name, node in nodes.items():
            _check(name, node)
        rounds = wrk_rounds(ctx, {**nodes, "direct": origin}, configs["without-plugins"].targets, folder, NAME)
    finally:
        ctx.procs.stop_all()
    ratios = {
        f"{name}/without": {key: stats.paired_ratios(rounds, name, "without-plugins", key)
                            for key in ("rps", "cpu_us_per_request", "p99_us")}
        for name in ("pre-function", "custom-plugin")
    }
    ratios["pre-function-default/without-default"] = {
        key: stats.paired_ratios(rounds, "pre-function-default", "without-plugins-default", key)
        for key in ("rps", "cpu_us_per_request", "p99_us")}
    ratios["direct/without"] = {"rps": stats.paired_ratios(rounds, "direct", "without-plugins", "rps")}
    return {"rounds": rounds, "ratios": ratios,
            "summary": {name: summarize_contender(rounds, name) for name in CONTENDERS},
            "configs": {name: config.describe() for name, config in configs.items()},
            "code": CODE,
            "load": "wrk -t1 -c32, random route per request",
            "duration_s": ctx.timing.duration_s, "rounds_count": ctx.timing.rounds}


# ---------------------------------------------------------------- report

def render(result: dict, plot_dir: Path) -> Rendered:
    rows = [contender_row(name, result["summary"][name]) for name in CONTENDERS]
    text = (f"Load: {result['load']}; {result['duration_s']} s per sample, {result['rounds_count']} "
            "interleaved rounds. Every node: one worker on the gateway core, 100 routes on one service (the "
            f"origin). `pre-function` runs `{result['code']}` in access on every route; `custom-plugin` runs the "
            "same line in a custom plugin's `access` (a Kong-style folder loaded through `lua_package_path`). "
            "The `-default` nodes write an access log, as Kong ships; the others run without one. "
            "`direct` is wrk straight to the origin (no gateway).\n\n")
    text += table(CONTENDER_HEADER, rows)
    text += "\nRatios, computed within each round (mean, and the range over rounds):\n\n"
    ratio_rows = []
    pairs = [(f"{name}/without", result["ratios"][f"{name}/without"]) for name in ("pre-function", "custom-plugin")]
    default = result["ratios"].get("pre-function-default/without-default")
    if default:
        pairs.append(("pre-function-default/without-default", default))
    for label, ratios in pairs:
        ratio_rows += [[f"{label} {what}", fmt(ratios[key]["mean"], 3),
                        f"{fmt(ratios[key]['min'], 3)} – {fmt(ratios[key]['max'], 3)}"]
                       for key, what in (("rps", "RPS"), ("cpu_us_per_request", "CPU per request"),
                                         ("p99_us", "p99"))]
    direct = result["ratios"]["direct/without"]["rps"]
    ratio_rows.append(["direct/without RPS (layout check)", fmt(direct["mean"], 3),
                       f"{fmt(direct['min'], 3)} – {fmt(direct['max'], 3)}"])
    text += table(["ratio", "mean", "range"], ratio_rows)
    goals = []
    for label, ratios in pairs:
        rps, cpu = ratios["rps"]["mean"], ratios["cpu_us_per_request"]["mean"]
        if rps is not None:
            goals.append(Goal(f"lua-cost: RPS, {label}", ">= 0.93", f"{rps:.3f}", rps >= 0.93))
        if cpu is not None:
            goals.append(Goal(f"lua-cost: CPU per request, {label}", "<= 1.08", f"{cpu:.3f}", cpu <= 1.08))
    if direct["mean"] is not None:
        valid = direct["mean"] >= 1.5
        goals.append(Goal("lua-cost layout: direct RPS / gateway RPS", ">= 1.5", f"{direct['mean']:.2f}", valid,
                          "" if valid else "below 1.5 the load generator's core, not the gateway, limits the RPS",
                          kind="layout"))
    return Rendered(text, [], goals)
