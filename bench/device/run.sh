#!/usr/bin/env bash
# On a lent machine (the device tool), from the repository root, with bench/device/bundle
# carried there (bench/device/pack.sh made it):
#
#   bench/device/run.sh [lab|pairs|all]     # default all
#
# 1. unpacks the bundle into /tmp/strait-device and puts its tools first on PATH;
# 2. `lab`: the lab's proxy-baseline in the layout where the gateway's core is the limit
#    (gateway on core 2 alone; wrk/h2load with 4 threads and a 4-worker nginx origin on cores
#    3-10), DEVICE_ROUNDS interleaved rounds (default 5) of DEVICE_DURATION seconds (default
#    5), with Envoy from the bundle;
# 3. `pairs`: bench/device/profile-pairs.sh in the same layout (CPU split, switches,
#    inter-processor interrupts and a perf profile of the gateway's core per request).
# Results go to $OUT (the device tool's folder that comes back) or, without it, to
# bench/results/device-<time>/: lab/report.md and lab/results.json, pairs/summary.txt.
# Needs python3 (standard library only) and at least 11 CPUs; xz and tar to unpack.
set -euo pipefail
repo_dir="$(cd "$(dirname "$0")/../.." && pwd)"
what=${1:-all}
out="${OUT:-$repo_dir/bench/results/device-$(date -u +%Y%m%d-%H%M%S)}"
mkdir -p "$out"
bundle="$repo_dir/bench/device/bundle/tools.tar.xz"
[[ -f "$bundle" ]] || { echo "run: no $bundle (bench/device/pack.sh, then carry bench/device/bundle)" >&2; exit 1; }
(($(nproc) >= 11)) || { echo "run: $(nproc) CPUs; the layout needs cores 2-10" >&2; exit 1; }
root=/tmp/strait-device
rm -rf "$root"
mkdir -p "$root"
xz -T0 -dc "$bundle" | tar -C "$root" -xf -
export PATH="$root/bin:$PATH"
# Debian's nginx opens its compiled-in temporary folders at start, whatever the prefix.
[[ $(id -u) -eq 0 ]] && mkdir -p /var/lib/nginx /var/log/nginx
cp "$root/BUILD" "$out/BUILD"
{ nproc; uname -r; grep -m1 'model name' /proc/cpuinfo || true; } >"$out/machine.txt"

if [[ $what == all || $what == lab ]]; then
    (cd "$repo_dir/bench" &&
        STRAIT_BENCH_GATEWAY_CPUS=2 STRAIT_BENCH_LOAD_CPUS=3-10 STRAIT_BENCH_LOAD_THREADS=4 \
            STRAIT_BENCH_ORIGIN_WORKERS=4 STRAIT_BENCH_ENVOY="$root/real/envoy" \
            taskset -c 3-10 python3 -m lab --no-docs --strait-bin "$root/real/strait" \
            --rounds "${DEVICE_ROUNDS:-5}" --duration "${DEVICE_DURATION:-5}" --out "$out/lab" proxy-baseline) ||
        echo "run: the lab failed (see above)" >&2
    # The logs of every process stay behind; the report and the JSON come back.
    rm -rf "$out/lab/work"
fi
if [[ $what == all || $what == pairs ]]; then
    DEVICE_GATEWAY_CPU=2 DEVICE_LOAD_CPUS=3-10 DEVICE_LOAD_THREADS=4 DEVICE_ORIGIN_WORKERS=4 \
        "$repo_dir/bench/device/profile-pairs.sh" "$out/pairs" "$root/real/strait"
fi
