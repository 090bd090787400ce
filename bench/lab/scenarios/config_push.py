"""config-push: the published Kong LMDB tests.

With the 10k routes / 10k consumers set (key-auth + request-termination on every route;
the set without key-auth when this Strait rejects key-auth):
(a) latency of `POST /config` of the full set (it answers 201 once the new snapshot is
    committed and live);
(b) time until the new snapshot is live, seen three ways from the moment the POST
    starts: `GET /status` shows the new `config_version`; a proxy request on a route
    answers with the new request-termination message; and the compiler's own
    `configuration replaced elapsed_ms=N` log line (compile + commit + swap, no parsing);
(c) RPS and p99 of a random-route, random-key load while the whole set is re-posted
    every 2 s, against the same load with no pushes, in interleaved rounds;
(d) the loaded set re-posted with one route changed (its path), from the start of the
    POST until the proxy answers on the new path.
Two copies of the set differ only in their request-termination message, so every push
is a real change.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from pathlib import Path

from lab import loadgen, plots, stats, systems
from lab.configgen import route_path
from lab.context import RunContext
from lab.procs import memory_kib
from lab.registry import Goal, Rendered
from lab.report import fmt, table
from lab.rounds import run_rounds, summarize_contender
from lab.strait_admin import (choose_lmdb_set, post_config, replaced_elapsed_ms, request,
                              same_message_set, status)

NAME = "config-push"
TITLE = "config-push: 10k routes / 10k consumers (Kong's LMDB tests)"
ROUTES = CONSUMERS = 10_000
MESSAGES = ("push-a", "push-b")
POLL_S = 0.002


def _poll_until(check, started: float, timeout: float = 60.0) -> float | None:
    """Seconds from `started` until check() is true, or None on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return time.monotonic() - started
        except (OSError, http.client.HTTPException, RuntimeError, ValueError):
            pass
        time.sleep(POLL_S)
    return None


def _timed_push(node: systems.System, document: bytes, message: str, key: str | None) -> dict:
    """POST one document and time (a) the response and (b) the two liveness signals."""
    before = status(node.admin_port)["config_version"]
    headers = {"apikey": key} if key else {}
    marks: dict = {}
    started = time.monotonic()
    watchers = [
        threading.Thread(target=lambda: marks.__setitem__("status_live_s", _poll_until(
            lambda: status(node.admin_port)["config_version"] > before, started))),
        threading.Thread(target=lambda: marks.__setitem__("proxy_live_s", _poll_until(
            lambda: message.encode() in request(node.h1_port, "GET", route_path(1), None, headers,
                                                timeout=5)[1], started))),
    ]
    for watcher in watchers:
        watcher.start()
    code, body, post_s = post_config(node.admin_port, document)
    for watcher in watchers:
        watcher.join()
    if code != 201:
        raise RuntimeError(f"POST /config answered {code}: {body[:500]!r}")
    return {"post_s": post_s, **marks}


class Pusher(threading.Thread):
    """Re-posts the set every `every_s` while a load runs (alternating the two copies)."""

    def __init__(self, node: systems.System, documents: list[bytes], every_s: float, length_s: float):
        super().__init__(daemon=True)
        self.node, self.documents, self.every_s, self.length_s = node, documents, every_s, length_s
        self.pushes: list[dict] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        count = 0
        while not self.stopping.wait(self.every_s - ((time.monotonic() - started) % self.every_s)):
            offset = time.monotonic() - started
            if offset > self.length_s - self.every_s / 2:
                return
            code, _, post_s = post_config(self.node.admin_port, self.documents[count % 2])
            self.pushes.append({"at_s": offset, "status": code, "post_s": post_s})
            count += 1


def _load_contender(ctx: RunContext, node: systems.System, targets: Path, documents: list[bytes],
                    pushing: bool):
    def load(tag: str) -> dict:
        pusher = Pusher(node, documents, ctx.timing.push_every_s, ctx.timing.push_load_s)
        if pushing:
            pusher.start()
        try:
            sample = loadgen.run(loadgen.Load(port=node.h1_port, duration_s=ctx.timing.push_load_s,
                                              targets=targets, cpus=ctx.load_cpus,
                                              work_dir=ctx.scenario_work(NAME)), node.pid, tag)
        finally:
            pusher.stopping.set()
            if pushing:
                pusher.join()
        sample["pushes"] = pusher.pushes
        return sample
    return load


