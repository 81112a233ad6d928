#!/usr/bin/env bash
# prepare_modules.sh STATE: lays out, under STATE/modules, the Bazel modules
# that bazel.sh passes with --override_module and that come from outside
# Debian's packages:
#   rules_go v0.65.0 and gazelle v0.54.0 from the Go module proxy (both are Go
#   modules), repaired for use as Bazel modules; copies of Debian's
#   bazel_features and rules_python with the overlays in bazel/offline/overlays;
#   and buildozer (for `bazel mod tidy`), built from the Go module proxy into
#   the module of bazel/offline/buildozer.
# Idempotent: a stamp per module records what it was made from.
set -euo pipefail
state=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mods=$state/modules
debian=$state/sid/usr/share/bazel
mkdir -p "$mods"

RULES_GO_VERSION=v0.65.0
GAZELLE_VERSION=v0.54.0
# gazelle's go.work uses its nested v2 module; the version its go.mod requires.
GAZELLE_V2_VERSION=v2.0.0-3
# buildtools publishes no Go-module tags for its releases: a commit of its
# main branch (2026-09-04).
BUILDOZER_VERSION=v0.0.0-20260904073137-eaa4d125b423

export GOMODCACHE=$state/gomodcache GOFLAGS=-modcacherw GOTOOLCHAIN=local

# A stamp's content: the version plus a hash of the overlay files that apply.
overlay_hash() {
  if [ -d "$here/overlays/$1" ]; then
    (cd "$here/overlays/$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-16
  else
    echo none
  fi
}
fresh() { [ -f "$mods/$1/.pgn-stamp" ] && [ "$(cat "$mods/$1/.pgn-stamp")" = "$2" ]; }
stamp() { echo "$2" > "$mods/$1/.pgn-stamp"; }

go_module_dir() {
  local dir
  dir=$(cd "$state" && go mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -n "$dir" ] || { echo "go mod download $1 failed" >&2; exit 1; }
  echo "$dir"
}

# Copies SRC to DEST, with exec bits on scripts (the proxy's zips drop them)
# and the overlay of NAME laid over it.
install_module() {
  local name=$1 src=$2 dest=$mods/$1
  rm -rf "$dest.tmp" "$dest"
  cp -r "$src" "$dest.tmp"
  chmod -R u+w "$dest.tmp"
  find "$dest.tmp" -type f \( -name '*.sh' -o -name '*.bash' -o -name '*.py' \) -exec chmod +x {} +
  if [ -d "$here/overlays/$name" ]; then
    cp -r "$here/overlays/$name/." "$dest.tmp/"
  fi
  mv "$dest.tmp" "$dest"
}

key="$RULES_GO_VERSION $(overlay_hash rules_go)"
if ! fresh rules_go "$key"; then
  echo "[bazel-offline] rules_go $RULES_GO_VERSION from the Go module proxy"
  install_module rules_go "$(go_module_dir "github.com/bazelbuild/rules_go@$RULES_GO_VERSION")"
  stamp rules_go "$key"
fi

key="$GAZELLE_VERSION $GAZELLE_V2_VERSION 2 $(overlay_hash gazelle)"
if ! fresh gazelle "$key"; then
  echo "[bazel-offline] gazelle $GAZELLE_VERSION from the Go module proxy"
  v2=$(go_module_dir "github.com/bazel-contrib/bazel-gazelle/v2@$GAZELLE_V2_VERSION")
  install_module gazelle "$(go_module_dir "github.com/bazelbuild/bazel-gazelle@$GAZELLE_VERSION")"
  cp -r "$v2" "$mods/gazelle/v2"
  chmod -R u+w "$mods/gazelle/v2"
  # The repository's v2/go.sum is empty and the proxy's zip leaves it out;
  # gazelle checks its list of its own sources, which names it.
  [ -f "$mods/gazelle/v2/go.sum" ] || : > "$mods/gazelle/v2/go.sum"
  stamp gazelle "$key"
fi

# Debian's bazel_features (1.11) predates a field rules_go 0.65 reads:
# add it with its Bazel 7 value.
key="$(sha256sum "$debian/tools/features/features.bzl" | cut -c1-16) $(overlay_hash bazel_features)"
if ! fresh bazel_features "$key"; then
  install_module bazel_features "$debian/tools/features"
  sed -i 's/^_rules = struct($/_rules = struct(\n    instrumented_files_info_has_baseline_coverage_files = False,/' \
    "$mods/bazel_features/features.bzl"
  grep -q instrumented_files_info_has_baseline_coverage_files "$mods/bazel_features/features.bzl"
  stamp bazel_features "$key"
fi

# Debian's rules_python (0.22.1) plus what this build uses from newer
# releases: the Python headers, pip.parse with the system interpreter, the
# wheel maker.
key="$(find "$debian/rules/python" -type f -print0 | sort -z | xargs -0 cat | sha256sum | cut -c1-16) 2 $(overlay_hash rules_python)"
if ! fresh rules_python "$key"; then
  install_module rules_python "$debian/rules/python"
  # py_wheel's `summary` attribute (rules_python >= 0.23): the Summary field.
  wheel_bzl=$mods/rules_python/python/private/py_wheel.bzl
  sed -i -e 's/^    if ctx.attr.author:$/    if ctx.attr.summary:\n        metadata_contents.append("Summary: %s" % ctx.attr.summary)\n    if ctx.attr.author:/' \
    -e 's/^    "homepage": attr.string($/    "summary": attr.string(doc = "A one-line summary of the distribution."),\n    "homepage": attr.string(/' \
    "$wheel_bzl"
  [ "$(grep -c 'ctx.attr.summary\|"summary": attr' "$wheel_bzl")" = 3 ] || { echo "py_wheel.bzl patch failed" >&2; exit 1; }
  stamp rules_python "$key"
fi

key="$BUILDOZER_VERSION $(cd "$here/buildozer" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)"
if ! fresh buildozer "$key"; then
  echo "[bazel-offline] buildozer $BUILDOZER_VERSION from the Go module proxy"
  rm -rf "$mods/buildozer.tmp" "$mods/buildozer"
  cp -r "$here/buildozer" "$mods/buildozer.tmp"
  GOBIN="$mods/buildozer.tmp" GOFLAGS=-modcacherw CGO_ENABLED=0 \
    go install -trimpath "github.com/bazelbuild/buildtools/buildozer@$BUILDOZER_VERSION"
  mv "$mods/buildozer.tmp" "$mods/buildozer"
  stamp buildozer "$key"
fi
