"""Interleaved rounds: every round loads each contender once, in a rotated order, so
drift on the machine (thermal, a neighbour's build) spreads over all of them instead of
landing on whichever ran last. Ratios are computed within a round, then summarized."""

from __future__ import annotations

import subprocess
from typing import Callable

from . import stats
from .context import RunContext

SAMPLE_KEYS = ("rps", "p50_us", "p90_us", "p99_us", "p99_9_us", "cpu_us_per_request", "user_us_per_request",
               "system_us_per_request", "sleeps_per_request", "gateway_core_busy")


def describe(sample: dict) -> str:
    cpu = sample.get("cpu_us_per_request")
    cpu_text = f", {cpu:.1f} µs CPU/req" if cpu else ""
    bad = sample.get("errors", 0) + sample.get("non_2xx", 0)
    return (f"{sample['rps']:,.0f} req/s, p99 {sample['p99_us'] or 0:,.0f} µs{cpu_text}"
            f"{f', {bad} errors/non-2xx' if bad else ''}")


def run_rounds(ctx: RunContext, contenders: dict[str, Callable[[str], dict]], rounds: int,
               label: str) -> list[dict]:
    """contenders: name -> function(tag) returning one sample. Returns [{name: sample}]."""
    names = list(contenders)
    results = []
    for index in range(rounds):
        shift = index % len(names)
        order = names[shift:] + names[:shift]
        samples = {}
        for position, name in enumerate(order):
            try:
                sample = contenders[name](f"{label}-r{index}-{name}")
                text = describe(sample)
            except (RuntimeError, subprocess.TimeoutExpired) as error:
                # One failed sample (a crashed gateway, a tool error) is recorded and
                # left out of the statistics; the other contenders keep their rounds.
                sample, text = {"error": str(error)[-1000:]}, f"FAILED: {str(error)[-300:]}"
            sample.update(round=index, position=position)
            ctx.log(f"{label} round {index + 1}/{rounds} {name}: {text}")
            samples[name] = sample
        results.append(samples)
    return results


def wrk_rounds(ctx: RunContext, systems: dict, targets, work_dir, label: str) -> list[dict]:
    """Each system (name -> a started `systems.System`) warmed up, then `ctx.timing.rounds`
    interleaved rounds of wrk on `targets` against each, its CPU measured on its process tree."""
    from . import loadgen

    def contender(system, duration: int) -> Callable[[str], dict]:
        def load(tag: str) -> dict:
            return loadgen.run(loadgen.Load(port=system.h1_port, duration_s=duration, targets=targets,
                                            cpus=ctx.load_cpus, work_dir=work_dir), system.pid, tag)
        return load

    for name, system in systems.items():
        contender(system, ctx.timing.warmup_s)(f"{label}-warmup-{name}")
    contenders = {name: contender(system, ctx.timing.duration_s) for name, system in systems.items()}
    return run_rounds(ctx, contenders, ctx.timing.rounds, label)


def good_samples(rounds: list[dict], name: str) -> list[dict]:
    """The contender's samples that did not fail."""
    return [r[name] for r in rounds if name in r and "error" not in r[name]]


def summarize_contender(rounds: list[dict], name: str) -> dict:
    samples = good_samples(rounds, name)
    summary = stats.summarize_samples(samples, SAMPLE_KEYS)
    summary["cdf_us"] = stats.median_curve([s["percentiles_us"] for s in samples if s.get("percentiles_us")])
    summary["peak_rss_kib"] = max((s.get("peak_rss_kib") or 0 for s in samples), default=None) or None
    summary["errors"] = sum(s.get("errors", 0) for s in samples)
    summary["non_2xx"] = sum(s.get("non_2xx", 0) for s in samples)
    summary["requests"] = sum(s.get("requests", 0) for s in samples)
    summary["failed_samples"] = sum(1 for r in rounds if "error" in r.get(name, {}))
    return summary
