#!/usr/bin/env bash
# Run every check CI runs: formatting, lints, all tests (unit, property and
# end-to-end against the real binary), and validation of every shipped
# example config by the binary itself. Installs what the tests need.
set -euo pipefail
cd "$(dirname "$0")/.."

need() { command -v "$1" >/dev/null 2>&1; }
if ! need cargo; then
  echo "cargo not found: install Rust (rustup) first" >&2
  exit 1
fi
if ! need curl || ! need python3; then
  apt-get update -qq && apt-get install -y -qq curl python3
fi
# wrk runs the lab's request scripts in the bench harness's tests (bench/lab/tests).
if ! need wrk; then
  apt-get update -qq && apt-get install -y -qq wrk
fi
# The release build's PGO training run (scripts/pgo-train.sh) is checked here on the debug
# binary: an nginx origin, wrk and h2load drive it.
if ! need nginx || ! need h2load; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx nghttp2-client
  # The package starts a system service on port 80; the scripts run their own instances.
  if need systemctl && systemctl is-active --quiet nginx 2>/dev/null; then systemctl stop nginx || true; fi
fi
# A real redis-server for rate-limiting's redis policy (tests/src/redis.rs starts its own
# instances on free ports; the package's own service, if it starts, is not used).
if ! need redis-server; then
  apt-get update -qq && apt-get install -y -qq redis-server
fi
# A real OpenLDAP slapd for ldap-auth (tests/src/ldap.rs loads and starts its own directory
# per test on free ports; the package's own service, if it starts, is not used).
if ! [[ -x /usr/sbin/slapd ]] || ! need ldapwhoami; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slapd ldap-utils
fi
# A real Zipkin server for the zipkin plugin (tests/src/zipkin.rs runs the exec jar from Maven
# Central on Java 17, on a free port).
if ! need java; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless
fi
zipkin_jar="$HOME/.m2/repository/io/zipkin/zipkin-server/3.5.1/zipkin-server-3.5.1-exec.jar"
if [[ ! -f "$zipkin_jar" && -z "${STRAIT_ZIPKIN_JAR:-}" ]]; then
  if ! need mvn; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven
  fi
  mvn -q dependency:get -Dartifact=io.zipkin:zipkin-server:3.5.1:jar:exec -Dtransitive=false
fi
# A real PostgreSQL for the postgres store (tests/src/postgres.rs runs initdb and its own
# server on a free port per test; the package's own cluster, if it starts, is not used).
if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 && [[ -z "${STRAIT_PG_BINDIR:-}" ]]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql
fi

# decK (Kong's declarative CLI) for the dump/sync round-trip test, and decK's own integration
# suite (`tests/integration` of the same module, build tag `integration`) with its test files,
# for tests/tests/deck_integration.rs and deck_testdata.rs: the release module from the Go
# module proxy, built in a scratch copy into target/tools (kept between runs when present,
# never required to be). `go install github.com/kong/deck@v...` cannot do this: decK's go.mod
# has replace directives, which `go install pkg@version` refuses. v1.55.0 is the newest
# release whose every dependency the module proxy reachable here serves.
DECK_VERSION=v1.55.0
tools_dir="${STRAIT_TOOLS_DIR:-$PWD/target/tools}"
deck_suite_dir="$tools_dir/deck-suite"
ensure_go() {
  if ! need go; then
    apt-get update -qq && apt-get install -y -qq golang-go
  fi
}
install_deck() {
  ensure_go
  echo "== installing decK $DECK_VERSION into $tools_dir/bin and its integration suite into $deck_suite_dir"
  local scratch module_dir
  scratch="$(mktemp -d)"
  module_dir="$(cd "$scratch" && go mod download -json "github.com/kong/deck@$DECK_VERSION" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
  cp -r "$module_dir" "$scratch/deck" && chmod -R u+w "$scratch/deck"
  mkdir -p "$tools_dir/bin"
  rm -rf "$deck_suite_dir" && mkdir -p "$deck_suite_dir"
  local version_flag="-X github.com/kong/deck/cmd.VERSION=$DECK_VERSION"
  (cd "$scratch/deck" && CGO_ENABLED=0 go build -trimpath -ldflags "$version_flag" -o "$tools_dir/bin/deck" . &&
    CGO_ENABLED=0 go test -c -tags=integration -ldflags "$version_flag" \
      -o "$deck_suite_dir/integration.test" ./tests/integration)
  # The tests read testdata/... from their package folder, some through ../../tests/integration:
  # keep the module's layout beside the binary.
  mkdir -p "$deck_suite_dir/tests"
  cp -r "$scratch/deck/tests/integration" "$deck_suite_dir/tests/integration"
  echo "$DECK_VERSION" >"$deck_suite_dir/version"
  rm -rf "$scratch"
}
if ! "$tools_dir/bin/deck" version 2>/dev/null | grep -q "$DECK_VERSION" ||
  [[ "$(cat "$deck_suite_dir/version" 2>/dev/null)" != "$DECK_VERSION" ]]; then
  install_deck
