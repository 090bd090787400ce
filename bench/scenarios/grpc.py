"""grpc: gRPC unary calls and bidi streams (ghz) through Strait, Envoy and direct.

The origin is the test tree's tonic server (`strait.test.Stream`, tests/src/grpc.rs) built as
`grpc-origin` and run on one thread on the load core: `Unary` echoes a message, `Ack` (bidi)
answers every message with its sequence number. Strait (1 worker) and Envoy (--concurrency 1)
proxy it over h2c on the gateway core; `direct` is ghz straight to the origin, the ceiling of
the layout. ghz (Go, `--cpus 1`) runs on the load core beside the origin.

Two loads:

- `unary`: `Unary`, 64-byte payload, ghz -c 64 over 4 connections;
- `bidi`: `Ack`, 64-byte payload, ghz -c 16 over 4 connections, each call a stream of 100
  messages, every one acknowledged by the origin; a message counts once its ack arrived (a
  call that ends OK received all 100 acks).

On a 2-core machine ghz and the origin on one core cannot outrun a gateway on the other, so
each load runs in two modes, each `duration` seconds a sample, in interleaved rounds:

- `saturated`: each gateway runs under a CPU quota of 10% of its core (CFS bandwidth, 1 ms
  every 10 ms; `lab.procs.CpuQuota`), so the gateway is the limit and `direct` (never capped)
  must go >= 1.5x faster than it for the layout to be valid. (At 15% Strait's bidi streams
  reached 1.43-1.50x of direct once its HTTP/2 writes were coalesced: too close to the load
  core's ceiling.) Messages per core = messages / gateway CPU seconds, at saturation. Latency
  here includes the quota's stalls (up to 9 ms), so only the gateways' p99 against each other
  means something;
- `paced`: no quota; the load core is the limit, every gateway carries the same load, and the
  gateway's CPU per message and the p99 of a call are compared at that pace.

Reported per system: messages/s (unary: calls; bidi: acked messages), p50/p90/p99 of a call
(bidi: the whole 100-message stream), the gateway's CPU per message and messages per core.

Goals (saturated mode): Strait's messages per core >= 2x Envoy's on both loads; >= 50,000
acked bidi messages/s per core. Without a CPU quota (no cgroup access) only the paced mode
runs and the report says the rate comparison is not valid.

Run alone: `bench/run grpc` (`--quick`: short loads, two rounds).
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from pathlib import Path

from lab import plots, stats, systems
from lab.context import REPO_DIR, RunContext
from lab.procs import CpuMeter, CpuQuota, free_port, memory_kib, running, wait_for_port
from lab.registry import Goal, Rendered
from lab.report import fmt, percent, table
from lab.rounds import good_samples, run_rounds, summarize_contender

NAME = "grpc"
TITLE = "grpc: unary and bidi streaming (ghz), Strait vs Envoy vs direct"
SERVICE = "strait.test.Stream"
PAYLOAD = base64.b64encode(b"m" * 64).decode()
STREAM_MESSAGES = 100
LOADS = {
    "unary": {"call": "Unary", "concurrency": 64, "connections": 4, "messages": 1,
              "label": "unary (ghz -c 64, 4 connections)"},
    "bidi": {"call": "Ack", "concurrency": 16, "connections": 4, "messages": STREAM_MESSAGES,
             "label": f"bidi (ghz -c 16, 4 connections, {STREAM_MESSAGES} acked messages a stream)"},
}
MODES = {
    "saturated": "each gateway under a CPU quota of {share:.0%} of its core: the gateway is the limit",
    "paced": "no quota: the load core (ghz + origin) is the limit; CPU per message and p99 at its pace",
}
QUOTA_SHARE = 0.10
GOAL_PER_CORE = 50_000
# What ghz reports for calls it cut itself when its duration is up.
END_OF_LOAD = ("the client connection is closing", "use of closed network connection")
GOAL_VS_ENVOY = 2.0
VALID_DIRECT_RATIO = 1.5


# ---------------------------------------------------------------- set-up

def _ghz_binary(bench_dir: Path) -> tuple[str | None, str]:
    path = bench_dir / ".venv" / "bin" / "ghz"
    if path.exists():
        return str(path), ""
    return None, "ghz is not installed (bench/setup.sh installs it with `go install`; see its output)"


def _origin_binary(ctx: RunContext) -> Path:
    """cargo's release `grpc-origin`, built unless the lab was told not to build (the Strait
    binary under test is `target/dist/strait`, from scripts/release-build.sh; the origin is
    a plain release build of the test crate)."""
    target_dir = Path(os.environ.get("CARGO_TARGET_DIR") or REPO_DIR / "target")
    binary = target_dir / "release" / "grpc-origin"
    if not (binary.exists() and os.environ.get("STRAIT_BENCH_NO_BUILD")):
        ctx.log(f"{NAME}: cargo build --release -p strait-e2e --bin grpc-origin")
        subprocess.run(["cargo", "build", "--release", "-p", "strait-e2e", "--bin", "grpc-origin"],
                       cwd=REPO_DIR, check=True, timeout=3600, stdout=subprocess.DEVNULL)
    return binary


def plain_proto(source: Path, target: Path) -> Path:
    """`source` without its google.api.http options and their import, which ghz would need
    on an import path; the messages and methods are unchanged."""
    text = source.read_text()
    text = re.sub(r'^import "google/api/annotations\.proto";\n', "", text, flags=re.M)
    kept, position = [], 0
    while (start := text.find("option (google.api.http)", position)) >= 0:
        kept.append(text[position:start])
        depth, index = 0, text.index("{", start)
        while True:
            depth += {"{": 1, "}": -1}.get(text[index], 0)
            if depth == 0:
                break
            index += 1
        position = text.index(";", index) + 1
    kept.append(text[position:])
    target.write_text("".join(kept))
    return target


def _strait_config(folder: Path, origin_port: int) -> Path:
    path = folder / "strait-grpc.json"
    path.write_text(json.dumps({"_format_version": "3.0", "services": [{
        "name": "stream", "url": f"grpc://127.0.0.1:{origin_port}",
        "routes": [{"name": "stream", "paths": [f"/{SERVICE}/"], "protocols": ["grpc"],
                    "strip_path": False}]}]}))
    return path


def _start_all(ctx: RunContext, folder: Path) -> tuple[dict, dict, int]:
    origin_port = free_port()
    origin = ctx.procs.start("grpc-origin", [str(_origin_binary(ctx)), f"127.0.0.1:{origin_port}"],
                             ctx.load_cpus)
    wait_for_port(origin_port, origin)
    direct = systems.System("direct", origin_port, origin_port, None)
    started = {"strait": systems.start_strait(ctx.procs, ctx.strait_bin, folder, ctx.gateway_cpus,
                                              config=_strait_config(folder, origin_port))}
    unavailable = {}
    envoy_bin, reason = systems.envoy_binary(ctx.bench_dir)
    if envoy_bin:
        try:
            started["envoy"] = systems.start_envoy(ctx.procs, folder, ctx.gateway_cpus, direct, envoy_bin,
                                                   grpc=True)
        except RuntimeError as error:
            unavailable["envoy"] = f"Envoy did not start: {str(error)[-300:]}"
    else:
        unavailable["envoy"] = reason
    started["direct"] = direct
    return started, unavailable, origin.pid


# ---------------------------------------------------------------- loads

def _ghz(ghz: str, proto: Path, port: int, load: dict, cpus: str, duration_s: float | None,
         calls: int | None = None) -> dict:
    argv = ["taskset", "-c", cpus, ghz, "--cpus", "1", "--insecure", "--proto", str(proto),
            "--call", f"{SERVICE}.{load['call']}", "-d", json.dumps({"seq": 1, "payload": PAYLOAD}),
            "-c", str(load["concurrency"]), "--connections", str(load["connections"]),
            "--format", "json"]
    if load["messages"] > 1:
        argv += ["--stream-call-count", str(load["messages"])]
    argv += ["-n", str(calls)] if calls else ["-z", f"{duration_s}s"]
    argv.append(f"127.0.0.1:{port}")
    done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=(duration_s or 10) + 60)
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(f"ghz failed ({done.returncode}): {done.stderr[-1500:]} {done.stdout[-500:]}")
    report.pop("details", None)
    report.pop("histogram", None)
    return report


def _sample(report: dict, load: dict) -> dict:
    codes = report.get("statusCodeDistribution") or {}
    ok = codes.get("OK", 0)
    # Calls still open when ghz's time is up fail on ghz's own side as it closes its
    # connections (for `direct` too); any other failure is an error the client saw.
    kinds = report.get("errorDistribution") or {}
    cut = sum(n for message, n in kinds.items() if any(mark in message for mark in END_OF_LOAD))
    errors = sum(n for code, n in codes.items() if code != "OK") - cut
    duration_s = report["total"] / 1e9
    messages = ok * load["messages"]
    points = [[p["percentage"], p["latency"] / 1000.0] for p in report.get("latencyDistribution") or []]
    sample = {"tool": "ghz", "calls": report["count"], "ok_calls": ok, "cut_at_end": cut,
              "errors": errors, "non_2xx": 0, "error_kinds": report.get("errorDistribution") or {},
              "duration_s": duration_s, "requests": messages,
              "rps": messages / duration_s if duration_s else 0.0,
              "calls_per_s": ok / duration_s if duration_s else 0.0,
              "percentiles_us": points}
    for p in (50, 90, 99):
        sample[f"p{p}_us"] = stats.at_percentile(points, p) if points else None
    sample["p99_9_us"] = None
    return sample


def _contender(ctx: RunContext, ghz: str, proto: Path, system: systems.System, load: dict,
               duration: float, quota: CpuQuota | None):
    def measure(tag: str) -> dict:
        pid = system.pid
        if pid and quota:
            quota.enter(pid)
        try:
            with CpuMeter(pid) as meter:
                sample = _sample(_ghz(ghz, proto, system.h2_port, load, ctx.load_cpus, duration), load)
        finally:
            if pid and quota:
                quota.leave(pid)
        if pid and not running(pid):
            raise RuntimeError(f"{system.name} (pid {pid}) exited during the load")
        if pid:
            sample["gateway_cpu_s"] = meter.seconds
            sample["gateway_core_busy"] = meter.seconds / sample["duration_s"]
            if sample["requests"] and meter.seconds:
                sample["cpu_us_per_request"] = meter.seconds * 1e6 / sample["requests"]
                sample["messages_per_core_s"] = sample["requests"] / meter.seconds
            sample.update(memory_kib(pid))
        return sample
    return measure


def _check(ghz: str, proto: Path, started: dict, cpus: str) -> None:
    """Every system answers both kinds of call, all OK, before anything is measured."""
    for name, system in started.items():
        for kind, load in LOADS.items():
            report = _ghz(ghz, proto, system.h2_port, dict(load, concurrency=2, connections=1), cpus,
                          None, calls=20)
            codes = report.get("statusCodeDistribution") or {}
            if codes.get("OK") != 20:
                raise RuntimeError(f"{name} {kind}: {codes} {report.get('errorDistribution')}")


def _measure(ctx: RunContext, ghz: str, proto: Path, started: dict, kind: str, mode: str,
             quota: CpuQuota | None) -> dict:
    load = LOADS[kind]
    systems_here = {name: system for name, system in started.items()
                    if mode == "saturated" or name != "direct"}
    for name, system in systems_here.items():
        _contender(ctx, ghz, proto, system, load, ctx.timing.warmup_s, quota)(f"{kind}-{mode}-warmup-{name}")
    contenders = {name: _contender(ctx, ghz, proto, system, load, ctx.timing.duration_s, quota)
                  for name, system in systems_here.items()}
    rounds = run_rounds(ctx, contenders, ctx.timing.rounds, f"{NAME} {kind} {mode}")
    summary = {}
    for name in systems_here:
        summary[name] = summarize_contender(rounds, name)
        summary[name]["messages_per_core_s"] = stats.summarize(
            [s.get("messages_per_core_s") for s in good_samples(rounds, name)])
    ratios = {}
    if "envoy" in systems_here:
        ratios["strait/envoy"] = {
            "messages_per_core_s": stats.paired_ratios(rounds, "strait", "envoy", "messages_per_core_s"),
            "rps": stats.paired_ratios(rounds, "strait", "envoy", "rps"),
            "p99": stats.paired_ratios(rounds, "strait", "envoy", "p99_us")}
    if "direct" in systems_here:
        for name in systems_here:
            if name != "direct":
                ratios[f"direct/{name}"] = {"rps": stats.paired_ratios(rounds, "direct", name, "rps")}
    return {"rounds": rounds, "summary": summary, "ratios": ratios}


def run(ctx: RunContext) -> dict:
    folder = ctx.scenario_work(NAME)
    ghz, reason = _ghz_binary(ctx.bench_dir)
    if not ghz:
        return {"unavailable_all": reason}
    proto = plain_proto(REPO_DIR / "tests" / "proto" / "stream.proto", folder / "stream.proto")
    quota = CpuQuota(f"strait-lab-{free_port()}", QUOTA_SHARE)
    if quota.error:
        ctx.log(f"{NAME}: {quota.error}; only the paced mode runs")
    started, unavailable, origin_pid = _start_all(ctx, folder)
    result = {"systems": list(started), "unavailable": unavailable, "loads": {},
              "duration_s": ctx.timing.duration_s, "rounds": ctx.timing.rounds,
              "payload_bytes": 64, "stream_messages": STREAM_MESSAGES,
              "quota_share": QUOTA_SHARE, "quota_error": quota.error}
    try:
        _check(ghz, proto, started, ctx.load_cpus)
        for kind in LOADS:
            result["loads"][kind] = {}
            for mode in MODES:
                if mode == "saturated" and quota.error:
                    continue
                result["loads"][kind][mode] = _measure(ctx, ghz, proto, started, kind, mode,
                                                       quota if mode == "saturated" else None)
        result["origin_rss_kib"] = memory_kib(origin_pid)["rss_kib"]
    finally:
        ctx.procs.stop_all()
        quota.remove()
    return result


# ---------------------------------------------------------------- report

def _rows(data: dict) -> list[list]:
    rows = []
    for name, summary in data["summary"].items():
        rate, cpu = summary["rps"], summary["cpu_us_per_request"]
        per_core = summary["messages_per_core_s"]
        rows.append([f"**{name}**" if name == "strait" else name, fmt(rate["mean"]),
                     f"{fmt(rate['min'])} – {fmt(rate['max'])}",
                     *(fmt((summary[key]["median"] or 0) / 1000, 2) for key in ("p50_us", "p90_us", "p99_us")),
                     fmt(cpu["mean"], 2), fmt(per_core["mean"]),
                     percent(summary.get("gateway_core_busy", {}).get("mean")),
                     fmt((summary["peak_rss_kib"] or 0) / 1024, 1) if summary["peak_rss_kib"] else "–",
                     summary["errors"]])
    return rows


def _validity(data: dict) -> str:
    notes = []
    for pair, ratios in data["ratios"].items():
        if pair.startswith("direct/") and ratios["rps"]["mean"] is not None:
            value = ratios["rps"]["mean"]
            gateway = pair.split("/")[1]
            busy = data["summary"][gateway].get("gateway_core_busy", {}).get("mean")
            verdict = ("valid: the gateway is the limit" if value >= VALID_DIRECT_RATIO
                       else "**not valid**: the load core is the limit, not the gateway")
            notes.append(f"- direct / {gateway} = {value:.2f}x (gateway used {percent(busy)} of a core): "
                         f"{verdict}")
    return "\n".join(notes) + "\n" if notes else ""


def _plots(result: dict, plot_dir: Path) -> tuple[dict, list[Path]]:
    names, written, groups = {}, [], {}
    for kind, modes in result["loads"].items():
        for mode, data in modes.items():
            curves = {name: s["cdf_us"] for name, s in data["summary"].items() if s["cdf_us"]}
            path = plots.latency_cdf(curves, f"grpc {kind}, {mode}: latency of a call (p10..p99)",
                                     plot_dir / f"lab-grpc-cdf-{kind}-{mode}.png")
            if path:
                names[f"cdf-{kind}-{mode}"] = path.name
                written.append(path)
            groups[f"{kind} {mode}"] = {
                name: [s["messages_per_core_s"] for s in good_samples(data["rounds"], name)
                       if s.get("messages_per_core_s")]
                for name in data["summary"] if name != "direct"}
    path = plots.bars_with_spread(groups, "messages per gateway core-second",
                                  "grpc: messages per core (bar = mean, whisker = min..max)",
                                  plot_dir / "lab-grpc-per-core.png")
    if path:
        names["per-core"] = path.name
        written.append(path)
    return names, written


def _headline_mode(modes: dict) -> str | None:
    return "saturated" if "saturated" in modes else next(iter(modes), None)


def _goals(result: dict) -> list[Goal]:
    goals = []
    for kind in LOADS:
        modes = result["loads"].get(kind, {})
        mode = _headline_mode(modes)
        ratio = modes.get(mode, {}).get("ratios", {}).get("strait/envoy") if mode else None
        label = f"{kind} messages per core vs Envoy"
        target = f">= {GOAL_VS_ENVOY:.1f}x Envoy"
        if not ratio or ratio["messages_per_core_s"]["mean"] is None:
            goals.append(Goal(label, target, "not measured", None, result.get("unavailable", {}).get("envoy", "")))
            continue
        value = ratio["messages_per_core_s"]
        note = "" if mode == "saturated" else f"paced only: {result.get('quota_error')}"
        goals.append(Goal(label, target, f"{value['mean']:.2f}x (rounds {value['min']:.2f}–{value['max']:.2f}, "
                          f"{mode})", value["mean"] >= GOAL_VS_ENVOY, note))
    modes = result["loads"].get("bidi", {})
    bidi = modes.get(_headline_mode(modes), {}).get("summary", {}).get("strait") if modes else None
    per_core = bidi["messages_per_core_s"]["mean"] if bidi else None
    goals.append(Goal("acked bidi messages/s per core", f">= {GOAL_PER_CORE:,}",
                      f"{per_core:,.0f}" if per_core else "not measured",
                      per_core >= GOAL_PER_CORE if per_core else None))
    return goals


def render(result: dict, plot_dir: Path) -> Rendered:
    if "unavailable_all" in result:
        return Rendered(f"**Not run**: {result['unavailable_all']}\n", [],
                        [Goal("grpc benchmark", "run", "not measured", None, result["unavailable_all"])])
    names, written = _plots(result, plot_dir)
    text = (f"Origin: the test tree's tonic server (`grpc-origin`, one thread) on the load core with "
            f"ghz; {result['payload_bytes']}-byte payloads; {result['duration_s']} s per sample, "
            f"{result['rounds']} interleaved rounds. Systems: {', '.join(result['systems'])}.\n\n")
    if result.get("quota_error"):
        text += f"**Saturated mode not run**: {result['quota_error']}.\n\n"
    for name, reason in result["unavailable"].items():
        text += f"**{name} unavailable**: {reason}\n\n"
    header = ["system", "messages/s", "min – max", "p50 ms", "p90 ms", "p99 ms", "gateway CPU µs/msg",
              "messages per core-s", "gateway core used", "peak RSS MiB", "errors"]
    for kind, modes in result["loads"].items():
        for mode, data in modes.items():
            text += (f"#### {LOADS[kind]['label']}, {mode}\n\n"
                     f"{MODES[mode].format(share=result['quota_share'])}.\n\n" + table(header, _rows(data)))
            validity = _validity(data)
            if validity:
                text += "\nLayout check (direct must go >= 1.5x faster than a gateway):\n\n" + validity
            envoy = data["ratios"].get("strait/envoy")
            if envoy:
                per_core, p99 = envoy["messages_per_core_s"], envoy["p99"]
                text += (f"\nStrait / Envoy, paired within rounds: messages per core "
                         f"{fmt(per_core['mean'], 2)}x (rounds {fmt(per_core['min'], 2)} – "
                         f"{fmt(per_core['max'], 2)}), p99 {fmt(p99['mean'], 2)}x (lower is better).\n")
            if names.get(f"cdf-{kind}-{mode}"):
                text += f"\n![grpc {kind} {mode} latency](IMG/{names[f'cdf-{kind}-{mode}']})\n"
            text += "\n"
    if names.get("per-core"):
        text += f"![grpc messages per core](IMG/{names['per-core']})\n\n"
    return Rendered(text, written, _goals(result))
