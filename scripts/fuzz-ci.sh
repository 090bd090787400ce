#!/usr/bin/env bash
# Every fuzz target for FUZZ_SECONDS (default 60) from its checked-in seed corpus, one after
# the other: a crash, a leak or a timeout fails the run, and libFuzzer's reproducer is left in
# the target's `artifacts/` folder (docs/security.md#fuzzing). scripts/test.sh runs this.
#
# The targets need the nightly toolchain (libFuzzer's sanitizer flags) and cargo-fuzz, which
# is built into target/tools from crates.io. Where no nightly toolchain is installed and
# rustup cannot fetch one, the run says so and is skipped rather than failed: the check
# needs a toolchain the machine does not have, and nothing about the code is known.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-60}"
tools_dir="${STRAIT_TOOLS_DIR:-$PWD/target/tools}"
CARGO_FUZZ_VERSION=0.13.2

if ! cargo +nightly --version >/dev/null 2>&1; then
  if ! command -v rustup >/dev/null 2>&1 || ! timeout 300 rustup toolchain install nightly --profile minimal >/dev/null 2>&1; then
    echo "== fuzz: SKIPPED, no nightly toolchain here and rustup could not install one" >&2
    exit 0
  fi
fi
if ! "$tools_dir/cargo-fuzz/bin/cargo-fuzz" --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
  echo "== installing cargo-fuzz $CARGO_FUZZ_VERSION into $tools_dir/cargo-fuzz"
  # A debug build: it only drives cargo, and builds in half the time.
  cargo install -q --locked --debug --root "$tools_dir/cargo-fuzz" "cargo-fuzz@$CARGO_FUZZ_VERSION"
fi
export PATH="$tools_dir/cargo-fuzz/bin:$PATH"

work="$(mktemp -d /tmp/strait-fuzz.XXXXXX)"
trap 'rm -rf "$work"' EXIT
run() {  # FUZZ_DIR TARGET
  local dir="$1" target="$2"
  echo "== fuzz $target for ${seconds}s ($dir)"
  mkdir -p "$work/$target"
  # New inputs go to a scratch corpus; the checked-in seeds are only read.
  if ! (cd "$dir" && cargo +nightly fuzz run -O "$target" "$work/$target" "corpus/$target" -- \
    -max_total_time="$seconds" -print_final_stats=1 2>&1 | tail -n 15); then
    echo "== fuzz $target FAILED: the input that did it is in $dir/artifacts/$target/" >&2
    return 1
  fi
}
# One crate (one build) holds every target.
for target in declarative admin_body http1_head http1_response http3_request expression; do
  run fuzz "$target"
done
