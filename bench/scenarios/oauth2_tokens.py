"""oauth2-tokens: OAuth2 token saves through Kong's migration API at a fixed rate, with
millions of tokens stored, while the proxy authenticates bearer tokens.

The failure it guards against: a Kong user's external system saved each token it minted
through `POST /oauth2_tokens`; at 150 saves/s on Cassandra saves took 5 s on average and up
to 30 s, because token lookups went through secondary indexes. Strait keeps tokens in a
runtime store keyed by the token's hash (docs/architecture.md#runtime-data-stores).

Layout (the lab's): one Strait node (1 worker) on the gateway core; the origin, wrk and this
harness on the load core. Per stage (full: 1,000,000 then 10,000,000 tokens stored; quick:
20,000 then 200,000):

1. preload: `POST /oauth2_tokens` from wrk (32 connections, closed loop) until the store
   holds the stage's count (tokens `bt-<n>`, 30-day expiry, bound to the bench service);
   reports saves/s and gateway CPU per save;
2. an open-loop client saves new tokens at 1,000/s (each save's latency is measured from
   the moment it was due, so a stall counts against every save queued behind it) through
   every round of step 3, at least 60 s in a full run;
3. interleaved rounds of paced proxy load (32 clients, each pausing a random 0-10 ms
   after each response): a bearer token picked at random among every stored token on a
   route with the oauth2 plugin, against a key-auth route;
4. disk (blocks of the token store's data file) and gateway RSS, anonymous and file-backed.

Run alone: `bench/run oauth2-tokens` (about 20 minutes; `--quick` for the small stages;
`STRAIT_BENCH_OAUTH2_STAGES=1000000` for other stages, comma-separated).

`STRAIT_BENCH_OAUTH2_STORE=postgres` keeps the tokens in PostgreSQL instead of the embedded
store: a throwaway server on the load core (lab.postgres), the node DB-less with
`oauth2_token_store = postgres` (as a node sharing its tokens with others would run); disk is
then the token tables' size (`pg_total_relation_size`, indexes included).

`STRAIT_BENCH_OAUTH2_STORE=cassandra` keeps them in Cassandra: a throwaway node on the load
core (lab.cassandra, the tests' launcher), the node DB-less with `oauth2_token_store =
cassandra`; disk is then the node's data folder (SSTables and commit log). With Cassandra, run
`STRAIT_BENCH_OAUTH2_STAGES=1000000`: a save with a client's access token is a lightweight
transaction (Paxos), so the preload of 10M would take hours on the lab's one load core.
`STRAIT_BENCH_OAUTH2_SAVE_RATE` sets the open loop's rate (default 1,000/s).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import threading
import time
from pathlib import Path

from lab import loadgen, stats, systems
from lab.context import RunContext
from lab.cassandra import CassandraServer
from lab.postgres import PgServer
from lab.procs import memory_kib
from lab.registry import Goal, Rendered
from lab.report import fmt, table
from lab.rounds import run_rounds, summarize_contender

NAME = "oauth2-tokens"
TITLE = "oauth2-tokens: 1,000 token saves/s at 1M and 10M stored tokens, bearer auth under load"
STAGES = (1_000_000, 10_000_000)
QUICK_STAGES = (20_000, 200_000)
SAVE_RATE = 1_000          # saves per second, open loop (STRAIT_BENCH_OAUTH2_SAVE_RATE overrides)
SAVE_SENDERS = 32          # connections the open-loop client may have in flight
TOKEN_LIFETIME_S = 30 * 24 * 3600
SERVICE_ID = "5d1b7c39-0b0f-4a55-8a8e-2c1f0b3c0a01"
CREDENTIAL_ID = "8b7f4a31-6a2e-4f0e-9c44-7d2b9e5f1a02"
API_KEY = "bench-key-auth-key"
PACE_MS = 5                # mean pause of a proxy connection between requests
PROXY_CONNECTIONS = 32

PRELOAD_LUA = r"""
-- POST /oauth2_tokens for tokens bt-<first>..bt-<last>; then say so on stderr (the lab
-- interrupts wrk) and stop this thread.
local first, last, credential, service, lifetime, n
local created, failed, shown = 0, 0, 0
local body_format = '{"credential":{"id":"%s"},"service":{"id":"%s"},"access_token":"bt-%d",'
   .. '"expires_in":%d,"scope":"read"}'
