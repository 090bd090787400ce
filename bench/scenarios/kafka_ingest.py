"""kafka-ingest: acknowledged messages per second per gateway core through `kafka-upstream`.

The story it answers: a team ingested millions of acknowledged messages per second through a
gateway into Kafka, where an acknowledgement had to mean the data was safe. Strait's
kafka-upstream answers 200 only once the broker acknowledged the message at
`producer_request_acks` (docs/plugins.md, "Kafka").

Layout (the lab's): one Strait node (1 worker) on the gateway core; one Apache Kafka 4.1 broker
(KRaft, single node, 3 partitions; the jars scripts/test.sh resolves into
target/tools/kafka/libs, resolved here with mvn when missing), wrk and this harness on the
load core. wrk POSTs a 100-byte text body to a route whose kafka-upstream has
`producer_request_acks = -1` (and, as a second contender, `1`), 64 connections, in
interleaved rounds.

The broker shares the load core with wrk, so the load core, not the gateway, may be the limit:
the figure to judge is the gateway's CPU per acknowledged message and messages per gateway CPU
second ("per core"), reported beside the rate and the gateway core's busy share. Every answer
must be a 200 (non-2xx counts are reported).

Run alone: `bench/run kafka-ingest` (`--quick`: short loads).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from pathlib import Path

from statistics import mean

from lab import loadgen, systems
from lab.context import RunContext
from lab.registry import Goal, Rendered
from lab.report import CONTENDER_HEADER, contender_row, table
from lab.rounds import summarize_contender

NAME = "kafka-ingest"
TITLE = "kafka-ingest: acknowledged Kafka messages per gateway core through kafka-upstream (acks -1 and 1)"
CONTENDERS = ("acks-all", "acks-leader")
ACKS = {"acks-all": -1, "acks-leader": 1}
CONNECTIONS = 64
BODY = "x" * 100
KAFKA_VERSION = "4.1.1"

BENCH = Path(__file__).resolve().parent.parent
REPO = BENCH.parent

POST_LUA = f"""
wrk.method = "POST"
wrk.body = "{BODY}"
wrk.headers["Content-Type"] = "text/plain"
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kafka_libs() -> Path:
    libs = REPO / "target" / "tools" / "kafka" / "libs"
    if not (libs / f"kafka_2.13-{KAFKA_VERSION}.jar").exists():
        if libs.exists():
            shutil.rmtree(libs)
        subprocess.run(["mvn", "-q", "-B", "-f", str(REPO / "tests" / "kafka" / "pom.xml"),
                        "dependency:copy-dependencies", "-DincludeScope=runtime",
                        f"-DoutputDirectory={libs}"], check=True)
    return libs


def _start_broker(ctx: RunContext, folder: Path) -> int:
    """A one-node KRaft broker on the load core; its PLAINTEXT port once it listens."""
    libs = _kafka_libs()
    port, controller = _free_port(), _free_port()
    data = folder / "kafka-data"
    if data.exists():
        shutil.rmtree(data)
    (folder / "log4j2.properties").write_text(
        "rootLogger.level = WARN\nrootLogger.appenderRef.stdout.ref = STDOUT\nappender.stdout.type = Console\n"
        "appender.stdout.name = STDOUT\nappender.stdout.layout.type = PatternLayout\n"
        "appender.stdout.layout.pattern = [%d] %p %m (%c)%n\n")
    properties = folder / "server.properties"
    properties.write_text(
        f"process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:{controller}\n"
        f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}\n"
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}\n"
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n"
        "controller.listener.names=CONTROLLER\ninter.broker.listener.name=PLAINTEXT\n"
        f"log.dirs={data}\nnum.partitions=3\noffsets.topic.replication.factor=1\n"
        "transaction.state.log.replication.factor=1\ntransaction.state.log.min.isr=1\n")
    java = ["java", "-Xmx1g", f"-Dlog4j2.configurationFile={folder / 'log4j2.properties'}", "-cp", f"{libs}/*"]
    subprocess.run(["taskset", "-c", ctx.load_cpus, *java, "kafka.tools.StorageTool", "format", "-t",
                    "c3RyYWl0LWthZmthLXRzdA", "-c", str(properties)], check=True, capture_output=True)
    ctx.procs.start("kafka", [*java, "kafka.Kafka", str(properties)], ctx.load_cpus)
    deadline = time.monotonic() + 120
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return port
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError("the Kafka broker did not listen within 120 s")
            time.sleep(0.2)