fi
export STRAIT_DECK_SUITE="$deck_suite_dir"
export STRAIT_DECK_BIN="$tools_dir/bin/deck"

# h2spec (HTTP/2 conformance, tests/tests/conformance.rs): v2.6.0's commit, by the Go
# pseudo-version the module proxy serves (its go.mod has no /v2, so `@v2.6.0` does not resolve).
H2SPEC_MODULE="github.com/summerwind/h2spec/cmd/h2spec@v0.0.0-20200804131034-70ac22940108"
if [ ! -x "$tools_dir/bin/h2spec" ]; then
  echo "== installing h2spec (v2.6.0) into $tools_dir/bin"
  ensure_go
  GOBIN="$tools_dir/bin" go install "$H2SPEC_MODULE"
fi
export STRAIT_H2SPEC_BIN="$tools_dir/bin/h2spec"

# Let's Encrypt's Pebble ACME test server and its DNS stand-in (challtestsrv) for the acme
# plugin's tests (tests/src/pebble.rs), from the Go module proxy. Pebble's TLS certificate and
# the CA that signed it are read from the module's source in the Go module cache.
PEBBLE_VERSION=v2.10.0
if [ ! -x "$tools_dir/bin/pebble" ] || [ ! -x "$tools_dir/bin/pebble-challtestsrv" ] \
  || [ "$(cat "$tools_dir/pebble.version" 2>/dev/null)" != "$PEBBLE_VERSION" ]; then
  echo "== installing pebble $PEBBLE_VERSION into $tools_dir/bin"
  ensure_go
  GOBIN="$tools_dir/bin" go install "github.com/letsencrypt/pebble/v2/cmd/pebble@$PEBBLE_VERSION"
  GOBIN="$tools_dir/bin" go install "github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv@$PEBBLE_VERSION"
  echo "$PEBBLE_VERSION" > "$tools_dir/pebble.version"
fi
ensure_go
go mod download "github.com/letsencrypt/pebble/v2@$PEBBLE_VERSION" >/dev/null 2>&1 || true
export STRAIT_PEBBLE_BIN_DIR="$tools_dir/bin"
export STRAIT_PEBBLE_DIR="$(go env GOMODCACHE)/github.com/letsencrypt/pebble/v2@$PEBBLE_VERSION"

# schemathesis (property-based Admin API testing against /openapi.json), wheels only, in a venv.
SCHEMATHESIS_VERSION=4.32.5
if ! "$tools_dir/venv/bin/schemathesis" --version 2>/dev/null | grep -q "$SCHEMATHESIS_VERSION"; then
  echo "== installing schemathesis $SCHEMATHESIS_VERSION into $tools_dir/venv"
  if ! python3 -m venv "$tools_dir/venv" 2>/dev/null; then
    apt-get update -qq && apt-get install -y -qq python3-venv
    python3 -m venv "$tools_dir/venv"
  fi
  "$tools_dir/venv/bin/pip" install -q --only-binary=:all: "schemathesis==$SCHEMATHESIS_VERSION"