function init(args)
   first, last = tonumber(args[1]), tonumber(args[2])
   credential, service, lifetime = args[3], args[4], tonumber(args[5])
   n = first
end
local warmed = false
function request()
   -- wrk may build a request it never sends (its first call per thread): that one is
   -- a GET, so no token number is skipped.
   if not warmed or n > last then
      warmed = true
      return wrk.format("GET", "/status")
   end
   local body = string.format(body_format, credential, service, n, lifetime)
   n = n + 1
   return wrk.format("POST", "/oauth2_tokens", { ["Content-Type"] = "application/json" }, body)
end
function response(status, headers, body)
   if status == 201 then
      created = created + 1
   elseif status ~= 200 then
      failed = failed + 1
      if shown < 5 then
         shown = shown + 1
         io.stderr:write("preload: " .. status .. " " .. body:sub(1, 200) .. "\n")
      end
   end
   if created + failed >= last - first + 1 then
      io.stderr:write(string.format("PRELOAD created=%d failed=%d\n", created, failed))
      wrk.thread:stop()
   end
end
"""

BEARER_LUA = r"""
-- GET the oauth2 route with a bearer token picked at random among bt-1..bt-<count>.
local count
function init(args)
   count = tonumber(args[1])
   math.randomseed(os.time() * 1000 + math.floor(os.clock() * 1e6))
end
function request()
   return wrk.format("GET", "/oauth2-api", { Authorization = "Bearer bt-" .. math.random(count) })
end
"""

KEY_AUTH_LUA = f"""
function request()
   return wrk.format("GET", "/key-auth-api", {{ apikey = "{API_KEY}" }})
end
"""

# Each proxy connection is a client that pauses a random 0..2*PACE_MS ms after each
# response: the clients drift apart as independent ones do. (A fixed pause keeps them
# in lockstep: bursts of 32 requests at once, whose queueing multiplies any difference
# in CPU per request into the p99.)
PACING_LUA = f"""
function delay()
   return math.random(0, {2 * PACE_MS})
