"""https-keepalive: CPU per HTTPS keep-alive request, Strait against nginx (OpenSSL).

wrk (one thread, 32 keep-alive connections over TLS) to Strait and to nginx, each a TLS
reverse proxy with one worker on the gateway core in front of the same plaintext origin,
with the same certificate (ECDSA P-256, then RSA-2048), ciphers and session settings
(lab/tls.py), saturated (each in a CPU quota, the gateway the limit) and open (no quota).
The goal compares CPU per request: Strait <= 1.0x nginx.

Run alone: `bench/run https-keepalive` (`--quick`: short loads).
"""

from __future__ import annotations

from pathlib import Path

from lab import tls
from lab.context import RunContext
from lab.registry import Rendered

NAME = "https-keepalive"
TITLE = "https-keepalive: HTTPS keep-alive requests, Strait vs nginx (same certificate and ciphers)"


def run(ctx: RunContext) -> dict:
    folder = ctx.scenario_work(NAME)
    starters = tls.strait_and_nginx(ctx)

    def load(system, seconds, tag):
        return tls.wrk_https(system.h1_port, seconds, ctx.load_cpus, folder, tag)

    result = tls.compare_modes(ctx, NAME, tls.KINDS, starters, load)
    result["load"] = "wrk -t1 -c32, HTTPS keep-alive, GET /"
    return result


def render(result: dict, plot_dir: Path) -> Rendered:
    text, goals = tls.render_modes(result, "requests", "request", "cpu_us_per_request", 1.0,
                                     "https-keepalive: Strait CPU per request / nginx's")
    return Rendered(f"Load: {result['load']}.\n\n" + text, [], goals)
