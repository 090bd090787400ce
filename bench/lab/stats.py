"""Summary statistics over samples, and latency percentiles from raw values."""

from __future__ import annotations

import math
import statistics

# The percentiles every sample reports, and the grid a CDF is drawn from.
HEADLINE_PERCENTILES = (50, 90, 99, 99.9)
CDF_GRID = (0.1, 0.5, 1, *range(2, 99, 2), 99, 99.5, 99.9, 99.95, 99.99, 100)


def percentile(sorted_values: list[float], p: float) -> float:
    """Linear-interpolated percentile of already sorted values (p in 0..100)."""
    if not sorted_values:
        return math.nan
    rank = (len(sorted_values) - 1) * p / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (rank - low)


def grid_from_values(values: list[float]) -> list[list[float]]:
    """[[percentile, value], ...] over CDF_GRID, the same shape wrk's Lua reports."""
    ordered = sorted(values)
    return [[p, percentile(ordered, p)] for p in CDF_GRID]


def at_percentile(points: list[list[float]], p: float) -> float:
    """Value at percentile p from [[percentile, value], ...] points (interpolated)."""
    previous = None
    for point_p, value in points:
        if point_p >= p:
            if previous is None or point_p == p:
                return value
            prev_p, prev_value = previous
            return prev_value + (value - prev_value) * (p - prev_p) / (point_p - prev_p)
        previous = (point_p, value)
    return points[-1][1] if points else math.nan


def summarize(values: list[float]) -> dict:
    """mean, median, sample standard deviation, min, max of a list of numbers."""
    clean = [v for v in values if v is not None and not math.isnan(v)]
    if not clean:
        return {"n": 0, "mean": None, "median": None, "stdev": None, "min": None, "max": None}
    return {
        "n": len(clean),
        "mean": statistics.fmean(clean),
        "median": statistics.median(clean),
        "stdev": statistics.stdev(clean) if len(clean) > 1 else 0.0,
        "min": min(clean),
        "max": max(clean),
    }


def summarize_samples(samples: list[dict], keys: tuple[str, ...]) -> dict:
    """summarize() of each key across samples (dicts), skipping missing ones."""
    return {key: summarize([s.get(key) for s in samples if s.get(key) is not None]) for key in keys}


def median_curve(curves: list[list[list[float]]]) -> list[list[float]]:
    """Point-wise median of several [[percentile, value], ...] curves on one grid."""
    if not curves:
        return []
    return [[point[0], statistics.median(curve[i][1] for curve in curves)]
            for i, point in enumerate(curves[0])]


def paired_ratios(rounds: list[dict], numerator: str, denominator: str, key: str) -> dict:
    """Per-round ratio numerator/denominator of `key`, then summarized.

    `rounds` is a list of {system: sample}; a round missing either side is skipped.
    """
    ratios = []
    for round_samples in rounds:
        top, bottom = round_samples.get(numerator), round_samples.get(denominator)
        if top and bottom and top.get(key) and bottom.get(key) and "error" not in top and "error" not in bottom:
            ratios.append(top[key] / bottom[key])
    return {"per_round": ratios, **summarize(ratios)}


def paired_ratio_set(rounds: list[dict], numerator: str, denominator: str,
                     keys: tuple[str, ...] = ("rps", "cpu_us_per_request", "p99_us")) -> dict:
    """`paired_ratios` of each of `keys`: {key: summary}."""
    return {key: paired_ratios(rounds, numerator, denominator, key) for key in keys}

