"""memory: Strait's resident memory with 10k and 50k routes + consumers loaded.

Sets in the shape of the published LMDB test (every route with key-auth and
request-termination, every consumer with a key-auth credential; without key-auth when
this Strait rejects it), loaded at start through `declarative_config`. For each: RSS once
idle, RSS after a short random-route load, RSS after re-posting the set 10 times through
`POST /config` (old snapshots must be freed), the peak over the node's life (VmHWM, start-up
parsing included) and the peak during the re-posts alone (VmHWM restarted just before them).
RSS is split into anonymous pages (heap) and file-backed pages (the binary and LMDB's map).
Bytes per route = (RSS - RSS of an empty node) / routes.
"""

from __future__ import annotations

import time
from pathlib import Path

from lab import loadgen, systems
from lab.context import RunContext
from lab.procs import memory_kib, reset_peak_rss
from lab.registry import Goal, Rendered
from lab.report import fmt, table
from lab.strait_admin import choose_lmdb_set, post_config

NAME = "memory"
TITLE = "memory: RSS with 10k and 50k routes + consumers"
SETS = (("empty", 0), ("10k/10k", 10_000), ("50k/50k", 50_000))
SETTLE_S = 1.5
REPOSTS = 10
TARGET_MB = 150
PUSH_PEAK_RATIO = 1.5
MB = 1e6


def _rss_bytes(pid: int) -> dict:
    kib = memory_kib(pid)
    return {"rss": kib["rss_kib"] * 1024, "peak": kib["peak_rss_kib"] * 1024,
            "anon": kib["anon_kib"] * 1024, "file": kib["file_kib"] * 1024}


def _measure_set(ctx: RunContext, folder: Path, name: str, count: int) -> dict:
    chosen = choose_lmdb_set(ctx.strait_bin, folder, f"memory-{count}", count, count) if count else None
    started = time.monotonic()
    node = systems.start_strait(ctx.procs, ctx.strait_bin, folder, ctx.gateway_cpus,
                                name=f"strait-memory-{count}", config=chosen.config.path if chosen else None)
    row = {"set": name, "routes": count, "consumers": count,
           "seconds_to_listen": time.monotonic() - started,
           "config": chosen.describe() if chosen else None}
    time.sleep(SETTLE_S)
    row["idle"] = _rss_bytes(node.pid)
    if chosen:
        loadgen.run(loadgen.Load(port=node.h1_port, duration_s=ctx.timing.warmup_s,
                                 targets=chosen.config.targets, cpus=ctx.load_cpus, work_dir=folder),
                    node.pid, f"memory-{count}")
        row["after_load"] = _rss_bytes(node.pid)
        document = chosen.config.path.read_bytes()
        reposts = 1 if ctx.quick else REPOSTS
        before_push = _rss_bytes(node.pid)
        row["push_peak_measured"] = reset_peak_rss(node.pid)
        for _ in range(reposts):
            code, body, _ = post_config(node.admin_port, document)
            if code != 201:
                raise RuntimeError(f"POST /config answered {code}: {body[:300]!r}")
        row["before_push"] = before_push
        row["push_peak"] = _rss_bytes(node.pid)["peak"] if row["push_peak_measured"] else None
        time.sleep(SETTLE_S)
        row["reposts"] = reposts
        row["after_reposts"] = _rss_bytes(node.pid)
    row["peak"] = max(_rss_bytes(node.pid)["peak"], row.get("push_peak") or 0, row["idle"]["peak"])
    ctx.procs.stop(node.process)
    ctx.log(f"{NAME}: {name}: RSS idle {row['idle']['rss'] / MB:.1f} MB, peak {row['peak'] / MB:.1f} MB")
    return row


def run(ctx: RunContext) -> dict:
    folder = ctx.scenario_work(NAME)
    rows = [_measure_set(ctx, folder, name, count) for name, count in SETS]
    baseline = rows[0]["idle"]["rss"]
    for row in rows[1:]:
        steady = max(row["idle"]["rss"], row["after_load"]["rss"], row["after_reposts"]["rss"])
        row["steady_rss"] = steady
        row["bytes_per_route"] = (row["idle"]["rss"] - baseline) / row["routes"]
    return {"rows": rows, "baseline_rss": baseline}


# ---------------------------------------------------------------- report

def _mb(value) -> str:
    return fmt(value / MB, 1) if value is not None else "–"


def render(result: dict, plot_dir: Path) -> Rendered:
    rows, notes = [], set()
    for row in result["rows"]:
        config = row.get("config")
        if config and not config["exact_published_set"]:
            notes.add(config["note"])
        after = row.get("after_reposts")
        rows.append([row["set"], f"{config['total_objects']:,}" if config else "0",
                     _mb(config["bytes"]) if config else "–", f"{row['seconds_to_listen']:.1f}",
                     _mb(row["idle"]["rss"]),
                     f"{_mb(row['idle'].get('anon'))} / {_mb(row['idle'].get('file'))}",
                     _mb(row.get("after_load", {}).get("rss")),
                     _mb(after["rss"]) if after else "–",
                     f"{_mb(after.get('anon'))} / {_mb(after.get('file'))}" if after else "–",
                     _mb(row.get("push_peak")), _mb(row["peak"]),
                     fmt(row.get("bytes_per_route"), 0)])
    reposts = next((row["reposts"] for row in result["rows"] if row.get("reposts")), REPOSTS)
    text = ("Each set loaded at start (`declarative_config`), then measured idle, after a short "
            f"random-route load, and after re-posting the set {reposts} times through `POST /config`. "
            "MB = 10^6 bytes. Heap / file: anonymous pages (`RssAnon`: heap, stacks) and file-backed "
            "pages (`RssFile`: the binary and LMDB's memory map). Push peak: VmHWM restarted just before "
            "the re-posts (`/proc/PID/clear_refs`), so it is the highest RSS while they were parsed, "
            "diffed and committed; peak over life includes start-up parsing. Bytes per route = (idle RSS - "
            "empty node's idle RSS) / routes, one route carrying its consumer, credential and plugins.\n\n")
    text += "".join(f"Note: {note}.\n\n" for note in sorted(notes))
    text += table(["set", "objects", "JSON MB", "start to listening s", "RSS idle MB", "idle heap / file MB",
                   "RSS after load MB", "RSS after re-posts MB", "after re-posts heap / file MB",
                   "push peak MB", "peak over life MB", "bytes per route"], rows)
    ten = next((row for row in result["rows"] if row["routes"] == 10_000), None)
    goals = []
    if ten:
        note = ten["config"].get("goal_note", "")
        goals.append(Goal("RSS with the 10k/10k set", f"< {TARGET_MB} MB idle and after re-posts",
                          f"{ten['idle']['rss'] / MB:.1f} MB idle after start, {ten['steady_rss'] / MB:.1f} MB "
                          f"after {ten.get('reposts', REPOSTS)} re-posts",
                          ten["steady_rss"] < TARGET_MB * MB, note))
        if ten.get("push_peak"):
            idle = ten["before_push"]["rss"]
            ratio = ten["push_peak"] / idle
            goals.append(Goal("peak RSS during a push of the 10k/10k set", f"< {PUSH_PEAK_RATIO}x idle RSS",
                              f"{ratio:.2f}x ({ten['push_peak'] / MB:.1f} MB over {idle / MB:.1f} MB)",
                              ratio < PUSH_PEAK_RATIO, note))
    return Rendered(text, [], goals)
