#!/usr/bin/env bash
# ai-proxy's own cost: user-space instructions per request (callgrind, as
# bench/h1-instructions.sh counts them) for a chat request translated both ways, beside the same
# request and answer proxied with no plugin.
#
#   bench/ai-instructions.sh BINARY
#
# An nginx origin stands for the providers and answers at once with fixed bodies: an OpenAI chat
# completion, an Anthropic message, and each one's stream (16 content events, then usage and
# the end). One Strait worker runs under callgrind with instrumentation off; every route is
# warmed up, then each set's requests (AI_INSN_REQUESTS, default 2,000, over 2 kept-alive
# connections in lockstep) are counted alone:
#
#   plain              POST to the origin's OpenAI answer, no plugin: the baseline
#   openai             ai-proxy, provider openai (the request checked and re-encoded, the answer
#                      checked and its usage read)
#   anthropic          ai-proxy, provider anthropic (translated both ways)
#   openai-stream      a streamed answer, its events passed on and counted
#   anthropic-stream   a streamed answer translated event by event
#   plain-stream       the OpenAI stream with no plugin: the streams' baseline
#
# AI_INSN_KEEP=DIR keeps each set's callgrind output (DIR/callgrind.SET) for callgrind_annotate.
#
# On this 2-core VM a wall-clock run cannot make the gateway's core the only limit (the client
# and origin share the machine); instructions are exact. The kernel's work (syscalls) is not
# counted, so the ratio overstates the plugin's share of a request's whole CPU.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: bench/ai-instructions.sh BINARY" >&2; exit 2; }
binary=$1
requests=${AI_INSN_REQUESTS:-2000}
command -v valgrind >/dev/null || { echo "valgrind is missing (bench/setup.sh installs it)" >&2; exit 1; }
dir=$(mktemp -d /tmp/ai-insn.XXXXXX)
vpid=""
cleanup() {
    [ -n "$vpid" ] && kill "$vpid" 2>/dev/null || true
    [ -f "$dir/origin.pid" ] && kill "$(cat "$dir/origin.pid")" 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT

python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
words = ["piece%d " % i for i in range(16)]
openai = json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": "gpt-4o-2024",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(words)}, "finish_reason": "stop",
                 "logprobs": None}],
    "usage": {"prompt_tokens": 21, "completion_tokens": 16, "total_tokens": 37}})
anthropic = json.dumps({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
    "content": [{"type": "text", "text": "".join(words)}], "stop_reason": "end_turn", "stop_sequence": None,
    "usage": {"input_tokens": 21, "output_tokens": 16}})
base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000, "model": "gpt-4o-2024"}
events = ["data: " + json.dumps({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})]
events += ["data: " + json.dumps({**base, "choices": [{"index": 0, "delta": {"content": w}}]}) for w in words]
events += ["data: " + json.dumps({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
           "data: " + json.dumps({**base, "choices": [], "usage": {"prompt_tokens": 21, "completion_tokens": 16,
                                                                   "total_tokens": 37}}),
           "data: [DONE]"]
openai_stream = "\n\n".join(events) + "\n\n"
a = [("message_start", {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
      "model": "claude-x", "content": [], "usage": {"input_tokens": 21, "output_tokens": 1}}}),
     ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})]
a += [("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": w}})
      for w in words]
a += [("content_block_stop", {"type": "content_block_stop", "index": 0}),
      ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 16}}),
      ("message_stop", {"type": "message_stop"})]
anthropic_stream = "".join("event: %s\ndata: %s\n\n" % (n, json.dumps(e)) for n, e in a)
def nginx_string(s):
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"
with open(f"{d}/origin.conf", "w") as f:
    f.write(f"""worker_processes 1; error_log {d}/origin-error.log; pid {d}/origin.pid;
events {{ worker_connections 4096; }}
http {{ access_log off; keepalive_requests 1000000; client_body_buffer_size 16k;
  server {{ listen 127.0.0.1:19961 backlog=4096;
    location /openai {{ default_type application/json; return 200 {nginx_string(openai)}; }}
    location /anthropic {{ default_type application/json; return 200 {nginx_string(anthropic)}; }}
    location /sse-openai {{ default_type text/event-stream; return 200 {nginx_string(openai_stream)}; }}
    location /sse-anthropic {{ default_type text/event-stream; return 200 {nginx_string(anthropic_stream)}; }}
  }} }}
""")
def ai(provider, path, extra):
    options = {"upstream_url": "http://127.0.0.1:19961" + path}
    options.update(extra)
    return [{"name": "ai-proxy", "config": {"route_type": "llm/v1/chat", "model": {"provider": provider,
        "name": "gpt-4o" if provider == "openai" else "claude-x", "options": options},
        "auth": {"header_name": "authorization", "header_value": "Bearer sk-bench"},
        "logging": {"log_statistics": True}}}]
