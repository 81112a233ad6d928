"""Builds the extension: the Go core as a c-archive, linked into the C shim.

Everything else about the package is in pyproject.toml. The build needs Go
(see go.mod for the version) and a C compiler; Go modules come from the Go
module proxy. The output is reproducible: -trimpath, no build id, no VCS
stamp, no timestamps.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class BuildGoExtension(build_ext):
    """Runs `go build -buildmode=c-archive` before compiling the C shim."""

    def build_extension(self, ext: Extension) -> None:
        go = shutil.which("go")
        if go is None:
            sys.exit("pygrpc-native: building from source needs the Go toolchain on PATH (https://go.dev/dl/)")
        out_dir = Path(self.build_temp).resolve() / "go"
        out_dir.mkdir(parents=True, exist_ok=True)
        archive = out_dir / "libpgn.a"
        env = dict(os.environ, CGO_ENABLED="1")
        subprocess.run(
            [go, "build", "-buildmode=c-archive", "-trimpath", "-buildvcs=false",
             "-ldflags=-buildid=", "-o", str(archive), "./go/capi"],
            cwd=ROOT, env=env, check=True,
        )
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
