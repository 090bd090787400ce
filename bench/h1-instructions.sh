#!/usr/bin/env bash
# User-space instructions per proxied HTTP/1.1 request, counted by valgrind (callgrind).
#
#   bench/h1-instructions.sh BINARY|nginx [BINARY|nginx ...]
#
# CPU time per request on a shared 2-core VM moves by ±5% between samples of one build, more
# than most single changes to the hot path save, and this VM exposes no hardware counters.
# Instructions are counted exactly: each binary runs one worker under callgrind with
# instrumentation off; after 2,000 warm-up requests it is switched on for H1_INSN_REQUESTS
# (default 4,000) requests, sent by a Python client over 4 kept-alive connections in lockstep
# (GET / with Host, User-Agent and Accept), one route to an nginx origin (`return 200 'ok'`),
# then the counts are dumped. Kernel work (the syscalls) is not counted. The client sends one
# request per connection at a time, so the runtime parks more often than under load: compare
# builds with each other, not with a wrk run. Needs valgrind and nginx (bench/setup.sh).
#
# The word `nginx` in place of a binary counts nginx proxying the same requests (one worker,
# the proxy-baseline configuration of bench/nginx-conf.sh, no master process): the reference
# the gateway is held to. H1_INSN_CACHE=1 adds callgrind's cache simulation and prints L1
# instruction and data misses per request beside the instructions (the simulated caches are
# a model of this machine's, 32 KiB each: compare the counts between programs, not with time).
# H1_INSN_CONFIG=FILE loads that declarative file in Strait instead (its services must point at
# the origin, 127.0.0.1:19961), H1_INSN_PATH the path requested (default /) and
# H1_INSN_HEADER one more header line (`apikey: ...`): a plugin chain's count beside none.
set -euo pipefail

requests=${H1_INSN_REQUESTS:-4000}
[ $# -ge 1 ] || { echo "usage: bench/h1-instructions.sh BINARY|nginx [BINARY|nginx ...]" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "valgrind is missing (bench/setup.sh installs it)" >&2; exit 1; }
dir=$(mktemp -d /tmp/h1-insn.XXXXXX)
vpid=""
cleanup() {
    [ -n "$vpid" ] && kill "$vpid" 2>/dev/null || true
    [ -f "$dir/origin.pid" ] && kill "$(cat "$dir/origin.pid")" 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT

. "$(dirname "$0")/nginx-conf.sh"
origin_conf "$dir" 19961
kong_json "$dir" 19961
nginx -p "$dir" -c "$dir/origin.conf"

client() {  # REQUESTS CONNECTIONS
    python3 - "$1" "$2" <<'PY'
import socket, sys
total, conns = int(sys.argv[1]), int(sys.argv[2])
socks = [socket.create_connection(("127.0.0.1", 19981)) for _ in range(conns)]
import os
path, extra = os.environ.get("H1_INSN_PATH", "/"), os.environ.get("H1_INSN_HEADER", "")
extra = (extra + "\r\n") if extra else ""
request = (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:19981\r\nUser-Agent: h1-instructions\r\n"
           f"Accept: */*\r\n{extra}\r\n").encode()
for _ in range(total // conns):
    for s in socks:
        s.sendall(request)
    for s in socks:
        data = b""
        while not data.endswith(b"ok"):
            chunk = s.recv(4096)
            if not chunk:
                sys.exit("connection closed")
            data += chunk
PY
}

cache=()
[ "${H1_INSN_CACHE:-0}" = 1 ] && cache=(--cache-sim=yes)

for binary in "$@"; do
    rm -rf "$dir/p" "$dir"/callgrind.out*
    if [ "$binary" = nginx ]; then
        proxy_conf "$dir" 19981 19961
        sed -i 's/^worker_processes 1;/worker_processes 1; daemon off; master_process off;/' "$dir/proxy.conf"
        valgrind --tool=callgrind --instr-atstart=no "${cache[@]}" --callgrind-out-file="$dir/callgrind.out" \
            nginx -p "$dir" -c "$dir/proxy.conf" >"$dir/proxy.log" 2>&1 &
    else
        # The OAuth2 token store's default 64 GiB map is more address space than valgrind gives.
        STRAIT_PREFIX="$dir/p" STRAIT_PROXY_ACCESS_LOG=off STRAIT_PROXY_ERROR_LOG=stderr \
            STRAIT_PROXY_LISTEN=127.0.0.1:19981 STRAIT_ADMIN_LISTEN=127.0.0.1:19991 STRAIT_STATUS_LISTEN=off STRAIT_ADMIN_GUI_LISTEN=off \
            STRAIT_WORKER_THREADS=1 STRAIT_LOG_LEVEL=warn STRAIT_OAUTH2_TOKEN_STORE_SIZE=64m \
            STRAIT_DECLARATIVE_CONFIG="${H1_INSN_CONFIG:-$dir/kong.json}" \
            valgrind --tool=callgrind --instr-atstart=no "${cache[@]}" --callgrind-out-file="$dir/callgrind.out" \
            "$binary" start >"$dir/strait.log" 2>&1 &
    fi
    vpid=$!
    for _ in $(seq 1 240); do
        curl -s -o /dev/null "http://127.0.0.1:19981${H1_INSN_PATH:-/}" && break
        sleep 0.5
    done
    client 2000 1
    callgrind_control -i on "$vpid" >/dev/null 2>&1
    client "$requests" 4
    callgrind_control -d "$vpid" >/dev/null 2>&1
    # nginx without a master process runs as one process: its dump has no thread suffix.
    out=$(ls "$dir"/callgrind.out.* | head -1)
    # H1_INSN_KEEP=DIR keeps each callgrind output there (callgrind_annotate reads it).
    [ -n "${H1_INSN_KEEP:-}" ] && cp "$out" "$H1_INSN_KEEP/callgrind.$(basename "$binary")"
    awk -v name="$(basename "$binary")" -v n="$requests" '
        /^events:/ { for (i = 2; i <= NF; i++) event[i] = $i }
        /^summary:/ {
            line = sprintf("%s: %d instructions per request (%d requests)", name, $2 / n, n)
            for (i = 3; i <= NF; i++)
                if (event[i] == "I1mr" || event[i] == "D1mr" || event[i] == "D1mw")
                    line = line sprintf(", %s %d", event[i], $i / n)
            print line
        }' "$out"
    kill "$vpid"
    wait "$vpid" 2>/dev/null || true
    vpid=""
done
