"""wasm-cost: what one proxy-wasm filter costs per request.

Contenders on the same 100 routes (one service, the origin): a Strait node without plugins;
two whose service has a filter chain with one proxy-wasm filter reading one request header and
setting one upstream header: `wasm-rust` (bench/filters/rust-seen, the proxy-wasm Rust SDK,
built here for wasm32-wasip1) and `wasm-go` (tests/filters/strait-test-filter, the proxy-wasm
Go SDK with standard Go's wasip1 target, configured to do the same); the same line as a Lua
`pre-function` (lua-cost's); and `direct` (wrk straight to the origin). wrk sends every request to a random route, in
interleaved rounds; the layout is valid when direct >= 1.5x the gateway without plugins.

Reported: RPS, CPU µs per request and p99 for each, and the ratios to the node without
plugins and to the pre-function, computed within each round. Issue 61's goal: the filter at
>= 0.85 of the node without plugins' throughput.

Run alone: `bench/run wasm-cost` (`--quick`: short loads). Needs Go (scripts/test.sh builds
the Go filter into target/tools/filters; without it this scenario builds it) and Rust's
wasm32-wasip1 target (`rustup target add wasm32-wasip1`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from lab import stats, systems
from lab.configgen import ConfigSpec, write_config
from lab.context import RunContext
from lab.registry import Rendered
from lab.report import CONTENDER_HEADER, contender_row, layout_goal, ratio_table, table
from lab.rounds import summarize_contender, wrk_rounds

NAME = "wasm-cost"
TITLE = "wasm-cost: one proxy-wasm filter (Go SDK) reading one header and setting one, 100 routes"
ROUTES = 100
CONTENDERS = ("wasm-rust", "wasm-go", "pre-function", "without-plugins", "wasm-rust-default",
              "without-plugins-default", "direct")
FILTERS = ("wasm-rust", "wasm-go")
# Kong's default configuration writes an access log; the other nodes run without one, as the
# lab's stripped rows do.
DEFAULT_ENV = {"STRAIT_PROXY_ACCESS_LOG": "logs/access.log"}
CODE = "kong.service.request.set_header('x-seen', kong.request.get_header('accept') or 'none')"
FILTER = "strait-test-filter"

BENCH = Path(__file__).resolve().parent.parent
REPO = BENCH.parent
SOURCE = REPO / "tests" / "filters" / FILTER


def _rust_filter(folder: Path) -> Path:
    """bench/filters/rust-seen built for wasm32-wasip1, alone in a folder."""
    source = BENCH / "filters" / "rust-seen"
    target = folder / "rust-seen-target"
    built = subprocess.run(["cargo", "build", "--release", "--target", "wasm32-wasip1"], cwd=source,
                           env={**os.environ, "CARGO_TARGET_DIR": str(target)}, capture_output=True, text=True)
    if built.returncode != 0:
        raise RuntimeError("building bench/filters/rust-seen failed (is the wasm32-wasip1 target installed? "
                           f"`rustup target add wasm32-wasip1`):\n{built.stderr[-2000:]}")
    filters = folder / "rust-filters"
    filters.mkdir(parents=True, exist_ok=True)
    shutil.copy(target / "wasm32-wasip1" / "release" / "rust_seen.wasm", filters / "rust-seen.wasm")
    return filters


def _go_filter(folder: Path) -> Path:
    """A folder with the Go filter and its meta file: scripts/test.sh's build, or one made here."""
    built = REPO / "target" / "tools" / "filters" / f"{FILTER}.wasm"
    filters = folder / "filters"
    filters.mkdir(parents=True, exist_ok=True)
    shutil.copy(SOURCE / f"{FILTER}.meta.json", filters)
    if built.exists() and built.stat().st_mtime >= (SOURCE / "main.go").stat().st_mtime:
        shutil.copy(built, filters)
        return filters
    build = folder / "filter-build"
    build.mkdir(parents=True, exist_ok=True)
    for name in ("main.go", "go.mod"):
        shutil.copy(SOURCE / name, build)
    env = {**os.environ, "GOOS": "wasip1", "GOARCH": "wasm"}
    subprocess.run(["go", "mod", "tidy"], cwd=build, check=True, capture_output=True)
    subprocess.run(["go", "build", "-buildmode=c-shared", "-trimpath", "-o", str(filters / f"{FILTER}.wasm"), "."],
                   cwd=build, env=env, check=True, capture_output=True)
    return filters


def _with_filter_chain(config_path: Path, filter_entry: dict) -> None:
    """The service's filter chain of one filter."""
    document = json.loads(config_path.read_text())
    document["services"][0]["filter_chains"] = [{"name": "seen", "filters": [filter_entry]}]
    config_path.write_text(json.dumps(document, separators=(",", ":")))


