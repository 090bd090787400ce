"""The edge scenarios' common parts (bench/scenarios/https_keepalive.py, tls_handshakes.py,
tls_resumed.py, http3.py): certificates, TLS gateways, TLS and QUIC loads, and the quota
that makes the gateway the limit on a 2-core machine.

Every contender proxies to the same plaintext origin (nginx, HTTP/1.1 keep-alive) and serves
TLS with the same certificate (ECDSA P-256 or RSA-2048, made here with openssl), TLS 1.2 and
1.3, Kong's `intermediate` ciphers with the server's preference, session tickets and a
session cache on both (nginx: `ssl_session_cache shared:SSL:10m`, tickets on; Strait: its
defaults, which are Kong's). What each handshake negotiated is probed with
`openssl s_client` and reported, so a difference in cipher or key exchange would show.

Two modes (STRAIT_BENCH_TLS_MODES, default both; tls-handshakes and tls-resumed were run
saturated only):
- saturated: every process of the gateway under test runs in a CPU quota (CFS bandwidth,
  `lab.procs.CpuQuota`) of QUOTA_SHARE of its core, so the load generator on the other core
  outruns it; the measure is work per gateway CPU second (requests or handshakes per core),
  and a sample counts as gateway-limited when the gateway used 90-110% of its quota;
- open: no quota; the load generator's core is the limit and the gateways are compared on
  CPU per unit of work. Throttling is not free for every design (nginx spends more per request
  under it, Envoy's QUIC far more), so both are reported.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from . import loadgen, systems
from .context import REPO_DIR, RunContext
from .procs import CpuMeter, CpuQuota, free_port, process_tree, running, wait_for_port

QUOTA_SHARE = 0.25
# Kong's `ssl_cipher_suite = intermediate` (kong/conf_loader), for nginx as Kong writes it.
INTERMEDIATE_CIPHERS = ("ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
                        "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
                        "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:"
                        "DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384")
KINDS = ("ecdsa", "rsa")


def certificate(folder: Path, kind: str) -> tuple[Path, Path]:
    """A self-signed certificate for `localhost` and its key: ECDSA P-256 or RSA-2048."""
    cert, key = folder / f"{kind}.crt", folder / f"{kind}.key"
    if not cert.exists():
        algorithm = (["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"] if kind == "ecdsa"
                     else ["-newkey", "rsa:2048"])
        subprocess.run(["openssl", "req", "-x509", *algorithm, "-nodes", "-keyout", str(key), "-out", str(cert),
                        "-days", "30", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
                       check=True, capture_output=True, timeout=60)
    return cert, key


def start_nginx_tls(ctx: RunContext, folder: Path, origin: systems.System, cert: Path, key: Path,
                    name: str = "nginx") -> systems.System:
    """nginx as a TLS reverse proxy (HTTP/1.1 and HTTP/2 by ALPN), 1 worker, on the gateway core."""
    port = free_port()
    upstreams = (f"  upstream origin {{ server 127.0.0.1:{origin.h1_port}; keepalive 64; "
                 f"keepalive_requests 1000000; keepalive_timeout 120s; }}\n")
    servers = (f"  server {{ listen 127.0.0.1:{port} ssl http2 backlog=4096;\n"
               f"    ssl_certificate {cert}; ssl_certificate_key {key};\n"
               f"    ssl_protocols TLSv1.2 TLSv1.3; ssl_ciphers {INTERMEDIATE_CIPHERS};\n"
               f"    ssl_prefer_server_ciphers on; ssl_session_tickets on; ssl_session_timeout 1d;\n"
               f"    ssl_session_cache shared:SSL:10m;\n"
               f"    location / {{ proxy_pass http://origin; proxy_http_version 1.1; "
               f"proxy_set_header Connection \"\"; }} }}\n")
    work = folder / name
    conf = systems._nginx_conf(work, servers, upstreams)
    process = systems._start_nginx(ctx.procs, name, work, conf, ctx.gateway_cpus, port)
    return systems.System(name, port, port, process)


def start_strait_tls(ctx: RunContext, folder: Path, origin: systems.System, cert: Path, key: Path,
                     name: str = "strait", http3: bool = False) -> systems.System:
    """Strait with one worker, a TLS listener (HTTP/1.1 and HTTP/2; `http3`: QUIC on the same
    port) and one route to the origin, access log off like the nginx peer."""
    port, admin = free_port(), free_port()
    prefix = folder / f"{name}-prefix"
    if prefix.exists():
        shutil.rmtree(prefix)
    config = folder / f"{name}.yml"
    config.write_text(f"""_format_version: "3.0"
services:
- name: origin
  url: http://127.0.0.1:{origin.h1_port}
  routes:
  - name: all
    paths: ["/"]
