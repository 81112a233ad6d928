#!/usr/bin/env bash
# Runs Bazel offline: `bazel/offline/bazel.sh test //...`, any Bazel command.
#
# Everything this project's Bazel build needs that a public-registry user would
# download from the Bazel Central Registry or GitHub is made here instead, from
# the package registries this machine reaches:
#
#   * Bazel itself: Debian sid's bazel-bootstrap (7.7.1), with its packaged
#     rules (platforms, rules_cc, rules_java, rules_python 0.22.1, skylib, ...),
#     inside a Debian sid root (`debootstrap --variant=minbase sid`): the
#     package needs a newer glibc than the host's.
#   * rules_go and gazelle: from the Go module proxy, through
#     --override_module (bazel/offline/prepare_modules.sh); buildozer (which
#     `bazel mod tidy` runs) built from the Go module proxy.
#   * Modules nobody packages (apple_support, protobuf, ...): small stand-ins
#     in bazel/offline/stubs/; what Debian's rules_python 0.22.1 lacks (the
#     Python headers, py_wheel's tool, pip.parse with a system interpreter):
#     bazel/offline/overlays/.
#   * Go: the host's toolchain (`go env GOROOT`), bound into the root; Go
#     modules come from the host's GOPROXY, passed with --repo_env at run time.
#
# MODULE.bazel and the BUILD files are untouched by all this: the mapping is
# the `offline` config in bazel/offline/bazelrc plus the flags this script
# generates. It works on the workspace it is started in (the nearest
# MODULE.bazel or WORKSPACE at or above the current folder) or the one given
# with `--workspace DIR`: this checkout, a consumer example, or a monorepo
# that vendors this project and runs third_party/pygrpc-native/bazel/offline/bazel.sh.
#
# State (the root, Bazel's caches, the downloaded rules) lives in
# $PGN_BAZEL_STATE (default /var/tmp/pygrpc-bazel; bazel/offline/README.md
# says what it costs); it is created on the first run (about 2 minutes) and
# reused after that. `bazel/offline/bazel.sh
# --reset` removes it; `bazel/offline/bazel.sh --exec CMD...` runs CMD in the
# root. Needs root (debootstrap, mount namespaces).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# The pygrpc-native checkout this script belongs to (a vendored copy under a
# monorepo's third_party/ is one too): its stand-ins and overlays are used.
project=$(cd "$here/../.." && pwd -P)
state=${PGN_BAZEL_STATE:-/var/tmp/pygrpc-bazel}
rootfs=$state/sid
# Bump when the package list or the root's setup changes: the root is redone.
root_version="1"
packages=(
  bazel-bootstrap bazel-platforms bazel-rules-cc bazel-rules-java bazel-rules-license
  bazel-rules-proto bazel-rules-python bazel-rules-shell bazel-skylib bazel-features
  build-essential python3-dev python3-pip python3-venv ca-certificates git
)

log() { printf '[bazel-offline] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap and mount namespaces)"

# --workspace DIR (or --workspace=DIR), before everything else: work on DIR.
workspace_arg=
case "${1:-}" in
  --workspace) [ $# -ge 2 ] || die "--workspace needs a folder"; workspace_arg=$2; shift 2 ;;
  --workspace=*) workspace_arg=${1#--workspace=}; shift ;;
esac

if [ "${1:-}" = "--reset" ]; then
  log "removing $state"
  rm -rf --one-file-system "$state"
  exit 0
fi

goroot=$(go env GOROOT 2>/dev/null) || die "the host Go toolchain is required (go on PATH)"
goproxy=$(go env GOPROXY)
gosumdb=$(go env GOSUMDB)

# The Debian mirror the host's apt uses (never written into a file of ours).
debian_mirror() {
  if [ -n "${PGN_DEBIAN_MIRROR:-}" ]; then echo "$PGN_DEBIAN_MIRROR"; return; fi
  local m
  m=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null \
        | awk '/^URIs:/ {print $2}' | grep -v -e security -e '^$' | grep '/debian/\?$' | head -1)
  if [ -z "$m" ]; then
    m=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
          | awk '$1 == "deb" && $2 !~ /^\[/ {print $2}' | grep -v security | grep '/debian/\?$' | head -1)
  fi
  [ -n "$m" ] || die "no Debian mirror found in the host's apt sources; set PGN_DEBIAN_MIRROR"
  echo "$m"
}

