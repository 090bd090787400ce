"""What every scenario gets: paths, the Strait binary, core layout, load lengths,
the process registry, and a logger. One `RunContext` per `bench/run` invocation."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .loadgen import load_threads
from .procs import Processes
from .systems import origin_workers

BENCH_DIR = Path(__file__).resolve().parent.parent
REPO_DIR = BENCH_DIR.parent


@dataclass
class Timing:
    """Load lengths and repetitions; `--quick` shrinks all of them."""

    rounds: int = 5
    duration_s: int = 10
    warmup_s: int = 2
    push_load_s: int = 20
    push_every_s: float = 2.0
    post_samples: int = 10

    @classmethod
    def quick(cls) -> "Timing":
        return cls(rounds=2, duration_s=2, warmup_s=1, push_load_s=4, push_every_s=2.0, post_samples=3)


@dataclass
class RunContext:
    out_dir: Path
    strait_bin: Path
    quick: bool
    timing: Timing
    command: str
    gateway_cpus: str = "0"
    load_cpus: str = "1"
    procs: Processes = field(init=False)
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.procs = Processes(self.work_dir)

    @property
    def bench_dir(self) -> Path:
        return BENCH_DIR

    @property
    def work_dir(self) -> Path:
        return self.out_dir / "work"

    def scenario_work(self, name: str) -> Path:
        folder = self.work_dir / name
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def log(self, message: str) -> None:
        elapsed = time.monotonic() - self.started
        print(f"[lab {elapsed:7.1f}s] {message}", file=sys.stderr, flush=True)


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(REPO_DIR), *args], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info() -> dict:
    mem_kib = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    return {"nproc": os.cpu_count(), "cpu_model": cpu_model(), "kernel": platform.release(),
            "memory_gib": round(mem_kib / 1024 / 1024, 1), "os": _os_name()}


def _os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return platform.system()


def load_average() -> float:
    """1-minute load average: anything well above the lab's own processes means noise."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return -1.0


def run_metadata(ctx: RunContext, tools: dict) -> dict:
    dirty = _git("status", "--porcelain", "--untracked-files=no") not in ("", "unknown")
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _git("rev-parse", "--short", "HEAD") + ("-dirty" if dirty else ""),
        "command": ctx.command,
        "quick": ctx.quick,
        "machine": machine_info(),
        "layout": layout(ctx),
        "timing": ctx.timing.__dict__,
        "tools": tools,
        "strait_build": strait_build(ctx.strait_bin),
        "load_average_at_start": load_average(),
    }


def layout(ctx: RunContext) -> dict:
    """Where each part ran: the gateway's cores, and the load generator's and origin's."""
    threads, workers = load_threads(), origin_workers()
    return {
        "gateway_cpus": ctx.gateway_cpus, "load_cpus": ctx.load_cpus,
        "load_threads": threads, "origin_workers": workers,
        "description": (f"gateway under test on core {ctx.gateway_cpus} (1 worker); "
                        f"load generator (wrk/h2load, {threads} thread{'s' if threads > 1 else ''}), "
                        f"origin (nginx, {workers} worker{'s' if workers > 1 else ''}) and this "
                        f"harness on core{'s' if len(ctx.load_cpus) > 1 else ''} {ctx.load_cpus}; "
                        "everything on 127.0.0.1"),
    }


def strait_build(binary: Path) -> str:
    """How the measured binary was built: scripts/release-build.sh leaves a BUILD file
    beside target/dist/strait (`pgo yes|no`, `commit ...`); any other binary is unknown."""
    try:
        fields = dict(line.split(" ", 1) for line in (binary.parent / "BUILD").read_text().splitlines()
                      if " " in line)
    except OSError:
        return f"{binary} (not from scripts/release-build.sh: build unknown)"
    pgo = "profile-guided" if fields.get("pgo") == "yes" else "without PGO"
    return f"{binary.name} from scripts/release-build.sh, {pgo}, built at `{fields.get('commit', '?')}`"
