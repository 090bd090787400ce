#!/usr/bin/env bash
# Where each gateway's CPU goes, under the load of proxy-baseline's HTTP/1.1 half: nginx and
# Strait proxy the same origin in turn, several pairs back to back, each alone on its core.
#
#   bench/device/profile-pairs.sh OUT_DIR [STRAIT_BINARY]
#
# Per sample (DEVICE_SECONDS of load after a 1 s warm-up; wrk -t$DEVICE_LOAD_THREADS -c32):
# requests, the gateway's user and system CPU per request (/proc/PID/stat), its voluntary
# switches per request, the interrupts every CPU took per request by kind (/proc/interrupts:
# RES and CAL are the inter-processor interrupts a wake-up of a thread on another core costs;
# the gateway's sends wake the origin and wrk), and, when perf runs, a profile of the
# gateway's core (`perf record -C`), reported per request by symbol. OUT_DIR/summary.txt
# compares the two gateways: means per gateway, then the symbols whose time per request
# differs most. Layout (defaults: the lent 16-core machine's, as in docs/benchmarks.md):
# DEVICE_GATEWAY_CPU=2, DEVICE_LOAD_CPUS=3-10 (wrk and the origin), DEVICE_LOAD_THREADS=4,
# DEVICE_ORIGIN_WORKERS=4, DEVICE_PAIRS=3, DEVICE_SECONDS=5. On this 2-core machine:
# DEVICE_GATEWAY_CPU=1 DEVICE_LOAD_CPUS=0 DEVICE_LOAD_THREADS=1 DEVICE_ORIGIN_WORKERS=1.
# Needs nginx, wrk and python3 on PATH; perf is optional.
set -euo pipefail
bench_dir="$(cd "$(dirname "$0")/.." && pwd)"
out="$(realpath -m "${1:?usage: profile-pairs.sh OUT_DIR [STRAIT_BINARY]}")"
strait="$(realpath "${2:-$bench_dir/../target/dist/strait}")"
gateway_cpu=${DEVICE_GATEWAY_CPU:-2}
load_cpus=${DEVICE_LOAD_CPUS:-3-10}
load_threads=${DEVICE_LOAD_THREADS:-4}
origin_workers=${DEVICE_ORIGIN_WORKERS:-4}
pairs=${DEVICE_PAIRS:-3}
seconds=${DEVICE_SECONDS:-5}
mkdir -p "$out"
work="$(mktemp -d /tmp/strait-pairs.XXXXXX)"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pidfile in "$work"/*.pid; do [[ -f "$pidfile" ]] && kill "$(cat "$pidfile")" 2>/dev/null; done
    rm -rf "$work"
}
trap cleanup EXIT

. "$bench_dir/nginx-conf.sh"
origin_conf "$work" 19960
sed -i "s/^worker_processes 1;/worker_processes $origin_workers;/" "$work/origin.conf"
proxy_conf "$work" 19970 19960
kong_json "$work" 19960
taskset -c "$load_cpus" nginx -p "$work" -c "$work/origin.conf"
taskset -c "$gateway_cpu" nginx -p "$work" -c "$work/proxy.conf"
STRAIT_PREFIX="$work/strait" STRAIT_PROXY_ACCESS_LOG=off STRAIT_PROXY_LISTEN=127.0.0.1:19980 \
    STRAIT_ADMIN_LISTEN=127.0.0.1:19990 STRAIT_STATUS_LISTEN=off STRAIT_ADMIN_GUI_LISTEN=off STRAIT_WORKER_THREADS=1 \
    STRAIT_LOG_LEVEL=warn STRAIT_DECLARATIVE_CONFIG="$work/kong.json" \
    taskset -c "$gateway_cpu" "$strait" start >"$work/strait.log" 2>&1 &
pids+=($!)
strait_pid=$!
# Both listening (bash's /dev/tcp: the lent machine may have no curl).
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for _ in $(seq 1 100); do
    listening 19980 && listening 19970 && break
    sleep 0.1
done
# CPU of the proxy's worker process (nginx) or of the whole process (Strait); switches of
# the task that serves: nginx's worker, Strait's worker thread.
nginx_worker=$(pgrep -P "$(cat "$work/proxy.pid")" | head -1)
strait_worker=$(grep -l '^strait-worker-0$' /proc/"$strait_pid"/task/*/comm | head -1 | xargs dirname | xargs basename)
have_perf=0
if command -v perf >/dev/null && perf record -q -C "$gateway_cpu" -o "$work/probe.data" -- sleep 0.1 >/dev/null 2>&1; then
    have_perf=1
fi
echo "perf $([[ $have_perf == 1 ]] && echo yes || echo no)" >"$out/layout.txt"
echo "gateway cpu $gateway_cpu, load cpus $load_cpus, wrk -t$load_threads -c32, origin workers $origin_workers, $pairs pairs of ${seconds}s" >>"$out/layout.txt"

interrupts() {  # CPU-summed counts of each interrupt line, "NAME COUNT" per line
    awk 'NR == 1 { n = NF; next } { s = 0; for (i = 2; i <= n + 1 && i <= NF; i++) if ($i ~ /^[0-9]+$/) s += $i; print $1, s }' /proc/interrupts
}
sample() {  # NAME PORT PID TASK ROUND
    local name=$1 port=$2 pid=$3 task=$4 round=$5 file="$out/$name.$round"
    taskset -c "$load_cpus" wrk -t"$load_threads" -c32 -d1s "http://127.0.0.1:$port/" >/dev/null
    interrupts >"$file.irq0"
    read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$pid/stat")
    v0=$(awk '/^voluntary_ctxt_switches/{print $2}' "/proc/$pid/task/$task/status")
    taskset -c "$load_cpus" wrk -t"$load_threads" -c32 -d"${seconds}s" "http://127.0.0.1:$port/" >"$file.wrk" &
    local wrk_pid=$!
    if [[ $have_perf == 1 ]]; then
        sleep 0.5
        perf record -q -C "$gateway_cpu" -F 4999 -o "$file.data" -- sleep $((seconds - 1)) >/dev/null 2>&1 || true
    fi
    wait "$wrk_pid"
    read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$pid/stat")
    v1=$(awk '/^voluntary_ctxt_switches/{print $2}' "/proc/$pid/task/$task/status")
    interrupts >"$file.irq1"
    echo "$u0 $s0 $u1 $s1 $v0 $v1 $(getconf CLK_TCK)" >"$file.cpu"
}
for round in $(seq 1 "$pairs"); do
    if ((round % 2)); then order="nginx strait"; else order="strait nginx"; fi
    for name in $order; do
        if [[ $name == nginx ]]; then
            sample nginx 19970 "$nginx_worker" "$nginx_worker" "$round"
        else
            sample strait 19980 "$strait_pid" "$strait_worker" "$round"
        fi
    done
done
python3 "$bench_dir/device/pairs_summary.py" "$out" "$pairs" "$seconds" "$have_perf" | tee "$out/summary.txt"
# Only the text comes back: the profiles themselves are large.
rm -f "$out"/*.data "$out"/*.irq0 "$out"/*.irq1