def _prepare(ctx: RunContext, folder: Path) -> tuple:
    chosen = choose_lmdb_set(ctx.strait_bin, folder, "lmdb-a", ROUTES, CONSUMERS, MESSAGES[0])
    suffix = "" if chosen.exact else "-without-key-auth"
    other = same_message_set(chosen, folder, f"lmdb-b{suffix}", MESSAGES[1])
    ctx.log(f"{NAME}: {chosen.note}; {chosen.config.bytes / 1e6:.1f} MB, "
            f"{chosen.config.total_objects} objects")
    return chosen, [chosen.config.path.read_bytes(), other.path.read_bytes()]


def _measure_posts(ctx: RunContext, node: systems.System, documents: list[bytes], key: str | None) -> dict:
    log = node.process.log_path
    first = _timed_push(node, documents[0], MESSAGES[0], key)
    ctx.log(f"{NAME}: first load from empty {first['post_s'] * 1000:.0f} ms")
    samples = []
    for index in range(ctx.timing.post_samples):
        which = (index + 1) % 2
        sample = _timed_push(node, documents[which], MESSAGES[which], key)
        ctx.log(f"{NAME}: re-post {index + 1}: POST {sample['post_s'] * 1000:.0f} ms, live via proxy "
                f"{(sample['proxy_live_s'] or 0) * 1000:.0f} ms")
        samples.append(sample)
    compile_ms = replaced_elapsed_ms(log)
    return {"first_from_empty": first, "samples": samples,
            "compile_ms_log": compile_ms[-len(samples):] if samples else [],
            "summary": {key: stats.summarize([s[key] for s in samples if s.get(key) is not None])
                        for key in ("post_s", "status_live_s", "proxy_live_s")}}


def _one_route_changed(document: bytes, variant: int) -> tuple[bytes, str]:
    """The document with route 1's path changed to a new one; returns it and the path (no
    path of the set, nor an earlier variant, is a prefix of it: a request on it reaches the
    route only once the change is live)."""
    tree = json.loads(document)
    path = f"/changed-{variant}{route_path(1)}"
    routes = tree.get("routes", []) + [r for s in tree.get("services", []) for r in s.get("routes", [])]
    for route in routes:
        if route.get("paths") == [route_path(1)]:
            route["paths"] = [path]
            return json.dumps(tree, separators=(",", ":")).encode(), path
    raise RuntimeError("route 1 not found in the set")


def _measure_one_change(ctx: RunContext, node: systems.System, loaded: bytes, message: str,
                        key: str | None) -> dict:
    """(d): re-post the loaded set with one route changed, ctx.timing.post_samples times (each
    differs from the running configuration by that route alone)."""
    headers = {"apikey": key} if key else {}
    variants = [_one_route_changed(loaded, n) for n in range(1, ctx.timing.post_samples + 1)]
    log = node.process.log_path
    samples = []
    for document, path in variants:
        started = time.monotonic()
        marks: dict = {}
        watcher = threading.Thread(target=lambda: marks.__setitem__("proxy_live_s", _poll_until(
            lambda: message.encode() in request(node.h1_port, "GET", path, None, headers, timeout=5)[1],
            started)))
        watcher.start()
        code, body, post_s = post_config(node.admin_port, document)
        watcher.join()
        if code != 201:
            raise RuntimeError(f"POST /config answered {code}: {body[:500]!r}")
        samples.append({"post_s": post_s, **marks})
        ctx.log(f"{NAME}: one route changed: POST {post_s * 1000:.0f} ms, live via proxy "
                f"{(marks.get('proxy_live_s') or 0) * 1000:.0f} ms")
    compile_ms = replaced_elapsed_ms(log)[-len(samples):] if samples else []
    # Back to the set as loaded, so the loads of (c) reach every route.
    code, body, _ = post_config(node.admin_port, loaded)
    if code != 201:
        raise RuntimeError(f"POST /config answered {code}: {body[:500]!r}")
    return {"samples": samples, "compile_ms_log": compile_ms,
            "summary": {key: stats.summarize([s[key] for s in samples if s.get(key) is not None])
                        for key in ("post_s", "proxy_live_s")}}


