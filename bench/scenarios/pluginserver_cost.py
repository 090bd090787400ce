"""pluginserver-cost: what one plugin-server plugin costs per request.

Contenders on the same 100 routes (one service, the origin): a Strait node without plugins;
one whose every route has a Go plugin on go-pdk (bench/plugins/go-seen, built here against
go-pdk v0.11.0 from the Go module proxy) that reads one request header and sets one upstream
header in `access`; one with a Python plugin on PyPI's kong-pdk doing the same; the same line
as a Lua `pre-function` (lua-cost's); and `direct` (wrk straight to the origin). The plugin
servers are the node's children, on the gateway's core: CPU per request counts the node and
its servers (the lab measures the process tree). wrk sends every request to a random route, in
interleaved rounds; the layout is valid when direct >= 1.5x the gateway without plugins.

Reported: RPS, CPU µs per request and p99 for each, and the ratios to the node without
plugins and to the pre-function, computed within each round. Issue 61 asks the plugin-server
path to be measured and explained (Kong's external plugins cost several times a Lua plugin).

Run alone: `bench/run pluginserver-cost` (`--quick`: short loads). Needs Go and the venv's
kong-pdk (scripts/test.sh installs both; STRAIT_KONG_PDK_PYTHON names another Python).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from lab import stats, systems
from lab.configgen import ConfigSpec, write_config
from lab.context import RunContext
from lab.registry import Rendered
from lab.report import CONTENDER_HEADER, contender_row, layout_goal, ratio_table, table
from lab.rounds import summarize_contender, wrk_rounds

NAME = "pluginserver-cost"
TITLE = "pluginserver-cost: one Go / Python plugin-server plugin reading one header and setting one, 100 routes"
ROUTES = 100
CONTENDERS = ("go-plugin", "python-plugin", "pre-function", "without-plugins", "direct")
CODE = "kong.service.request.set_header('x-seen', kong.request.get_header('accept') or 'none')"
PY_SEEN = '''import kong_pdk.pdk.kong as kong

Schema = ()
version = "0.1.0"
priority = 1000


class Plugin(object):
    def __init__(self, config):
        self.config = config

    def access(self, kong: kong.kong):
        accept, err = kong.request.get_header("accept")
        kong.service.request.set_header("x-seen", accept or "none")


if __name__ == "__main__":
    from kong_pdk.cli import start_dedicated_server
    start_dedicated_server("py-seen", Plugin, version, priority, Schema)
'''

BENCH = Path(__file__).resolve().parent.parent
REPO = BENCH.parent


def _go_plugin(folder: Path) -> Path:
    """bench/plugins/go-seen built in a scratch copy (go-pdk from the Go module proxy)."""
    build = folder / "go-seen-build"
    build.mkdir(parents=True, exist_ok=True)
    for name in ("main.go", "go.mod"):
        (build / name).write_text((BENCH / "plugins" / "go-seen" / name).read_text())
    binary = folder / "go-seen"
    env = {**os.environ, "CGO_ENABLED": "0"}
    subprocess.run(["go", "mod", "tidy"], cwd=build, env=env, check=True, capture_output=True)
    subprocess.run(["go", "build", "-trimpath", "-o", str(binary), "."], cwd=build, env=env, check=True,
                   capture_output=True)
    return binary


def _python() -> str:
    python = os.environ.get("STRAIT_KONG_PDK_PYTHON") or str(REPO / "target" / "tools" / "venv" / "bin" / "python")
    if subprocess.run([python, "-c", "import kong_pdk"], capture_output=True).returncode != 0:
        raise RuntimeError(f"{python} has no kong_pdk: run scripts/test.sh (it installs it) or set "
                           "STRAIT_KONG_PDK_PYTHON")
    return python


def _server_env(name: str, plugin: str, socket: Path, start: str, query: str) -> dict:
    key = name.upper()
    return {"STRAIT_PLUGINS": f"bundled,{plugin}", "STRAIT_PLUGINSERVER_NAMES": name,
            f"STRAIT_PLUGINSERVER_{key}_SOCKET": str(socket), f"STRAIT_PLUGINSERVER_{key}_START_CMD": start,
            f"STRAIT_PLUGINSERVER_{key}_QUERY_CMD": query}


def _check(name: str, system: systems.System, port: int) -> None:
    import time
    from lab.configgen import route_path
    from lab.strait_admin import request
    deadline = time.monotonic() + 30
    while True:
        code, body = request(port, "GET", route_path(7), None, {}, timeout=5)
        if code == 200 and body == systems.ORIGIN_BODY.encode():
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} answered {code} {body[:200]!r}")
        time.sleep(0.2)


def run(ctx: RunContext) -> dict:
    folder = ctx.scenario_work(NAME)
    origin = systems.start_origin(ctx.procs, folder, ctx.load_cpus)
    url = f"http://127.0.0.1:{origin.h1_port}"
    go_binary = _go_plugin(folder)
    script = folder / "py-seen.py"
    script.write_text(PY_SEEN)
    python = _python()
    configs = {
        "go-plugin": write_config(ConfigSpec(routes=ROUTES, service_url=url, extra_plugins=[
            {"name": "go-seen", "config": {}}]), folder / "go-plugin.json"),
        "python-plugin": write_config(ConfigSpec(routes=ROUTES, service_url=url, extra_plugins=[
            {"name": "py-seen", "config": {}}]), folder / "python-plugin.json"),
        "pre-function": write_config(ConfigSpec(routes=ROUTES, service_url=url, extra_plugins=[
            {"name": "pre-function", "config": {"access": [CODE]}}]), folder / "pre-function.json"),
        "without-plugins": write_config(ConfigSpec(routes=ROUTES, service_url=url), folder / "without-plugins.json"),
    }
    envs = {
        "go-plugin": _server_env("go", "go-seen", folder / "go-seen.socket",
                                 f"{go_binary} -kong-prefix {folder}", f"{go_binary} -dump"),
        "python-plugin": _server_env("py", "py-seen", folder / "py-seen.sock",
                                     f"{python} {script} --kong-prefix {folder} --socket-name py-seen.sock",
                                     f"{python} {script} --dump"),
    }
    try:
        nodes = {
            name: systems.start_strait(ctx.procs, ctx.strait_bin, folder, ctx.gateway_cpus, name=f"strait-{name}",
                                       config=config.path, extra_env=envs.get(name))
            for name, config in configs.items()
        }
        for name, node in nodes.items():
            _check(name, node, node.h1_port)
        rounds = wrk_rounds(ctx, {**nodes, "direct": origin}, configs["without-plugins"].targets, folder, NAME)
    finally:
        ctx.procs.stop_all()
    ratios = {}
    for name in ("go-plugin", "python-plugin", "pre-function"):
        ratios[f"{name}/without"] = stats.paired_ratio_set(rounds, name, "without-plugins")
    for name in ("go-plugin", "python-plugin"):
        ratios[f"{name}/pre-function"] = stats.paired_ratio_set(rounds, name, "pre-function",
                                                                ("rps", "cpu_us_per_request"))
    ratios["direct/without"] = {"rps": stats.paired_ratios(rounds, "direct", "without-plugins", "rps")}
    return {"rounds": rounds, "ratios": ratios,
            "summary": {name: summarize_contender(rounds, name) for name in CONTENDERS},
            "load": "wrk -t1 -c32, random route per request",
            "duration_s": ctx.timing.duration_s, "rounds_count": ctx.timing.rounds}


# ---------------------------------------------------------------- report

def render(result: dict, plot_dir: Path) -> Rendered:
    rows = [contender_row(name, result["summary"][name]) for name in CONTENDERS]
    text = (f"Load: {result['load']}; {result['duration_s']} s per sample, {result['rounds_count']} interleaved "
            "rounds. Every node: one worker on the gateway core, its plugin server there too, 100 routes on one "
            "service (the origin). CPU per request counts the node and its plugin server.\n\n")
    # The gateway's CPU here is the node's and its plugin server's (the process tree).
    text += table(CONTENDER_HEADER, rows)
    text += "\nRatios, computed within each round (mean, and the range over rounds):\n\n"
    text += ratio_table(result["ratios"])
    goals = layout_goal("pluginserver-cost", result["ratios"]["direct/without"]["rps"])
    return Rendered(text, [], goals)
