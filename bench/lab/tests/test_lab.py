"""Unit tests for the lab's pure parts, and for its wrk request script run by wrk (installed by
scripts/test.sh): python3 -m unittest discover -s bench/lab/tests -t bench"""

import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from pathlib import Path

from lab import configgen, loadgen, report, stats, systems
from lab.procs import CpuMeter
from lab.registry import Goal, Rendered


class StatsTest(unittest.TestCase):
    def test_percentile_interpolates(self):
        values = [1.0, 2.0, 3.0, 4.0]
        self.assertEqual(stats.percentile(values, 0), 1.0)
        self.assertEqual(stats.percentile(values, 100), 4.0)
        self.assertAlmostEqual(stats.percentile(values, 50), 2.5)

    def test_at_percentile_reads_a_grid(self):
        points = [[50, 100.0], [90, 200.0], [99, 400.0]]
        self.assertEqual(stats.at_percentile(points, 90), 200.0)
        self.assertAlmostEqual(stats.at_percentile(points, 70), 150.0)

    def test_paired_ratios_stay_within_rounds(self):
        rounds = [{"a": {"rps": 200}, "b": {"rps": 100}}, {"a": {"rps": 90}, "b": {"rps": 100}},
                  {"a": {"rps": 50}}]
        ratios = stats.paired_ratios(rounds, "a", "b", "rps")
        self.assertEqual(ratios["per_round"], [2.0, 0.9])
        self.assertAlmostEqual(ratios["mean"], 1.45)

    def test_summarize_empty(self):
        self.assertEqual(stats.summarize([])["n"], 0)


