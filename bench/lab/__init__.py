"""Strait performance lab: scenarios, load generation, statistics, reports and plots.

Entry point: `bench/run` (installs tools, builds Strait, then `python -m lab`).
See docs/benchmarks.md#performance-lab.
"""
