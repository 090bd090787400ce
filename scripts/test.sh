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

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy --all-targets -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
echo "== build"
cargo build --workspace
echo "== validate example configs"
for file in examples/*.yml examples/*.yaml examples/*.json bench/configs/*.yml; do
  [ -e "$file" ] || continue
  "${CARGO_TARGET_DIR:-target}/debug/strait" config validate "$file"
done
echo "== bench harness unit tests"
python3 -m unittest discover -s bench/lab/tests -t bench
echo "== tests"
cargo test --workspace -- --test-threads="${STRAIT_TEST_THREADS:-4}"