routes = [
    {"name": "plain", "paths": ["/plain"], "plugins": []},
    {"name": "plain-stream", "paths": ["/plain-stream"], "plugins": []},
    {"name": "openai", "paths": ["/openai-route"], "plugins": ai("openai", "/openai", {})},
    {"name": "anthropic", "paths": ["/anthropic-route"],
     "plugins": ai("anthropic", "/anthropic", {"anthropic_version": "2023-06-01"})},
    {"name": "openai-stream", "paths": ["/openai-stream"], "plugins": ai("openai", "/sse-openai", {})},
    {"name": "anthropic-stream", "paths": ["/anthropic-stream"],
     "plugins": ai("anthropic", "/sse-anthropic", {"anthropic_version": "2023-06-01"})},
]
# The plain routes reach the same answers as the AI routes' providers (path rewritten by the service).
config = {"_format_version": "3.0", "services": [
    {"name": "plain", "url": "http://127.0.0.1:19961/openai", "routes": [routes[0]]},
    {"name": "plain-stream", "url": "http://127.0.0.1:19961/sse-openai", "routes": [routes[1]]},
    {"name": "llm", "url": "http://127.0.0.1:9", "routes": routes[2:]}]}
with open(f"{d}/kong.json", "w") as f:
    json.dump(config, f)
PY
nginx -p "$dir" -c "$dir/origin.conf"

client() {  # PATH REQUESTS CONNECTIONS STREAM
    python3 - "$@" <<'PY'
import json, socket, sys
path, total, conns, stream = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
body = json.dumps({"messages": [{"role": "system", "content": "You are brief."},
                                {"role": "user", "content": "Say sixteen words about gateways."}],
                   "stream": stream}).encode()
request = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:19981\r\nUser-Agent: ai-instructions\r\n"
           f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
socks = [socket.create_connection(("127.0.0.1", 19981)) for _ in range(conns)]
bufs = [b"" for _ in socks]
def read_response(i):
    s = socks[i]
    data = bufs[i]
    def more():
        chunk = s.recv(65536)
        if not chunk:
            sys.exit(f"{path}: connection closed")
        return chunk
    while b"\r\n\r\n" not in data:
        data += more()
    head, rest = data.split(b"\r\n\r\n", 1)
    if not head.startswith(b"HTTP/1.1 200"):
        sys.exit(f"{path}: {head[:200]!r}")
    lower = head.lower()
    if b"content-length:" in lower:
        n = int(lower.split(b"content-length:")[1].split(b"\r\n")[0])
        while len(rest) < n:
            rest += more()
        bufs[i] = rest[n:]
    else:
        while b"0\r\n\r\n" not in rest:
            rest += more()
        bufs[i] = rest.split(b"0\r\n\r\n", 1)[1]
for _ in range(total // conns):
    for s in socks:
        s.sendall(request)
    for i in range(len(socks)):
        read_response(i)
PY
}

STRAIT_PREFIX="$dir/p" STRAIT_PROXY_ACCESS_LOG=off STRAIT_PROXY_ERROR_LOG=stderr \
    STRAIT_PROXY_LISTEN=127.0.0.1:19981 STRAIT_ADMIN_LISTEN=127.0.0.1:19991 STRAIT_STATUS_LISTEN=off STRAIT_ADMIN_GUI_LISTEN=off \
    STRAIT_WORKER_THREADS=1 STRAIT_LOG_LEVEL=warn STRAIT_OAUTH2_TOKEN_STORE_SIZE=64m \
    STRAIT_DECLARATIVE_CONFIG="$dir/kong.json" \
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$dir/callgrind.out" \
    "$binary" start >"$dir/strait.log" 2>&1 &
vpid=$!
for _ in $(seq 1 240); do
    curl -s -o /dev/null -X POST "http://127.0.0.1:19981/plain" && break
    sleep 0.5
done
sets=(plain openai anthropic plain-stream openai-stream anthropic-stream)
path_of() {
    case $1 in
    plain) echo /plain ;; openai) echo /openai-route ;; anthropic) echo /anthropic-route ;;
    *) echo "/$1" ;;
    esac
}
for set in "${sets[@]}"; do
    stream=0; case $set in *stream) stream=1 ;; esac
    client "$(path_of "$set")" 500 1 "$stream"
done
base=""; stream_base=""
for set in "${sets[@]}"; do
    stream=0; case $set in *stream) stream=1 ;; esac
    callgrind_control -i on "$vpid" >/dev/null 2>&1
    client "$(path_of "$set")" "$requests" 2 "$stream"
    callgrind_control -i off "$vpid" >/dev/null 2>&1
    callgrind_control -d "$set" "$vpid" >/dev/null 2>&1
    out=$(ls -t "$dir"/callgrind.out* | head -1)
    count=$(awk -v n="$requests" '/^totals:/ { printf "%d", $2 / n }' "$out")
    case $set in plain) base=$count ;; plain-stream) stream_base=$count ;; esac
    ref=$base; [ $stream = 1 ] && ref=$stream_base
    if [ "$set" = plain ] || [ "$set" = plain-stream ]; then
        printf '%-17s %7d instructions per request\n' "$set" "$count"
    else
        awk -v s="$set" -v c="$count" -v b="$ref" \
            'BEGIN { printf "%-17s %7d instructions per request  +%d over no plugin (%.2fx)\n", s, c, c - b, c / b }'
    fi
    [ -n "${AI_INSN_KEEP:-}" ] && cp "$out" "$AI_INSN_KEEP/callgrind.$set"
    [ -n "${AI_INSN_DEBUG:-}" ] && ls -la "$dir" >&2 && grep -E "^(summary|totals):" "$dir"/callgrind.out* >&2
    rm -f "$out"
done
