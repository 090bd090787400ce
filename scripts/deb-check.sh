#!/usr/bin/env bash
# The Debian package, end to end (run by scripts/test.sh): build it from BINARY, install it
# with dpkg -i, start the installed binary with the installed settings, proxy a request
# through a route made on its Admin API, check `strait health`, quit it, then remove and
# purge the package and check nothing of it is left. Needs root (dpkg); ports 8000-8002,
# 8100 and 8443 free (the installed settings' own).
set -euo pipefail
binary=${1:-target/debug/strait}
out=$(mktemp -d)
trap 'rm -rf "$out"; [[ -n "${pid:-}" ]] && kill "$pid" 2>/dev/null || true' EXIT
deb=$(packaging/deb/build.sh "$binary" "$out")
echo "== $(basename "$deb"): $(du -h "$deb" | cut -f1)"
dpkg -i "$deb" >/dev/null
for path in /usr/bin/strait /etc/strait/strait.conf /lib/systemd/system/strait.service \
  /usr/share/doc/strait/operations.md /var/lib/strait/logs; do
  [[ -e "$path" ]] || { echo "missing after install: $path"; exit 1; }
done
dpkg -s strait | grep -q "^Status: install ok installed" || { echo "dpkg does not list strait as installed"; exit 1; }
/usr/bin/strait check /etc/strait/strait.conf
/usr/bin/strait start --conf /etc/strait/strait.conf >"$out/start.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  curl -fsS -o /dev/null http://127.0.0.1:8100/status/ready 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || { cat "$out/start.log" /var/lib/strait/logs/error.log 2>/dev/null; exit 1; }
  sleep 0.2
done
curl -fsS -o /dev/null -X POST http://127.0.0.1:8001/services -d name=packaged -d url=http://127.0.0.1:9
curl -fsS -o /dev/null -X POST http://127.0.0.1:8001/services/packaged/routes -d name=packaged -d 'paths[]=/packaged'
curl -fsS -o /dev/null -X POST http://127.0.0.1:8001/routes/packaged/plugins -d name=request-termination \
  -d config.status_code=200 -d 'config.body=served by the packaged strait'
answer=""
for _ in $(seq 1 50); do
  answer=$(curl -sS http://127.0.0.1:8000/packaged/ || true)
  [[ "$answer" == "served by the packaged strait" ]] && break
  sleep 0.1
done
[[ "$answer" == "served by the packaged strait" ]] || { echo "proxied answer: $answer"; exit 1; }
curl -fsS http://127.0.0.1:8002/ | grep -q 'app.js' || { echo "the admin UI is not served on 8002"; exit 1; }
/usr/bin/strait health --conf /etc/strait/strait.conf
/usr/bin/strait quit --conf /etc/strait/strait.conf
pid=""
dpkg -r strait >/dev/null
[[ ! -e /usr/bin/strait ]] || { echo "/usr/bin/strait left after dpkg -r"; exit 1; }
[[ -e /etc/strait/strait.conf ]] || { echo "dpkg -r removed the conffile (only purge should)"; exit 1; }
dpkg -P strait >/dev/null
for path in /etc/strait/strait.conf /var/lib/strait /lib/systemd/system/strait.service; do
  [[ ! -e "$path" ]] || { echo "left after purge: $path"; exit 1; }
done
echo "== the package installs, serves, and is removed cleanly"