# The workspace Bazel works on: the one given with --workspace, else the
# nearest folder at or above the current one that has a MODULE.bazel,
# REPO.bazel, WORKSPACE.bazel or WORKSPACE file (as `bazel` itself looks).
# Never this checkout by default: from a monorepo's root,
# third_party/pygrpc-native/bazel/offline/bazel.sh works on the monorepo.
is_workspace() {
  local marker
  for marker in MODULE.bazel REPO.bazel WORKSPACE.bazel WORKSPACE; do
    [ -f "$1/$marker" ] && return 0
  done
  return 1
}
cwd=$(pwd -P)
if [ -n "$workspace_arg" ]; then
  workspace=$(cd "$workspace_arg" 2>/dev/null && pwd -P) || die "--workspace $workspace_arg: no such folder"
  is_workspace "$workspace" || die "--workspace $workspace: no MODULE.bazel or WORKSPACE there"
else
  workspace=$cwd
  until is_workspace "$workspace"; do
    [ "$workspace" != / ] \
      || die "no Bazel workspace at or above $cwd (no MODULE.bazel or WORKSPACE): cd into one or pass --workspace DIR"
    workspace=$(dirname "$workspace")
  done
fi
# Bazel runs in the current folder when it is inside the workspace (a
# package's folder, say), else at the workspace's root.
case "$cwd/" in
  "$workspace"/*) workdir=$cwd ;;
  *) workdir=$workspace ;;
esac
log "workspace $workspace"
# What enter.sh binds into the root: the workspace and this checkout, or the
# one of them that holds the other.
case "$project/" in
  "$workspace"/*) bound=$workspace ;;
  *) case "$workspace/" in
       "$project"/*) bound=$project ;;
       *) bound=$workspace:$project ;;
     esac ;;
esac

# enter CMD...: runs CMD inside the sid root, in a private mount namespace,
# with the workspace, this checkout (where a local_path_override finds it),
# the host Go and the state folder bound at their own paths.
enter() {
  unshare --mount --propagation private -- /bin/bash "$here/enter.sh" \
    "$rootfs" "$goroot" "$state" "$workdir" "$bound" "$@"
}

prepare_root() {
  local stamp=$rootfs/.pgn-root key
  # Redone when the package list or the host's own CAs change.
  key="$root_version ${packages[*]} $(cat /usr/local/share/ca-certificates/*.crt 2>/dev/null | sha256sum | cut -c1-16)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ]; then
    return
  fi
  local t0=$SECONDS
  if [ ! -x "$rootfs/usr/bin/apt-get" ] || [ ! -f "$rootfs/.pgn-debootstrap" ]; then
    command -v debootstrap >/dev/null || {
      log "installing debootstrap on the host"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    }
    local mirror; mirror=$(debian_mirror)
    log "debootstrap sid into $rootfs (about 30 s)"
    rm -rf --one-file-system "$rootfs"
    mkdir -p "$state"
    debootstrap --variant=minbase sid "$rootfs" "$mirror" > "$state/debootstrap.log" 2>&1 \
      || { tail -20 "$state/debootstrap.log"; die "debootstrap failed (log: $state/debootstrap.log)"; }
    touch "$rootfs/.pgn-debootstrap"
  fi
  # The mirror serves a frozen sid: its Release files are past Valid-Until.
  printf 'Acquire::Check-Valid-Until "false";\nAcquire::Check-Date "false";\n' \
    > "$rootfs/etc/apt/apt.conf.d/99pgn-frozen"
  printf 'APT::Install-Recommends "false";\n' > "$rootfs/etc/apt/apt.conf.d/99pgn-norecommends"
  # Trust the host's certificate authorities (the registries are reached
  # through them): local CAs go where update-ca-certificates finds them.
  mkdir -p "$rootfs/usr/local/share/ca-certificates"
  cp -f /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/" 2>/dev/null || true
  log "installing Bazel and the toolchain in the root (about 1 minute)"
  enter /bin/sh -c "export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq ${packages[*]} > /var/log/pgn-apt.log 2>&1 \
      || { tail -30 /var/log/pgn-apt.log; exit 1; }
    update-ca-certificates > /dev/null 2>&1 || true
    apt-get clean"
  echo "$key" > "$stamp"
  log "root ready in $((SECONDS - t0)) s"
}

# Each workspace gets an output base of 1-2 GB under output_user_root, kept
# between runs. Those whose workspace is gone (a deleted CI clone or
# worktree) and that no command used for an hour are deleted; the hour spares
# a workspace that exists in another mount namespace only.
prune_output_bases() {
  local base workspace_of
  for base in "$state"/output_user_root/*/; do
    base=${base%/}
    [ -f "$base/DO_NOT_BUILD_HERE" ] || continue
    workspace_of=$(cat "$base/DO_NOT_BUILD_HERE")
    [ -n "$workspace_of" ] && [ ! -e "$workspace_of" ] || continue
    [ -z "$(find "$base" -maxdepth 1 -name command.log -mmin -60)" ] || continue
    log "deleting the output base of $workspace_of (no longer there): $base"
    rm -rf --one-file-system "$base"
  done
}