fi
export STRAIT_SCHEMATHESIS_BIN="$tools_dir/venv/bin/schemathesis"
# The official Prometheus client's text-format parser, for the /metrics tests.
PROMETHEUS_CLIENT_VERSION=0.21.1
if ! "$tools_dir/venv/bin/pip" show prometheus_client 2>/dev/null | grep -q "^Version: $PROMETHEUS_CLIENT_VERSION$"; then
  "$tools_dir/venv/bin/pip" install -q --only-binary=:all: "prometheus_client==$PROMETHEUS_CLIENT_VERSION"
fi
export STRAIT_PROMETHEUS_PYTHON="$tools_dir/venv/bin/python"
# botocore's SigV4 signer, which the AWS stand-in (tests/stand-ins/aws.py) checks aws-lambda's
# Lambda and STS requests with.
BOTOCORE_VERSION=1.44.5
if ! "$tools_dir/venv/bin/pip" show botocore 2>/dev/null | grep -q "^Version: $BOTOCORE_VERSION$"; then
  "$tools_dir/venv/bin/pip" install -q --only-binary=:all: "botocore==$BOTOCORE_VERSION"
fi
export STRAIT_AWS_PYTHON="$tools_dir/venv/bin/python"
# A real Apache Kafka broker for kafka-upstream and kafka-log (tests/src/kafka.rs formats and
# starts its own, KRaft mode, on the JVM above): Kafka 4.1.1 and its dependencies from Maven
# Central, copied into target/tools/kafka/libs; kafka-python (PyPI) reads the topics back.
kafka_libs="$tools_dir/kafka/libs"
if [[ ! -f "$kafka_libs/kafka_2.13-4.1.1.jar" && -z "${STRAIT_KAFKA_LIBS:-}" ]]; then
  if ! need mvn; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven
  fi
  rm -rf "$kafka_libs"
  mvn -q -B -f tests/kafka/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$kafka_libs"
fi
# A real Apache Cassandra 5.0 for the Cassandra store (tests/src/cassandra.rs starts its own
# node on the JVM above, with the guardrails that refuse ALLOW FILTERING and secondary indexes):
# cassandra-all and its dependencies from Maven Central, copied into target/tools/cassandra/libs.
cassandra_libs="$tools_dir/cassandra/libs"
if [[ ! -f "$cassandra_libs/cassandra-all-5.0.6.jar" && -z "${STRAIT_CASSANDRA_LIBS:-}" ]]; then
  if ! need mvn; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven
  fi
  rm -rf "$cassandra_libs"
  mvn -q -B -f tests/cassandra/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$cassandra_libs"
fi
KAFKA_PYTHON_VERSION=2.2.15
if ! "$tools_dir/venv/bin/pip" show kafka-python 2>/dev/null | grep -q "^Version: $KAFKA_PYTHON_VERSION$"; then
  "$tools_dir/venv/bin/pip" install -q --only-binary=:all: "kafka-python==$KAFKA_PYTHON_VERSION"
fi
# The official `openai` and `anthropic` SDKs, unmodified clients of ai-proxy's routes
# (tests/tests/plugins_ai.rs, tests/stand-ins/llm_sdk.py).
OPENAI_SDK_VERSION=3.57.0
ANTHROPIC_SDK_VERSION=2.14.0
if ! "$tools_dir/venv/bin/pip" show openai 2>/dev/null | grep -q "^Version: $OPENAI_SDK_VERSION$" ||
  ! "$tools_dir/venv/bin/pip" show anthropic 2>/dev/null | grep -q "^Version: $ANTHROPIC_SDK_VERSION$"; then
  "$tools_dir/venv/bin/pip" install -q --only-binary=:all: "openai==$OPENAI_SDK_VERSION" \
    "anthropic==$ANTHROPIC_SDK_VERSION"
