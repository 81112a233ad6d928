#!/usr/bin/env bash
# Runs every test of the project from a fresh clone: Go unit tests, then the
# Python suite against grpcio clients (the differential suites and the
# interop matrix included). Installs what it needs: the pinned Python test
# dependencies (PyPI) and the package itself, built from source (Go modules
# from the Go module proxy), into a virtual environment under build/, so
# nothing outside the checkout changes.
#
# With PGN_WHEELS=1, and always under CI (CI set), it then builds every
# release wheel and the sdist and checks them (wheels/check.sh: twice for
# reproducibility, auditwheel, abi3audit, smoke runs on CPython 3.10-3.13 and
# under qemu-aarch64; needs root for apt the first time; ~10 CPU-minutes with
# cold Go and zig caches, about 4 minutes once they are warm).
#
# With PGN_BAZEL=1, and always under CI (CI set), it then runs the Bazel
# graph offline (bazel/offline/test_all.sh: Debian's Bazel in a sid root it
# prepares under /var/tmp; needs root, ~5.5 GB and a few minutes the first
# time; under CI it deletes the output bases it made at the end, see
# bazel/offline/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v go >/dev/null || { echo "Go is required (see go.mod for the version)"; exit 1; }
command -v cc >/dev/null || command -v gcc >/dev/null || { echo "A C compiler is required"; exit 1; }

venv=build/venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
py="$venv/bin/python"
"$py" -m pip install -q --upgrade pip
"$py" -m pip install -q -r tests/requirements.txt
"$py" -m pip install -q --force-reinstall --no-deps .
# The OpenTelemetry test environment (tests/test_observability.py):
# grpcio-observability pins another grpcio than the main suite. Without it
# (no network, no wheel for this platform) those checks skip and say why.
otel_venv=build/venv-otel
if [ ! -x "$otel_venv/bin/python" ]; then
  python3 -m venv "$otel_venv"
fi
if ! { "$otel_venv/bin/python" -m pip install -q -r tests/otel-requirements.txt &&
  "$otel_venv/bin/python" -m pip install -q --force-reinstall --no-deps .; }; then
  echo "could not make $otel_venv: tests/test_observability.py will skip" >&2
  rm -rf "$otel_venv"
fi
# h2spec, pinned, for tests/reliability (not a module dependency: go.mod
# doesn't list it).
if [ ! -x build/tools/h2spec ]; then
  GOBIN="$PWD/build/tools" go install github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible
fi

echo "== go test"
go vet ./...
go test -count=1 -race ./...

echo "== go fuzz (${PGN_FUZZTIME:-a few seconds} per target)"
# Each target briefly, beyond its committed seeds (testdata/fuzz): the wire
# (raw frames against a running front), method paths, metadata checks, the
# Go->C value encoding, option parsing. The budgets are counts of inputs
# (about 2 s each here), not durations: with a duration, Go 1.26's fuzzing
# coordinator can fail a target with a bare "context deadline exceeded" as
# the time runs out (golang/go#75804, fixed in Go 1.27). A longer hunt:
# PGN_FUZZTIME=10m bash scripts/test.sh (for every target), or one by hand.
for target in go/front:FuzzWire:30x go/front:FuzzMethodPath:20000x go/front:FuzzMetadataChecks:6000x \
  go/front:FuzzParseConfig:10000x go/capi:FuzzEncoder:16000x; do
  pkg=${target%%:*} rest=${target#*:}
  go test -run='^$' -fuzz="^${rest%%:*}\$" -fuzztime="${PGN_FUZZTIME:-${rest#*:}}" "./$pkg"
done

echo "== mypy --strict examples/"
# The examples as a user's code: type-checked against the installed package
# (python/pygrpc_native/_native.pyi and the package's annotations), so the
# stubs can't drift from what the examples do with them.
"$py" -m pip install -q -r scripts/typecheck-requirements.txt
"$py" -m mypy --strict --cache-dir build/mypy-cache examples/

echo "== pytest"
# The package is imported from the venv: the source tree keeps it under python/.
"$py" -m pytest -q -p no:cacheprovider tests

echo "== the differential suites on CPython 3.10 and 3.13"
# The suites above ran on this venv's Python (3.11); asyncio's task and
# cancellation semantics change between versions (Task.cancelling() came in
# 3.11, eager tasks in 3.12), so grpc.server() and grpc.aio.server() are
# compared with ours on the oldest and newest versions the wheel serves
# too, from pyenv where it has them (a version not found is said, and
# skipped). Not lief and matplotlib: only the wheel and chart tests use them.
pyenv_root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
grep -v -E '^(lief|matplotlib)==' tests/requirements.txt > build/requirements-diff.txt
for version in 3.10 3.13; do
  other=$(ls -d "$pyenv_root"/versions/"$version".*/bin/python3 2>/dev/null | tail -n 1 || true)
  [ -n "$other" ] || other=$(command -v "python$version" || true)
  if [ -z "$other" ]; then
    echo "no CPython $version found: its differential run is skipped"
    continue
  fi
  other_venv="build/venv-py$version"
  [ -x "$other_venv/bin/python" ] || "$other" -m venv "$other_venv"
  "$other_venv/bin/python" -m pip install -q --upgrade pip
  "$other_venv/bin/python" -m pip install -q -r build/requirements-diff.txt
  "$other_venv/bin/python" -m pip install -q --force-reinstall --no-deps .
  "$other_venv/bin/python" -m pytest -q -p no:cacheprovider tests/test_aio_diff_*.py tests/test_server_diff_*.py
done

echo "== grpc-go's transport (the oracle): Go tests, wire fuzzing, differential, TLS, metrics, interop, reliability"
# The full suites above ran on the default transport (the front's own, h2);
# grpc-go's server stays selectable per server (grpc.pygrpc_native.transport)
# or, for whole suites, by PGN_TRANSPORT, as the reference h2 is held to. On
# it: the Go tests (every front test, since they make their fronts from the
# same configuration; the frame-differential test drives both transports
# and plain grpc-go in every run), the wire fuzzer, the differential suites
# (grpc.server() and ours, compared), the TLS, low-level and metrics
# suites, the interop matrix (plaintext and TLS) and the short reliability
# suite (h2spec against plain grpc-go included).
PGN_TRANSPORT=grpcgo go test -count=1 -race ./go/front
PGN_TRANSPORT=grpcgo go test -run='^$' -fuzz='^FuzzWire$' -fuzztime="${PGN_FUZZTIME:-30x}" ./go/front
PGN_TRANSPORT=grpcgo "$py" -m pytest -q -p no:cacheprovider tests/test_*diff*.py tests/test_tls_*.py \
  tests/test_interop.py tests/test_lowlevel_*.py tests/test_server_request_streams.py tests/test_stream_memory.py \
  tests/test_metrics_prometheus.py tests/test_observability.py tests/test_server_vanished_clients.py tests/reliability

if [ "${PGN_WHEELS:-}" = 1 ] || [ -n "${CI:-}" ]; then
  echo "== wheels"
  bash wheels/check.sh
fi

if [ "${PGN_BAZEL:-}" = 1 ] || [ -n "${CI:-}" ]; then
  echo "== bazel (offline)"
  bash bazel/offline/test_all.sh
fi
