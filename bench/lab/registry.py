"""Scenario registry: name -> scenario, found by dropping a file in a folder.

Two kinds of scenario are picked up:

1. A Python module in `bench/lab/scenarios/` (built in) or `bench/scenarios/` (added by
   other issues), defining

       NAME = "my-scenario"                  # what `bench/run my-scenario` calls it
       TITLE = "My scenario"                 # heading in the report
       def run(ctx: RunContext) -> dict      # JSON-serialisable result
       def render(result: dict, plot_dir: Path) -> Rendered   # Markdown, PNGs, goals

   `ctx.procs.start(...)` starts (and later stops) processes; `ctx.gateway_cpus` /
   `ctx.load_cpus` are the cores; `ctx.timing` says how long to load.

2. An executable file `bench/scenarios/<name>` or `bench/scenarios/<name>.sh`, run with
   STRAIT_BIN, BENCH_OUT (a folder), BENCH_QUICK (0/1), BENCH_GATEWAY_CPUS,
   BENCH_LOAD_CPUS, BENCH_DURATION_S, BENCH_ROUNDS in its environment. It writes
   `$BENCH_OUT/result.json`, and may write `$BENCH_OUT/report.md` (a Markdown fragment;
   `IMG/x.png` links to `$BENCH_OUT/x.png`) and PNGs. It must stop what it starts.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from .context import BENCH_DIR, RunContext

BUILTIN_DIR = Path(__file__).resolve().parent / "scenarios"
EXTERNAL_DIR = BENCH_DIR / "scenarios"


@dataclass
class Goal:
    """One target the report tracks; `met` is None when it could not be measured.

    kind "goal" rows go to the goals table; kind "comparison" rows (Strait vs another
    system on a secondary measure) appear only under "where Strait loses" when not met;
    kind "layout" rows (whether the run's layout could judge a goal) go to the table and,
    when not met, to a line of their own."""

    goal: str
    target: str
    measured: str
    met: bool | None
    note: str = ""
    kind: str = "goal"
    # The run could not judge it (e.g. a layout whose load core was the limit): shown as
    # "invalid layout", never as met or missed.
    invalid: bool = False


@dataclass
class Rendered:
    """A scenario's part of the report."""

    markdown: str
    plots: list[Path] = field(default_factory=list)
    goals: list[Goal] = field(default_factory=list)


@dataclass
class Scenario:
    name: str
    title: str
    source: Path
    module: ModuleType | None = None

    def run(self, ctx: RunContext) -> dict:
        if self.module:
            return self.module.run(ctx)
        return _run_executable(self, ctx)

    def render(self, result: dict, plot_dir: Path) -> Rendered:
        if self.module:
            return self.module.render(result, plot_dir)
        return _render_executable(result, plot_dir)


def _load_module(path: Path) -> ModuleType:
    package = "lab.scenarios" if path.parent == BUILTIN_DIR else "bench_scenarios"
    spec = importlib.util.spec_from_file_location(f"{package}.{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def discover() -> dict[str, Scenario]:
    found: dict[str, Scenario] = {}
    for folder in (BUILTIN_DIR, EXTERNAL_DIR):
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            scenario = _scenario_from(path)
            if scenario and scenario.name not in found:
                found[scenario.name] = scenario
    return found


def _scenario_from(path: Path) -> Scenario | None:
    if path.name.startswith(("_", ".")):
        return None
    if path.suffix == ".py":
        module = _load_module(path)
        name = getattr(module, "NAME", path.stem.replace("_", "-"))
        return Scenario(name, getattr(module, "TITLE", name), path, module)
    if path.is_file() and os.access(path, os.X_OK) and path.suffix in ("", ".sh"):
        return Scenario(path.stem, path.stem, path)
    return None


def _run_executable(scenario: Scenario, ctx: RunContext) -> dict:
    out = ctx.scenario_work(scenario.name) / "out"
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, STRAIT_BIN=str(ctx.strait_bin), BENCH_OUT=str(out),
               BENCH_QUICK="1" if ctx.quick else "0", BENCH_GATEWAY_CPUS=ctx.gateway_cpus,
               BENCH_LOAD_CPUS=ctx.load_cpus, BENCH_DURATION_S=str(ctx.timing.duration_s),
               BENCH_ROUNDS=str(ctx.timing.rounds))
    subprocess.run([str(scenario.source)], env=env, check=True, timeout=3600)
    result = json.loads((out / "result.json").read_text())
    report = out / "report.md"
    return {"result": result, "report_md": report.read_text() if report.exists() else "",
            "out_dir": str(out)}


def _render_executable(result: dict, plot_dir: Path) -> Rendered:
    plots = []
    out = Path(result.get("out_dir", ""))
    for png in sorted(out.glob("*.png")) if out.is_dir() else []:
        target = plot_dir / png.name
        target.write_bytes(png.read_bytes())
        plots.append(target)
    markdown = result.get("report_md") or "```json\n" + json.dumps(result["result"], indent=1) + "\n```\n"
    return Rendered(markdown, plots)
