"""Bounded loads with wrk (HTTP/1.1 keep-alive) and h2load (HTTP/2, h2c prior
knowledge), pinned to the load-generator core; each returns one sample dict:

    requests, duration_s, rps, errors, non_2xx, latency_us {mean, stdev, min, max},
    percentiles_us [[p, us], ...] (the CDF grid), p50_us, p90_us, p99_us, p99_9_us

plus, when a gateway PID is given, gateway_cpu_s and cpu_us_per_request.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from . import stats
from .procs import CpuMeter, memory_kib, running

LUA_DIR = Path(__file__).resolve().parent.parent / "lua"


def load_threads() -> int:
    """Threads per wrk/h2load run: STRAIT_BENCH_LOAD_THREADS, default 1."""
    return positive_env("STRAIT_BENCH_LOAD_THREADS")


def positive_env(name: str) -> int:
    """A count from the environment, 1 when unset; anything but a whole number >= 1 stops
    the lab with the variable's name."""
    raw = os.environ.get(name, "1")
    value = int(raw) if raw.strip().isdigit() else 0
    if value < 1:
        raise SystemExit(f"{name}={raw!r}: expected a whole number of at least 1")
    return value


@dataclass
class Load:
    """What to send, for how long, from which cores."""

    port: int
    protocol: str = "h1"          # "h1" (wrk) or "h2" (h2load, h2c prior knowledge)
    scheme: str = "http"          # "https": wrk over TLS (keep-alive)
    path: str = "/"
    duration_s: int = 10
    connections: int = 32
    streams: int = 10             # h2 only: concurrent streams per connection
    targets: Path | None = None   # wrk only: random path/key per request (configgen output)
    cpus: str = "1"
    # wrk/h2load threads (-t). One by default: on the 2-core layout the load generator has
    # one core. On a bigger machine STRAIT_BENCH_LOAD_THREADS gives it as many as
    # STRAIT_BENCH_LOAD_CPUS holds, so that it and the origin stay far from being the limit.
    threads: int = field(default_factory=load_threads)
    work_dir: Path = Path("/tmp")
    headers: dict = field(default_factory=dict)
    # wrk only: each connection waits this long (ms, whole) after a response before its next
    # request, which caps the rate below the gateway's capacity (latency under a set load,
    # not at saturation). 0: closed loop, as fast as responses come.
    pace_ms: int = 0
    # wrk only: a scenario's own Lua (request()/response() etc.) in place of the random
    # route script, and the arguments after `--` that its init(args) reads.
    lua: str = ""
    script_args: list = field(default_factory=list)
    # wrk only: a script that finishes its work before duration_s writes a line starting
    # with this marker to stderr; the lab then interrupts wrk (SIGINT: it stops and
    # reports what it did). The whole run is still bounded by timeout_s.
    stop_marker: str = ""
    timeout_s: float | None = None

    @property
    def url(self) -> str:
        host = "localhost" if self.scheme == "https" else "127.0.0.1"
        return f"{self.scheme}://{host}:{self.port}{self.path}"


def run(load: Load, gateway_pid: int | None = None, tag: str = "load") -> dict:
    """Run one bounded load; measure the gateway's CPU time and memory around it."""
    runner = _run_wrk if load.protocol == "h1" else _run_h2load
    with CpuMeter(gateway_pid) as meter:
        sample = runner(load, tag)
    if gateway_pid and not running(gateway_pid):
        raise RuntimeError(f"the gateway (pid {gateway_pid}) exited during the load")
    if gateway_pid:
        add_gateway_cpu(sample, meter, gateway_pid)
    return sample


def add_gateway_cpu(sample: dict, meter: CpuMeter, gateway_pid: int) -> None:
    """The gateway's CPU over the sample: seconds, share of a core, per request (user, system,
    sleeps), work per CPU second, and its memory."""
    sample["gateway_cpu_s"] = meter.seconds
    # Share of one core the gateway used: near 100% means the gateway, not the load
    # generator's core, limited the throughput.
    sample["gateway_core_busy"] = meter.seconds / sample["duration_s"] if sample["duration_s"] else None
    if sample["requests"]:
        sample["cpu_us_per_request"] = meter.seconds * 1e6 / sample["requests"]
        sample["user_us_per_request"] = meter.user * 1e6 / sample["requests"]
        sample["system_us_per_request"] = meter.system * 1e6 / sample["requests"]
        sample["sleeps_per_request"] = meter.switches / sample["requests"]
        if meter.seconds:
            sample["per_core_s"] = sample["requests"] / meter.seconds
    sample.update(memory_kib(gateway_pid))


def _bounded(argv: list[str], timeout: float) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[2]} failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout


