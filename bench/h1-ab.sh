#!/usr/bin/env bash
# CPU per HTTP/1.1 request of Strait builds against each other and nginx, interleaved.
#
#   bench/h1-ab.sh ROUNDS BINARY [BINARY ...]
#
# Each proxy runs alone with one worker on core 1; wrk (-t1 -c32) and the origin (nginx,
# `return 200 'ok'`, one worker) run on core 0. Each round measures every proxy in turn for
# H1_AB_SECONDS (default 5) after a 1 s warm-up, in an order that rotates from round to round. CPU per request is the proxy's utime+stime
# (/proc/PID/stat) over the run divided by the requests wrk completed; "user" is utime alone.
# H1_AB_NGINX=0 leaves nginx (proxy_pass with upstream keepalive) out. H1_AB_ACCESS_LOG=1 turns
# the access log on for every proxy, as Kong and Strait ship: Strait's default
# `proxy_access_log`, nginx's in Kong's format with `buffer=64k`. Compare builds measured
# in one run only: on a shared machine absolute figures drift from hour to hour.
set -euo pipefail

rounds=${1:?usage: bench/h1-ab.sh ROUNDS BINARY [BINARY ...]}
shift
seconds=${H1_AB_SECONDS:-5}
dir=$(mktemp -d /tmp/h1-ab.XXXXXX)
ticks=$(getconf CLK_TCK)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    [ -f "$dir/proxy.pid" ] && kill "$(cat "$dir/proxy.pid")" 2>/dev/null || true
    [ -f "$dir/origin.pid" ] && kill "$(cat "$dir/origin.pid")" 2>/dev/null || true
}
trap cleanup EXIT

. "$(dirname "$0")/nginx-conf.sh"
origin_conf "$dir" 19960
access_log=${H1_AB_ACCESS_LOG:-0}
proxy_conf "$dir" 19970 19960 "$access_log"
kong_json "$dir" 19960

taskset -c 0 nginx -p "$dir" -c "$dir/origin.conf"
names=() ports=()
if [ "${H1_AB_NGINX:-1}" != 0 ]; then
    taskset -c 1 nginx -p "$dir" -c "$dir/proxy.conf"
    sleep 0.3
    pids+=("$(pgrep -P "$(cat "$dir/proxy.pid")")")
    ports+=(19970)
    names+=(nginx)
fi
i=0
for binary in "$@"; do
    port=$((19980 + i))
    strait_access=off
    [ "$access_log" = 1 ] && strait_access="$dir/p$i/access.log"
    STRAIT_PREFIX="$dir/p$i" STRAIT_PROXY_ACCESS_LOG="$strait_access" STRAIT_PROXY_ERROR_LOG=stderr \
        STRAIT_PROXY_LISTEN=127.0.0.1:$port STRAIT_ADMIN_LISTEN=127.0.0.1:$((19990 + i)) \
        STRAIT_STATUS_LISTEN=off STRAIT_ADMIN_GUI_LISTEN=off STRAIT_WORKER_THREADS=1 STRAIT_LOG_LEVEL=warn \
        STRAIT_DECLARATIVE_CONFIG="$dir/kong.json" taskset -c 1 "$binary" start >"$dir/s$i.log" 2>&1 &
    pids+=($!)
    ports+=("$port")
    names+=("$(basename "$binary")#$i")
    i=$((i + 1))
done
sleep 2

cpu() { awk '{print $14 + $15, $14}' "/proc/$1/stat"; }
count=${#names[@]}
for round in $(seq 1 "$rounds"); do
    # Each round starts one proxy later: whichever runs first in a round
    # measured faster here (up to 8% in one run), so a fixed order favours it.
    for k in $(seq 0 $((count - 1))); do
        j=$(((k + round - 1) % count))
        taskset -c 0 wrk -t1 -c32 -d1s "http://127.0.0.1:${ports[$j]}/" >/dev/null
        read -r total0 user0 < <(cpu "${pids[$j]}")
        out=$(taskset -c 0 wrk -t1 -c32 -d"${seconds}s" "http://127.0.0.1:${ports[$j]}/")
        read -r total1 user1 < <(cpu "${pids[$j]}")
        requests=$(echo "$out" | awk '/requests in/{print $1}')
        awk -v r="$round" -v n="${names[$j]}" -v q="$requests" -v s="$seconds" -v t=$((total1 - total0)) \
            -v u=$((user1 - user0)) -v hz="$ticks" 'BEGIN {
                printf "round %d %-24s rps %7.0f  cpu/req %6.2f us  user %5.2f us\n",
                    r, n, q / s, t * 1e6 / hz / q, u * 1e6 / hz / q }'
    done
done
