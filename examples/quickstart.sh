#!/usr/bin/env bash
# Build Strait, start a local upstream on 127.0.0.1:9000 (serving
# examples/static), and run the gateway in the foreground on the embedded
# store with examples/kong.yml. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p strait
python3 -m http.server 9000 --bind 127.0.0.1 --directory examples/static >/dev/null 2>&1 &
upstream=$!
trap 'kill "$upstream" 2>/dev/null || true' EXIT
echo "upstream (python http.server) on 127.0.0.1:9000, pid $upstream"
echo "try: curl -i localhost:8000/hello   curl -i localhost:8000/files/index.txt   curl -s localhost:8001/"
./target/release/strait start --conf examples/strait.conf
