#!/usr/bin/env bash
# The training run of the profile-guided release build (scripts/release-build.sh).
#
#   scripts/pgo-train.sh BINARY
#
# Starts BINARY (a Strait built with -Cprofile-generate) with one worker, a declarative
# configuration and an nginx origin (`return 200 'ok'`), drives the paths a gateway spends
# its time on, checks every answer, and stops it with SIGINT so that it exits normally and
# writes its profile:
#   - HTTP/1.1 keep-alive and h2c (prior knowledge) to a route without plugins;
#   - HTTP/1.1 to a route with key-auth, rate-limiting, cors, request- and
#     response-transformer (an authenticated consumer), and to the two chains the lab's
#     plugins-cost measures: key-auth + acl + request-transformer, and key-auth +
#     rate-limiting + prometheus;
#   - HTTPS, HTTP/1.1 and HTTP/2 (ALPN), on the node's default certificate;
#   - Admin API reads and writes (services, routes, consumers, plugins);
#   - POST /config of 10,000 routes (twice), then HTTP/1.1 to a random one of them per request.
# Code that no step runs is treated as cold by the compiler (laid out apart and optimized
# for size), so what a gateway does per request belongs here. PGO_TRAIN_SECONDS (default 8)
# is the length of the main HTTP/1.1 load; the others take half of it.
# Needs nginx, wrk, h2load, curl and python3; ports 19962 (origin), 19982/19983 (proxy)
# and 19992 (admin) on 127.0.0.1.
set -euo pipefail

bin=${1:?usage: scripts/pgo-train.sh BINARY}
seconds=${PGO_TRAIN_SECONDS:-8}
half=$(((seconds + 1) / 2))
for tool in nginx wrk h2load curl python3; do
    command -v "$tool" >/dev/null || { echo "pgo-train: $tool is missing" >&2; exit 1; }
