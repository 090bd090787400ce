#!/usr/bin/env bash
# User-space instructions per proxied request with one global plugin, beside none, counted by
# callgrind (bench/h1-instructions.sh): a plugin's cost that this VM's noise cannot move.
#
#   bench/plugin-instructions.sh BINARY [SET ...]     (sets: none zipkin statsd datadog
#                                                      prometheus; default all five)
#
# One service and route to the origin bench/h1-instructions.sh starts, the set's plugin global
# with Kong's defaults (zipkin's sample_ratio 0.001, its spans to the origin; statsd's and
# datadog's default metrics over UDP to a sink this script starts). Prints each set's
# instructions per request and its increase over `none` (when `none` is among the sets).
# Counts cover every thread of the process: the metrics plugins' shipping thread too, which
# under callgrind's lockstep client flushes a window of fewer requests than under load (a
# pessimistic share of its per-window work). PLUGIN_INSN_KEEP=DIR keeps each callgrind output
# (DIR/SET/callgrind.strait) for callgrind_annotate.
set -euo pipefail
bench_dir="$(cd "$(dirname "$0")" && pwd)"
[ $# -ge 1 ] || { echo "usage: bench/plugin-instructions.sh BINARY [SET ...]" >&2; exit 2; }
binary=$1; shift
sets=("$@"); [ ${#sets[@]} -gt 0 ] || sets=(none zipkin statsd datadog prometheus)
work="$(mktemp -d /tmp/plugin-insn.XXXXXX)"
sink_port=19962
python3 -c "
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('127.0.0.1', $sink_port))
while True: s.recv(65535)" &
sink=$!
trap 'kill $sink 2>/dev/null || true; rm -rf "$work"' EXIT
base=""
for set in "${sets[@]}"; do
    case $set in
    none) plugins='[]' ;;
    zipkin) plugins='[{"name": "zipkin", "config": {"http_endpoint": "http://127.0.0.1:19961/api/v2/spans"}}]' ;;
    statsd) plugins="[{\"name\": \"statsd\", \"config\": {\"host\": \"127.0.0.1\", \"port\": $sink_port}}]" ;;
    datadog) plugins="[{\"name\": \"datadog\", \"config\": {\"host\": \"127.0.0.1\", \"port\": $sink_port}}]" ;;
    prometheus) plugins='[{"name": "prometheus"}]' ;;
    *) echo "unknown set: $set" >&2; exit 2 ;;
    esac
    printf '{"_format_version": "3.0", "services": [{"name": "origin", "url": "http://127.0.0.1:19961", "routes": [{"name": "all", "paths": ["/"]}]}], "plugins": %s}\n' \
        "$plugins" >"$work/$set.json"
    keep=""
    if [ -n "${PLUGIN_INSN_KEEP:-}" ]; then keep="$PLUGIN_INSN_KEEP/$set"; mkdir -p "$keep"; fi
    count=$(H1_INSN_CONFIG="$work/$set.json" H1_INSN_KEEP="$keep" "$bench_dir/h1-instructions.sh" "$binary" |
        awk '/instructions per request/ {print $2}')
    [ "$set" = none ] && base=$count
    if [ -n "$base" ] && [ "$set" != none ]; then
        awk -v s="$set" -v c="$count" -v b="$base" \
            'BEGIN { printf "%-10s %6d instructions per request  +%d over none (%.3fx)\n", s, c, c - b, c / b }'
    else
        printf '%-10s %6d instructions per request\n' "$set" "$count"
    fi
done