fi
export STRAIT_AI_PYTHON="$tools_dir/venv/bin/python"
# The `cryptography` package, for the reference implementation of lua-resty-session's cookie
# (tests/stand-ins/session_cookie.py) the session plugin's cookies are checked against.
CRYPTOGRAPHY_VERSION=44.0.2
if ! "$tools_dir/venv/bin/pip" show cryptography 2>/dev/null | grep -q "^Version: $CRYPTOGRAPHY_VERSION$"; then
  "$tools_dir/venv/bin/pip" install -q --only-binary=:all: "cryptography==$CRYPTOGRAPHY_VERSION"
fi
export STRAIT_SESSION_PYTHON="$tools_dir/venv/bin/python"
# The official OTLP protobuf definitions, to decode what opentelemetry exports.
OTEL_PROTO_VERSION=1.27.0
if ! "$tools_dir/venv/bin/pip" show opentelemetry-proto 2>/dev/null | grep -q "^Version: $OTEL_PROTO_VERSION$"; then
  "$tools_dir/venv/bin/pip" install -q --only-binary=:all: "opentelemetry-proto==$OTEL_PROTO_VERSION"
fi
# aioquic, the HTTP/3 client of tests/tests/http3.rs (tests/h3/client.py), with the
# cryptography pinned above (aioquic takes any from 43 up).
AIOQUIC_VERSION=1.7.2
if ! "$tools_dir/venv/bin/pip" show aioquic 2>/dev/null | grep -q "^Version: $AIOQUIC_VERSION$"; then
  "$tools_dir/venv/bin/pip" install -q --only-binary=:all: "aioquic==$AIOQUIC_VERSION" "cryptography==$CRYPTOGRAPHY_VERSION"
fi
# A real WebSocket server (the `websockets` library) for the Upgrade tests.
WEBSOCKETS_VERSION=13.1
if ! "$tools_dir/venv/bin/pip" show websockets 2>/dev/null | grep -q "^Version: $WEBSOCKETS_VERSION$"; then
  "$tools_dir/venv/bin/pip" install -q --only-binary=:all: "websockets==$WEBSOCKETS_VERSION"
fi

# Kong's external plugin PDKs, real ones from the registries, for tests/tests/plugin_servers.rs:
# PyPI kong-pdk (the Python plugin server; the wheel: the sdist needs Python < 3.12) into the
# venv, and npm kong-pdk (kong-js-pluginserver) into target/tools/js-pdk, linked into tools/bin.
KONG_PDK_PYTHON_VERSION=0.36
if ! "$tools_dir/venv/bin/pip" show kong-pdk 2>/dev/null | grep -q "^Version: $KONG_PDK_PYTHON_VERSION$"; then
  "$tools_dir/venv/bin/pip" install -q --only-binary=:all: "kong-pdk==$KONG_PDK_PYTHON_VERSION"
fi
export STRAIT_KONG_PDK_PYTHON="$tools_dir/venv/bin/python"
KONG_PDK_JS_VERSION=0.6.0
if ! need node || ! need npm; then
  apt-get update -qq && apt-get install -y -qq nodejs npm
fi
if [[ "$(cat "$tools_dir/js-pdk/version" 2>/dev/null)" != "$KONG_PDK_JS_VERSION" ]]; then
  echo "== installing npm kong-pdk $KONG_PDK_JS_VERSION into $tools_dir/js-pdk"
  rm -rf "$tools_dir/js-pdk" && mkdir -p "$tools_dir/js-pdk" "$tools_dir/bin"
  (cd "$tools_dir/js-pdk" && npm install --silent --no-audit --no-fund "kong-pdk@$KONG_PDK_JS_VERSION")
  echo "$KONG_PDK_JS_VERSION" >"$tools_dir/js-pdk/version"