done
dir=$(mktemp -d /tmp/strait-pgo-train.XXXXXX)
spid=""
cleanup() {
    [ -n "$spid" ] && kill "$spid" 2>/dev/null || true
    [ -f "$dir/origin.pid" ] && kill "$(cat "$dir/origin.pid")" 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT

fail() { echo "pgo-train: $*" >&2; cat "$dir/strait.log" >&2 2>/dev/null || true; exit 1; }
# Another process on one of these ports would answer in the node's place.
for port in 19962 19982 19983 19992; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        fail "port $port on 127.0.0.1 is in use; the training needs 19962, 19982, 19983 and 19992"
    fi
done
repo_dir="$(cd "$(dirname "$0")/.." && pwd)"
. "$repo_dir/bench/nginx-conf.sh"
origin_conf "$dir" 19962
nginx -p "$dir" -c "$dir/origin.conf"
cat >"$dir/kong.json" <<'JSON'
{"_format_version": "3.0",
 "services": [{"name": "origin", "url": "http://127.0.0.1:19962",
   "routes": [{"name": "all", "paths": ["/"]},
              {"name": "keyed", "paths": ["/keyed"],
               "plugins": [{"name": "key-auth"},
                           {"name": "rate-limiting", "config": {"second": 100000000, "policy": "local"}},
                           {"name": "cors"},
                           {"name": "request-transformer", "config": {"add": {"headers": ["x-trained:1"]}}},
                           {"name": "response-transformer", "config": {"add": {"headers": ["x-trained:1"]}}}]},
              {"name": "allowed", "paths": ["/allowed"],
               "plugins": [{"name": "key-auth"},
                           {"name": "acl", "config": {"allow": ["trained"]}},
                           {"name": "request-transformer", "config": {"add": {"headers": ["x-trained:1"]}}}]},
              {"name": "metered", "paths": ["/metered"],
               "plugins": [{"name": "key-auth"},
                           {"name": "rate-limiting", "config": {"second": 100000000, "policy": "local"}},
                           {"name": "prometheus", "config": {"status_code_metrics": true, "latency_metrics": true,
                                                             "bandwidth_metrics": true}}]}]}],
 "consumers": [{"username": "trainer", "keyauth_credentials": [{"key": "train-key"}],
                "acls": [{"group": "trained"}]}]}
JSON
STRAIT_PREFIX="$dir/prefix" STRAIT_PROXY_ACCESS_LOG=off STRAIT_PROXY_ERROR_LOG=stderr \
    STRAIT_PROXY_LISTEN="127.0.0.1:19982, 127.0.0.1:19983 http2 ssl" \
    STRAIT_ADMIN_LISTEN=127.0.0.1:19992 STRAIT_STATUS_LISTEN=off STRAIT_ADMIN_GUI_LISTEN=off STRAIT_WORKER_THREADS=1 \
    STRAIT_LOG_LEVEL=warn STRAIT_DECLARATIVE_CONFIG="$dir/kong.json" \
    "$bin" start >"$dir/strait.log" 2>&1 &
spid=$!
started=0
for _ in $(seq 1 240); do
    kill -0 "$spid" 2>/dev/null || fail "the node exited at start"
    curl -s -o /dev/null http://127.0.0.1:19982/ && { started=1; break; }
    sleep 0.25
done
[ "$started" = 1 ] || fail "the node did not answer on 127.0.0.1:19982 within 60 s"

# check_wrk WHAT OUTPUT: wrk's summary must show requests, no socket errors and no answer
# of 4xx/5xx (wrk counts those as "Non-2xx or 3xx responses").
check_wrk() {
    local requests
    requests=$(awk '/requests in/ {print $1}' <<<"$2")
    [ -n "$requests" ] && [ "$requests" -gt 0 ] || fail "$1: no requests completed: $2"
    if grep -qE "Non-2xx|Socket errors" <<<"$2"; then fail "$1: failed requests: $2"; fi
    echo "pgo-train: $1: $(awk '/Requests\/sec/ {print $2}' <<<"$2") requests/s" >&2
}
# load_h1 URL SECONDS CONNECTIONS [HEADER...]: HTTP/1.1 keep-alive load.
load_h1() {
    local url=$1 secs=$2 conns=$3 out
    shift 3
    local headers=()
    for h in "$@"; do headers+=(-H "$h"); done
    out=$(wrk -t1 -c"$conns" -d"${secs}s" "${headers[@]}" "$url") || fail "wrk $url exited with $?"
    check_wrk "$url (HTTP/1.1)" "$out"
}
# load_h2 URL SECONDS: HTTP/2 streams, every one answered 2xx (at least one).
load_h2() {
    local out
    out=$(h2load -t1 -c16 -m10 -D "$2" "$1") || fail "h2load $1 exited with $?"
    grep -qE "status codes: [1-9][0-9]* 2xx, 0 3xx, 0 4xx, 0 5xx" <<<"$out" || fail "h2load $1: $out"
    grep -qE ", 0 failed, 0 errored, 0 timeout" <<<"$out" || fail "h2load $1: $out"
    echo "pgo-train: $1 (HTTP/2): $(awk '/^finished in/ {print $4}' <<<"$out") requests/s" >&2
}
for path in keyed allowed metered; do
    curl -sf -o /dev/null -H 'apikey: train-key' "http://127.0.0.1:19982/$path" || fail "/$path refused the key"
done

load_h1 http://127.0.0.1:19982/ "$seconds" 32
load_h2 http://127.0.0.1:19982/ "$half"
load_h1 http://127.0.0.1:19982/keyed "$half" 16 'apikey: train-key' 'Origin: http://example.com'
load_h1 http://127.0.0.1:19982/allowed "$half" 16 'apikey: train-key'
load_h1 http://127.0.0.1:19982/metered "$half" 16 'apikey: train-key'
load_h1 https://127.0.0.1:19983/ "$half" 16
load_h2 https://127.0.0.1:19983/ "$half"
python3 - <<'PY' || fail "Admin API calls failed"
import http.client, json
conn = http.client.HTTPConnection("127.0.0.1", 19992)
def call(method, path, body=None, want=(200, 201, 204)):
    conn.request(method, path, body=json.dumps(body) if body is not None else None,
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    if resp.status not in want:
        raise SystemExit(f"{method} {path}: {resp.status} {data[:300]!r}")
    return json.loads(data) if data else None
for i in range(100):
    call("PUT", f"/services/train-{i}", {"url": f"http://127.0.0.1:19962/s{i}"})
    call("POST", f"/services/train-{i}/routes", {"name": f"train-route-{i}", "paths": [f"/train/{i}"]})
    call("POST", "/consumers", {"username": f"train-user-{i}"})
    call("POST", f"/consumers/train-user-{i}/key-auth", {"key": f"train-key-{i}"})
    call("POST", f"/routes/train-route-{i}/plugins", {"name": "rate-limiting", "config": {"minute": 1000}})
    call("PATCH", f"/routes/train-route-{i}", {"hosts": [f"h{i}.example"]})
call("GET", "/services?size=50")
call("GET", "/routes?size=50")
call("GET", "/plugins")
call("GET", "/status")
for i in range(100):
    call("DELETE", f"/routes/train-route-{i}")
    call("DELETE", f"/services/train-{i}")
    call("DELETE", f"/consumers/train-user-{i}")
PY
# Many routes: POST /config of 10,000 routes (parse, validate, compile; then the same set
# again, which takes the path of a re-post), and a random route per request over them.
(cd "$repo_dir/bench" && python3 -m lab.configgen --routes 10000 --service-url http://127.0.0.1:19962 \
    -o "$dir/many.json" >/dev/null)
for attempt in first again; do
    code=$(curl -s -o "$dir/post.out" -w '%{http_code}' -X POST -H 'content-type: application/json' \
        --data-binary @"$dir/many.json" http://127.0.0.1:19992/config) || fail "POST /config ($attempt) failed"
    [ "$code" = 200 ] || [ "$code" = 201 ] || fail "POST /config ($attempt) answered $code: $(head -c 300 "$dir/post.out")"
done
first_path=$(awk 'NR == 1 {print $1}' "$dir/many.targets")
for _ in $(seq 1 100); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:19982$first_path")" = 200 ] && break
    sleep 0.1
done
out=$(wrk -t1 -c32 -d"${half}s" -s "$repo_dir/bench/lua/random_route.lua" http://127.0.0.1:19982 -- "$dir/many.targets") \
    || fail "wrk over 10,000 routes exited with $?"
check_wrk "10,000 routes, a random one per request" "$out"
# SIGINT: the node shuts down and exits normally, which writes the profile.
kill -INT "$spid" || fail "the node was gone before the end of the training"
wait "$spid" || fail "the node did not exit cleanly"
spid=""