""")
    env = {
        "STRAIT_PREFIX": str(prefix),
        "STRAIT_PROXY_LISTEN": f"127.0.0.1:{port} ssl http2" + (" http3" if http3 else ""),
        "STRAIT_ADMIN_LISTEN": f"127.0.0.1:{admin}",
        "STRAIT_STATUS_LISTEN": "off", "STRAIT_ADMIN_GUI_LISTEN": "off",
        "STRAIT_WORKER_THREADS": "1", "STRAIT_LOG_LEVEL": "info",
        "STRAIT_PROXY_ACCESS_LOG": "off", "STRAIT_PROXY_ERROR_LOG": "stderr",
        "STRAIT_SSL_CERT": str(cert), "STRAIT_SSL_CERT_KEY": str(key),
        "STRAIT_DECLARATIVE_CONFIG": str(config),
    }
    process = ctx.procs.start(name, [str(ctx.strait_bin), "start"], ctx.gateway_cpus, env=env)
    wait_for_port(port, process)
    wait_for_port(admin, process)
    return systems.System(name, port, port, process, admin_port=admin)


def negotiated(port: int) -> str:
    """What a default OpenSSL client negotiates with the listener: protocol, cipher, key
    exchange group and the server's signature."""
    done = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-servername", "localhost",
                           "-brief"], input="", capture_output=True, text=True, timeout=15)
    text = done.stdout + done.stderr
    fields = []
    for label in ("Protocol version", "Ciphersuite", "Peer signature type", "Negotiated TLS1.3 group",
                  "Server Temp Key"):
        match = re.search(rf"^{label}: (.*)$", text, re.M)
        if match:
            fields.append(match.group(1).strip())
    return ", ".join(fields) or text.strip()[-300:]


def check_proxies(system: systems.System) -> None:
    """The TLS listener proxies a request to the origin."""
    done = subprocess.run(["curl", "-sk", "--max-time", "5", f"https://localhost:{system.h1_port}/"],
                          capture_output=True, text=True, timeout=10)
    if done.stdout != systems.ORIGIN_BODY:
        raise RuntimeError(f"{system.name} answered {done.stdout[:200]!r} over TLS ({done.stderr[-200:]})")


def s_time(port: int, seconds: int, reuse: bool, cpus: str, processes: int) -> dict:
    """`openssl s_time` clients in parallel: each a new TLS connection per request (GET /,
    HTTP/1.0, the response read whole), with a full handshake (`-new`) or resuming the
    first connection's session (`-reuse`, counted from the 'r' it prints per resumed one)."""
    argv = ["taskset", "-c", cpus, "openssl", "s_time", "-connect", f"127.0.0.1:{port}", "-www", "/",
            "-time", str(seconds), "-reuse" if reuse else "-new"]
    started = time.monotonic()
    running_ = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 stdin=subprocess.DEVNULL) for _ in range(processes)]
    connections, reused, errors = 0, 0, 0
    for process in running_:
        out, err = process.communicate(timeout=seconds + 60)
        match = re.findall(r"^(\d+) connections in [\d.]+ real seconds", out, re.M)
        if process.returncode != 0 or not match:
            errors += 1
            continue
        connections += int(match[-1])
        # One character per connection after "starting": 'r' when the session was resumed.
        marks = re.search(r"^starting\n(\S*)", out, re.M)
        reused += marks.group(1).count("r") if marks else 0
    duration = time.monotonic() - started
    sample = {"tool": "openssl s_time", "requests": connections, "duration_s": duration,
              "rps": connections / duration if duration else 0.0, "errors": errors, "non_2xx": 0,
              "processes": processes}
    sample["reused"] = reused
    return sample


def h3load_binary(ctx: RunContext) -> Path:
    """The lab's HTTP/3 load generator (tests/src/bin/h3load.rs), a plain release build."""
    target_dir = Path(os.environ.get("CARGO_TARGET_DIR") or REPO_DIR / "target")
    binary = target_dir / "release" / "h3load"
    if not (binary.exists() and os.environ.get("STRAIT_BENCH_NO_BUILD")):
        ctx.log("cargo build --release -p strait-e2e --bin h3load")
        subprocess.run(["cargo", "build", "--release", "-p", "strait-e2e", "--bin", "h3load"],
                       cwd=REPO_DIR, check=True, timeout=3600, stdout=subprocess.DEVNULL)
    return binary


def h3load(binary: Path, port: int, seconds: int, cpus: str, connections: int, streams: int) -> dict:
    import json
    done = subprocess.run(["taskset", "-c", cpus, str(binary), f"127.0.0.1:{port}", "localhost", "/",
                           str(connections), str(streams), str(seconds)],
                          capture_output=True, text=True, timeout=seconds + 60)
    if done.returncode != 0:
        raise RuntimeError(f"h3load failed: {done.stderr[-1000:]}")
    raw = json.loads(done.stdout.strip().splitlines()[-1])
    return {"tool": "h3load", "requests": raw["requests"], "duration_s": raw["duration_s"],
            "rps": raw["requests"] / raw["duration_s"] if raw["duration_s"] else 0.0,
            "errors": raw["errors"], "non_2xx": raw["non_2xx"],
            **{key: raw[key] for key in ("p50_us", "p90_us", "p99_us", "p99_9_us")}}


