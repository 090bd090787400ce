#!/usr/bin/env bash
# Build the Debian package: packaging/deb/build.sh BINARY OUT_DIR [VERSION]
# (BINARY: a built `strait`, release for shipping; VERSION: default, what it reports).
# Lays out /usr/bin/strait, /etc/strait/strait.conf (a conffile), the systemd unit
# and the docs, with maintainer scripts that make the prefix /var/lib/strait.
set -euo pipefail
binary=$1
out=$2
version=${3:-$("$binary" version | awk '{print $2}')}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pkg="$work/strait_${version}_amd64"
install -D -m 0755 "$binary" "$pkg/usr/bin/strait"
install -D -m 0644 "$here/strait.conf" "$pkg/etc/strait/strait.conf"
install -D -m 0644 "$here/strait.service" "$pkg/lib/systemd/system/strait.service"
install -D -m 0644 "$root/README.md" "$pkg/usr/share/doc/strait/README.md"
for doc in operations ui configuration; do
  install -D -m 0644 "$root/docs/$doc.md" "$pkg/usr/share/doc/strait/$doc.md"
done
mkdir -p "$pkg/DEBIAN"
cat >"$pkg/DEBIAN/control" <<CONTROL
Package: strait
Version: $version
Section: net
Priority: optional
Architecture: amd64
Depends: libc6 (>= 2.31)
Maintainer: Strait <strait@localhost>
Installed-Size: $(du -sk "$pkg/usr" | cut -f1)
Description: API gateway compatible with Kong 3.9
 Kong's Admin API, declarative configuration and plugins (Lua, plugin servers,
 proxy-wasm), an embedded store or PostgreSQL, hybrid mode, and an admin UI;
 reload and binary upgrade without dropping a connection.
CONTROL
echo "/etc/strait/strait.conf" >"$pkg/DEBIAN/conffiles"
cat >"$pkg/DEBIAN/postinst" <<'SCRIPT'
#!/bin/sh
set -e
if [ "$1" = "configure" ]; then
  mkdir -p /var/lib/strait/logs /var/lib/strait/pids
  chmod 0750 /var/lib/strait
  if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null || true
    systemctl enable strait.service >/dev/null || true
    # An upgrade hands the sockets to the new binary: no connection is dropped.
    if systemctl is-active --quiet strait.service; then
      /usr/bin/strait restart --conf /etc/strait/strait.conf || true
    else
      systemctl start strait.service || true
    fi
  fi
fi
exit 0
SCRIPT
cat >"$pkg/DEBIAN/prerm" <<'SCRIPT'
#!/bin/sh
set -e
if [ "$1" = "remove" ] && [ -d /run/systemd/system ]; then
  systemctl stop strait.service >/dev/null || true
  systemctl disable strait.service >/dev/null || true
fi
exit 0
SCRIPT
cat >"$pkg/DEBIAN/postrm" <<'SCRIPT'
#!/bin/sh
set -e
if [ "$1" = "purge" ]; then
  rm -rf /var/lib/strait
fi
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null || true
fi
exit 0
SCRIPT
chmod 0755 "$pkg/DEBIAN/postinst" "$pkg/DEBIAN/prerm" "$pkg/DEBIAN/postrm"
mkdir -p "$out"
dpkg-deb --root-owner-group -Zgzip -z1 --build "$pkg" "$out/strait_${version}_amd64.deb" >/dev/null
echo "$out/strait_${version}_amd64.deb"