def _config(origin_url: str, broker_port: int, acks: int) -> dict:
    return {
        "_format_version": "3.0",
        "services": [{"name": "ingest", "url": origin_url, "routes": [{
            "name": "ingest", "paths": ["/ingest"],
            "plugins": [{"name": "kafka-upstream", "config": {
                "bootstrap_servers": [{"host": "127.0.0.1", "port": broker_port}],
                "topic": "bench-ingest", "producer_request_acks": acks}}],
        }]}],
    }


def run(ctx: RunContext) -> dict:
    from lab.strait_admin import request
    folder = ctx.scenario_work(NAME)
    origin = systems.start_origin(ctx.procs, folder, ctx.load_cpus)
    try:
        broker = _start_broker(ctx, folder)
        nodes = {}
        for name in CONTENDERS:
            config = folder / f"{name}.json"
            config.write_text(json.dumps(_config(f"http://127.0.0.1:{origin.h1_port}", broker, ACKS[name])))
            nodes[name] = systems.start_strait(ctx.procs, ctx.strait_bin, folder, ctx.gateway_cpus,
                                               name=f"strait-{name}", config=config)
        # The topic is created by the first message (auto-creation); warm each node's producer.
        for name, node in nodes.items():
            deadline = time.monotonic() + 60
            while True:
                code, body = request(node.h1_port, "POST", "/ingest", BODY.encode(),
                                     {"Content-Type": "text/plain"}, timeout=10)
                if code == 200:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name}: kafka-upstream answered {code} {body[:200]!r}")
                time.sleep(0.5)
        rounds = []
        for index in range(ctx.timing.rounds):
            samples = {}
            for name, node in nodes.items():
                load = loadgen.Load(port=node.h1_port, path="/ingest", duration_s=ctx.timing.duration_s,
                                    connections=CONNECTIONS, cpus=ctx.load_cpus, work_dir=folder, lua=POST_LUA)
                samples[name] = loadgen.run(load, node.pid, tag=f"{name}-{index}")
                ctx.log(f"{NAME} round {index + 1} {name}: {samples[name]['rps']:.0f} acknowledged/s, "
                        f"{samples[name].get('cpu_us_per_request', 0):.1f} µs CPU each")
            rounds.append(samples)
    finally:
        ctx.procs.stop_all()
    return {"rounds": rounds,
            "summary": {name: summarize_contender(rounds, name) for name in CONTENDERS},
            "per_core": {name: mean([r[name].get("per_core_s") or 0 for r in rounds]) for name in CONTENDERS},
            "non_2xx": {name: sum(r[name]["non_2xx"] + r[name]["errors"] for r in rounds) for name in CONTENDERS},
            "busy": {name: mean([r[name].get("gateway_core_busy") or 0 for r in rounds]) for name in CONTENDERS},
            "load": f"wrk -t1 -c{CONNECTIONS}, POST of a {len(BODY)}-byte text body",
            "duration_s": ctx.timing.duration_s, "rounds_count": ctx.timing.rounds}


def render(result: dict, plot_dir: Path) -> Rendered:
    rows = [contender_row(name, result["summary"][name]) for name in CONTENDERS]
    text = (f"Load: {result['load']}; {result['duration_s']} s per sample, {result['rounds_count']} interleaved "
            "rounds. One Strait node (one worker, gateway core); one Kafka 4.1 broker (KRaft, 3 partitions) "
            "on the load core with wrk. Every request answered is one message acknowledged by the broker "
            "at the contender's acks.\n\n")
    text += table(CONTENDER_HEADER, rows)
    text += "\n| contender | acknowledged messages per gateway CPU second | gateway core busy | non-2xx or errors |\n"
    text += "|---|---|---|---|\n"
    for name in CONTENDERS:
        text += (f"| {name} | {result['per_core'][name]:,.0f} | {result['busy'][name] * 100:.0f}% "
                 f"| {result['non_2xx'][name]} |\n")
    goals = [Goal("kafka-ingest: every answer a 200 (acks -1)", "0 failures", str(result["non_2xx"]["acks-all"]),
                  result["non_2xx"]["acks-all"] == 0, "")]
    return Rendered(text, [], goals)
