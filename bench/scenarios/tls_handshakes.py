"""tls-handshakes: full TLS handshakes per gateway core, Strait against nginx (OpenSSL).

`openssl s_time -new` clients (four processes on the load core) open a new TLS connection
for every request (GET /, the answer read whole, then closed): every connection a full
handshake (ECDHE X25519 and the certificate's signature: ECDSA P-256, then RSA-2048). Both
gateways proxy to the same origin with the same certificate and settings (lab/tls.py) and
run saturated and open (lab/tls.py). Goal: handshakes per core >= nginx's.

Run alone: `bench/run tls-handshakes` (`--quick`: short loads).
"""

from __future__ import annotations

from pathlib import Path

from lab import tls
from lab.context import RunContext
from lab.registry import Rendered

NAME = "tls-handshakes"
TITLE = "tls-handshakes: full TLS handshakes per core, Strait vs nginx"
CLIENTS = 4


def run(ctx: RunContext) -> dict:
    starters = tls.strait_and_nginx(ctx)

    def load(system, seconds, tag):
        return tls.s_time(system.h1_port, seconds, False, ctx.load_cpus, CLIENTS)

    result = tls.compare_modes(ctx, NAME, tls.KINDS, starters, load)
    result["load"] = f"{CLIENTS} x openssl s_time -new -www /: a new connection and full handshake per request"
    return result


def render(result: dict, plot_dir: Path) -> Rendered:
    text, goals = tls.render_modes(result, "handshakes", "handshake", "per_core_s", 1.0,
                                     "tls-handshakes: Strait full handshakes per core / nginx's")
    return Rendered(f"Load: {result['load']}.\n\n" + text, [], goals)