class ConfiggenTest(unittest.TestCase):
    def test_lmdb_preset_counts_fifty_thousand_objects(self):
        spec = configgen.ConfigSpec(**configgen.PRESETS["lmdb"])
        self.assertEqual(sum(configgen.count_objects(spec).values()), 50_000)

    def test_document_shape_and_targets(self):
        spec = configgen.ConfigSpec(routes=3, consumers=2, key_auth=True, request_termination=True)
        with tempfile.TemporaryDirectory() as folder:
            generated = configgen.write_config(spec, Path(folder) / "set.json")
            document = json.loads(generated.path.read_text())
            lines = generated.targets.read_text().splitlines()
        route = document["routes"][0]
        self.assertEqual([p["name"] for p in route["plugins"]], ["key-auth", "request-termination"])
        self.assertEqual(len(document["consumers"]), 2)
        self.assertEqual(lines[0].split("\t")[0], "/r000001")
        self.assertEqual(lines[2], "/r000003\t")

    def test_plugins_cost_set_adds_acl_groups_and_transformer(self):
        spec = configgen.ConfigSpec(routes=2, consumers=2, key_auth=True, acl=True, request_transformer=True,
                                    service_url="http://127.0.0.1:9")
        document = configgen.build_document(spec)
        route = document["services"][0]["routes"][0]
        self.assertEqual([p["name"] for p in route["plugins"]], ["key-auth", "acl", "request-transformer"])
        self.assertEqual(route["plugins"][1]["config"]["allow"], [configgen.ACL_GROUP])
        self.assertEqual(document["consumers"][0]["acls"][0]["group"], configgen.ACL_GROUP)
        self.assertEqual(configgen.count_objects(spec)["plugins"], 6)
        self.assertEqual(configgen.count_objects(spec)["acls"], 2)

    def test_paths_are_never_prefixes_of_each_other(self):
        paths = [configgen.route_path(i) for i in (1, 10, 100, 99_999)]
        self.assertEqual(len({len(p) for p in paths}), 1)

    def test_cycled_targets_give_every_route_equally_often(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = configgen.write_cycled_targets(100, 50_000, Path(tmp) / "t.targets")
            lines = path.read_text().splitlines()
            self.assertEqual(len(lines), 50_000)
            counts: dict[str, int] = {}
            for line in lines:
                counts[line] = counts.get(line, 0) + 1
            self.assertEqual(set(counts), {f"{configgen.route_path(i)}\t" for i in range(1, 101)})
            self.assertEqual(set(counts.values()), {500})
            with self.assertRaises(ValueError):
                configgen.write_cycled_targets(3, 50_000, Path(tmp) / "u.targets")

    def test_without_key_auth_keeps_consumers(self):
        spec = configgen.ConfigSpec(routes=1, consumers=1, key_auth=False, request_termination=True)
        document = configgen.build_document(spec)
        self.assertEqual([p["name"] for p in document["routes"][0]["plugins"]], ["request-termination"])
        self.assertEqual(len(document["consumers"][0]["keyauth_credentials"]), 1)


META = {"date": "2026-01-01 00:00 UTC", "commit": "abc1234", "command": "bench/run x", "quick": False,
        "machine": {"nproc": 2, "cpu_model": "cpu", "memory_gib": 1, "os": "os", "kernel": "k"},
        "layout": {"description": "layout"}, "tools": {"wrk": "w", "h2load": "h", "nginx": "n", "envoy": "e"}}


class ReportTest(unittest.TestCase):
    def block(self, name, met):
        rendered = Rendered(f"text of {name}\n![x](IMG/lab-{name}.png)\n",
                            goals=[Goal(f"goal {name}", "t", "m", met)])
        return {name: report.scenario_block(name, name, META, rendered)}

    def test_update_docs_replaces_only_the_scenarios_run(self):
        with tempfile.TemporaryDirectory() as folder:
            doc = Path(folder) / "benchmarks.md"
            doc.write_text("# Benchmarks\n\n## Worker model\n\nkept\n")
            report.update_docs(doc, META, {**self.block("one", True), **self.block("two", False)}, [])
            report.update_docs(doc, META, self.block("two", True), [])
            text = doc.read_text()
        self.assertIn("kept", text)
        self.assertEqual(text.count("<!-- lab:scenario one -->"), 1)
        self.assertEqual(text.count("<!-- lab:scenario two -->"), 1)
        self.assertIn("](img/lab-one.png)", text)
        self.assertIn("- nowhere in this run.", text)
        self.assertEqual(text.count(report.BEGIN), 1)

    def test_text_after_the_block_survives(self):
        with tempfile.TemporaryDirectory() as folder:
            doc = Path(folder) / "benchmarks.md"
            doc.write_text(f"# B\n\n{report.BEGIN}\nold\n{report.END}\n\n## Router\n\nrouter text\n")
            report.update_docs(doc, META, self.block("one", False), [])
            report.update_docs(doc, META, self.block("one", False), [])
            text = doc.read_text()
        self.assertTrue(text.endswith(f"{report.END}\n\n## Router\n\nrouter text\n"))
        self.assertIn("goal one — m (target t)", text)


if __name__ == "__main__":
    unittest.main()


PERF_SCRIPT = """strait-worker-0 100 1.000: 1 cpu-clock:
\tffffffff81000001 tcp_sendmsg+0x10 ([kernel.kallsyms])
\t5600000001 <tokio::net::TcpStream>::poll_write+0x20 (/bin/strait)
\t5600000002 strait_proxy::handler::forward+0x30 (/bin/strait)
\t5600000003 start_thread+0x5 (/usr/lib/libc.so.6)

strait-worker-0 100 1.001: 1 cpu-clock:
\t5600000010 core::ptr::write+0x1 (inlined)
\t5600000011 hyper::proto::h1::role::parse+0x2 (/bin/strait)
\t5600000002 strait_proxy::handler::forward+0x30 (/bin/strait)
\t5600000003 start_thread+0x5 (/usr/lib/libc.so.6)

strait-admin 101 1.002: 1 cpu-clock:
\t5600000020 strait_admin::post_config+0x1 (/bin/strait)
"""


OWN_CODEC_SCRIPT = """strait-worker-0 100 1.000: 1 cpu-clock:
\t5600000030 core::ptr::write+0x1 (inlined)
\t5600000031 strait_proxy::h1_codec::parse_head+0x2 (inlined)
\t5600000032 strait_proxy::handler::handle+0x3 (inlined)
\t5600000033 strait_proxy::workers::accept_loop::{{closure}}+0x4 (/bin/strait)

strait-worker-0 100 1.001: 1 cpu-clock:
\t5600000034 strait_proxy::handler::forward+0x5 (inlined)
\t5600000035 <strait_proxy::h1_server::Session>::exchange+0x6 (inlined)
\t5600000033 strait_proxy::workers::accept_loop::{{closure}}+0x4 (/bin/strait)
"""


class FlameTest(unittest.TestCase):
    def test_fold_keeps_callers_below_callees_and_skips_inlined_frames(self):
        from lab import flame
        root = flame.fold(PERF_SCRIPT.splitlines(), thread="strait-worker-0")
        self.assertEqual(root.samples, 2)
        forward = root.children["strait-worker-0"].children["start_thread"].children[
            "strait_proxy::handler::forward"]
        self.assertEqual(forward.samples, 2)
        self.assertEqual(sorted(forward.children), ["<tokio::net::TcpStream>::poll_write",
                                                    "hyper::proto::h1::role::parse"])
        with tempfile.TemporaryDirectory() as folder:
            out = Path(folder) / "f.svg"
            with open(out, "w") as handle:
                flame.render(root, "t", 0.0, handle)
            text = out.read_text()
        self.assertIn("<svg", text)
        self.assertIn("strait_proxy::handler::forward (2 samples, 100.00%)", text)

    def test_layers_count_the_innermost_known_frame(self):
        from lab import flame
        shares = dict(flame.leaf_layers(PERF_SCRIPT.splitlines(), thread="strait-worker-0"))
        self.assertEqual(shares, {"kernel (syscalls, TCP/IP on loopback)": 50.0, flame.CODEC: 50.0})

    def test_strait_s_own_http1_codec_counts_as_the_codec_and_its_handler_as_strait(self):
        from lab import flame
        shares = dict(flame.leaf_layers(OWN_CODEC_SCRIPT.splitlines(), thread="strait-worker-0"))
        self.assertEqual(shares, {flame.CODEC: 50.0, "Strait (strait_*)": 50.0})


def _grpc_scenario():
    from lab import registry
    return registry.discover()["grpc"].module


class GrpcScenarioTest(unittest.TestCase):
    def test_the_proto_loses_its_http_options_and_keeps_every_method(self):
        grpc = _grpc_scenario()
        source = Path(__file__).resolve().parents[3] / "tests" / "proto" / "stream.proto"
        with tempfile.TemporaryDirectory() as folder:
            text = grpc.plain_proto(source, Path(folder) / "s.proto").read_text()
        self.assertNotIn("option (google.api.http)", text)
        self.assertNotIn("import ", text)
        for method in ("rpc Unary(Msg) returns (Msg)", "rpc Collect(stream Msg) returns (Summary);",
                       "rpc Ack(stream Msg) returns (stream Msg);", "rpc Missing(Msg) returns (Msg)"):
            self.assertIn(method, text)
        self.assertEqual(text.count("{"), text.count("}"))

    def test_only_calls_ghz_cut_at_the_end_are_not_errors(self):
        grpc = _grpc_scenario()
        report = {"count": 1010, "total": 2e9,
                  "statusCodeDistribution": {"OK": 1000, "Canceled": 4, "Unavailable": 6},
                  "errorDistribution": {
                      "rpc error: code = Canceled desc = grpc: the client connection is closing": 4,
                      "rpc error: code = Unavailable desc = error reading from server: read tcp "
                      "1->2: use of closed network connection": 4,
                      "rpc error: code = Unavailable desc = no healthy upstream": 2},
                  "latencyDistribution": [{"percentage": 50, "latency": 1e6},
                                          {"percentage": 99, "latency": 4e6}]}
        sample = grpc._sample(report, grpc.LOADS["bidi"])
        self.assertEqual((sample["ok_calls"], sample["cut_at_end"], sample["errors"]), (1000, 8, 2))
        self.assertEqual(sample["requests"], 1000 * grpc.STREAM_MESSAGES)
        self.assertAlmostEqual(sample["rps"], 50_000)
        self.assertAlmostEqual(sample["p99_us"], 4000)


@unittest.skipUnless(shutil.which("wrk"), "wrk is not installed (scripts/test.sh installs it)")
class RandomRouteScriptTest(unittest.TestCase):
    """bench/lua/random_route.lua, run by wrk against a server that notes what it was sent."""

    def test_every_path_and_key_is_sent_with_random_pairs(self):
        seen = []

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Head and body in one write (flushed after each request), not two
            # segments held up by Nagle's algorithm and delayed ACKs.
            wbufsize = 1 << 16

            def do_GET(self):
                seen.append((self.path, self.headers.get("apikey"), self.headers.get("Host")))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        script = Path(__file__).resolve().parents[2] / "lua" / "random_route.lua"
        try:
            with tempfile.TemporaryDirectory() as folder:
                targets = Path(folder) / "set.targets"
                targets.write_text("/r1\tk1\n/r2\tk2\n/r3\tk3\n")
                subprocess.run(["wrk", "-t1", "-c2", "-d1s", "-s", str(script),
                                f"http://127.0.0.1:{server.server_port}", "--", str(targets)],
                               check=True, capture_output=True, timeout=30)
        finally:
            server.shutdown()
            server.server_close()
        self.assertGreater(len(seen), 50)
        self.assertEqual({path for path, _, _ in seen}, {"/r1", "/r2", "/r3"})
        self.assertEqual({key for _, key, _ in seen}, {"k1", "k2", "k3"})
        # Paths and keys are paired at random, not each path with one key.
        self.assertGreater(len({(path, key) for path, key, _ in seen}), 3)
        self.assertEqual({host for _, _, host in seen}, {f"127.0.0.1:{server.server_port}"})


def _baseline_result(direct_rps, strait_rps, nginx_rps, strait_cpu_ratio, protocol="h1"):
    """A proxy-baseline result with one protocol: medians and paired ratios only."""
    def ratio(mean):
        return {"mean": mean, "min": mean, "max": mean}
    summary = {name: {"rps": {"median": rps}} for name, rps in
               (("direct", direct_rps), ("strait", strait_rps), ("nginx", nginx_rps))}
    ratios = {"strait/nginx": {"rps": ratio(strait_rps / nginx_rps), "p99": ratio(1.0),
                               "cpu_per_request": ratio(strait_cpu_ratio)}}
    return {"protocols": {protocol: {"summary": summary, "ratios": ratios}}, "unavailable": {}}


class ProxyBaselineGoalsTest(unittest.TestCase):
    """The layout check: RPS ratios count only where direct is 1.5x the fastest gateway."""

    def goals(self, *args, **kwargs):
        from lab import registry
        module = registry.discover()["proxy-baseline"].module
        return {g.goal: g for g in module._goals(_baseline_result(*args, **kwargs))}

    def test_a_direct_slower_than_a_gateway_is_no_ceiling(self):
        # HTTP/2: h2load speaks h2c to the origin when direct, so it can be the slowest.
        goals = self.goals(48_000, 65_000, 35_000, 0.5, protocol="h2")
        layout = goals["HTTP/2 layout: load core not the limit"]
        self.assertIsNone(layout.met)
        self.assertIn("no ceiling", layout.measured)
        self.assertTrue(goals["HTTP/2 RPS vs nginx"].invalid)
        self.assertIs(goals["HTTP/2 CPU per request vs nginx"].met, True)

    def test_a_load_core_at_its_limit_marks_rps_ratios_invalid(self):
        goals = self.goals(70_000, 64_000, 62_000, 0.98)
        layout = goals["HTTP/1.1 layout: load core not the limit"]
        self.assertEqual((layout.met, layout.kind), (False, "layout"))
        self.assertIn("1.09x (strait)", layout.measured)
        rps = goals["HTTP/1.1 RPS vs nginx"]
        self.assertTrue(rps.invalid)
        self.assertIsNone(rps.met)
        self.assertIn("1.032x", rps.measured)
        self.assertIs(goals["HTTP/1.1 CPU per request vs nginx"].met, True)

    def test_with_headroom_rps_ratios_are_judged(self):
        goals = self.goals(150_000, 64_000, 66_000, 1.02)
        self.assertIs(goals["HTTP/1.1 layout: load core not the limit"].met, True)
        rps = goals["HTTP/1.1 RPS vs nginx"]
        self.assertFalse(rps.invalid)
        self.assertIs(rps.met, False)
        self.assertIs(goals["HTTP/1.1 CPU per request vs nginx"].met, False)

    def test_the_default_configurations_are_judged_beside_the_stripped_ones(self):
        result = _baseline_result(150_000, 64_000, 66_000, 0.95)
        data = result["protocols"]["h1"]
        data["summary"]["strait-default"] = {"rps": {"median": 60_000}}
        data["summary"]["nginx-default"] = {"rps": {"median": 58_000}}
        data["ratios"]["strait-default/nginx-default"] = {
            "rps": {"mean": 1.03, "min": 1.03, "max": 1.03}, "p99": {"mean": 1.0, "min": 1.0, "max": 1.0},
            "cpu_per_request": {"mean": 1.08, "min": 1.08, "max": 1.08}}
        from lab import registry
        module = registry.discover()["proxy-baseline"].module
        goals = {g.goal: g for g in module._goals(result)}
        self.assertIs(goals["HTTP/1.1 CPU per request vs nginx"].met, True)
        default = goals["HTTP/1.1 CPU per request vs nginx, default configurations"]
        self.assertIs(default.met, False)
        self.assertIn("1.080x", default.measured)
        comparisons = {g.goal for g in module._comparisons(result)}
        self.assertIn("HTTP/1.1 p99 latency vs nginx-default", comparisons)
        self.assertNotIn("HTTP/1.1 gateway CPU per request vs nginx-default", comparisons)

    def test_the_goals_table_says_invalid_layout_and_keeps_it_out_of_losses(self):
        goals = self.goals(70_000, 64_000, 62_000, 0.98).values()
        block = report.scenario_block("proxy-baseline", "t", META, Rendered("x", goals=list(goals)))
        text = report.goals_markdown({"proxy-baseline": block})
        self.assertIn("| 1.032x (rounds 1.032–1.032) | **invalid layout** |", text)
        self.assertIn("- nowhere in this run.", text)
        self.assertIn("- layout, proxy-baseline: HTTP/1.1 layout: load core not the limit — 1.09x", text)


class BiggerMachineLayoutTest(unittest.TestCase):
    """STRAIT_BENCH_LOAD_THREADS and STRAIT_BENCH_ORIGIN_WORKERS size the load generator and
    the origin for machines with more than 2 cores; both default to one."""

    def setUp(self):
        self.saved = {k: os.environ.pop(k, None)
                      for k in ("STRAIT_BENCH_LOAD_THREADS", "STRAIT_BENCH_ORIGIN_WORKERS")}

    def tearDown(self):
        for key, value in self.saved.items():
            os.environ.pop(key, None)
            if value is not None:
                os.environ[key] = value

    def test_defaults_are_one_thread_and_one_worker(self):
        self.assertEqual(loadgen.Load(port=1).threads, 1)
        self.assertEqual(systems.origin_workers(), 1)
        self.assertIn("worker_processes 1;", systems._nginx_conf(Path("/w"), ""))

    def test_the_environment_sizes_load_threads_and_origin_workers(self):
        os.environ["STRAIT_BENCH_LOAD_THREADS"] = "4"
        os.environ["STRAIT_BENCH_ORIGIN_WORKERS"] = "3"
        self.assertEqual(loadgen.Load(port=1).threads, 4)
        conf = systems._nginx_conf(Path("/w"), "", workers=systems.origin_workers())
        self.assertIn("worker_processes 3;", conf)

    def test_a_bad_count_is_refused_with_its_name(self):
        for bad in ("0", "-2", "four"):
            os.environ["STRAIT_BENCH_LOAD_THREADS"] = bad
            with self.assertRaises(SystemExit) as caught:
                loadgen.Load(port=1)
            self.assertIn("STRAIT_BENCH_LOAD_THREADS", str(caught.exception))


class CpuMeterTest(unittest.TestCase):
    def test_splits_user_and_system_time_and_counts_sleeps(self):
        child = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                                  "sys.stdin.readline()\n"
                                  "sum(i * i for i in range(6_000_000))\n"
                                  "for _ in range(30): time.sleep(0.002)\n"
                                  "print('done', flush=True)\n"
                                  "sys.stdin.readline()\n"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            time.sleep(0.3)
            with CpuMeter(child.pid) as meter:
                child.stdin.write("go\n")
                child.stdin.flush()
                self.assertEqual(child.stdout.readline(), "done\n")
            self.assertGreater(meter.user, 0.05)
            self.assertAlmostEqual(meter.seconds, meter.user + meter.system)
            self.assertGreaterEqual(meter.switches, 30)
        finally:
            child.stdin.write("end\n")
            child.stdin.close()
            child.wait(5)
            child.stdout.close()
