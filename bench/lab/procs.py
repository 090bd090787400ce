"""Processes the lab starts: pinned with taskset, tracked by PID, always stopped.

Every process goes through `Processes.start`, which records it; `Processes.stop_all`
(called from a `finally` and from signal handlers in cli.py) terminates each one by
its own PID, then kills what did not exit. Nothing here ever matches processes by name.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Child side of fork: get SIGKILL if the lab itself dies without cleaning up."""
    try:
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


@dataclass
class Managed:
    """One started process and what it is for."""

    name: str
    popen: subprocess.Popen
    log_path: Path
    stop_signal: int = signal.SIGTERM

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, limit: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-limit:]
        except OSError:
            return ""


@dataclass
class Processes:
    """The set of processes one lab run started."""

    log_dir: Path
    running: list[Managed] = field(default_factory=list)

    def start(self, name: str, argv: list[str], cpus: str | None, env: dict | None = None,
              stop_signal: int = signal.SIGTERM, cwd: Path | None = None) -> Managed:
        if cpus is not None:
            argv = ["taskset", "-c", cpus, *argv]
        log_path = self.log_dir / f"{name}.log"
        log = open(log_path, "ab")
        full_env = dict(os.environ, **(env or {}))
        popen = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=full_env,
                                 cwd=cwd, stdin=subprocess.DEVNULL, start_new_session=True,
                                 preexec_fn=_die_with_parent)
        log.close()
        managed = Managed(name, popen, log_path, stop_signal)
        self.running.append(managed)
        return managed

    def stop(self, managed: Managed, grace: float = 10.0) -> None:
        if managed.alive():
            try:
                managed.popen.send_signal(managed.stop_signal)
                managed.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                managed.popen.kill()
                managed.popen.wait(timeout=5)
            except ProcessLookupError:
                pass
        if managed in self.running:
            self.running.remove(managed)

    def stop_all(self) -> None:
        for managed in list(reversed(self.running)):
            self.stop(managed)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, managed: Managed, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not managed.alive():
            raise RuntimeError(f"{managed.name} exited early:\n{managed.log_tail()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{managed.name} did not listen on {port} within {timeout}s")


def running(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def process_tree(pid: int) -> list[int]:
    """`pid` and all its descendants (nginx master + workers)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    tree, pending = [], [pid]
    while pending:
        current = pending.pop()
        tree.append(current)
        pending.extend(children.get(current, []))
    return tree


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process tree, all threads, in seconds."""
    user, system = cpu_times(pid)
    return user + system


def cpu_times(pid: int) -> tuple[float, float]:
    """(utime, stime) of a process tree, all threads, in seconds."""
    user = system = 0
    for member in process_tree(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        user += int(fields[11])
        system += int(fields[12])
    return user / CLOCK_TICKS, system / CLOCK_TICKS


def voluntary_switches(pid: int) -> int:
    """Voluntary context switches of every thread of a process tree: each one is a thread
    that found nothing to do and slept (in epoll_wait, for a proxy worker)."""
    total = 0
    for member in process_tree(pid):
        try:
            threads = os.listdir(f"/proc/{member}/task")
        except OSError:
            continue
        for thread in threads:
            try:
                text = Path(f"/proc/{member}/task/{thread}/status").read_text()
            except OSError:
                continue
            for line in text.splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
    return total


def memory_kib(pid: int) -> dict:
    """VmRSS, VmHWM (peak RSS), RssAnon (heap and other anonymous pages) and
    RssFile (file-backed pages: the binary, LMDB's map), summed over a process
    tree, in KiB."""
    fields = {"VmRSS:": "rss_kib", "VmHWM:": "peak_rss_kib", "RssAnon:": "anon_kib", "RssFile:": "file_kib"}
    totals = dict.fromkeys(fields.values(), 0)
    for member in process_tree(pid):
        try:
            lines = Path(f"/proc/{member}/status").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            name = line.split(":", 1)[0] + ":"
            if name in fields:
                totals[fields[name]] += int(line.split()[1])
    return totals


def reset_peak_rss(pid: int) -> bool:
    """Restart VmHWM at the current RSS (`clear_refs` 5, Linux >= 4.0), so a
    later VmHWM is the peak of what happened since. False when not allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


class CpuMeter:
    """CPU seconds a process tree used between `__enter__` and `__exit__` (`seconds`, split
    into `user` and `system`), and the voluntary context switches of its threads."""

    def __init__(self, pid: int | None):
        self.pid = pid
        self.seconds: float | None = None
        self.user: float | None = None
        self.system: float | None = None
        self.switches: int | None = None

    def __enter__(self) -> "CpuMeter":
        if self.pid:
            self._start = cpu_times(self.pid)
            self._switches = voluntary_switches(self.pid)
        return self

    def __exit__(self, *exc) -> None:
        if self.pid:
            user, system = cpu_times(self.pid)
            self.user, self.system = user - self._start[0], system - self._start[1]
            self.seconds = self.user + self.system
            self.switches = voluntary_switches(self.pid) - self._switches


class CpuQuota:
    """A CPU bandwidth cap (CFS quota) that processes are moved into and out of, so a
    gateway saturates a slice of its core while the load generator on the other core can
    go much faster: on a 2-core machine, the way to measure a gateway at its limit.

    cgroup v2 (`cpu.max`) where the cpu controller is delegated, else cgroup v1
    (`cpu.cfs_quota_us`); `error` says why neither could be used. `remove()` moves what
    is left back out and deletes the group."""

    def __init__(self, name: str, share: float, period_us: int = 10_000):
        self.share, self.period_us = share, period_us
        self.group: Path | None = None
        self.parent: Path | None = None
        self.error: str | None = None
        quota_us = max(1000, int(share * period_us))
        tried = []
        for root, files in ((Path("/sys/fs/cgroup"), {"cpu.max": f"{quota_us} {period_us}"}),
                            (Path("/sys/fs/cgroup/cpu"), {"cpu.cfs_period_us": str(period_us),
                                                          "cpu.cfs_quota_us": str(quota_us)})):
            if not (root / "cgroup.procs").exists():
                tried.append(f"{root}: no cgroup there")
                continue
            group = root / name
            try:
                group.mkdir(exist_ok=True)
                for file, value in files.items():
                    (group / file).write_text(value)
            except OSError as error:
                tried.append(f"{group}: {error}")
                if group.exists():
                    try:
                        group.rmdir()
                    except OSError:
                        pass
                continue
            self.group, self.parent = group, root
            return
        self.error = "no CPU quota available (" + "; ".join(tried) + ")"

    def enter(self, pid: int) -> None:
        if self.group:
            (self.group / "cgroup.procs").write_text(str(pid))

    def leave(self, pid: int) -> None:
        if self.parent:
            try:
                (self.parent / "cgroup.procs").write_text(str(pid))
            except OSError:
                pass  # the process has exited

    def remove(self) -> None:
        if not self.group:
            return
        try:
            for pid in (self.group / "cgroup.procs").read_text().split():
                self.leave(int(pid))
            self.group.rmdir()
        except OSError:
            pass
        self.group = None