fi
export STRAIT_KONG_JS_PLUGINSERVER="$tools_dir/js-pdk/node_modules/.bin/kong-js-pluginserver"
# The admin UI's browser test (tests/tests/admin_ui.rs): Debian's Chromium, driven by npm
# playwright-core (no browser download: it launches /usr/bin/chromium).
if ! need chromium; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
fi
PLAYWRIGHT_VERSION=1.65.1
if [[ "$(cat "$tools_dir/playwright/version" 2>/dev/null)" != "$PLAYWRIGHT_VERSION" ]]; then
  echo "== installing npm playwright-core $PLAYWRIGHT_VERSION into $tools_dir/playwright"
  rm -rf "$tools_dir/playwright" && mkdir -p "$tools_dir/playwright"
  (cd "$tools_dir/playwright" && npm install --silent --no-audit --no-fund "playwright-core@$PLAYWRIGHT_VERSION")
  echo "$PLAYWRIGHT_VERSION" >"$tools_dir/playwright/version"
fi
export STRAIT_PLAYWRIGHT_DIR="$tools_dir/playwright" STRAIT_CHROMIUM=/usr/bin/chromium
# A Go plugin on go-pdk (tests/plugins/go-greeter, our own source) built in a scratch copy into
# tools/bin; go-pdk comes from the Go module proxy at the go.mod's version (v0.11.0: v0.11.1 is
# refused by the proxy here), its go.sum made by `go mod tidy`. Rebuilt when the source changes.
go_greeter="$tools_dir/bin/go-greeter"
if [[ ! -x "$go_greeter" ]] || [[ tests/plugins/go-greeter/main.go -nt "$go_greeter" ]] ||
  [[ tests/plugins/go-greeter/go.mod -nt "$go_greeter" ]]; then
  ensure_go
  echo "== building tests/plugins/go-greeter on go-pdk"
  scratch="$(mktemp -d)"
  cp tests/plugins/go-greeter/main.go tests/plugins/go-greeter/go.mod "$scratch/"
  mkdir -p "$tools_dir/bin"
  (cd "$scratch" && go mod tidy && CGO_ENABLED=0 go build -trimpath -o "$go_greeter" .)
  rm -rf "$scratch"
fi
export STRAIT_GO_GREETER="$go_greeter"
# A proxy-wasm filter (tests/filters/strait-test-filter, our own source) on the proxy-wasm Go
# SDK, built with standard Go for wasip1 (no TinyGo) into tools/filters beside its meta.json.
# The SDK has no tags: the go.mod pins a pseudo-version the Go module proxy serves.
wasm_filters="$tools_dir/filters"
test_filter="$wasm_filters/strait-test-filter.wasm"
if [[ ! -f "$test_filter" ]] || [[ tests/filters/strait-test-filter/main.go -nt "$test_filter" ]] ||
  [[ tests/filters/strait-test-filter/go.mod -nt "$test_filter" ]]; then
  ensure_go
  echo "== building tests/filters/strait-test-filter on proxy-wasm-go-sdk (GOOS=wasip1)"
  scratch="$(mktemp -d)"
  cp tests/filters/strait-test-filter/main.go tests/filters/strait-test-filter/go.mod "$scratch/"
  mkdir -p "$wasm_filters"
  (cd "$scratch" && go mod tidy &&
    GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o "$test_filter" .)
  rm -rf "$scratch"
fi
cp tests/filters/strait-test-filter/strait-test-filter.meta.json "$wasm_filters/"
export STRAIT_WASM_FILTERS="$wasm_filters"

