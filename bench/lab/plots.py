"""PNG plots (matplotlib, Agg backend), small enough to commit: latency CDFs with a
logit percentile axis (tails visible), bars with spread, and a curve over a parameter.
Every function returns the written path, or None when matplotlib is unavailable."""

from __future__ import annotations

import statistics
from pathlib import Path

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator
except ImportError:  # the report says plots are missing; numbers still come out
    plt = None

SIZE = (6.4, 3.8)
DPI = 90
COLORS = {"strait": "#1f77b4", "nginx": "#2ca02c", "envoy": "#d62728", "direct": "#7f7f7f"}
TAIL_TICKS = (0.1, 0.5, 0.9, 0.99, 0.999, 0.9999)


def available() -> bool:
    return plt is not None


def _color(name: str, index: int) -> str:
    return COLORS.get(name, f"C{index % 10}")


def _save(figure, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    plt.close(figure)
    return path


def latency_cdf(curves: dict[str, list[list[float]]], title: str, path: Path) -> Path | None:
    """curves: system -> [[percentile, latency_us], ...]; x log latency, y logit percentile."""
    if not plt:
        return None
    figure, axes = plt.subplots(figsize=SIZE)
    for index, (name, points) in enumerate(curves.items()):
        kept = [(us / 1000.0, p / 100.0) for p, us in points if 0 < p < 100 and us > 0]
        if kept:
            axes.plot([x for x, _ in kept], [y for _, y in kept], label=name,
                      color=_color(name, index), linewidth=1.6)
    axes.set_xscale("log")
    axes.set_yscale("logit")
    axes.yaxis.set_major_locator(FixedLocator(TAIL_TICKS))
    axes.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"p{v * 100:g}"))
    axes.yaxis.set_minor_locator(NullLocator())
    axes.yaxis.set_minor_formatter(NullFormatter())
    axes.set_ylim(0.05, 0.9999)
    axes.set_xlabel("latency (ms, log scale)")
    axes.set_ylabel("percentile")
    axes.set_title(title, fontsize=10)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    return _save(figure, path)


def bars_with_spread(groups: dict[str, dict[str, list[float]]], ylabel: str, title: str,
                     path: Path) -> Path | None:
    """groups: group label -> system -> samples; bar = mean, whisker = min..max, dots = samples."""
    if not plt:
        return None
    systems = list(dict.fromkeys(name for samples in groups.values() for name in samples))
    width = 0.8 / max(len(systems), 1)
    figure, axes = plt.subplots(figsize=SIZE)
    for index, name in enumerate(systems):
        for group_index, samples in enumerate(groups.values()):
            values = samples.get(name) or []
            if not values:
                continue
            x = group_index + (index - (len(systems) - 1) / 2) * width
            mean = statistics.fmean(values)
            axes.bar(x, mean, width * 0.9, color=_color(name, index), alpha=0.75,
                     label=name if group_index == 0 else None)
            axes.errorbar(x, mean, yerr=[[mean - min(values)], [max(values) - mean]],
                          color="black", capsize=3, linewidth=1)
            axes.scatter([x] * len(values), values, color="black", s=6, zorder=3)
    axes.set_xticks(range(len(groups)), list(groups))
    axes.set_ylabel(ylabel)
    axes.set_title(title, fontsize=10)
    axes.grid(True, axis="y", alpha=0.3)
    axes.legend(fontsize=8, ncols=min(len(systems), 4), loc="upper left")
    return _save(figure, path)


def curve_with_spread(xs: list[float], samples: list[list[float]], ylabel: str,
                      second: tuple[str, list[float]] | None, title: str, xlabel: str,
                      path: Path) -> Path | None:
    """A mean curve with min..max whiskers over x (log scale), optional second y axis."""
    if not plt:
        return None
    figure, axes = plt.subplots(figsize=SIZE)
    means = [statistics.fmean(values) for values in samples]
    lows = [m - min(v) for m, v in zip(means, samples)]
    highs = [max(v) - m for m, v in zip(means, samples)]
    axes.errorbar(xs, means, yerr=[lows, highs], marker="o", color=COLORS["strait"],
                  capsize=3, label=ylabel)
    axes.set_xscale("log")
    axes.set_ylim(0, max(max(v) for v in samples) * 1.4)  # headroom for the legend
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.grid(True, alpha=0.3)
    if second:
        label, values = second
        twin = axes.twinx()
        twin.plot(xs, values, marker="s", linestyle="--", color="#ff7f0e", label=label)
        twin.set_ylabel(label)
        twin.set_ylim(0, max(values) * 1.6 if values and max(values) > 0 else 1)
        handles = axes.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
        axes.legend(handles=handles, fontsize=8, loc="upper center", ncols=2)
    axes.set_title(title, fontsize=10)
    return _save(figure, path)