def run(ctx: RunContext) -> dict:
    folder = ctx.scenario_work(NAME)
    chosen, documents = _prepare(ctx, folder)
    node = systems.start_strait(ctx.procs, ctx.strait_bin, folder, ctx.gateway_cpus,
                                name="strait-config-push", extra_env={"NO_COLOR": "1"})
    key = None
    if chosen.exact:
        key = chosen.config.targets.read_text().split("\n", 1)[0].split("\t")[1]
    result = {"set": chosen.describe(), "rounds": ctx.timing.rounds,
              "load": f"wrk -t{loadgen.load_threads()} -c32, random route + key, {ctx.timing.push_load_s} s",
              "push_every_s": ctx.timing.push_every_s}
    result["posts"] = _measure_posts(ctx, node, documents, key)
    loaded = ctx.timing.post_samples % 2
    result["one_change"] = _measure_one_change(ctx, node, documents[loaded], MESSAGES[loaded], key)
    result["rss_before_load_kib"] = memory_kib(node.pid)["rss_kib"]
    contenders = {name: _load_contender(ctx, node, chosen.config.targets, documents, name != "no-push")
                  for name in ("no-push", "push")}
    load_rounds = run_rounds(ctx, contenders, ctx.timing.rounds, NAME)
    time.sleep(1.0)
    result["rss_after_load_kib"] = memory_kib(node.pid)["rss_kib"]
    result["load_rounds"] = load_rounds
    result["load_summary"] = {name: summarize_contender(load_rounds, name) for name in contenders}
    result["ratio_push_over_no_push"] = stats.paired_ratios(load_rounds, "push", "no-push", "rps")
    result["p99_ratio_push_over_no_push"] = stats.paired_ratios(load_rounds, "push", "no-push", "p99_us")
    pushes = [p for r in load_rounds for p in r["push"].get("pushes", [])]
    result["pushes_during_load"] = {"count": len(pushes), "non_201": sum(p["status"] != 201 for p in pushes),
                                    "post_s": stats.summarize([p["post_s"] for p in pushes])}
    ctx.procs.stop_all()
    return result


# ---------------------------------------------------------------- report

def _row(label: str, summary: dict, to_ms: float = 1000.0) -> list:
    """A table row: median, mean, stdev, range and count of `summary` in ms (`to_ms`: 1000
    for seconds, 1 for values already in ms)."""
    def ms(key: str) -> str:
        value = summary.get(key)
        return fmt(value * to_ms if value is not None else None)
    return [label, ms("median"), ms("mean"), ms("stdev"), f"{ms('min')} – {ms('max')}", summary["n"]]


def _post_table(posts: dict) -> str:
    labels = {"post_s": "`POST /config` answered 201", "status_live_s": "`GET /status` shows the new `config_version`",
              "proxy_live_s": "proxy answers with the new config"}
    rows = [_row(label, posts["summary"][key]) for key, label in labels.items()]
    rows.append(_row("compiler log `configuration replaced elapsed_ms` (compile + commit + swap)",
                     stats.summarize(posts["compile_ms_log"]), 1))
    outside = [s["post_s"] * 1000 - c for s, c in zip(posts["samples"], posts["compile_ms_log"])]
    rows.append(_row("POST minus compiler time (upload, parse, validate, respond)", stats.summarize(outside), 1))
    first = posts["first_from_empty"]
    text = table(["from the start of the POST (ms)", "median", "mean", "stdev", "min – max", "samples"], rows)
    return text + (f"\nFirst load into an empty node: POST {first['post_s'] * 1000:,.0f} ms, live via proxy "
                   f"{(first.get('proxy_live_s') or 0) * 1000:,.0f} ms.\n")


def _one_change_table(one: dict) -> str:
    labels = {"post_s": "`POST /config` answered 201", "proxy_live_s": "proxy answers on the changed route"}
    rows = [_row(label, one["summary"][key]) for key, label in labels.items()]
    rows.append(_row("compiler log `configuration replaced elapsed_ms` (diff + derive + commit + swap)",
                     stats.summarize(one["compile_ms_log"]), 1))
    return table(["one route changed, from the start of the POST (ms)", "median", "mean", "stdev",
                  "min – max", "samples"], rows)


def _load_table(result: dict) -> str:
    rows = []
    for name, summary in result["load_summary"].items():
        rps = summary["rps"]
        rows.append([name, fmt(rps["mean"]), fmt(rps["median"]), fmt(rps["stdev"]),
                     f"{fmt(rps['min'])} – {fmt(rps['max'])}", fmt(summary["p50_us"]["median"]),
                     fmt(summary["p99_us"]["median"]), fmt(summary["p99_9_us"]["median"]),
                     fmt(summary["cpu_us_per_request"]["mean"], 1), summary["errors"] + summary["non_2xx"]])
    return table(["load", "RPS mean", "RPS median", "RPS stdev", "RPS min – max", "p50 µs", "p99 µs",
                  "p99.9 µs", "CPU µs/req", "errors + non-2xx"], rows)


