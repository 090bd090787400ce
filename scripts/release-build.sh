#!/usr/bin/env bash
# The release binary, built with profile-guided optimization: target/dist/strait.
#
#   scripts/release-build.sh            # PGO build (about 10.5 minutes on 2 cores, cold)
#   STRAIT_PGO=0 scripts/release-build.sh    # plain `cargo build --release`, copied there
#
# 1. builds Strait instrumented (-Cprofile-generate) in target/pgo/generate;
# 2. runs scripts/pgo-train.sh with it: HTTP/1.1, h2c, HTTPS, plugins, Admin API writes,
#    POST /config of 10,000 routes and a random route per request over them;
# 3. merges the profile with the toolchain's llvm-profdata (rustup's llvm-tools component,
#    added here when missing) into target/pgo/strait.profdata;
#    (target/pgo lives in $CARGO_TARGET_DIR when that is set; target/dist always here)
# 4. builds again with -Cprofile-use in target/pgo/use and copies the binary to
#    target/dist/strait, with target/dist/BUILD saying how it was made.
# The profile is made from the code being built, every time; nothing is kept between
# builds but cargo's caches. The release profile (fat LTO, one codegen unit) applies to
# both builds. Why: docs/architecture.md#profile-guided-release-build.
# Needs nginx, wrk and h2load for the training run (bench/setup.sh installs them; so does
# this script, with apt-get, when they are missing).
set -euo pipefail
repo_dir="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo_dir"
mkdir -p target/dist
target_base=$(realpath -m "${CARGO_TARGET_DIR:-$repo_dir/target}")
# The commit the binary was built from; "-dirty" when tracked files had changes.
commit=$(git describe --always --dirty --abbrev=7 2>/dev/null || echo unknown)
sudo_cmd=()
[[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)

if [[ "${STRAIT_PGO:-1}" == 0 ]]; then
    cargo build --release -p strait
    cp "$target_base/release/strait" target/dist/strait
    printf 'commit %s\npgo no\n' "$commit" >target/dist/BUILD
    echo "release-build: target/dist/strait (no PGO)" >&2
    exit 0
fi
# The profile flags go with any the caller set; CARGO_ENCODED_RUSTFLAGS would override
# RUSTFLAGS and LLVM_PROFILE_FILE would send the profile elsewhere, so neither may apply.
unset CARGO_ENCODED_RUSTFLAGS LLVM_PROFILE_FILE
user_flags=${RUSTFLAGS:-}

missing=()
command -v nginx >/dev/null || missing+=(nginx)
command -v wrk >/dev/null || missing+=(wrk)
command -v h2load >/dev/null || missing+=(nghttp2-client)
if ((${#missing[@]})); then
    echo "release-build: apt-get install ${missing[*]} (for the training run)" >&2
    "${sudo_cmd[@]}" apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
    if command -v systemctl >/dev/null && systemctl is-active --quiet nginx 2>/dev/null; then
        "${sudo_cmd[@]}" systemctl stop nginx >/dev/null 2>&1 || true
    fi
fi

host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
if [[ ! -x "$profdata" ]]; then
    echo "release-build: rustup component add llvm-tools (for llvm-profdata)" >&2
    rustup component add llvm-tools >&2 || true
fi
[[ -x "$profdata" ]] || {
    echo "release-build: $profdata is missing (rustup's llvm-tools component); STRAIT_PGO=0 builds without PGO" >&2
    exit 1
}

pgo_dir="$target_base/pgo"
echo "release-build: 1/4 instrumented build" >&2
RUSTFLAGS="$user_flags -Cprofile-generate=$pgo_dir/raw" CARGO_TARGET_DIR="$pgo_dir/generate" \
    cargo build --release -p strait
echo "release-build: 2/4 training run" >&2
# Build scripts are instrumented too and leave their own profiles: only the node's count.
rm -rf "$pgo_dir/raw" "$pgo_dir/strait.profdata"
"$repo_dir/scripts/pgo-train.sh" "$pgo_dir/generate/release/strait"
echo "release-build: 3/4 merging the profile" >&2
"$profdata" merge -o "$pgo_dir/strait.profdata" "$pgo_dir/raw"
echo "release-build: 4/4 optimized build" >&2
RUSTFLAGS="$user_flags -Cprofile-use=$pgo_dir/strait.profdata" CARGO_TARGET_DIR="$pgo_dir/use" \
    cargo build --release -p strait
cp "$pgo_dir/use/release/strait" target/dist/strait
printf 'commit %s\npgo yes\n' "$commit" >target/dist/BUILD
echo "release-build: target/dist/strait (PGO)" >&2