end
"""


def _config(origin_url: str) -> dict:
    return {
        "_format_version": "3.0",
        "services": [{
            "id": SERVICE_ID, "name": "bench", "url": origin_url,
            "routes": [
                {"name": "oauth2-api", "paths": ["/oauth2-api"],
                 "plugins": [{"name": "oauth2", "config": {
                     "enable_client_credentials": True, "scopes": ["read"],
                     "provision_key": "bench-provision-key",
                     "accept_http_if_already_terminated": True}}]},
                {"name": "key-auth-api", "paths": ["/key-auth-api"],
                 "plugins": [{"name": "key-auth"}]},
            ],
        }],
        "consumers": [{
            "username": "bench",
            "keyauth_credentials": [{"key": API_KEY}],
            "oauth2_credentials": [{"id": CREDENTIAL_ID, "name": "bench-app", "client_id": "bench-client",
                                    "client_secret": "bench-secret",
                                    "redirect_uris": ["https://bench.example/cb"]}],
        }],
    }


class OpenLoopSaver(threading.Thread):
    """`POST /oauth2_tokens` at a fixed rate from one asyncio loop (no threads contending
    for the interpreter): each save is started at its due time on a free keep-alive
    connection out of SAVE_SENDERS, or waits for one. Latency runs from the due time to
    the response, so waiting behind a slow save counts (open loop); `service` is the part
    from sending to the response."""

    def __init__(self, port: int, rate: int, prefix: str, cpus: set[int]):
        super().__init__(daemon=True)
        self.port, self.rate, self.prefix, self.cpus = port, rate, prefix, cpus
        self.stop_event = threading.Event()
        self.latencies_ms: list[float] = []
        self.service_ms: list[float] = []
        self.slow: list[tuple[float, float, float]] = []   # (seconds into the run, latency, service)
        self.errors: list[str] = []
        self.error_count = 0
        self.started_at = self.ended_at = 0.0

    def run(self) -> None:
        if self.cpus:
            os.sched_setaffinity(0, self.cpus)
        asyncio.run(self._run())

    async def _exchange(self, connection, body: bytes) -> tuple[int, bytes]:
        reader, writer = connection
        writer.write(b"POST /oauth2_tokens HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                     b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        status = int((await reader.readline()).split()[1])
        length = None
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if length is None:
            raise RuntimeError("a response without content-length")
        return status, await reader.readexactly(length)

    async def _save(self, pool: asyncio.Queue, due: float, index: int) -> None:
        loop = asyncio.get_running_loop()
        body = json.dumps({"credential": {"id": CREDENTIAL_ID}, "service": {"id": SERVICE_ID},
                           "access_token": f"{self.prefix}-{index}", "expires_in": TOKEN_LIFETIME_S,
                           "scope": "read"}).encode()
        connection = await pool.get()
        sent = loop.time()
        status, detail = 0, b""
        try:
            if connection is None:
                connection = await asyncio.open_connection("127.0.0.1", self.port)
            status, detail = await asyncio.wait_for(self._exchange(connection, body), 30)
        except (OSError, RuntimeError, ValueError, IndexError, asyncio.TimeoutError,
                asyncio.IncompleteReadError) as error:
            detail = str(error).encode()
            if connection is not None:
                connection[1].close()
            connection = None
        finally:
            pool.put_nowait(connection)
        done = loop.time()
        latency, service = (done - due) * 1000, (done - sent) * 1000
        self.latencies_ms.append(latency)
        self.service_ms.append(service)
        if latency > 20 and len(self.slow) < 50:
            self.slow.append((round(due - self.started_at, 3), round(latency, 1), round(service, 1)))
        if status != 201:
            self.error_count += 1
            if len(self.errors) < 10:
                self.errors.append(f"{status} {detail[:200].decode(errors='replace')}")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        pool: asyncio.Queue = asyncio.Queue()
        for _ in range(SAVE_SENDERS):
            pool.put_nowait(await asyncio.open_connection("127.0.0.1", self.port))
        tasks = set()
        self.started_at = start = loop.time()
        index = 0
        while not self.stop_event.is_set():
            due = start + index / self.rate
            if due > loop.time():
                await asyncio.sleep(due - loop.time())
            task = asyncio.create_task(self._save(pool, due, index))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            index += 1
        if tasks:
            await asyncio.wait(tasks)
        self.ended_at = loop.time()
        while not pool.empty():
            connection = pool.get_nowait()
            if connection is not None:
                connection[1].close()

    def summary(self) -> dict:
        values, service = sorted(self.latencies_ms), sorted(self.service_ms)
        seconds = self.ended_at - self.started_at
        pick = lambda v, p: stats.percentile(v, p) if v else None  # noqa: E731
        return {"saves": len(values), "seconds": seconds, "rate": len(values) / seconds if seconds else None,
                "errors": self.error_count, "first_errors": self.errors,
                "p50_ms": pick(values, 50), "p99_ms": pick(values, 99), "p99_9_ms": pick(values, 99.9),
                "max_ms": values[-1] if values else None,
                "service_p99_9_ms": pick(service, 99.9), "service_max_ms": service[-1] if service else None,
                "over_20ms": self.slow}


def _save_rate() -> int:
    """The open-loop save rate: SAVE_RATE unless STRAIT_BENCH_OAUTH2_SAVE_RATE says otherwise (to
    find the rate a store sustains below the goal's)."""
    return int(os.environ.get("STRAIT_BENCH_OAUTH2_SAVE_RATE", "").strip() or SAVE_RATE)


def _store() -> str:
    store = os.environ.get("STRAIT_BENCH_OAUTH2_STORE", "embedded").strip() or "embedded"
    if store not in ("embedded", "postgres", "cassandra"):
        raise ValueError(f"STRAIT_BENCH_OAUTH2_STORE: expected embedded, postgres or cassandra (got {store!r})")
    return store


def _disk_bytes(prefix: Path, pg: PgServer | CassandraServer | None = None) -> int:
    """Blocks in use by the token store's files (the map is sparse: not its size); on
    PostgreSQL the token tables with their indexes and TOAST; on Cassandra the node's data."""
    if isinstance(pg, CassandraServer):
        return pg.disk_bytes()
    if pg is not None:
        return int(pg.sql("SELECT pg_total_relation_size('oauth2_tokens') "
                          "+ pg_total_relation_size('oauth2_authorization_codes')"))
    total = 0
    for path in (prefix / "oauth2_tokens").glob("*.mdb"):
        total += path.stat().st_blocks * 512
    return total


def _cpu_set(cpus: str) -> set[int]:
    return {int(c) for c in cpus.replace("-", ",").split(",") if c.strip().isdigit()}


def _preload(ctx: RunContext, node: systems.System, first: int, last: int, folder: Path) -> dict:
    ctx.log(f"{NAME}: preloading tokens bt-{first:,}..bt-{last:,} through POST /oauth2_tokens")
    load = loadgen.Load(port=node.admin_port, duration_s=3600, connections=32, cpus=ctx.load_cpus,
                        work_dir=folder, lua=PRELOAD_LUA,
                        script_args=[first, last, CREDENTIAL_ID, SERVICE_ID, TOKEN_LIFETIME_S],
                        stop_marker="PRELOAD", timeout_s=3700)
    sample = loadgen.run(load, node.pid, f"preload-{last}")
    sample["tokens"] = last - first + 1
    sample["saves_per_s"] = sample["tokens"] / sample["duration_s"] if sample["duration_s"] else None
    sample["cpu_us_per_save"] = (sample["gateway_cpu_s"] * 1e6 / sample["tokens"]
                                 if sample.get("gateway_cpu_s") else None)
    ctx.log(f"{NAME}: preloaded {sample['tokens']:,} in {sample['duration_s']:.0f} s "
            f"({sample['saves_per_s']:,.0f} saves/s, {sample['cpu_us_per_save'] or 0:.0f} µs gateway CPU/save, "
            f"{sample['non_2xx']} non-2xx)")
    return sample


def _stage(ctx: RunContext, node: systems.System, prefix: Path, folder: Path, stored: int, preloaded: int,
           index: int, pg: PgServer | CassandraServer | None) -> dict:
    saver = OpenLoopSaver(node.admin_port, _save_rate(), f"sv{index}", _cpu_set(ctx.load_cpus))
    contenders = {}
    for name, lua, args in (("oauth2 bearer", BEARER_LUA, [preloaded]), ("key-auth", KEY_AUTH_LUA, [])):
        def load(tag: str, lua=lua, args=args) -> dict:
            return loadgen.run(loadgen.Load(port=node.h1_port, duration_s=ctx.timing.duration_s,
                                            connections=PROXY_CONNECTIONS, cpus=ctx.load_cpus,
                                            work_dir=folder, lua=lua + PACING_LUA,
                                            script_args=args), node.pid, tag)
        contenders[name] = load
    # In a full run the saves go on for at least 60 s, whatever the rounds add up to.
    minimum_s = 0 if ctx.quick else 60
    saver.start()
    started = time.monotonic()
    rounds = run_rounds(ctx, contenders, ctx.timing.rounds, f"{NAME}-{stored}")
    time.sleep(max(0.0, minimum_s - (time.monotonic() - started)))
    saver.stop_event.set()
    saver.join()
    saves = saver.summary()
    ctx.log(f"{NAME}: {saves['saves']:,} saves at {saves['rate']:,.0f}/s: p50 {saves['p50_ms']:.2f} ms, "
            f"p99 {saves['p99_ms']:.2f} ms, p99.9 {saves['p99_9_ms']:.2f} ms, max {saves['max_ms']:.1f} ms "
            f"(sent to answered: p99.9 {saves['service_p99_9_ms']:.2f} ms, max {saves['service_max_ms']:.1f} ms), "
            f"{saves['errors']} errors; over 20 ms (s into the run, latency, service): {saves['over_20ms'][:10]}")
    return {
        "stored": stored, "saves": saves, "rounds": rounds,
        "summary": {name: summarize_contender(rounds, name) for name in contenders},
        "p99_ratio": stats.paired_ratios(rounds, "oauth2 bearer", "key-auth", "p99_us"),
        "disk_bytes": _disk_bytes(prefix, pg), "memory_kib": memory_kib(node.pid),
    }


def _stages(ctx: RunContext) -> tuple[int, ...]:
    """STRAIT_BENCH_OAUTH2_STAGES (comma-separated counts) overrides the stages."""
    override = os.environ.get("STRAIT_BENCH_OAUTH2_STAGES", "").strip()
    if override:
        counts = tuple(int(part.replace("_", "")) for part in override.split(","))
        if any(b <= a for a, b in zip(counts, counts[1:])) or counts[0] < 1:
            raise ValueError("STRAIT_BENCH_OAUTH2_STAGES: counts must be positive and increasing")
        return counts
    return QUICK_STAGES if ctx.quick else STAGES


def run(ctx: RunContext) -> dict:
    folder = ctx.scenario_work(NAME)
    origin = systems.start_origin(ctx.procs, folder, ctx.load_cpus)
    config = folder / "oauth2.json"
    config.write_text(json.dumps(_config(f"http://127.0.0.1:{origin.h1_port}")))
    store, pg, extra_env = _store(), None, {}
    if store == "postgres":
        pg = PgServer(ctx, folder / "postgres")
        pg.bootstrap(ctx.strait_bin)
        extra_env = dict(pg.env(), STRAIT_DATABASE="embedded", STRAIT_OAUTH2_TOKEN_STORE="postgres")
    if store == "cassandra":
        pg = CassandraServer(ctx, folder / "cassandra")
        try:
            pg.bootstrap(ctx.strait_bin)
            extra_env = dict(pg.env(), STRAIT_DATABASE="embedded", STRAIT_OAUTH2_TOKEN_STORE="cassandra")
            return _run(ctx, folder, config, store, pg, extra_env)
        finally:
            pg.stop()
            shutil.rmtree(folder / "cassandra", ignore_errors=True)
    return _run(ctx, folder, config, store, pg, extra_env)


def _run(ctx: RunContext, folder: Path, config: Path, store: str, pg: PgServer | CassandraServer | None,
         extra_env: dict) -> dict:
    node = systems.start_strait(ctx.procs, ctx.strait_bin, folder, ctx.gateway_cpus, name="strait-oauth2",
                                config=config, extra_env=extra_env)
    prefix = folder / "strait-oauth2-prefix"
    baseline = {"disk_bytes": _disk_bytes(prefix, pg), "memory_kib": memory_kib(node.pid)}
    stages, preloads, stored = [], [], 0
    for index, target in enumerate(_stages(ctx)):
        preloaded = sum(p["tokens"] for p in preloads)
        preloads.append(_preload(ctx, node, preloaded + 1, target, folder))
        if preloads[-1]["non_2xx"] or preloads[-1]["errors"]:
            raise RuntimeError(f"preload failed: {preloads[-1]['non_2xx']} non-2xx, "
                               f"{preloads[-1]['errors']} errors (see the log)")
        stored = target + sum(s["saves"]["saves"] for s in stages)
        stages.append(_stage(ctx, node, prefix, folder, stored, target, index, pg))
    ctx.procs.stop_all()
    if isinstance(pg, PgServer):
        shutil.rmtree(folder / "postgres", ignore_errors=True)
    # Gigabytes at 10M tokens: measured above, not kept with the run's logs.
    shutil.rmtree(prefix / "oauth2_tokens", ignore_errors=True)
    return {
        "store": store, "baseline": baseline, "preloads": preloads, "stages": stages,
        "save_rate": _save_rate(),
        "proxy_load": (f"wrk -t1 -c{PROXY_CONNECTIONS}, each connection pausing a random 0-{2 * PACE_MS} ms after "
                       "each response, "
                       f"{ctx.timing.duration_s} s per sample"),
    }


# ---------------------------------------------------------------- report

def _per_million(result: dict, key: str, part: str | None = None) -> float | None:
    """Growth between the first and last stage, per million tokens stored."""
    stages = result["stages"]
    if len(stages) < 2:
        return None
    first, last = stages[0], stages[-1]
    value = (lambda s: s[key][part]) if part else (lambda s: s[key])
    tokens = last["stored"] - first["stored"]
    return (value(last) - value(first)) / tokens * 1e6 if tokens else None


def _goals(result: dict) -> list[Goal]:
    goals = []
    for stage in result["stages"]:
        label = f"at {stage['stored']:,.0f} tokens"
        saves, ratio = stage["saves"], stage["p99_ratio"]
        goals += [
            Goal(f"save p99 {label}", "< 10 ms", f"{saves['p99_ms']:.2f} ms", saves["p99_ms"] < 10),
            Goal(f"save p99.9 {label}", "< 50 ms", f"{saves['p99_9_ms']:.2f} ms", saves["p99_9_ms"] < 50),
            Goal(f"save errors {label}", "0", str(saves["errors"]), saves["errors"] == 0),
            Goal(f"proxy p99, bearer token vs key-auth, {label}", "within 20%",
                 f"{(ratio['mean'] - 1) * 100:+.1f}%" if ratio["n"] else "not measured",
                 ratio["mean"] <= 1.20 if ratio["n"] else None),
        ]
    if len(result["stages"]) >= 2:
        first, last = result["stages"][0], result["stages"][-1]
        cpu = lambda s: s["summary"]["oauth2 bearer"]["cpu_us_per_request"]["median"]  # noqa: E731
        growth = cpu(last) / cpu(first) - 1 if cpu(first) and cpu(last) else None
        goals.append(Goal(f"bearer lookup CPU/request, {last['stored']:,.0f} vs {first['stored']:,.0f} tokens",
                          "flat (within 20%)", f"{growth * 100:+.1f}%" if growth is not None else "not measured",
                          abs(growth) <= 0.20 if growth is not None else None))
    return goals


def render(result: dict, plot_dir: Path) -> Rendered:
    store = result.get("store", "embedded")
    where = {"embedded": "the embedded store",
             "postgres": "PostgreSQL (`oauth2_token_store = postgres`; the server on the load core)",
             "cassandra": "Cassandra 5.0 (`oauth2_token_store = cassandra`; one node on the load core)"}[store]
    text = (f"Tokens in {where}. "
            f"One Strait node (1 worker) on the gateway core; origin, wrk and the save client on the load "
            f"core. Saves: `POST /oauth2_tokens` at {result['save_rate']:,}/s, open loop, latency from each "
            f"save's due time. Proxy load: {result['proxy_load']}; bearer tokens picked at random among "
            f"every stored token.\n\n")
    rows = [[f"{p['tokens']:,}", fmt(p["duration_s"], 0), fmt(p["saves_per_s"]), fmt(p["cpu_us_per_save"]),
             fmt(p.get("gateway_core_busy"), 2), p["errors"] + p["non_2xx"]] for p in result["preloads"]]
    text += table(["preloaded tokens (closed loop, 32 connections)", "seconds", "saves/s",
                   "gateway CPU µs/save", "gateway core busy", "errors"], rows)
    rows = []
    for stage in result["stages"]:
        saves = stage["saves"]
        rows.append([f"{stage['stored']:,}", f"{saves['saves']:,}", fmt(saves["rate"]), fmt(saves["p50_ms"], 2),
                     fmt(saves["p99_ms"], 2), fmt(saves["p99_9_ms"], 2), fmt(saves["max_ms"], 1),
                     fmt(saves["service_p99_9_ms"], 2), saves["errors"]])
    text += "\n" + table(["tokens stored", "saves", "saves/s", "p50 ms", "p99 ms", "p99.9 ms", "max ms",
                          "sent-to-answered p99.9 ms", "errors"], rows)
    rows = []
    for stage in result["stages"]:
        for name, summary in stage["summary"].items():
            rows.append([f"{stage['stored']:,}", name, fmt(summary["rps"]["mean"]),
                         fmt(summary["cpu_us_per_request"]["median"], 1), fmt(summary["p50_us"]["median"]),
                         fmt(summary["p99_us"]["median"]), fmt(summary["p99_9_us"]["median"]),
                         fmt(summary["gateway_core_busy"]["median"], 2),
                         summary["errors"] + summary["non_2xx"]])
    text += "\n" + table(["tokens stored", "proxy load (with saves)", "RPS", "gateway CPU µs/req", "p50 µs",
                          "p99 µs", "p99.9 µs", "gateway core busy", "errors + non-2xx"], rows)
    mib = lambda b: fmt(b / 2**20, 1)  # noqa: E731
    rows = [["empty", mib(result["baseline"]["disk_bytes"]), mib(result["baseline"]["memory_kib"]["anon_kib"] * 1024),
             mib(result["baseline"]["memory_kib"]["file_kib"] * 1024)]]
    rows += [[f"{s['stored']:,}", mib(s["disk_bytes"]), mib(s["memory_kib"]["anon_kib"] * 1024),
              mib(s["memory_kib"]["file_kib"] * 1024)] for s in result["stages"]]
    text += "\n" + table(["tokens stored", "token store on disk MiB", "gateway RSS anonymous MiB",
                          "gateway RSS file-backed MiB"], rows)
    disk = _per_million(result, "disk_bytes")
    anon = _per_million(result, "memory_kib", "anon_kib")
    file_backed = _per_million(result, "memory_kib", "file_kib")
    if disk is not None:
        text += (f"\nGrowth per million tokens (between the stages): disk {mib(disk)} MiB, RSS anonymous "
                 f"{fmt(anon / 1024, 1)} MiB, RSS file-backed {fmt(file_backed / 1024, 1)} MiB (the token "
                 "store's pages the lookups touched; the kernel can drop them under pressure).\n")
    for stage in result["stages"]:
        if stage["saves"]["first_errors"]:
            text += f"\nSave errors at {stage['stored']:,}: " + "; ".join(stage["saves"]["first_errors"]) + "\n"
    return Rendered(text, [], _goals(result))
