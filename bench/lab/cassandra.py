"""A throwaway Apache Cassandra node for scenarios that need one: the tests' launcher
(`cassandra-server`, tests/src/bin/cassandra-server.rs: Cassandra 5.0 from Maven Central in
target/tools/cassandra/libs, which scripts/test.sh resolves; Java 17), pinned with taskset to
the load cores (the JVM inherits the affinity; `STRAIT_BENCH_CASSANDRA_CPUS` names others),
guardrails on, role `strait`.

The launcher exits once the node serves and leaves it running: `stop()` ends it by the PID it
wrote, and the scenario calls it from a `finally`."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from .context import RunContext
from .procs import free_port, running

USER, PASSWORD = "strait", "strait-secret"
REPO = Path(__file__).resolve().parents[2]


def _launcher() -> Path:
    binary = REPO / "target" / "debug" / "cassandra-server"
    subprocess.run(["cargo", "build", "-q", "-p", "strait-e2e", "--bin", "cassandra-server"], cwd=REPO,
                   check=True)
    return binary


class CassandraServer:
    def __init__(self, ctx: RunContext, folder: Path, keyspace: str = "strait_bench"):
        self.folder, self.port, self.keyspace = folder, free_port(), keyspace
        folder.mkdir(parents=True, exist_ok=True)
        # STRAIT_BENCH_CASSANDRA_CPUS gives the node other cores (all of them: "0-1" here), to
        # see what the store does when it is not the load core that limits it.
        cpus = os.environ.get("STRAIT_BENCH_CASSANDRA_CPUS", "").strip() or ctx.load_cpus
        ctx.log(f"starting Cassandra on 127.0.0.1:{self.port} (cores {cpus})")
        done = subprocess.run(["taskset", "-c", cpus, str(_launcher()), str(folder), str(self.port)],
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"Cassandra did not start: {done.stdout}{done.stderr}")
        self.pid = int((folder / "cassandra.pid").read_text().strip())

    def env(self) -> dict:
        return {"STRAIT_DATABASE": "cassandra", "STRAIT_CASSANDRA_CONTACT_POINTS": "127.0.0.1",
                "STRAIT_CASSANDRA_PORT": str(self.port), "STRAIT_CASSANDRA_KEYSPACE": self.keyspace,
                "STRAIT_CASSANDRA_USERNAME": USER, "STRAIT_CASSANDRA_PASSWORD": PASSWORD}

    def bootstrap(self, strait_bin: Path) -> None:
        """`strait migrations bootstrap` on this node's keyspace."""
        subprocess.run([str(strait_bin), "migrations", "bootstrap"], env=dict(os.environ, **self.env()),
                       check=True, capture_output=True, timeout=300)

    def disk_bytes(self) -> int:
        """Blocks in use by the node's SSTables and commit log."""
        total = 0
        for path in (self.folder / "data").rglob("*"):
            if path.is_file():
                total += path.stat().st_blocks * 512
        return total

    def stop(self) -> None:
        if not running(self.pid):
            return
        os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while running(self.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if running(self.pid):
            os.kill(self.pid, signal.SIGKILL)
