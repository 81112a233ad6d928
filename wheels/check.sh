#!/usr/bin/env bash
# Builds every wheel and checks it; scripts/test.sh runs this under CI.
#   bash wheels/check.sh
# 1. builds all wheels into dist/, then again into build/wheels-rebuild/, and
#    fails unless the two are byte-identical (reproducible builds);
# 2. prints sizes and fails over 8 MiB a wheel;
# 3. auditwheel: the manylinux wheels are manylinux_2_17 (manylinux2014),
#    the musl ones musllinux_1_2; abi3audit: no stable-ABI violation;
# 4. inspects every extension (wheels/tests: Mach-O and ELF, pytest);
# 5. x86_64 smoke: the manylinux x86_64 wheel in a fresh venv of every
#    CPython 3.10-3.13 found (pyenv and the host), answering a grpcio client
#    through server(), aio.server() and TLS;
# 6. aarch64 smoke: the manylinux aarch64 wheel in an arm64 Debian root under
#    qemu-aarch64: import, a unary call, a server-streaming call;
# 7. sdist: it carries the Go module and the shim, pip builds it from source,
#    and without Go on PATH pip stops with the error that says so.
# Installs what it needs (apt: qemu-user and the arm64 packages; PyPI: the
# pinned tools) idempotently.
set -euo pipefail
cd "$(dirname "$0")/.."

start=$SECONDS
here=$PWD
tools=build/wheel-tools
smoke=build/wheel-smoke
rebuild=build/wheels-rebuild
grpcio=$(grep -E '^grpcio==' tests/requirements.txt)
# One timestamp for both builds, even if a commit lands between them.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}

echo "== wheels: build"
rm -rf dist "$rebuild"
bash wheels/build.sh --out dist
echo "== wheels: build again (reproducibility)"
"$tools/bin/python" wheels/build.py --out "$rebuild" >/dev/null
(cd dist && sha256sum -- *.whl) > build/wheels.sha256
(cd "$rebuild" && sha256sum --check --quiet ../wheels.sha256) \
  || { echo "wheels differ between two builds of the same tree"; exit 1; }
[ "$(ls dist | wc -l)" = "$(ls "$rebuild" | wc -l)" ]

echo "== wheels: sizes and sha256"
limit=$((8 * 1024 * 1024))
for wheel in dist/*.whl; do
  size=$(stat -c %s "$wheel")
  awk -v s="$size" -v h="$(sha256sum "$wheel" | cut -c1-64)" -v n="${wheel#dist/}" \
    'BEGIN { printf "%6.2f MiB  %s  %s\n", s / 1048576, h, n }'
  [ "$size" -le "$limit" ] || { echo "$wheel is over 8 MiB"; exit 1; }
done

echo "== wheels: auditwheel, abi3audit, binaries"
"$tools/bin/python" -m pip install -q -r wheels/requirements-check.txt
for wheel in dist/*linux*.whl; do
  case "$wheel" in
    *manylinux_2_17_x86_64*) want=manylinux_2_17_x86_64 ;;
    *manylinux_2_17_aarch64*) want=manylinux_2_17_aarch64 ;;
    *musllinux_1_2_x86_64*) want=musllinux_1_2_x86_64 ;;
    *musllinux_1_2_aarch64*) want=musllinux_1_2_aarch64 ;;
  esac
  "$tools/bin/auditwheel" show "$wheel" | tr -s ' \n' ' ' | grep -q "platform tag: \"$want\"" \
    || { "$tools/bin/auditwheel" show "$wheel"; echo "$wheel: auditwheel does not say $want"; exit 1; }
  echo "auditwheel: $want"
done
"$tools/bin/abi3audit" --strict --summary dist/*.whl
PGN_WHEEL_DIR=dist "$tools/bin/python" -m pytest -q -p no:cacheprovider wheels/tests

echo "== wheels: x86_64 smoke in every CPython 3.10-3.13 here"
mkdir -p "$smoke"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -keyout "$smoke/key.pem" -out "$smoke/cert.pem" -subj /CN=localhost \
  -addext subjectAltName=DNS:localhost,IP:127.0.0.1 2>/dev/null
x86_wheel=$(ls dist/*manylinux_2_17_x86_64*.whl)
tested=
pyenv_root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
candidates="python3 $(command -v python3.10 python3.11 python3.12 python3.13 || true)"
candidates="$candidates $(ls -d "$pyenv_root"/versions/3.1[0-3]*/bin/python3 2>/dev/null || true)"
for python in $candidates; do
  version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || continue
  case " $tested " in *" $version "*) continue ;; esac
  case "$version" in 3.10|3.11|3.12|3.13) ;; *) continue ;; esac
  venv="$smoke/py$version"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q "$grpcio" "$x86_wheel"
  (cd "$smoke" && "$here/$venv/bin/python" "$here/wheels/smoke.py" --aio --tls cert.pem key.pem)
  tested="$tested $version"
done
[ -n "$tested" ] || { echo "no CPython 3.10-3.13 found for the smoke test"; exit 1; }
echo "x86_64 smoke passed on CPython$tested"

echo "== wheels: aarch64 smoke under qemu"
arm_root=$(bash wheels/arm64_root.sh)
site="$smoke/arm64-site"
rm -rf "$site"
"$tools/bin/python" -m pip install -q --target "$site" --platform manylinux2014_aarch64 \
  --implementation cp --python-version 3.11 --only-binary=:all: "$grpcio" dist/*manylinux_2_17_aarch64*.whl
(cd "$smoke" && PYTHONPATH="$here/$site" qemu-aarch64 -L "$arm_root" "$arm_root/usr/bin/python3.11" \
  "$here/wheels/smoke.py")

echo "== sdist: contents, build from source, error without Go"
rm -rf build/sdist
"$tools/bin/python" -m build --sdist -o build/sdist . >/dev/null
sdist=$(ls build/sdist/pygrpc_native-*.tar.gz)
members=$(tar tzf "$sdist" | sed 's#^[^/]*/##')
for need in go.mod go.sum go/capi/pgn.h go/capi/exports.go go/front/front.go \
    python/pygrpc_native/_native.c python/pygrpc_native/__init__.py setup.py pyproject.toml LICENSE; do
  grep -qx "$need" <<<"$members" || { echo "$sdist lacks $need"; exit 1; }
done
venv="$smoke/sdist"
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q "setuptools>=77" wheel "$grpcio"
if PATH="$here/$venv/bin" "$venv/bin/python" -m pip install -q --no-build-isolation --no-deps "$sdist" \
    > "$smoke/sdist-no-go.log" 2>&1; then
  echo "the sdist installed without Go on PATH"; exit 1
fi
grep -q "needs Go on PATH" "$smoke/sdist-no-go.log" \
  || { cat "$smoke/sdist-no-go.log"; echo "no clear error without Go"; exit 1; }
"$venv/bin/python" -m pip install -q --no-build-isolation --no-deps "$sdist"
(cd "$smoke" && "$here/$venv/bin/python" "$here/wheels/smoke.py")

echo "== wheels: all checks passed in $((SECONDS - start)) s"
