#!/usr/bin/env bash
# assemble.sh DEST: lays out this example's monorepo at DEST the way a user
# vendoring pygrpc-native would have it:
#
#   DEST/MODULE.bazel, .bazelrc, services/...   this folder's files
#   DEST/third_party/pygrpc-native/             a copy of the pygrpc-native
#                                               checkout this folder is in
#
# The copy holds the files git tracks or would track (`git ls-files
# --cached --others --exclude-standard`): what `git archive` of a commit
# holds, plus the working tree's uncommitted changes, so that testing the
# monorepo tests the checkout as it is. DEST is replaced; Bazel's output base
# for it (keyed by its path) stays warm between runs.
#
# Then, as in any monorepo vendoring it, from DEST:
#   third_party/pygrpc-native/bazel/offline/bazel.sh test //...
set -euo pipefail
die() { echo "assemble.sh: $*" >&2; exit 1; }
[ $# -eq 1 ] || die "usage: assemble.sh DEST"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
project=$(cd "$here/../.." && pwd -P)
git -C "$project" rev-parse --git-dir >/dev/null 2>&1 \
  || die "$project is not a git checkout: the vendored copy is made from git's list of files"

# copy_listed SRC DEST [PATHSPEC...]: the files git lists under SRC, to DEST.
copy_listed() {
  local src=$1 dest=$2
  shift 2
  mkdir -p "$dest"
  (cd "$src" && git ls-files -z --cached --others --exclude-standard -- "$@" \
     | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
     | tar --null -T - -cf -) | tar -xf - -C "$dest"
}

mkdir -p "$1"
dest=$(cd "$1" && pwd -P)
case "$dest/" in
  "$here"/*|"$project"/) die "DEST must not be inside the example or be the checkout: $dest" ;;
esac
find "$dest" -mindepth 1 -maxdepth 1 -exec rm -rf --one-file-system {} +
copy_listed "$here" "$dest" . ':!assemble.sh'
copy_listed "$project" "$dest/third_party/pygrpc-native"
echo "assembled $dest (pygrpc-native vendored at third_party/pygrpc-native)"