def _check(name: str, system: systems.System, port: int) -> None:
    from lab.configgen import route_path
    from lab.strait_admin import request
    code, body = request(port, "GET", route_path(7), None, {}, timeout=5)
    if code != 200 or body != systems.ORIGIN_BODY.encode():
        raise RuntimeError(f"{name} answered {code} {body[:200]!r}")


def run(ctx: RunContext) -> dict:
    folder = ctx.scenario_work(NAME)
    origin = systems.start_origin(ctx.procs, folder, ctx.load_cpus)
    url = f"http://127.0.0.1:{origin.h1_port}"
    folders = {"wasm-rust": _rust_filter(folder), "wasm-go": _go_filter(folder)}
    configs = {
        "wasm-rust": write_config(ConfigSpec(routes=ROUTES, service_url=url), folder / "wasm-rust.json"),
        "wasm-go": write_config(ConfigSpec(routes=ROUTES, service_url=url), folder / "wasm-go.json"),
        "pre-function": write_config(ConfigSpec(routes=ROUTES, service_url=url, extra_plugins=[
            {"name": "pre-function", "config": {"access": [CODE]}}]), folder / "pre-function.json"),
        "without-plugins": write_config(ConfigSpec(routes=ROUTES, service_url=url), folder / "without-plugins.json"),
    }
    # The Go filter reads `x-wasm-in` and sets `x-seen` to "seen|<it>": one read, one write.
    _with_filter_chain(configs["wasm-rust"].path, {"name": "rust-seen"})
    _with_filter_chain(configs["wasm-go"].path, {"name": FILTER, "config": {"header": "x-seen", "value": "seen"}})
    envs = {name: {"STRAIT_WASM": "on", "STRAIT_WASM_FILTERS_PATH": str(folders[name])} for name in FILTERS}
    layouts = {name: (config, envs.get(name)) for name, config in configs.items()}
    layouts["wasm-rust-default"] = (configs["wasm-rust"], {**envs["wasm-rust"], **DEFAULT_ENV})
    layouts["without-plugins-default"] = (configs["without-plugins"], DEFAULT_ENV)
    try:
        nodes = {
            name: systems.start_strait(ctx.procs, ctx.strait_bin, folder, ctx.gateway_cpus, name=f"strait-{name}",
                                       config=config.path, extra_env=env)
            for name, (config, env) in layouts.items()
        }
        for name, node in nodes.items():
            _check(name, node, node.h1_port)
        rounds = wrk_rounds(ctx, {**nodes, "direct": origin}, configs["without-plugins"].targets, folder, NAME)
    finally:
        ctx.procs.stop_all()
    ratios = {}
    for name in (*FILTERS, "pre-function"):
        ratios[f"{name}/without"] = stats.paired_ratio_set(rounds, name, "without-plugins")
    for name in FILTERS:
        ratios[f"{name}/pre-function"] = stats.paired_ratio_set(rounds, name, "pre-function",
                                                                ("rps", "cpu_us_per_request"))
    ratios["wasm-rust-default/without-default"] = stats.paired_ratio_set(rounds, "wasm-rust-default",
                                                                         "without-plugins-default")
    ratios["direct/without"] = {"rps": stats.paired_ratios(rounds, "direct", "without-plugins", "rps")}
    return {"rounds": rounds, "ratios": ratios,
            "summary": {name: summarize_contender(rounds, name) for name in CONTENDERS},
            "load": "wrk -t1 -c32, random route per request",
            "duration_s": ctx.timing.duration_s, "rounds_count": ctx.timing.rounds}


# ---------------------------------------------------------------- report

def render(result: dict, plot_dir: Path) -> Rendered:
    from lab.registry import Goal
    rows = [contender_row(name, result["summary"][name]) for name in CONTENDERS]
    text = (f"Load: {result['load']}; {result['duration_s']} s per sample, {result['rounds_count']} interleaved "
            "rounds. Every node: one worker on the gateway core, 100 routes on one service (the origin); the "
            "`-default` nodes write an access log, as Kong ships, the others run without one.\n\n")
    text += table(CONTENDER_HEADER, rows)
    text += "\nRatios, computed within each round (mean, and the range over rounds):\n\n"
    text += ratio_table(result["ratios"])
    goals = layout_goal("wasm-cost", result["ratios"]["direct/without"]["rps"])
    for name in FILTERS:
        wasm = result["ratios"][f"{name}/without"]["rps"]
        if wasm["mean"] is not None:
            goals.append(Goal(f"wasm-cost: {name} RPS / no plugin RPS", ">= 0.85", f"{wasm['mean']:.3f}",
                              wasm["mean"] >= 0.85, ""))
    return Rendered(text, [], goals)
