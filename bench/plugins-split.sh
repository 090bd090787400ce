#!/usr/bin/env bash
# Per-plugin CPU split behind `bench/run plugins-cost` (docs/plugins.md#what-plugins-cost):
# 100 routes / 100 consumers with no plugins, ip-restriction only (the plugin path's own
# cost), key-auth, key-auth + acl, key-auth + acl + request-transformer, key-auth +
# rate-limiting, key-auth + prometheus and key-auth + rate-limiting + prometheus, and (only when
# PLUGINS_SPLIT_SETS names them) statsd, statsd-packed and zipkin as global plugins without auth
# (PLUGINS_SPLIT_SETS picks sets); for each, a
# release Strait (1 worker, core 0) behind wrk -c32 (random route + key, core 1) against an
# nginx origin (core 1): RPS and gateway CPU µs per request over 10 s, ROUNDS times.
#   bench/plugins-split.sh [ROUNDS]      (after bench/setup.sh and cargo build --release)
# PLUGINS_SPLIT_BINS="A B" measures several builds, interleaved within each round and set
# (each line names its build): compare builds measured in one run only.
# PLUGINS_SPLIT_ACCESS_LOG=1 keeps Strait's default access log on (as Kong ships).
set -euo pipefail
bench_dir="$(cd "$(dirname "$0")" && pwd)"
rounds="${1:-2}"
bins="${PLUGINS_SPLIT_BINS:-${PLUGINS_SPLIT_BIN:-$bench_dir/../target/release/strait}}"
work="$(mktemp -d /tmp/strait-plugins-split.XXXXXX)"
origin_port=19500 proxy_port=19501 admin_port=19502
cat > "$work/nginx.conf" <<CONF
worker_processes 1; error_log $work/error.log; pid $work/nginx.pid;
events { worker_connections 4096; }
http { access_log off; server { listen 127.0.0.1:$origin_port backlog=4096; location / { return 200 "hello, world"; } } }
CONF
taskset -c 1 nginx -p "$work" -c "$work/nginx.conf"
sleep 0.2
origin_pid=$(cat "$work/nginx.pid")
trap 'kill "$origin_pid" 2>/dev/null || true; sleep 0.2; rm -rf "$work"' EXIT
gen() { (cd "$bench_dir" && python3 -m lab.configgen --routes 100 --consumers 100 \
    --service-url "http://127.0.0.1:$origin_port" -o "$work/$1.json" "${@:2}" >/dev/null); }
gen none
gen key-auth --plugins key-auth
gen key-auth+acl --plugins key-auth acl
gen all-three --plugins key-auth acl request-transformer
# The other set plugins-cost measures: key-auth + rate-limiting (local) + prometheus, and each
# of the last two on their own beside key-auth.
spec() { (cd "$bench_dir" && python3 -c "import sys; from pathlib import Path; from lab.configgen import ConfigSpec, write_config
write_config(ConfigSpec(routes=100, consumers=100, key_auth=True, service_url='http://127.0.0.1:$origin_port', $2), Path(sys.argv[1]))" "$work/$1.json" >/dev/null); }
spec key-auth+rl "rate_limiting=True"
spec key-auth+prom "prometheus=True"
spec key-auth+rl+prom "rate_limiting=True, prometheus=True"
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
doc = json.load(open(f"{work}/none.json"))
for route in doc["services"][0]["routes"]:
    route["plugins"] = [{"name": "ip-restriction", "config": {"allow": ["127.0.0.1/32"]}}]
json.dump(doc, open(f"{work}/ip-restriction.json", "w"))
# Issue 62's cost sets: statsd (Kong's defaults: a datagram per line, and packed into 1400-byte
# datagrams) and zipkin (its default sample ratio, 0.001) as global plugins, no auth.
origin = doc["services"][0]["url"]
for name, plugin in [
    ("statsd", {"name": "statsd", "config": {"host": "127.0.0.1", "port": 19503}}),
    ("statsd-packed", {"name": "statsd", "config": {"host": "127.0.0.1", "port": 19503, "udp_packet_size": 1400}}),
    ("zipkin", {"name": "zipkin", "config": {"http_endpoint": origin.rstrip("/") + "/api/v2/spans"}}),
]:
    doc = json.load(open(f"{work}/none.json"))
    doc["plugins"] = [plugin]
    json.dump(doc, open(f"{work}/{name}.json", "w"))
PY
# The statsd sets' datagrams go to a listener that reads and drops them (core 1, beside wrk).
taskset -c 1 python3 -c "import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('127.0.0.1', 19503))
while True: s.recv(65535)" &
sink_pid=$!
trap 'kill "$origin_pid" "$sink_pid" 2>/dev/null || true; sleep 0.2; rm -rf "$work"' EXIT
targets="$work/all-three.targets"
access_log=off
[ "${PLUGINS_SPLIT_ACCESS_LOG:-0}" = 1 ] && access_log="$work/access.log"
lua="$bench_dir/lua/random_route.lua"
for round in $(seq "$rounds"); do
  for set in ${PLUGINS_SPLIT_SETS:-none ip-restriction key-auth key-auth+acl all-three key-auth+rl key-auth+prom key-auth+rl+prom}; do
   for bin in $bins; do
    rm -rf "$work/prefix"
    STRAIT_PREFIX="$work/prefix" STRAIT_PROXY_ACCESS_LOG="$access_log" STRAIT_PROXY_ERROR_LOG=stderr STRAIT_PROXY_LISTEN="127.0.0.1:$proxy_port" \
      STRAIT_ADMIN_LISTEN="127.0.0.1:$admin_port" STRAIT_STATUS_LISTEN=off STRAIT_ADMIN_GUI_LISTEN=off STRAIT_WORKER_THREADS=1 \
      STRAIT_DECLARATIVE_CONFIG="$work/$set.json" taskset -c 0 "$bin" start >"$work/strait.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do curl -s -o /dev/null "127.0.0.1:$proxy_port" && break; sleep 0.1; done
    taskset -c 1 wrk -t1 -c32 -d3s -s "$lua" "http://127.0.0.1:$proxy_port" -- "$targets" >/dev/null
    before=$(awk '{print $14+$15}' "/proc/$pid/stat")
    out=$(taskset -c 1 wrk -t1 -c32 -d10s -s "$lua" "http://127.0.0.1:$proxy_port" -- "$targets")
    after=$(awk '{print $14+$15}' "/proc/$pid/stat")
    kill "$pid"; wait "$pid" 2>/dev/null || true
    requests=$(echo "$out" | awk '/requests in/ {print $1}')
    non2xx=$(echo "$out" | awk '/Non-2xx/ {print $NF}')
    python3 -c "import os; r=$requests; t=os.sysconf('SC_CLK_TCK'); \
print(f'round $round  {\"$set\":15} {r/10:8.0f} rps  {($after-$before)/t*1e6/r:6.2f} us/req  non-2xx ${non2xx:-0}  $(basename "$bin")')"
   done
  done
done
