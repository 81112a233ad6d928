"""Builds the extension: the Go core as a c-archive, linked into the C shim.

Everything else about the package is in pyproject.toml. This is the build of
`pip install .` and of the sdist; release wheels are built by wheels/build.sh.
It needs Go (1.21 or later; go.mod names the release, which Go fetches itself
if it is older) and a C compiler; Go modules come from the Go module proxy.
The output is reproducible: -trimpath, no build id, no VCS stamp, no
timestamps.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent

# The Go runtime settings the library is built with (go/front/front.go,
# streamWorkers, says why); the Bazel graph sets the same (go/capi/BUILD.bazel).
GODEBUG = "gcshrinkstackoff=1"


NO_WHEEL = (
    "pygrpc-native: no prebuilt wheel matches this platform, so pip is building it from source, "
    "which needs {what}. Prebuilt wheels cover CPython 3.10+ on Linux (glibc 2.17+ or musl 1.2+, "
    "x86_64/aarch64) and macOS 12+ (x86_64/arm64)."
)


def _c_compiler(command: list[str]) -> str | None:
    """The path of the compiler setuptools will run, or None when it isn't installed."""
    return shutil.which(command[0]) if command else None


class BuildGoExtension(build_ext):
    """Runs `go build -buildmode=c-archive` before compiling the C shim."""

    def build_extension(self, ext: Extension) -> None:
        go = shutil.which("go")
        if go is None:
            sys.exit(NO_WHEEL.format(what="Go on PATH: install Go 1.21 or later from https://go.dev/dl/ "
                                          "or your package manager (e.g. apt install golang-go), then retry"))
        compiler = getattr(self.compiler, "compiler_so", None) or []
        if compiler and _c_compiler(compiler) is None:
            sys.exit(NO_WHEEL.format(what=f"a C compiler ({compiler[0]!r} was not found): install one "
                                          "(e.g. apt install gcc, apk add build-base, xcode-select --install), "
                                          "or set CC, then retry"))
        out_dir = Path(self.build_temp).resolve() / "go"
        out_dir.mkdir(parents=True, exist_ok=True)
        archive = out_dir / "libpgn.a"
        env = dict(os.environ, CGO_ENABLED="1")
        try:
            subprocess.run(
                [go, "build", "-buildmode=c-archive", "-trimpath", "-buildvcs=false",
                 f"-ldflags=-s -w -buildid= -X=runtime.godebugDefault={GODEBUG}", "-o", str(archive), "./go/capi"],
                cwd=ROOT, env=env, check=True,
            )
        except subprocess.CalledProcessError as exc:
            sys.exit(f"pygrpc-native: `go build` of the Go core failed (exit {exc.returncode}; its output is "
                     "above). It needs a C compiler for cgo and the Go release in go.mod, which Go 1.21+ "
                     "fetches itself from the Go module proxy unless GOTOOLCHAIN=local.")
        ext.include_dirs = [str(out_dir), str(ROOT / "go" / "capi")]
        ext.extra_objects = [str(archive)]
        # Relink when the Go archive changed, not only when _native.c did.
        ext.depends = [*ext.depends, str(archive)]
        if sys.platform == "darwin":
            ext.extra_link_args = ["-framework", "CoreFoundation", "-framework", "Security"]
        else:
            # Keep the Go archive's symbols private to the extension.
            ext.extra_link_args = ["-Wl,--exclude-libs,ALL"]
        super().build_extension(ext)


setup(
    ext_modules=[
        Extension(
            "pygrpc_native._native",
            sources=["python/pygrpc_native/_native.c"],
            define_macros=[("Py_LIMITED_API", "0x030A0000")],
            libraries=["pthread"],
            py_limited_api=True,
        )
    ],
    cmdclass={"build_ext": BuildGoExtension},
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
