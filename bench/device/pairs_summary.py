"""Summary of bench/device/profile-pairs.sh: per gateway and pair, requests per second, CPU,
switches and interrupts per request; then, when perf ran, the symbols of the gateway's core
whose time per request differs most between the two gateways (means over the pairs).

    python3 pairs_summary.py OUT_DIR PAIRS SECONDS HAVE_PERF
"""

import re
import statistics
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

GATEWAYS = ("nginx", "strait")
PERF_HZ = 4999
# Interrupt lines worth a column: the timer, the inter-processor kinds, network softirq work is
# not an interrupt line (it runs in the sender's context on loopback).
IRQ_LINES = ("LOC:", "RES:", "CAL:", "TLB:", "IWI:")


def requests_of(wrk_text: str) -> int:
    found = re.search(r"(\d+) requests in", wrk_text)
    return int(found.group(1)) if found else 0


def interrupts(path: Path) -> dict[str, int]:
    counts = {}
    for line in path.read_text().splitlines():
        name, _, count = line.partition(" ")
        if count.strip().isdigit():
            counts[name] = int(count)
    return counts


def perf_symbols(path: Path) -> Counter:
    """Samples per symbol ("[k] name" for the kernel) of one perf.data."""
    done = subprocess.run(["perf", "report", "-i", str(path), "--no-children", "--sort", "sym", "-q",
                           "-F", "sample,sym", "-t", "|"], capture_output=True, text=True)
    symbols = Counter()
    for line in done.stdout.splitlines():
        count, _, symbol = line.partition("|")
        if count.strip().isdigit():
            symbols[symbol.strip()] += int(count.strip())
    return symbols


def main() -> int:
    out, pairs, seconds, have_perf = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
    rows = defaultdict(list)
    per_symbol = {name: defaultdict(list) for name in GATEWAYS}
    for name in GATEWAYS:
        for pair in range(1, pairs + 1):
            base = out / f"{name}.{pair}"
            requests = requests_of(Path(f"{base}.wrk").read_text())
            if requests == 0:
                print(f"{name} pair {pair}: wrk completed no requests")
                continue
            u0, s0, u1, s1, v0, v1, hz = (int(x) for x in Path(f"{base}.cpu").read_text().split())
            before, after = interrupts(Path(f"{base}.irq0")), interrupts(Path(f"{base}.irq1"))
            irq = {line: (after.get(line, 0) - before.get(line, 0)) / requests for line in IRQ_LINES}
            row = {
                "rps": requests / seconds,
                "user_us": (u1 - u0) * 1e6 / hz / requests,
                "system_us": (s1 - s0) * 1e6 / hz / requests,
                "switches": (v1 - v0) / requests,
                **{line.rstrip(":"): value for line, value in irq.items()},
            }
            row["cpu_us"] = row["user_us"] + row["system_us"]
            rows[name].append(row)
            data = Path(f"{base}.data")
            if have_perf and data.exists():
                # perf sampled SECONDS - 1 of the SECONDS of load.
                scale = 1e6 / PERF_HZ / (row["rps"] * (seconds - 1))
                symbols = perf_symbols(data)
                per_symbol[name]["(all samples)"].append(sum(symbols.values()) * scale)
                for symbol, count in symbols.items():
                    per_symbol[name][symbol].append(count * scale)
    columns = ["rps", "cpu_us", "user_us", "system_us", "switches"] + [line.rstrip(":") for line in IRQ_LINES]
    print("per request unless named; interrupts counted on every CPU")
    print(f"{'gateway':8} {'pair':>4} " + " ".join(f"{c:>10}" for c in columns))
    for name in GATEWAYS:
        for pair, row in enumerate(rows[name], 1):
            print(f"{name:8} {pair:>4} " + " ".join(f"{row[c]:>10.3f}" if c != "rps" else f"{row[c]:>10.0f}"
                                                    for c in columns))
    means = {name: {c: statistics.mean(r[c] for r in rows[name]) for c in columns} for name in GATEWAYS if rows[name]}
    if len(means) == 2:
        print("\nmeans: " + ", ".join(
            f"{c} strait/nginx {means['strait'][c] / means['nginx'][c]:.3f}" for c in ("cpu_us", "user_us", "system_us")
            if means["nginx"][c]))
    if not (have_perf and per_symbol["nginx"] and per_symbol["strait"]):
        return 0

    def mean(name: str, symbol: str) -> float:
        # A symbol missing from a pair's profile had no samples there.
        values = per_symbol[name].get(symbol, [])
        return sum(values) / pairs

    symbols = (set(per_symbol["nginx"]) | set(per_symbol["strait"])) - {"(all samples)"}
    ranked = sorted(symbols, key=lambda s: mean("strait", s) - mean("nginx", s))
    print(f"\nperf, µs per request on the gateway's core (mean of {pairs} pairs): nginx strait difference symbol")
    print(f"{mean('nginx', '(all samples)'):8.3f} {mean('strait', '(all samples)'):8.3f} "
          f"{mean('strait', '(all samples)') - mean('nginx', '(all samples)'):+8.3f}  (all samples)")
    print("-- most above nginx")
    for symbol in reversed(ranked[-25:]):
        print(f"{mean('nginx', symbol):8.3f} {mean('strait', symbol):8.3f} "
              f"{mean('strait', symbol) - mean('nginx', symbol):+8.3f}  {symbol[:100]}")
    print("-- most below nginx")
    for symbol in ranked[:15]:
        print(f"{mean('nginx', symbol):8.3f} {mean('strait', symbol):8.3f} "
              f"{mean('strait', symbol) - mean('nginx', symbol):+8.3f}  {symbol[:100]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
