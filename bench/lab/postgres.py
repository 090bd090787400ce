"""A throwaway PostgreSQL server for scenarios that need one (Debian's `postgresql`, which
bench/setup.sh installs): initdb in the run's folder, fsync on, trust authentication on
127.0.0.1 only."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import time
from pathlib import Path

from .context import RunContext
from .procs import free_port

USER = DATABASE = "strait"


def _pg_bin() -> Path:
    root = Path("/usr/lib/postgresql")
    versions = sorted((int(p.name), p / "bin") for p in root.iterdir() if p.name.isdigit()) if root.is_dir() else []
    if not versions:
        raise RuntimeError("PostgreSQL is not installed (bench/setup.sh installs Debian's postgresql)")
    return versions[-1][1]


class PgServer:
    """initdb + postgres on a free port, as the `postgres` user when the lab runs as root."""

    def __init__(self, ctx: RunContext, folder: Path):
        self.bin, self.port = _pg_bin(), free_port()
        self.data = folder / "pgdata"
        if self.data.exists():
            shutil.rmtree(self.data)
        self.as_user = []
        if os.geteuid() == 0:
            account = pwd.getpwnam("postgres")
            folder.mkdir(parents=True, exist_ok=True)
            os.chown(folder, account.pw_uid, account.pw_gid)
            # setpriv execs (no process in between to forward signals).
            self.as_user = ["setpriv", "--reuid=postgres", "--regid=postgres", "--clear-groups"]
        subprocess.run([*self.as_user, str(self.bin / "initdb"), "-D", str(self.data), "-U", USER,
                        "--auth=trust", "-E", "UTF8", "--locale=C"], check=True, capture_output=True)
        argv = [*self.as_user, str(self.bin / "postgres"), "-D", str(self.data), "-p", str(self.port),
                "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
                "-c", "max_connections=100"]
        self.process = ctx.procs.start("postgres", argv, ctx.load_cpus, stop_signal=2)  # SIGINT: fast shutdown
        deadline = time.monotonic() + 60
        while subprocess.run([str(self.bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
                             capture_output=True).returncode != 0:
            if time.monotonic() > deadline or not self.process.alive():
                raise RuntimeError(f"postgres did not start:\n{self.process.log_tail()}")
            time.sleep(0.1)
        subprocess.run([str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", USER,
                        DATABASE], check=True, capture_output=True)

    def sql(self, query: str) -> str:
        done = subprocess.run([str(self.bin / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", USER,
                               "-d", DATABASE, "-Atc", query], check=True, capture_output=True, text=True)
        return done.stdout.strip()

    def env(self) -> dict:
        return {"STRAIT_DATABASE": "postgres", "STRAIT_PG_HOST": "127.0.0.1", "STRAIT_PG_PORT": str(self.port),
                "STRAIT_PG_USER": USER, "STRAIT_PG_DATABASE": DATABASE}

    def bootstrap(self, strait_bin: Path) -> None:
        """`strait migrations bootstrap` on this server's database."""
        subprocess.run([str(strait_bin), "migrations", "bootstrap"], env=dict(os.environ, **self.env()),
                       check=True, capture_output=True)
