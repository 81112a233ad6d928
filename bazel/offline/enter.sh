#!/bin/bash
# enter.sh ROOTFS GOROOT STATE WORKDIR DIRS CMD...: run by bazel.sh under
# `unshare --mount`: binds the folders of DIRS (colon-separated: the workspace
# and the pygrpc-native checkout), the host Go and the state folder into the
# sid root at their own paths, makes the root the process's `/` with
# pivot_root (Bazel's linux-sandbox then works as on a normal machine) and runs
# CMD there, in WORKDIR (the workspace or a folder inside it). Nothing here
# outlives the mount namespace.
set -euo pipefail
rootfs=$1 goroot=$2 state=$3 workdir=$4 dirs=$5
shift 5

mount --make-rprivate /
mount --bind "$rootfs" "$rootfs"
# The root keeps its own /tmp (on disk, under STATE); a checkout under /tmp
# (a CI clone, say) is bound inside it like any other path.
mkdir -p "$rootfs/proc" "$rootfs/sys" "$rootfs/dev" "$rootfs/tmp"
chmod 1777 "$rootfs/tmp"
mount -t proc proc "$rootfs/proc"
mount --rbind /sys "$rootfs/sys"
mount --rbind /dev "$rootfs/dev"
bind() {  # bind SRC [OPTS]: SRC at the same path inside the root
  mkdir -p "$rootfs/${1#/}"
  mount --bind "$1" "$rootfs/${1#/}"
  [ -z "${2:-}" ] || mount -o "remount,bind,$2" "$rootfs/${1#/}"
}
bind "$state"
IFS=: read -ra dirs <<<"$dirs"
for dir in "${dirs[@]}"; do
  bind "$dir"
done
bind "$goroot" ro
cp -f /etc/resolv.conf "$rootfs/etc/resolv.conf" 2>/dev/null || true
cp -f /etc/hosts "$rootfs/etc/hosts" 2>/dev/null || true

cd "$rootfs"
mkdir -p .oldroot
pivot_root . .oldroot
cd /
umount -l /.oldroot

cd "$workdir"
exec /usr/bin/env -i \
  HOME=/root USER=root LANG=C.UTF-8 TERM="${TERM:-dumb}" \
  PATH="$goroot/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  GOROOT="$goroot" GOTOOLCHAIN=local \
  "$@"