mkdir -p "$state"
# One preparation at a time (two checkouts may start at once).
exec 9>"$state/.prepare.lock"
flock 9
prepare_root
"$here/prepare_modules.sh" "$state" >&2
prune_output_bases
exec 9>&-

# `bazel.sh --exec CMD...`: CMD in the root, in the current folder (used by
# update_lock.sh).
if [ "${1:-}" = "--exec" ]; then
  shift
  enter "$@"
  exit
fi

# The module overrides: what the `offline` config (bazel/offline/bazelrc)
# can't say itself because the paths are only known here.
mods=$state/modules debian=/usr/share/bazel
offline_flags=(
  "--config=offline"
  "--override_module=rules_go=$mods/rules_go"
  "--override_module=gazelle=$mods/gazelle"
  "--override_module=bazel_features=$mods/bazel_features"
  "--override_module=rules_python=$mods/rules_python"
  "--override_module=buildozer=$mods/buildozer"
  "--override_module=rules_shell=$debian/rules/shell"
  "--repo_env=GOPROXY=$goproxy"
  "--repo_env=GOSUMDB=$gosumdb"
  "--repository_cache=$state/repository_cache"
  # gazelle's Go module and build caches (the modules go_deps fetches, the
  # fetch tools it compiles): one for all workspaces, instead of ~350 MB
  # inside each output base.
  "--repo_env=GO_REPOSITORY_USE_HOST_CACHE=1"
  "--repo_env=GOPATH=$state/gopath"
  "--repo_env=GOMODCACHE=$state/gomodcache"
  "--repo_env=GOCACHE=$state/gocache"
)
# Shared by every checkout and workspace on the machine (a CI clone, the
# consumer examples): the Go standard library and grpc-go build once. Bazel
# trims it back to $disk_cache_max (oldest entries first) when idle: room for
# `test_all.sh`'s outputs, which build the Go standard library and grpc-go for
# the host and the four release platforms (//wheels), ~2 GB together, so that
# a CI clone finds them all.
disk_cache_max=${PGN_BAZEL_DISK_CACHE_MAX:-4G}
build_flags=(
  "--disk_cache=$state/disk_cache"
  "--experimental_disk_cache_gc_max_size=$disk_cache_max"
)
for stub in "$here"/stubs/*/; do
  stub=${stub%/}
  offline_flags+=("--override_module=${stub##*/}=$stub")
done
# Startup options first, then the command, then our flags, then the rest.
# The server stays for warm runs, and leaves by itself after 15 idle minutes.
startup=(--output_user_root="$state/output_user_root" --max_idle_secs=900 --bazelrc="$here/bazelrc")
cmd=()
while [ $# -gt 0 ]; do
  case "$1" in
    --*) startup+=("$1"); shift ;;
    *) cmd=("$1"); shift; break ;;
  esac
done
[ ${#cmd[@]} -gt 0 ] || { enter bazel "${startup[@]}" help; exit; }
case "${cmd[0]}" in
  build|test|run|coverage|cquery|aquery|fetch|info|print_action|clean)
    exec_flags=("${offline_flags[@]}" "${build_flags[@]}") ;;
  query|mod|sync)
    exec_flags=("${offline_flags[@]}") ;;
  *) exec_flags=() ;;
esac
# `; exit` on the same line: bash reads no further, so editing this file while
# Bazel runs can't make it run what was written meanwhile.
enter bazel "${startup[@]}" "${cmd[0]}" "${exec_flags[@]}" "$@"; exit