def _goals(result: dict) -> list[Goal]:
    note = result["set"].get("goal_note", "")
    posts = result["posts"]["summary"]
    goals = []
    for key, label in (("post_s", "`POST /config` of the 10k/10k set"), ("proxy_live_s", "new config live")):
        summary = posts[key]
        measured = (f"max {summary['max'] * 1000:,.0f} ms (median {summary['median'] * 1000:,.0f} ms)"
                    if summary["n"] else "not measured")
        goals.append(Goal(label, "< 1 s", measured, summary["max"] < 1.0 if summary["n"] else None, note))
    one = result.get("one_change")
    if one:
        summary = one["summary"]["proxy_live_s"]
        measured = (f"max {summary['max'] * 1000:,.0f} ms (median {summary['median'] * 1000:,.0f} ms)"
                    if summary["n"] else "not measured")
        goals.append(Goal("re-post with 1 route changed, live", "< 50 ms", measured,
                          summary["max"] < 0.05 if summary["n"] else None, note))
    ratio = result["ratio_push_over_no_push"]
    goals.append(Goal("RPS while re-posting every 2 s", ">= 95% of RPS without pushes",
                      f"{ratio['mean'] * 100:.1f}%" if ratio["n"] else "not measured",
                      ratio["mean"] >= 0.95 if ratio["n"] else None, note))
    return goals


def render(result: dict, plot_dir: Path) -> Rendered:
    conf = result["set"]
    text = (f"Set: {conf['total_objects']:,} objects ({', '.join(f'{v:,} {k}' for k, v in conf['objects'].items())}), "
            f"{conf['bytes'] / 1e6:.1f} MB of JSON — {conf['note']}.\n\n")
    text += ("(a) and (b): each re-post replaces the loaded set with its twin (another "
             "request-termination message); times are measured from the start of the POST, polling "
             "every 2 ms. `POST /config` answers 201 only after the snapshot is committed and live, "
             "so the proxy probe is the earliest moment a client can see the change and the POST "
             "latency is the moment the writer knows it.\n\n")
    text += _post_table(result["posts"])
    if result.get("one_change"):
        text += ("\n(d) The loaded set re-posted with one route's path changed (each sample a new "
                 "path), timed from the start of the POST until the proxy answers on the new path.\n\n")
        text += _one_change_table(result["one_change"])
    pushes = result["pushes_during_load"]
    text += (f"\n(c) {result['load']}, {result['rounds']} interleaved rounds; pushes every "
             f"{result['push_every_s']:g} s: {pushes['count']} pushes during load, {pushes['non_201']} "
             f"not answered 201, POST median {(pushes['post_s']['median'] or 0) * 1000:,.0f} ms under load.\n\n")
    text += _load_table(result)
    ratio, p99 = result["ratio_push_over_no_push"], result["p99_ratio_push_over_no_push"]
    if ratio["n"]:
        text += (f"\nRPS with pushes / without, per round: {', '.join(f'{r:.3f}' for r in ratio['per_round'])} "
                 f"(mean {ratio['mean']:.3f}); p99 ratio mean {p99['mean']:.2f}.\n")
    before, after = result["rss_before_load_kib"], result["rss_after_load_kib"]
    verdict = ("stable: old snapshots are freed" if after <= before * 1.1
               else "it grew by more than 10%: check that old snapshots are freed")
    text += (f"\nStrait RSS: {before / 1024:,.0f} MiB before the loads, {after / 1024:,.0f} MiB after "
             f"{pushes['count']} more pushes ({verdict}). Every Strait thread (proxy worker, Admin API, "
             "compiler) is pinned to the gateway core, so parsing and compiling a pushed set takes CPU "
             "from the proxy worker: that cost is part of what (c) measures.\n")
    curves = {name: s["cdf_us"] for name, s in result["load_summary"].items() if s["cdf_us"]}
    path = plots.latency_cdf(curves, "config-push: latency with and without re-posting the set every 2 s",
                             plot_dir / "lab-config-push-cdf.png")
    if path:
        text += f"\n![config-push latency CDF](IMG/{path.name})\n"
    return Rendered(text, [path] if path else [], _goals(result))
