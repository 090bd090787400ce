"""Talking to a Strait node from the lab: `POST /config`, `GET /status`, proxy probes,
the compiler's `configuration replaced elapsed_ms=N` log lines, and choosing between
the exact published LMDB set and its variant without key-auth."""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .configgen import ConfigSpec, GeneratedConfig, write_config

ANSI = re.compile(r"\x1b\[[0-9;]*m")
REPLACED = re.compile(r"configuration replaced.*?elapsed_ms=(\d+)|elapsed_ms=(\d+).*?configuration replaced")


def request(port: int, method: str, path: str, body: bytes | None = None,
            headers: dict | None = None, timeout: float = 120.0) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


class KeepAlive:
    """One keep-alive HTTP/1.1 connection; reconnects after an error."""

    def __init__(self, port: int):
        self.port = port
        self.connection: http.client.HTTPConnection | None = None

    def send(self, method: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
        payload = json.dumps(body).encode() if body is not None else None
        headers = {"content-type": "application/json"} if payload is not None else {}
        for attempt in range(2):
            if self.connection is None:
                self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            try:
                self.connection.request(method, path, body=payload, headers=headers)
                response = self.connection.getresponse()
                return response.status, response.read()
            except (OSError, http.client.HTTPException):
                self.connection.close()
                self.connection = None
                if attempt:
                    raise
        raise RuntimeError("unreachable")


def post_config(admin_port: int, document: bytes) -> tuple[int, bytes, float]:
    """POST /config; returns (status, body, seconds until the response arrived)."""
    started = time.monotonic()
    status, body = request(admin_port, "POST", "/config", document,
                           {"content-type": "application/json"})
    return status, body, time.monotonic() - started


def status(admin_port: int) -> dict:
    code, body = request(admin_port, "GET", "/status", timeout=10)
    if code != 200:
        raise RuntimeError(f"GET /status answered {code}")
    return json.loads(body)


def replaced_elapsed_ms(log_path: Path) -> list[int]:
    """Every `configuration replaced elapsed_ms=N` in a node's log, in order."""
    text = ANSI.sub("", log_path.read_text(errors="replace"))
    return [int(a or b) for a, b in REPLACED.findall(text)]


def rss_from_status(admin_port: int) -> int | None:
    return status(admin_port).get("memory", {}).get("rss_bytes")


@dataclass
class ChosenSet:
    """The configuration a scenario loads, and whether it is the exact published one."""

    config: GeneratedConfig
    exact: bool
    note: str

    def describe(self) -> dict:
        short = "" if self.exact else "measured without the key-auth plugins, which this Strait rejects"
        return {**self.config.describe(), "exact_published_set": self.exact, "note": self.note,
                "goal_note": short}


def validate(strait_bin: Path, path: Path) -> tuple[bool, str]:
    done = subprocess.run([str(strait_bin), "config", "validate", str(path)],
                          capture_output=True, text=True, timeout=600)
    return done.returncode == 0, (done.stdout + done.stderr).strip()


def choose_lmdb_set(strait_bin: Path, folder: Path, name: str, routes: int, consumers: int,
                    message: str = "ok") -> ChosenSet:
    """The published set (key-auth + request-termination on every route) if this Strait
    accepts it, else the same set without the key-auth plugins, saying why."""
    full = ConfigSpec(routes=routes, consumers=consumers, key_auth=True,
                      request_termination=True, message=message)
    generated = write_config(full, folder / f"{name}.json")
    accepted, output = validate(strait_bin, generated.path)
    if accepted:
        return ChosenSet(generated, True, "exact published set (key-auth + request-termination)")
    reason = _first_problem(output)
    variant = ConfigSpec(routes=routes, consumers=consumers, key_auth=False,
                         request_termination=True, message=message)
    generated = write_config(variant, folder / f"{name}-without-key-auth.json")
    return ChosenSet(generated, False, f"Strait rejected the published set ({reason}); "
                                       "measured the same set without the key-auth plugins")


def _first_problem(output: str) -> str:
    for line in output.splitlines():
        if "not implemented" in line or ":" in line and "invalid" not in line:
            return line.split(": ", 1)[-1].strip()
    return output.splitlines()[-1] if output else "unknown error"


def same_message_set(chosen: ChosenSet, folder: Path, name: str, message: str) -> GeneratedConfig:
    """The chosen set again with another request-termination message (a real change)."""
    spec = ConfigSpec(routes=chosen.config.objects.get("routes", 0),
                      consumers=chosen.config.objects.get("consumers", 0),
                      key_auth=chosen.exact, request_termination=True, message=message)
    return write_config(spec, folder / f"{name}.json")