def _until_marker(argv: list[str], marker: str, timeout: float) -> str:
    """Run wrk until its script writes `marker` to stderr (then SIGINT) or it ends."""
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               stdin=subprocess.DEVNULL)
    timer = threading.Timer(timeout, process.kill)
    timer.start()
    errors = []
    try:
        for line in process.stderr:
            errors.append(line)
            if line.startswith(marker):
                process.send_signal(signal.SIGINT)
        out = process.stdout.read()
        process.wait()
    finally:
        timer.cancel()
    if process.returncode != 0:
        raise RuntimeError(f"{argv[2]} failed ({process.returncode}): {''.join(errors)[-2000:]}")
    return out + "".join(errors)


def _wrk_script(load: Load, tag: str) -> Path:
    parts = []
    if load.lua:
        parts.append(load.lua)
    elif load.targets:
        parts.append((LUA_DIR / "random_route.lua").read_text())
    elif load.headers:
        headers = "".join(f'wrk.headers["{k}"] = "{v}"\n' for k, v in load.headers.items())
        parts.append(headers)
    if load.pace_ms:
        parts.append(f"function delay()\n   return {int(load.pace_ms)}\nend\n")
    parts.append((LUA_DIR / "report.lua").read_text())
    script = load.work_dir / f"wrk-{tag}.lua"
    script.write_text("\n".join(parts))
    return script


def _run_wrk(load: Load, tag: str) -> dict:
    script = _wrk_script(load, tag)
    argv = ["taskset", "-c", load.cpus, "wrk", f"-t{load.threads}", f"-c{load.connections}",
            f"-d{load.duration_s}s", "--timeout", "5s", "-s", str(script), load.url]
    if load.lua:
        argv += ["--", *(str(arg) for arg in load.script_args)]
    elif load.targets:
        argv += ["--", str(load.targets)]
    timeout = load.timeout_s or load.duration_s + 30
    out = _until_marker(argv, load.stop_marker, timeout) if load.stop_marker else _bounded(argv, timeout)
    match = re.search(r"^LAB_JSON (.*)$", out, re.M)
    if not match:
        raise RuntimeError(f"wrk printed no result:\n{out[-2000:]}")
    raw = json.loads(match.group(1))
    errors = raw["errors"]
    duration_s = raw["duration_us"] / 1e6
    sample = {
        "tool": "wrk", "requests": raw["requests"], "duration_s": duration_s,
        "rps": raw["requests"] / duration_s if duration_s else 0.0,
        "errors": errors["connect"] + errors["read"] + errors["write"] + errors["timeout"],
        "non_2xx": errors["status"],
        "latency_us": raw["latency_us"], "percentiles_us": raw["percentiles_us"],
    }
    return _with_headline(sample)


def _run_h2load(load: Load, tag: str) -> dict:
    log_file = load.work_dir / f"h2load-{tag}.tsv"
    argv = ["taskset", "-c", load.cpus, "h2load", f"-t{load.threads}", f"-c{load.connections}",
            f"-m{load.streams}", f"-D{load.duration_s}", "--warm-up-time=0",
            f"--log-file={log_file}"]
    argv += [arg for k, v in load.headers.items() for arg in ("-H", f"{k}: {v}")]
    out = _bounded(argv + [load.url], load.duration_s + 30)
    sample = _parse_h2load(out)
    durations, non_2xx = _read_h2load_log(log_file)
    log_file.unlink(missing_ok=True)
    sample["non_2xx"] = non_2xx
    sample["percentiles_us"] = stats.grid_from_values(durations)
    if durations:
        summary = stats.summarize(durations)
        sample["latency_us"] = {k: summary[k] for k in ("mean", "stdev", "min", "max")}
    return _with_headline(sample)


def _parse_h2load(out: str) -> dict:
    finished = re.search(r"finished in ([\d.]+)(m?s), ([\d.]+) req/s", out)
    requests = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                         r"(\d+) failed, (\d+) errored, (\d+) timeout", out)
    if not finished or not requests:
        raise RuntimeError(f"h2load printed no result:\n{out[-2000:]}")
    duration_s = float(finished.group(1)) / (1000.0 if finished.group(2) == "ms" else 1.0)
    done = int(requests.group(3))
    return {
        "tool": "h2load", "requests": done, "duration_s": duration_s,
        "rps": done / duration_s if duration_s else 0.0,
        "errors": int(requests.group(6)) + int(requests.group(7)),
        "failed": int(requests.group(5)),
    }


def _read_h2load_log(path: Path) -> tuple[list[float], int]:
    durations, non_2xx = [], 0
    with open(path) as log:
        for line in log:
            columns = line.split("\t")
            if len(columns) < 3:
                continue
            status = int(columns[1])
            if not 200 <= status < 300:
                non_2xx += 1
            durations.append(float(columns[2]))
    return durations, non_2xx


def _with_headline(sample: dict) -> dict:
    points = sample.get("percentiles_us") or []
    for p in stats.HEADLINE_PERCENTILES:
        key = f"p{p:g}_us".replace(".", "_")
        sample[key] = stats.at_percentile(points, p) if points else None
    return sample