def metered(system: systems.System, quota: CpuQuota | None, load) -> dict:
    """`load()` against `system`, its CPU metered, inside `quota` when given; adds CPU per
    request, work per core second and whether the gateway was the limit."""
    pid = system.pid
    # Every process of the gateway goes in the quota: nginx serves from worker processes,
    # which moving the master alone would leave outside it.
    members = process_tree(pid) if pid and quota else []
    for member in members:
        quota.enter(member)
    try:
        with CpuMeter(pid) as meter:
            sample = load()
    finally:
        for member in members:
            quota.leave(member)
    if pid and not running(pid):
        raise RuntimeError(f"{system.name} (pid {pid}) exited during the load")
    if pid and meter.seconds:
        loadgen.add_gateway_cpu(sample, meter, pid)
        if quota and sample.get("gateway_core_busy") is not None:
            # Used (nearly) all of its quota, and no more (more: part of it ran outside).
            busy = sample["gateway_core_busy"]
            sample["gateway_limited"] = 0.9 * quota.share <= busy <= 1.1 * quota.share
    for key in ("p50_us", "p90_us", "p99_us", "p99_9_us"):
        sample.setdefault(key, None)
    return sample


def strait_and_nginx(ctx: RunContext) -> dict:
    """The contenders of the TLS scenarios: Strait and nginx, each a TLS reverse proxy."""
    return {
        "strait": lambda folder, origin, cert, key: start_strait_tls(ctx, folder, origin, cert, key),
        "nginx": lambda folder, origin, cert, key: start_nginx_tls(ctx, folder, origin, cert, key),
    }


def wrk_https(port: int, seconds: int, cpus: str, work_dir: Path, tag: str) -> dict:
    """wrk over HTTPS keep-alive (32 connections, one thread)."""
    return loadgen._run_wrk(loadgen.Load(port=port, scheme="https", duration_s=seconds, cpus=cpus,
                                         work_dir=work_dir), tag)


def compare(ctx: RunContext, name: str, kinds: tuple[str, ...], starters: dict, load, saturated: bool = True,
            check=check_proxies) -> dict:
    """For each certificate kind: start every contender (name -> start(folder, origin, cert,
    key), returning a System, or a string saying why it is unavailable), check it proxies,
    probe what it negotiates, warm it up, then `ctx.timing.rounds` interleaved rounds of
    `load(system, seconds, tag)` each metered (in the quota when `saturated`)."""
    from .rounds import good_samples, run_rounds, summarize_contender
    from . import stats

    folder = ctx.scenario_work(name)
    quota = CpuQuota(f"strait-lab-{free_port()}", QUOTA_SHARE) if saturated else None
    if quota and quota.error:
        ctx.log(f"{name}: {quota.error}; measuring without a quota (CPU per request only)")
        quota = None
    result = {"quota_share": QUOTA_SHARE if quota else None, "kinds": {}, "unavailable": {},
              "duration_s": ctx.timing.duration_s, "rounds_count": ctx.timing.rounds}
    try:
        origin = systems.start_origin(ctx.procs, folder, ctx.load_cpus)
        for kind in kinds:
            cert, key = certificate(folder, kind)
            started = {}
            for contender, start in starters.items():
                system = start(folder, origin, cert, key)
                if isinstance(system, str):
                    result["unavailable"][contender] = system
                else:
                    started[contender] = system
            for system in started.values():
                if check:
                    check(system)
            entry = {"negotiated": {}}
            for contender, system in started.items():
                entry["negotiated"][contender] = negotiated(system.h1_port) if system.name != "envoy" else "QUIC"

            def contender_fn(system, seconds):
                return lambda tag: metered(system, quota, lambda: load(system, seconds, tag))

            for contender, system in started.items():
                contender_fn(system, ctx.timing.warmup_s)(f"{name}-{kind}-warmup-{contender}")
            rounds = run_rounds(ctx, {c: contender_fn(s, ctx.timing.duration_s) for c, s in started.items()},
                                ctx.timing.rounds, f"{name} {kind}")
            summary = {}
            for contender in started:
                summary[contender] = summarize_contender(rounds, contender)
                good = good_samples(rounds, contender)
                summary[contender]["per_core_s"] = stats.summarize([s.get("per_core_s") for s in good])
                summary[contender]["limited"] = sum(1 for s in good if s.get("gateway_limited"))
                summary[contender]["reused"] = sum(s.get("reused", 0) for s in good)
            entry.update(rounds=rounds, summary=summary, ratios={})
            names = list(started)
            for other in names[1:]:
                entry["ratios"][f"{names[0]}/{other}"] = {
                    key: stats.paired_ratios(rounds, names[0], other, key)
                    for key in ("per_core_s", "cpu_us_per_request", "rps", "p99_us")}
            result["kinds"][kind] = entry
            for system in started.values():
                ctx.procs.stop(system.process)
    finally:
        ctx.procs.stop_all()
        if quota:
            quota.remove()
    return result


