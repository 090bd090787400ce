#!/usr/bin/env python3
"""Run the end-to-end suites (tests/tests/*.rs), several binaries at a time.

`cargo test` runs one test binary after the other, and an end-to-end suite spends most of its
time waiting on real servers and processes: run one after the other, the suites kept this
2-core machine about half busy (351 CPU-seconds in 339 s). This builds them with cargo, then
runs `--jobs` binaries at once (each with its own `--test-threads`), the longest known ones
first, printing each suite's output whole when it ends. It fails when any suite fails, naming
them, as `cargo test` would.

    scripts/e2e-suites.py [--jobs N] [--skip SUITE ...] [--only SUITE ...] [-- TEST-ARGS...]

scripts/test.sh runs it three times: on the embedded store; on PostgreSQL with the suites that
do not depend on the store skipped; and the Admin API suites on Cassandra.
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Measured on this machine (seconds, first pass): started first so that they do not end last.
LONGEST = [
    "conformance",
    "plugins_zipkin",
    "deck_integration",
    "wasm_filters",
    "hybrid",
    "upstreams",
    "memory",
    "config_post",
    "background",
    "proxy_http",
]


def executables() -> dict:
    """Build the suites; their names and binaries."""
    build = subprocess.run(
        ["cargo", "test", "-p", "strait-e2e", "--no-run", "--message-format=json-render-diagnostics"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        check=True,
    )
    found = {}
    for line in build.stdout.decode().splitlines():
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            continue
        if message.get("reason") != "compiler-artifact" or not message.get("executable"):
            continue
        target = message["target"]
        if "test" in target["kind"]:
            found[target["name"]] = message["executable"]
        elif message.get("profile", {}).get("test"):
            found[f"{target['name']} (unit tests)"] = message["executable"]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("STRAIT_E2E_JOBS", "2")))
    parser.add_argument("--skip", nargs="*", default=[], help="suites not to run")
    parser.add_argument("--only", nargs="*", default=[], help="run only these suites")
    parser.add_argument("test_args", nargs="*", help="passed to every test binary (after --)")
    args = parser.parse_args()
    suites = {name: exe for name, exe in executables().items()
              if name not in args.skip and (not args.only or name in args.only)}
    missing = [name for name in args.only if name not in suites]
    if missing:
        print(f"== no such suite: {' '.join(missing)}", file=sys.stderr)
        return 1
    order = [name for name in LONGEST if name in suites]
    order += sorted(name for name in suites if name not in order)
    print_lock = threading.Lock()
    failed = []

    def run(name: str) -> None:
        started = time.monotonic()
        done = subprocess.run(
            [suites[name], *args.test_args],
            cwd=ROOT / "tests",
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        took = time.monotonic() - started
        with print_lock:
            print(f"     Running tests/{name}.rs ({took:.1f} s, exit {done.returncode})", flush=True)
            sys.stdout.buffer.write(done.stdout)
            sys.stdout.flush()
            if done.returncode != 0:
                failed.append(name)

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(run, order))
    print(f"== {len(order)} end-to-end suites in {time.monotonic() - started:.0f} s, {args.jobs} at a time")
    if failed:
        print(f"== failed: {' '.join(sorted(failed))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
