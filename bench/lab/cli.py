"""`bench/run` after setup and build: run scenarios, write results.json, report.md and
PNGs to bench/results/<timestamp>/, print the summary, and (full runs) update the
performance-lab block of docs/benchmarks.md."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import signal
import sys
import traceback
from pathlib import Path

from . import plots, report
from .context import BENCH_DIR, REPO_DIR, RunContext, Timing, load_average, run_metadata
from .registry import Rendered, Scenario, discover
from .systems import tool_versions

DEFAULT_SCENARIOS = ("proxy-baseline", "config-push", "many-routes", "memory")
DOCS = REPO_DIR / "docs" / "benchmarks.md"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/run", description="Strait performance lab.")
    parser.add_argument("scenarios", nargs="*",
                        help=f"default: {' '.join(DEFAULT_SCENARIOS)}; 'all' adds those in bench/scenarios/")
    parser.add_argument("--quick", action="store_true", help="short loads, 2 rounds (smoke test, CI)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds per scenario")
    parser.add_argument("--duration", type=int, help="seconds per load sample")
    parser.add_argument("--out", type=Path, help="results folder (default bench/results/<timestamp>)")
    parser.add_argument("--report-to", type=Path,
                        help="Markdown file whose performance-lab block to update "
                             "(default: docs/benchmarks.md on full runs, nothing with --quick)")
    parser.add_argument("--no-docs", action="store_true", help="never touch docs/")
    parser.add_argument("--render", type=Path, metavar="RESULTS_DIR",
                        help="re-render report.md and plots from RESULTS_DIR/results.json, run nothing")
    parser.add_argument("--list", action="store_true", help="list scenarios and exit")
    parser.add_argument("--strait-bin", type=Path, default=REPO_DIR / "target" / "dist" / "strait")
    parser.add_argument("--command", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    caller = Path(os.environ.get("STRAIT_BENCH_CALLER_CWD", "."))
    for name in ("out", "report_to", "render", "strait_bin"):
        value = getattr(args, name)
        if value is not None and not value.is_absolute():
            setattr(args, name, (caller / value).resolve())
    return args


def _timing(args: argparse.Namespace) -> Timing:
    timing = Timing.quick() if args.quick else Timing()
    if args.rounds:
        timing.rounds = args.rounds
    if args.duration:
        timing.duration_s = args.duration
        timing.push_load_s = max(args.duration * 2, 4)
    return timing


def _select(args: argparse.Namespace, known: dict[str, Scenario]) -> list[Scenario]:
    names = args.scenarios or list(DEFAULT_SCENARIOS)
    if names == ["all"]:
        names = list(dict.fromkeys([*DEFAULT_SCENARIOS, *known]))
    unknown = [name for name in names if name not in known]
    if unknown:
        sys.exit(f"unknown scenario(s): {', '.join(unknown)}; known: {', '.join(known)}")
    return [known[name] for name in names]


def _on_signal(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def run_scenarios(ctx: RunContext, chosen: list[Scenario], results: dict) -> None:
    for scenario in chosen:
        ctx.log(f"scenario {scenario.name}: start")
        try:
            results["scenarios"][scenario.name] = scenario.run(ctx)
        except KeyboardInterrupt:
            results["scenarios"][scenario.name] = {"error": "interrupted"}
            raise
        except Exception as error:  # one broken scenario must not lose the others
            ctx.log(f"scenario {scenario.name} failed: {error}")
            results["scenarios"][scenario.name] = {"error": str(error),
                                                   "traceback": traceback.format_exc()}
        finally:
            ctx.procs.stop_all()
            _save(ctx.out_dir, results)
        ctx.log(f"scenario {scenario.name}: done")


def _save(out_dir: Path, results: dict) -> None:
    (out_dir / "results.json").write_text(json.dumps(results, indent=1, default=str))


def render_all(out_dir: Path, results: dict, known: dict[str, Scenario]) -> tuple[dict, list[Path]]:
    blocks, written = {}, []
    meta = results["meta"]
    for name, result in results["scenarios"].items():
        scenario = known.get(name)
        if "error" in result or scenario is None:
            error = result.get("error", "scenario not found")
            rendered = Rendered(f"**The scenario failed**: `{error}` (see results.json and work/ logs).\n")
        else:
            rendered = scenario.render(result, out_dir)
        written += rendered.plots
        blocks[name] = report.scenario_block(name, scenario.title if scenario else name, meta, rendered)
    return blocks, written


def _cleanup_work(ctx: RunContext) -> None:
    """Drop the bulky parts of work/ (LMDB prefixes, generated configs); keep the logs."""
    for prefix in ctx.work_dir.rglob("*-prefix"):
        shutil.rmtree(prefix, ignore_errors=True)
    for generated in [*ctx.work_dir.rglob("*.json"), *ctx.work_dir.rglob("*.targets")]:
        if generated.stat().st_size > 200_000:
            generated.unlink()


def finish(out_dir: Path, results: dict, known: dict, report_to: Path | None) -> None:
    blocks, written = render_all(out_dir, results, known)
    path = report.write_run_report(out_dir, results["meta"], blocks)
    if report_to:
        good = {name: block for name, block in blocks.items() if "error" not in results["scenarios"][name]}
        report.update_docs(report_to, results["meta"], good, written)
    print(report.header_markdown(results["meta"]))
    print(report.goals_markdown(blocks))
    if not plots.available():
        print("(matplotlib unavailable: no plots)")
    print(f"Report: {path}\nJSON:   {out_dir / 'results.json'}")
    if report_to:
        print(f"Docs:   {report_to} (performance-lab block) and {report_to.parent / 'img'}/")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    known = discover()
    if args.list:
        for name, scenario in known.items():
            print(f"{name:20} {scenario.title}  ({scenario.source.relative_to(REPO_DIR)})")
        return 0
    report_to = None if args.no_docs else (args.report_to or (None if args.quick else DOCS))
    if args.render:
        results = json.loads((args.render / "results.json").read_text())
        finish(args.render, results, known, report_to)
        return 0
    chosen = _select(args, known)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir = args.out or BENCH_DIR / "results" / stamp
    command = args.command or "bench/run " + " ".join(sys.argv[1:])
    ctx = RunContext(out_dir, args.strait_bin, args.quick, _timing(args), command,
                     gateway_cpus=os.environ.get("STRAIT_BENCH_GATEWAY_CPUS", "0"),
                     load_cpus=os.environ.get("STRAIT_BENCH_LOAD_CPUS", "1"))
    signal.signal(signal.SIGTERM, _on_signal)
    results = {"meta": run_metadata(ctx, tool_versions(BENCH_DIR)), "scenarios": {}}
    if results["meta"]["load_average_at_start"] > 0.5:
        ctx.log(f"warning: load average {results['meta']['load_average_at_start']:.2f} before the run: "
                "other processes are using the CPU, expect noisy numbers")
    try:
        run_scenarios(ctx, chosen, results)
    except KeyboardInterrupt:
        ctx.log("interrupted: stopping everything")
        return 130
    finally:
        ctx.procs.stop_all()
        _cleanup_work(ctx)
    results["meta"]["load_average_at_end"] = load_average()
    _save(out_dir, results)
    finish(out_dir, results, known, report_to)
    return 0
