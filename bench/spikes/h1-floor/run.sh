#!/usr/bin/env bash
# The HTTP/1.1 floor spike against nginx and Strait (docs/architecture.md#http1-codec-spike).
#
#   bench/spikes/h1-floor/run.sh [STRAIT_BIN] [ROUNDS]
#
# Layout of `bench/run proxy-baseline`: each proxy alone on core 0 with one worker (nginx
# `worker_processes 1` with upstream keepalive, Strait `STRAIT_WORKER_THREADS=1`, the spike's
# single thread); origin (nginx `return 200 'ok'`, 1 worker) and wrk -t1 -c32 on core 1.
# Per system and round: 2 s warm-up, then 8 s of load; RPS, and the proxy's CPU µs per
# request (user + system from /proc/PID/stat over the run / requests) with the user part.
# `direct` is wrk straight to the origin: the layout is valid when it is >= 1.5x the
# fastest proxy. Needs nginx and wrk (bench/setup.sh) and a release Strait.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
strait="$(realpath "${1:-$repo/target/release/strait}")"
rounds="${2:-3}"
(cd "$here" && cargo build --release --quiet)
spike="$here/target/release/h1-floor"
work="$(mktemp -d /tmp/strait-h1-floor.XXXXXX)"
origin=19960 proxy=19961 admin=19962
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    [[ -f "$work/proxy.pid" ]] && kill "$(cat "$work/proxy.pid")" 2>/dev/null || true
    sleep 0.3
    rm -rf "$work"
}
trap cleanup EXIT

. "$repo/bench/nginx-conf.sh"
origin_conf "$work" "$origin"
proxy_conf "$work" "$proxy" "$origin"
kong_json "$work" "$origin"
taskset -c 1 nginx -p "$work" -c "$work/origin.conf"
sleep 0.2
pids+=("$(cat "$work/origin.pid")")

start() {  # sets pid: the process whose CPU is measured
    case "$1" in
        nginx)
            taskset -c 0 nginx -p "$work" -c "$work/proxy.conf"
            sleep 0.2
            pid=$(pgrep -P "$(cat "$work/proxy.pid")") ;;
        strait)
            rm -rf "$work/prefix"
            STRAIT_PREFIX="$work/prefix" STRAIT_PROXY_ACCESS_LOG=off STRAIT_PROXY_ERROR_LOG=stderr STRAIT_PROXY_LISTEN="127.0.0.1:$proxy" \
                STRAIT_ADMIN_LISTEN="127.0.0.1:$admin" STRAIT_STATUS_LISTEN=off STRAIT_ADMIN_GUI_LISTEN=off STRAIT_WORKER_THREADS=1 \
                STRAIT_LOG_LEVEL=warn STRAIT_DECLARATIVE_CONFIG="$work/kong.json" \
                taskset -c 0 "$strait" start >"$work/strait.log" 2>&1 &
            pid=$!
            pids+=("$pid") ;;
        spike)
            taskset -c 0 "$spike" "127.0.0.1:$proxy" "127.0.0.1:$origin" >"$work/spike.log" 2>&1 &
            pid=$!
            pids+=("$pid") ;;
    esac
}

measure() {  # system port pid
    taskset -c 1 wrk -t1 -c32 -d2s "http://127.0.0.1:$2/" >/dev/null
    local before after result requests
    before=$([[ -n "$3" ]] && awk '{print $14, $15}' "/proc/$3/stat" || echo "0 0")
    result=$(taskset -c 1 wrk -t1 -c32 -d8s "http://127.0.0.1:$2/")
    after=$([[ -n "$3" ]] && awk '{print $14, $15}' "/proc/$3/stat" || echo "0 0")
    requests=$(echo "$result" | awk '/requests in/ {print $1}')
    echo "$1 $requests $before $after" | awk -v t="$(getconf CLK_TCK)" '{
        cpu = ($5 + $6 - $3 - $4) / t * 1e6 / $2; user = ($5 - $3) / t * 1e6 / $2;
        if ($5 + $6 == 0) printf "%-7s %8.0f RPS\n", $1, $2 / 8;
        else printf "%-7s %8.0f RPS %7.2f CPU us/req (user %5.2f)\n", $1, $2 / 8, cpu, user }'
}

for round in $(seq "$rounds"); do
    echo "round $round"
    measure direct "$origin" ""
    for system in nginx strait spike; do
        start "$system"
        for _ in $(seq 100); do curl -s -o /dev/null "127.0.0.1:$proxy/" && break; sleep 0.05; done
        measure "$system" "$proxy" "$pid"
        if [[ "$system" == nginx ]]; then kill "$(cat "$work/proxy.pid")"; rm -f "$work/proxy.pid"
        else kill "$pid"; wait "$pid" 2>/dev/null || true; fi
        sleep 0.5
    done
done
