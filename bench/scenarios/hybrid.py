"""hybrid: a control plane serving 100 data planes (docs/hybrid.md).

Layout: the control plane (CP) alone on the gateway core. On the load core: one real data
plane process (DP), the origin, and 100 simulated data planes. The simulated DPs are
asyncio clients of the real protocol in this harness: TLS 1.3 with the cluster certificate,
a hello, frames read, and acks, pongs and reconnects with the real DP's backoff and jitter.

Stages:

a. **One route added to 10,000.** The CP starts with 10,000 routes; the real DP and the 100
   simulated DPs sync. Then 20 routes are added one at a time through the CP's Admin API. For
   each: the time from the POST to each simulated DP's receipt of the change, and to the real
   DP proxying it; and the bytes each DP received for it, against the route's own JSON size.
b. **A CP restart with 100 DPs connected.** wrk loads the real DP throughout. The CP is
   stopped (SIGTERM) and started again on the same prefix. Reported: when each simulated DP
   reconnected after the CP was back (the spread the jitter gives), and the real DP's errors
   and non-2xx answers (none means no DP stopped serving).
c. **1,000,000 consumers with key-auth credentials** (`--quick`: 100,000). A CP starts with
   them. A fresh real DP syncs: the time from its start to serving the CP's version, its RSS
   once synced and its peak anonymous memory during the sync (sampled every 50 ms; goal
   < 1 GiB), beside VmHWM, which also counts the LMDB copy's file pages. Then 100 simulated DPs ask for the whole configuration at once: the
   CP's CPU seconds and peak RSS while it serves them, and the time until all have it.

Run alone: `bench/run hybrid` (about 6 minutes; `--quick` about 2).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import ssl
import struct
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
import zlib
from pathlib import Path

from lab import loadgen, systems
from lab.configgen import ConfigSpec, write_config
from lab.context import RunContext
from lab.procs import cpu_seconds, free_port, memory_kib, wait_for_port
from lab.registry import Goal, Rendered
from lab.report import fmt, table

NAME = "hybrid"
TITLE = "hybrid: one route to 100 data planes, a control plane restart, 1M consumers to a fresh data plane"
SIM_DPS = 100
ROUTE_ADDS = 20
DEFLATED = 1 << 31
BACKOFF_FIRST_S, BACKOFF_MAX_S = 0.5, 30.0


# ---------------------------------------------------------------- simulated data planes

class SimDataPlane:
    """One data plane of the real protocol, without a proxy. `parse`: decode deflated
    frames (the parts of a whole configuration); off, they are only counted."""

    def __init__(self, index: int, port: int, tls: ssl.SSLContext, plugins: list[str], parse: bool):
        self.node_id = str(uuid.uuid4())
        self.version_text = "0.0.0"   # set to the control plane's own version before starting
        self.index, self.port, self.tls, self.plugins, self.parse = index, port, tls, plugins, parse
        self.version = 0
        self.received: list[tuple[float, str, int, int]] = []   # (monotonic, type, version, bytes)
        self.connected_at: list[float] = []
        self.stop = False

    async def run(self) -> None:
        attempt = 0
        while not self.stop:
            try:
                await self._session()
                attempt = 0
            except (OSError, asyncio.IncompleteReadError, ssl.SSLError, ConnectionError):
                pass
            if self.stop:
                return
            # The real DP's backoff: 0.5 s doubling to 30 s, each wait in [half, all].
            ceiling = min(BACKOFF_FIRST_S * (2 ** min(attempt, 10)), BACKOFF_MAX_S)
            attempt += 1
            await asyncio.sleep(ceiling * random.uniform(0.5, 1.0))

    async def _send(self, writer, message: dict) -> None:
        body = json.dumps(message).encode()
        writer.write(struct.pack(">I", len(body)) + body)
        await writer.drain()

    async def _session(self) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port, ssl=self.tls,
                                                       server_hostname="kong_clustering")
        try:
            self.connected_at.append(time.monotonic())
            await self._send(writer, {"type": "hello", "protocol": 1, "node_id": self.node_id,
                                      "hostname": f"sim-{self.index}", "version": self.version_text,
                                      "plugins": self.plugins, "config_version": self.version,
                                      "config_hash": ""})
            transfer = 0   # bytes of the whole configuration under way
            while not self.stop:
                header = struct.unpack(">I", await reader.readexactly(4))[0]
                length = header & ~DEFLATED
                if not self.parse and header & DEFLATED:
                    # A part of a whole configuration: counted, not decoded.
                    left = length
                    while left:
                        left -= len(await reader.read(min(left, 1 << 20)))
                    transfer += 4 + length
                    continue
                payload = await reader.readexactly(length)
                if header & DEFLATED:
                    payload = zlib.decompressobj(-15).decompress(payload)
                message = json.loads(payload)
                kind = message["type"]
                if kind == "full_start":
                    transfer = 4 + length
                elif kind == "full_batch":
                    transfer += 4 + length
                elif kind == "full_end":
                    self.version = message["version"]
                    self.received.append((time.monotonic(), "full", self.version, transfer + 4 + length))
                    await self._send(writer, {"type": "ack", "version": self.version, "hash": ""})
                elif kind == "changes":
                    self.version = message["version"]
                    self.received.append((time.monotonic(), kind, self.version, 4 + length))
                    await self._send(writer, {"type": "ack", "version": self.version, "hash": ""})
                elif kind == "ping":
                    await self._send(writer, {"type": "pong"})
        finally:
            writer.close()


class Fleet:
    """The simulated data planes on an event loop of their own (a thread)."""

    def __init__(self, count: int, port: int, cert: Path, key: Path, plugins: list[str], parse: bool):
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        tls.minimum_version = ssl.TLSVersion.TLSv1_3
        tls.load_cert_chain(cert, key)
        # The simulation checks the protocol, not the CP's certificate.
        tls.check_hostname = False
        tls.verify_mode = ssl.CERT_NONE
        self.planes = [SimDataPlane(i, port, tls, plugins, parse) for i in range(count)]
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(asyncio.gather(*(p.run() for p in self.planes)))

    def start(self, version_text: str) -> None:
        for plane in self.planes:
            plane.version_text = version_text
        self.thread.start()

    def stop(self) -> None:
        for plane in self.planes:
            plane.stop = True
        self.thread.join(timeout=40)

    def all_at(self, version: int) -> bool:
        return all(p.version >= version for p in self.planes)

    def wait_all_at(self, version: int, limit_s: float) -> float:
        started = time.monotonic()
        while not self.all_at(version):
            if time.monotonic() - started > limit_s:
                behind = sum(1 for p in self.planes if p.version < version)
                raise RuntimeError(f"{behind} simulated data planes never reached version {version}")
            time.sleep(0.005)
        return time.monotonic() - started


# ---------------------------------------------------------------- processes

def _admin(port: int, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def _status(port: int) -> int:
    return _admin(port, "GET", "/status")[1]["config_version"]


class Cluster:
    def __init__(self, ctx: RunContext, folder: Path):
        self.ctx, self.folder = ctx, folder
        self.cert, self.key = folder / "cluster.crt", folder / "cluster.key"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-keyout", str(self.key), "-out", str(self.cert), "-days", "30",
                        "-subj", "/CN=kong_clustering"], check=True, capture_output=True)
        self.cluster_port = free_port()

    def tls_env(self) -> dict:
        return {"STRAIT_CLUSTER_CERT": str(self.cert), "STRAIT_CLUSTER_CERT_KEY": str(self.key),
                "STRAIT_WORKER_THREADS": "1", "STRAIT_LOG_LEVEL": "info", "STRAIT_PROXY_ERROR_LOG": "stderr",
                "STRAIT_PROXY_ACCESS_LOG": "off", "STRAIT_STATUS_LISTEN": "off", "STRAIT_ADMIN_GUI_LISTEN": "off"}

    def start_cp(self, name: str, config: Path | None, prefix: Path, admin: int):
        env = dict(self.tls_env(), STRAIT_ROLE="control_plane", STRAIT_PREFIX=str(prefix),
                   STRAIT_CLUSTER_LISTEN=f"127.0.0.1:{self.cluster_port}",
                   STRAIT_ADMIN_LISTEN=f"127.0.0.1:{admin}")
        if config is not None:
            env["STRAIT_DECLARATIVE_CONFIG"] = str(config)
        process = self.ctx.procs.start(name, [str(self.ctx.strait_bin), "start"], self.ctx.gateway_cpus, env=env)
        wait_for_port(admin, process, timeout=600)
        wait_for_port(self.cluster_port, process, timeout=60)
        return process

    def start_dp(self, name: str):
        prefix = self.folder / f"{name}-prefix"
        shutil.rmtree(prefix, ignore_errors=True)
        proxy, admin = free_port(), free_port()
        env = dict(self.tls_env(), STRAIT_ROLE="data_plane", STRAIT_DATABASE="off", STRAIT_PREFIX=str(prefix),
                   STRAIT_CLUSTER_CONTROL_PLANE=f"127.0.0.1:{self.cluster_port}",
                   STRAIT_PROXY_LISTEN=f"127.0.0.1:{proxy}", STRAIT_ADMIN_LISTEN=f"127.0.0.1:{admin}")
        process = self.ctx.procs.start(name, [str(self.ctx.strait_bin), "start"], self.ctx.load_cpus, env=env)
        wait_for_port(admin, process, timeout=120)
        return process, proxy, admin


def _until_proxied(port: int, path: str, limit_s: float = 30.0) -> float:
    started = time.monotonic()
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
                if reply.status == 200:
                    return time.monotonic() - started
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        if time.monotonic() - started > limit_s:
            raise RuntimeError(f"{path} was never proxied")
        time.sleep(0.002)


def _percentiles(values: list[float]) -> dict:
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None  # noqa: E731
    return {"n": len(ordered), "p50": pick(0.50), "p99": pick(0.99), "max": ordered[-1] if ordered else None}


# ---------------------------------------------------------------- stages

def _stage_routes(ctx: RunContext, cluster: Cluster, origin_url: str) -> dict:
    folder = cluster.folder
    config = write_config(ConfigSpec(routes=10_000, service_url=origin_url), folder / "routes.json")
    admin = free_port()
    cp = cluster.start_cp("cp-routes", config.path, folder / "cp-routes-prefix", admin)
    version = _status(admin)
    dp, dp_proxy, dp_admin = cluster.start_dp("dp-routes")
    plugins = _admin(admin, "GET", "/plugins/enabled")[1]["enabled_plugins"]
    # Whole configurations are counted, not decoded: decoding 100 of them in Python
    # would measure this harness. Changes (the point of the stage) are decoded.
    fleet = Fleet(SIM_DPS, cluster.cluster_port, cluster.cert, cluster.key, plugins, parse=False)
    fleet.start(_admin(admin, "GET", "/")[1]["strait_version"])
    full_s = fleet.wait_all_at(version, 120)
    full_bytes = [p.received[-1][3] for p in fleet.planes]
    while _status(dp_admin) != version:
        time.sleep(0.05)
    ctx.log(f"{NAME}: 10,000 routes: {SIM_DPS} simulated DPs had the whole configuration {full_s:.2f} s "
            f"after connecting ({statistics_mean(full_bytes) / 1024:.0f} KiB each)")
    services = _admin(admin, "GET", "/services")[1]["data"]
    service = services[0]["id"]
    latencies, dp_latencies, delta_bytes, route_bytes = [], [], [], []
    for n in range(ROUTE_ADDS):
        route = {"name": f"added-{n}", "paths": [f"/added-{n}"]}
        sent = time.monotonic()
        code, created = _admin(admin, "POST", f"/services/{service}/routes", route)
        if code != 201:
            raise RuntimeError(f"adding a route: {code} {created}")
        version = _status(admin)
        dp_latencies.append(_until_proxied(dp_proxy, f"/added-{n}"))
        fleet.wait_all_at(version, 10)
        for plane in fleet.planes:
            arrived = next(r for r in plane.received if r[2] == version)
            latencies.append(arrived[0] - sent)
            delta_bytes.append(arrived[3])
        route_bytes.append(len(json.dumps(created, separators=(",", ":"))))
        time.sleep(0.2)
    result = {
        "routes": 10_000, "data_planes": SIM_DPS + 1, "full_sync_s": full_s,
        "full_bytes_per_dp": statistics_mean(full_bytes),
        "route_adds": ROUTE_ADDS,
        "sim_latency_ms": {k: (v * 1000 if isinstance(v, float) else v)
                           for k, v in _percentiles(latencies).items()},
        "dp_latency_ms": {k: (v * 1000 if isinstance(v, float) else v)
                          for k, v in _percentiles(dp_latencies).items()},
        "bytes_per_dp_per_route": statistics_mean(delta_bytes),
        "route_json_bytes": statistics_mean(route_bytes),
        "cp_memory_kib": memory_kib(cp.pid),
    }
    ctx.log(f"{NAME}: one route to {SIM_DPS} DPs: p50 {result['sim_latency_ms']['p50']:.1f} ms, p99 "
            f"{result['sim_latency_ms']['p99']:.1f} ms, max {result['sim_latency_ms']['max']:.1f} ms; real DP p99 "
            f"{result['dp_latency_ms']['p99']:.1f} ms; {result['bytes_per_dp_per_route']:.0f} bytes per DP "
            f"(the route's JSON: {result['route_json_bytes']:.0f})")

    # b. The CP restarts under the fleet while wrk loads the real DP.
    load = loadgen.Load(port=dp_proxy, path="/added-0", duration_s=20, connections=4, cpus=ctx.load_cpus,
                        work_dir=folder)
    sample: dict = {}
    loader = threading.Thread(target=lambda: sample.update(loadgen.run(load, None, "dp-during-cp-restart")))
    loader.start()
    time.sleep(3)
    ctx.procs.stop(cp)
    stopped = time.monotonic()
    time.sleep(2)
    before = {id(p): len(p.connected_at) for p in fleet.planes}
    cp = cluster.start_cp("cp-routes-again", None, folder / "cp-routes-prefix", admin)
    back = time.monotonic()
    deadline = back + 60
    while any(len(p.connected_at) == before[id(p)] for p in fleet.planes) and time.monotonic() < deadline:
        time.sleep(0.01)
    reconnects = [p.connected_at[-1] - back for p in fleet.planes if len(p.connected_at) > before[id(p)]]
    loader.join()
    fleet.stop()
    ctx.procs.stop(cp)
    ctx.procs.stop(dp)
    buckets: dict[int, int] = {}
    for seconds in reconnects:
        buckets[int(max(seconds, 0) * 10)] = buckets.get(int(max(seconds, 0) * 10), 0) + 1
    result["restart"] = {
        "down_s": back - stopped,
        "reconnected": len(reconnects),
        "reconnect_s": _percentiles(reconnects) | {"min": min(reconnects) if reconnects else None},
        "most_in_100ms": max(buckets.values()) if buckets else 0,
        "dp_requests": sample.get("requests"), "dp_errors": sample.get("errors"),
        "dp_non_2xx": sample.get("non_2xx"),
    }
    r = result["restart"]
    ctx.log(f"{NAME}: CP restart: {r['reconnected']}/{SIM_DPS} reconnected, from {r['reconnect_s']['min']:.2f} s "
            f"to {r['reconnect_s']['max']:.2f} s after it was back (at most {r['most_in_100ms']} in one 100 ms); "
            f"real DP under wrk: {r['dp_requests']} requests, {r['dp_errors']} errors, {r['dp_non_2xx']} non-2xx")
    return result


def statistics_mean(values: list) -> float:
    return sum(values) / len(values) if values else 0.0


def _stage_consumers(ctx: RunContext, cluster: Cluster, origin_url: str) -> dict:
    folder = cluster.folder
    count = 100_000 if ctx.quick else 1_000_000
    config = write_config(ConfigSpec(routes=10, consumers=count, key_auth=True, service_url=origin_url),
                          folder / "consumers.json")
    admin = free_port()
    started = time.monotonic()
    cp = cluster.start_cp("cp-consumers", config.path, folder / "cp-consumers-prefix", admin)
    cp_start_s = time.monotonic() - started
    version = _status(admin)
    ctx.log(f"{NAME}: CP up with {count:,} consumers in {cp_start_s:.1f} s")
    started = time.monotonic()
    dp, dp_proxy, dp_admin = cluster.start_dp("dp-consumers")
    # VmHWM counts the pages of the LMDB copy's mapped file the DP touched while
    # writing it (clean page cache, reclaimed under memory pressure and dropped
    # when the store reopens); the anonymous peak is what an OOM killer weighs.
    # /proc keeps no high-water mark for it: sample it.
    anon_peak = {"kib": 0}
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            try:
                anon_peak["kib"] = max(anon_peak["kib"], memory_kib(dp.pid)["anon_kib"])
            except (OSError, ValueError):
                pass
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    while _status(dp_admin) != version:
        if time.monotonic() - started > 900:
            raise RuntimeError("the fresh data plane never synced")
        time.sleep(0.1)
    sync_s = time.monotonic() - started
    time.sleep(2)
    sampling.set()
    sampler.join()
    dp_memory = memory_kib(dp.pid)
    dp_memory["peak_anon_kib"] = anon_peak["kib"]
    ctx.log(f"{NAME}: fresh DP synced {count:,} consumers in {sync_s:.1f} s; RSS "
            f"{dp_memory['rss_kib'] / 1024:.0f} MiB (peak {dp_memory['peak_rss_kib'] / 1024:.0f} MiB, "
            f"anonymous peak {dp_memory['peak_anon_kib'] / 1024:.0f} MiB)")
    ctx.procs.stop(dp)
    plugins = _admin(admin, "GET", "/plugins/enabled")[1]["enabled_plugins"]
    fleet = Fleet(SIM_DPS, cluster.cluster_port, cluster.cert, cluster.key, plugins, parse=False)
    cpu_before = cpu_seconds(cp.pid)
    started = time.monotonic()
    fleet.start(_admin(admin, "GET", "/")[1]["strait_version"])
    fleet_s = fleet.wait_all_at(version, 900)
    cp_cpu = cpu_seconds(cp.pid) - cpu_before
    cp_memory = memory_kib(cp.pid)
    frame_bytes = statistics_mean([p.received[-1][3] for p in fleet.planes])
    fleet.stop()
    ctx.procs.stop(cp)
    ctx.log(f"{NAME}: {SIM_DPS} DPs had the whole configuration ({frame_bytes / 2**20:.0f} MiB each on the "
            f"wire) {fleet_s:.1f} s after connecting; CP CPU {cp_cpu:.1f} s, RSS peak "
            f"{cp_memory['peak_rss_kib'] / 1024:.0f} MiB")
    for prefix in ("cp-consumers-prefix", "dp-consumers-prefix"):
        shutil.rmtree(folder / prefix, ignore_errors=True)
    os.remove(config.path)
    return {
        "consumers": count, "config_bytes": config.bytes, "cp_start_s": cp_start_s,
        "dp_sync_s": sync_s, "dp_memory_kib": dp_memory, "fleet_s": fleet_s, "frame_bytes": frame_bytes,
        "cp_cpu_s": cp_cpu, "cp_memory_kib": cp_memory,
    }


def run(ctx: RunContext) -> dict:
    folder = ctx.scenario_work(NAME)
    cluster = Cluster(ctx, folder)
    origin = systems.start_origin(ctx.procs, folder, ctx.load_cpus)
    origin_url = f"http://127.0.0.1:{origin.h1_port}"
    routes = _stage_routes(ctx, cluster, origin_url)
    consumers = _stage_consumers(ctx, cluster, origin_url)
    ctx.procs.stop_all()
    return {"routes": routes, "consumers": consumers}


# ---------------------------------------------------------------- report

def _goals(result: dict) -> list[Goal]:
    r, c = result["routes"], result["consumers"]
    restart = r["restart"]
    gib = 1024 * 1024
    return [
        Goal(f"one route added to 10,000 reaches {SIM_DPS} DPs, p99", "< 1 s",
             f"{r['sim_latency_ms']['p99']:.1f} ms", r["sim_latency_ms"]["p99"] < 1000),
        Goal("bytes sent per DP for one route", "about the route's size",
             f"{r['bytes_per_dp_per_route']:.0f} B (route JSON {r['route_json_bytes']:.0f} B)",
             r["bytes_per_dp_per_route"] < 4 * r["route_json_bytes"] + 200),
        Goal("CP restart: DPs that reconnected", f"{SIM_DPS}", str(restart["reconnected"]),
             restart["reconnected"] == SIM_DPS),
        Goal("CP restart: failed requests on the real DP", "0",
             str((restart["dp_errors"] or 0) + (restart["dp_non_2xx"] or 0)),
             (restart["dp_errors"] or 0) + (restart["dp_non_2xx"] or 0) == 0),
        Goal(f"DP RSS with {c['consumers']:,} consumers", "< 1 GiB",
             f"{c['dp_memory_kib']['rss_kib'] / 1024:.0f} MiB", c["dp_memory_kib"]["rss_kib"] < gib),
        Goal(f"DP peak anonymous memory while it first syncs {c['consumers']:,} consumers", "< 1 GiB",
             f"{c['dp_memory_kib']['peak_anon_kib'] / 1024:.0f} MiB (VmHWM with the LMDB copy's file pages: "
             f"{c['dp_memory_kib']['peak_rss_kib'] / 1024:.0f} MiB)",
             c["dp_memory_kib"]["peak_anon_kib"] < gib),
    ]


def render(result: dict, plot_dir: Path) -> Rendered:
    r, c = result["routes"], result["consumers"]
    ms = lambda d: f"{fmt(d['p50'], 1)} / {fmt(d['p99'], 1)} / {fmt(d['max'], 1)}"  # noqa: E731
    text = ("The control plane alone on the gateway core; the real data plane, the origin, wrk and "
            f"{SIM_DPS} simulated data planes (asyncio clients of the real protocol) on the load core.\n\n")
    text += table(["10,000 routes", "value"], [
        ["whole configuration to 100 simulated DPs (s after connecting)", fmt(r["full_sync_s"], 2)],
        ["whole configuration, bytes per DP", f"{r['full_bytes_per_dp']:,.0f}"],
        [f"one route added ({r['route_adds']} times): to each simulated DP, p50 / p99 / max ms",
         ms(r["sim_latency_ms"])],
        ["one route added: proxied by the real DP, p50 / p99 / max ms", ms(r["dp_latency_ms"])],
        ["bytes per DP per route added (the route's own JSON)",
         f"{r['bytes_per_dp_per_route']:,.0f} ({r['route_json_bytes']:,.0f})"],
    ])
    restart = r["restart"]
    text += "\n" + table(["CP restart with 101 DPs", "value"], [
        ["CP down (s)", fmt(restart["down_s"], 1)],
        ["simulated DPs reconnected", str(restart["reconnected"])],
        ["reconnects after the CP was back: first / p50 / last (s)",
         f"{fmt(restart['reconnect_s']['min'], 2)} / {fmt(restart['reconnect_s']['p50'], 2)} / "
         f"{fmt(restart['reconnect_s']['max'], 2)}"],
        ["most reconnects in one 100 ms", str(restart["most_in_100ms"])],
        ["real DP under wrk meanwhile: requests, errors, non-2xx",
         f"{restart['dp_requests']:,}, {restart['dp_errors']}, {restart['dp_non_2xx']}"],
    ])
    mib = lambda kib: fmt(kib / 1024, 0)  # noqa: E731
    text += "\n" + table([f"{c['consumers']:,} consumers with key-auth", "value"], [
        ["declarative file (MiB)", fmt(c["config_bytes"] / 2**20, 0)],
        ["CP start with the file (s)", fmt(c["cp_start_s"], 1)],
        ["fresh real DP: start to serving the CP's version (s)", fmt(c["dp_sync_s"], 1)],
        ["fresh real DP: RSS / peak anonymous / VmHWM (MiB)",
         f"{mib(c['dp_memory_kib']['rss_kib'])} / {mib(c['dp_memory_kib']['peak_anon_kib'])} / "
         f"{mib(c['dp_memory_kib']['peak_rss_kib'])}"],
        [f"{SIM_DPS} simulated DPs at once: until all had it (s)", fmt(c["fleet_s"], 1)],
        ["whole configuration on the wire per DP (MiB, deflated)", fmt(c["frame_bytes"] / 2**20, 1)],
        ["CP CPU while serving them (s)", fmt(c["cp_cpu_s"], 1)],
        ["CP RSS / peak RSS (MiB)", f"{mib(c['cp_memory_kib']['rss_kib'])} / "
                                    f"{mib(c['cp_memory_kib']['peak_rss_kib'])}"],
    ])
    return Rendered(text, [], _goals(result))
