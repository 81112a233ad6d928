#!/usr/bin/env bash
# Prints the path of an arm64 Debian root holding CPython 3.11, made once
# from Debian's arm64 packages (apt-get download + dpkg -x: nothing is
# installed on the host, no chroot, no debootstrap) and cached under
# /var/tmp. wheels/check.sh runs Python from it under qemu-aarch64 -L ROOT.
# Needs dpkg's arm64 architecture (wheels/setup_host.sh adds it).
set -euo pipefail

root=${PGN_ARM64_ROOT:-/var/tmp/pgn-arm64-root}
# The interpreter, its standard library and what they link, plus libstdc++
# for grpcio's extension.
wanted="python3.11-minimal:arm64 libpython3.11-stdlib:arm64 libstdc++6:arm64"

packages=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances $wanted \
  | grep -E '^[a-z0-9][^ ]*:arm64$' | sort -u)
# The exact versions make the stamp: a Debian update rebuilds the root.
stamp=$(apt-cache policy $packages | sha256sum | cut -d' ' -f1)
if [ -f "$root/.stamp" ] && [ "$(cat "$root/.stamp")" = "$stamp" ]; then
  echo "$root"
  exit 0
fi

rm -rf "$root" "$root.debs"
mkdir -p "$root" "$root.debs"
(cd "$root.debs" && apt-get -q -o APT::Sandbox::User=root download $packages >/dev/null)
for deb in "$root.debs"/*.deb; do
  dpkg-deb -x "$deb" "$root"
done
rm -rf "$root.debs"
echo "$stamp" > "$root/.stamp"
echo "$root"
