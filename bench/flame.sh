#!/usr/bin/env bash
# Flame graph of Strait's proxy worker on the hot path (docs/benchmarks.md#hot-path).
#
#   bench/flame.sh BIN OUT.svg [TITLE]
#   FLAME_PROTOCOL=h2c bench/flame.sh BIN OUT.svg [TITLE]     # h2load -c32 -m10 instead of wrk
#
# Layout of `bench/run proxy-baseline`: BIN (a release Strait, 1 worker) on core 0
# with one route and no plugins; the origin (nginx `return 200`, 1 worker) and
# wrk -t1 -c32 (keep-alive HTTP/1.1) on core 1. After 3 s of warm-up, perf samples
# the worker for 5 s (499 Hz, DWARF call graphs); the stacks become a self-contained
# SVG through bench/lab/flame.py. Also prints RPS and the gateway's CPU µs per
# request (user + system time from /proc over the sampled run / requests).
# Needs perf (Debian's linux-perf), nginx and wrk (bench/setup.sh).
set -euo pipefail
bench_dir="$(cd "$(dirname "$0")" && pwd)"
bin="$(realpath "$1")"
out="$(realpath -m "$2")"
protocol="${FLAME_PROTOCOL:-h1}"
case "$protocol" in
    h1) default_title="Strait proxy worker, HTTP/1.1 keep-alive, 1 route" ;;
    h2c) default_title="Strait proxy worker, h2c (32 connections x 10 streams), 1 route" ;;
    *) echo "FLAME_PROTOCOL must be h1 or h2c" >&2; exit 2 ;;
esac
title="${3:-$default_title}"
work="$(mktemp -d /tmp/strait-flame.XXXXXX)"
origin_port=19800 proxy_port=19801 admin_port=19802
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    sleep 0.3
    rm -rf "$work"
}
trap cleanup EXIT

cat >"$work/nginx.conf" <<CONF
worker_processes 1; error_log $work/error.log; pid $work/nginx.pid;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  server { listen 127.0.0.1:$origin_port backlog=4096; location / { return 200 'ok'; } } }
CONF
taskset -c 1 nginx -p "$work" -c "$work/nginx.conf"
sleep 0.2
pids+=("$(cat "$work/nginx.pid")")

cat >"$work/kong.json" <<JSON
{"_format_version": "3.0", "services": [{"name": "origin", "url": "http://127.0.0.1:$origin_port",
  "routes": [{"name": "all", "paths": ["/"]}]}]}
JSON
STRAIT_PREFIX="$work/prefix" STRAIT_PROXY_ACCESS_LOG=off STRAIT_PROXY_ERROR_LOG=stderr STRAIT_PROXY_LISTEN="127.0.0.1:$proxy_port" \
    STRAIT_ADMIN_LISTEN="127.0.0.1:$admin_port" STRAIT_STATUS_LISTEN=off STRAIT_ADMIN_GUI_LISTEN=off STRAIT_WORKER_THREADS=1 \
    STRAIT_LOG_LEVEL=warn STRAIT_DECLARATIVE_CONFIG="$work/kong.json" \
    taskset -c 0 "$bin" start >"$work/strait.log" 2>&1 &
pid=$!
pids+=("$pid")
for _ in $(seq 100); do curl -s -o /dev/null "127.0.0.1:$proxy_port/" && break; sleep 0.1; done

# Prints the number of requests completed in a load of $1 seconds.
load() {
    if [[ "$protocol" == h1 ]]; then
        taskset -c 1 wrk -t1 -c32 -d"$1"s "http://127.0.0.1:$proxy_port/" | awk '/requests in/ {print $1}'
    else
        taskset -c 1 h2load -t1 -c32 -m10 -D "$1" "http://127.0.0.1:$proxy_port/" | awk '/^requests:/ {print $8}'
    fi
}
load 3 >/dev/null
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
before=$(ticks)
taskset -c 1 perf record -q -F 499 --call-graph dwarf,32768 -p "$pid" -o "$work/perf.data" -- sleep 5 \
    >/dev/null 2>&1 &
perf_pid=$!
requests=$(load 5)
wait "$perf_pid" || true
after=$(ticks)
awk -v r="$requests" -v b="$before" -v a="$after" -v t="$(getconf CLK_TCK)" \
    'BEGIN { printf "%.0f RPS, %.2f gateway CPU us/request\n", r / 5, (a - b) / t * 1e6 / r }'

perf script -i "$work/perf.data" 2>/dev/null >"$work/perf.txt"
(cd "$bench_dir" && python3 -m lab.flame "$work/perf.txt" --thread strait-worker-0 --layers --title "$title" -o "$out")
echo "wrote $out"
