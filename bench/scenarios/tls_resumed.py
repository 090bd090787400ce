"""tls-resumed: resumed TLS handshakes per gateway core, Strait against nginx (OpenSSL).

`openssl s_time -reuse` clients (four processes on the load core) open a new TLS
connection for every request, each resuming the session of the client's first connection
(TLS 1.3 session tickets, which both gateways issue; the report counts the connections
the client saw resumed). Same gateways, certificate and quota as tls-handshakes
(lab/tls.py). Goal: resumed handshakes per core >= nginx's.

Run alone: `bench/run tls-resumed` (`--quick`: short loads).
"""

from __future__ import annotations

from pathlib import Path

from lab import tls
from lab.context import RunContext
from lab.registry import Rendered

NAME = "tls-resumed"
TITLE = "tls-resumed: resumed TLS handshakes per core, Strait vs nginx"
CLIENTS = 4


def run(ctx: RunContext) -> dict:
    starters = tls.strait_and_nginx(ctx)

    def load(system, seconds, tag):
        return tls.s_time(system.h1_port, seconds, True, ctx.load_cpus, CLIENTS)

    # The certificate only matters to the first handshake: one kind is enough.
    result = tls.compare_modes(ctx, NAME, ("ecdsa",), starters, load)
    result["load"] = f"{CLIENTS} x openssl s_time -reuse -www /: a new connection per request, resumed"
    return result


def render(result: dict, plot_dir: Path) -> Rendered:
    text, goals = tls.render_modes(result, "handshakes", "handshake", "per_core_s", 1.0,
                                     "tls-resumed: Strait resumed handshakes per core / nginx's")
    return Rendered(f"Load: {result['load']}.\n\n" + text, [], goals)