# cargo-deny: the dependency tree's licenses, banned crates and sources (deny.toml), built
# from crates.io into target/tools (kept between runs when present). A debug build: it checks
# in a second either way, and builds in 90 s instead of 230 s on a cold CI machine.
CARGO_DENY_VERSION=0.20.2
if ! "$tools_dir/cargo-deny/bin/cargo-deny" --version 2>/dev/null | grep -q "$CARGO_DENY_VERSION"; then
  echo "== installing cargo-deny $CARGO_DENY_VERSION into $tools_dir/cargo-deny"
  cargo install -q --locked --debug --root "$tools_dir/cargo-deny" "cargo-deny@$CARGO_DENY_VERSION"
fi

# The flood tests hold 10,000 client connections open (and the gateway as many).
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# Disk. CI's disk can be small (a run died with "No space left on device" while linking the
# tests), and a target dir that is reused grows with every build: cargo never deletes an old
# artifact. This run is one-shot, so it keeps no incremental data (that was half of a cold
# run's footprint: 4.9 GB of 10); when less than STRAIT_MIN_FREE_GB (default 20) is free, the
# workspace's own old artifacts and incremental data go before anything is built (dependencies
# stay: they are what a cache is for). A link that runs out of space dies with SIGBUS in the
# linker, which says nothing about the cause, so the free space is printed up front.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
target_dir="${CARGO_TARGET_DIR:-target}"
mkdir -p "$target_dir"
free_gb() { df -k --output=avail "$1" | tail -1 | awk '{print int($1 / 1048576)}'; }
if (("$(free_gb "$target_dir")" < "${STRAIT_MIN_FREE_GB:-20}")); then
  echo "== only $(free_gb "$target_dir") GB free: removing the workspace's old build artifacts"
  rm -rf "$target_dir/debug/incremental" "$target_dir"/*/debug/incremental fuzz/target/*/release/incremental
  workspace_crates=(strait-core strait-expr strait-store strait-router strait-runtime strait-plugins
    strait-lua strait-external strait-wasm strait-snapshot strait-proxy strait-cluster strait-admin strait strait-e2e)
  clean_args=()
  for crate in "${workspace_crates[@]}"; do clean_args+=(-p "$crate"); done
  cargo clean -q "${clean_args[@]}"
fi
echo "== disk free for $target_dir: $(free_gb "$target_dir") GB"
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy --all-targets -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
echo "== house rules: only the binary uses the proxy, no source file over 1,000 lines, no too_many_arguments allowance"
for crate in strait-admin strait-cluster strait-snapshot strait-plugins strait-lua strait-external strait-wasm strait-store strait-runtime; do
  if cargo tree --offline -p "$crate" -e normal,build --prefix none | grep -q '^strait-proxy '; then
    echo "$crate depends on strait-proxy: compile snapshots through strait-snapshot instead" >&2
    exit 1
  fi
done
long_files="$(find crates tests bench fuzz -name '*.rs' -not -path '*/target/*' -exec awk 'END { if (NR > 1000) print FILENAME ": " NR " lines" }' {} \;)"
if [ -n "$long_files" ]; then echo "$long_files" >&2; exit 1; fi
if grep -rn --include='*.rs' 'too_many_arguments' crates tests bench fuzz; then
  echo "a function takes too many arguments: give it a struct" >&2
  exit 1