def render_compare(result: dict, what: str, unit: str, goal_key: str, goal_target: float,
                   goal_text: str) -> tuple[str, list]:
    """The Markdown of `compare`'s result and its goals: per kind, a row per contender (work/s,
    per core, CPU µs per unit, p99, how often the gateway was the limit), then the ratios."""
    from .registry import Goal
    from .report import fmt, table

    text = ""
    if result.get("quota_share"):
        text += (f"Each gateway ran in a CPU quota of {result['quota_share']:.0%} of its core, so it, not the "
                 "load generator, was the limit; \"per core\" is work per gateway CPU second. A sample counts as "
                 "gateway-limited when the gateway used >= 90% of its quota.\n\n")
    else:
        text += "No CPU quota was available: compare CPU µs per unit only (the load generator may be the limit).\n\n"
    text += f"{result['duration_s']} s per sample, {result['rounds_count']} interleaved rounds.\n\n"
    goals = []
    for contender, why in result.get("unavailable", {}).items():
        text += f"- {contender}: unavailable ({why})\n"
    for kind, entry in result["kinds"].items():
        text += f"\n**{kind.upper()} certificate**\n\n"
        for contender, description in entry["negotiated"].items():
            text += f"- {contender} negotiated: {description}\n"
        text += "\n"
        rows = []
        for contender, summary in entry["summary"].items():
            rows.append([contender, fmt(summary["rps"]["mean"]), fmt(summary["per_core_s"]["mean"]),
                         fmt(summary["cpu_us_per_request"]["mean"], 1), fmt(summary["p99_us"]["median"]),
                         f"{summary['limited']}/{result['rounds_count']}", summary["errors"] + summary["non_2xx"],
                         fmt(summary.get("reused")) if summary.get("reused") else "–"])
        text += table(["system", f"{what}/s", f"{what} per core", f"CPU µs per {unit}", "p99 µs",
                       "gateway-limited rounds", "errors", "resumed"], rows)
        for label, ratios in entry["ratios"].items():
            per_core, cpu = ratios["per_core_s"], ratios["cpu_us_per_request"]
            text += (f"\n{label}: {what} per core {fmt(per_core['mean'], 3)} (rounds {fmt(per_core['min'], 3)} – "
                     f"{fmt(per_core['max'], 3)}), CPU per {unit} {fmt(cpu['mean'], 3)}\n")
            value = ratios[goal_key]["mean"]
            if value is not None:
                met = value <= goal_target if goal_key == "cpu_us_per_request" else value >= goal_target
                limited = all(s["limited"] == result["rounds_count"] for s in entry["summary"].values())
                goals.append(Goal(f"{goal_text} ({kind.upper()})", f"{'<=' if goal_key == 'cpu_us_per_request' else '>='} "
                                  f"{goal_target}", f"{value:.3f}", met,
                                  "" if limited or not result.get("quota_share") else
                                  "not every sample had the gateway as the limit"))
    return text, goals


MODE_TEXT = {
    "saturated": "**Saturated** (each gateway in a CPU quota: the gateway is the limit).",
    "open": ("**Open** (no quota: each gateway free on its core, the load generator's core the limit; "
             "what a quota's throttling does to a gateway, e.g. QUIC timers firing late, is not in "
             "these numbers, so compare CPU per unit here)."),
}


def compare_modes(ctx: RunContext, name: str, kinds: tuple[str, ...], starters: dict, load,
                  check=check_proxies) -> dict:
    """`compare` in each mode of STRAIT_BENCH_TLS_MODES (default both: `saturated`, `open`)."""
    modes = [m.strip() for m in os.environ.get("STRAIT_BENCH_TLS_MODES", "saturated,open").split(",") if m.strip()]
    return {"modes": {mode: compare(ctx, f"{name}-{mode}", kinds, starters, load, saturated=mode == "saturated",
                                    check=check) for mode in modes}}


def render_modes(result: dict, what: str, unit: str, goal_key: str, goal_target: float,
                 goal_text: str) -> tuple[str, list]:
    text, goals = "", []
    for mode, data in result["modes"].items():
        part, part_goals = render_compare(data, what, unit, goal_key, goal_target, f"{goal_text}, {mode}")
        text += f"\n{MODE_TEXT.get(mode, mode)}\n\n{part}"
        goals += part_goals
    return text, goals