fi
echo "== cargo deny check licenses bans sources"
"$tools_dir/cargo-deny/bin/cargo-deny" --log-level error check licenses bans sources
echo "== build"
cargo build --workspace
echo "== validate example configs"
for file in examples/*.yml examples/*.yaml examples/*.json bench/configs/*.yml; do
  [ -e "$file" ] || continue
  "${CARGO_TARGET_DIR:-target}/debug/strait" config validate "$file"
done
echo "== bench harness unit tests"
python3 -m unittest discover -s bench/lab/tests -t bench
echo "== release build's PGO training run, on the debug binary"
PGO_TRAIN_SECONDS=2 scripts/pgo-train.sh "${CARGO_TARGET_DIR:-target}/debug/strait"
echo "== the Debian package: build, dpkg -i, start with its settings, proxy, remove"
scripts/deb-check.sh "${CARGO_TARGET_DIR:-target}/debug/strait"
echo "== HTTP/1 differential corpus: every case to Strait and to nginx, verdicts compared"
python3 tests/differential/run.py --strait "${CARGO_TARGET_DIR:-target}/debug/strait" --check
echo "== tests"
cargo test --workspace --exclude strait-e2e -- --test-threads="${STRAIT_TEST_THREADS:-4}"
# The end-to-end suites (tests/tests/*.rs) spend most of their time waiting on real servers:
# scripts/e2e-suites.py runs STRAIT_E2E_JOBS (2) binaries at once, each with
# STRAIT_E2E_THREADS (2) test threads (the same four tests at a time as one binary with four),
# which keeps both cores busy (233 s instead of 339 s here).
e2e_threads="${STRAIT_E2E_THREADS:-2}"
# One Cassandra node for the whole run (tests/src/bin/cassandra-server.rs), stopped on exit.
cargo build -q -p strait-e2e --bin cassandra-server
cassandra_dir="$(mktemp -d /tmp/strait-cassandra.XXXXXX)"
cassandra_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"${CARGO_TARGET_DIR:-target}/debug/cassandra-server" "$cassandra_dir" "$cassandra_port"
stop_cassandra() { kill "$(cat "$cassandra_dir/cassandra.pid")" 2>/dev/null || true; rm -rf "$cassandra_dir"; }
trap stop_cassandra EXIT
export STRAIT_TEST_CASSANDRA="127.0.0.1:$cassandra_port" STRAIT_TEST_CASSANDRA_DIR="$cassandra_dir"
echo "== end-to-end suites"
python3 scripts/e2e-suites.py -- --test-threads="$e2e_threads"
# One suite, two stores: the end-to-end suites again, with every gateway that
# does not choose its store (nor a declarative file, which makes it DB-less) on a
# PostgreSQL server of its own (tests/src/gateway.rs reads STRAIT_E2E_STORE). The
# suites below test the data plane or an outside peer, whatever stores the
# configuration, and are not run twice (CI's time goes to what the store changes).
echo "== end-to-end suites on PostgreSQL"
store_blind="conformance floods memory smuggling deck_testdata http1_server http2_settings client_limits
  connection_age proxy_streaming proxy_upgrade proxy_h2_tls grpc_streaming grpc_errors grpc_transcoding
  plugins_zipkin plugins_ldap plugins_kafka cassandra_store cassandra_nodes cassandra_runtime cassandra_tls_retry plugins_serverless plugin_servers plugins_lua wasm_filters admin_ui"
# shellcheck disable=SC2086 # one suite name per word
STRAIT_E2E_STORE=postgres python3 scripts/e2e-suites.py --skip $store_blind "strait_e2e (unit tests)" "grpc-origin (unit tests)" \
  -- --test-threads="$e2e_threads"
# The Admin API suites a third time, every gateway on Cassandra (tests/src/gateway.rs reads
# STRAIT_E2E_STORE=cassandra): one node for the run, each gateway in a keyspace of its own,
# dropped when it stops (the Cassandra suites above share the same node); with them decK's
# suites and the plugins whose data then lives in the keyspace (tokens, sessions, counters).
echo "== Admin API suites on Cassandra"
STRAIT_E2E_STORE=cassandra python3 scripts/e2e-suites.py --only admin admin_credentials admin_crud \
  admin_crud_errors admin_crud_lists admin_crud_live admin_validate_agreement config_post \
  deck_info deck_integration deck_round_trip plugins_oauth2 plugins_session plugins_rate_limiting \
  -- --test-threads="$e2e_threads"
# Every fuzz target for a minute from its seed corpus (nightly toolchain; a crash fails).
echo "== fuzz targets, ${FUZZ_SECONDS:-60}s each"
scripts/fuzz-ci.sh
