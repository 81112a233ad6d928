"""The CPython headers the C shim compiles against, from a pinned source.

The host's Python headers are not used: they are whatever Python the builder
happens to have. The headers come from Debian's `libpython3.11-dev` for each
architecture (`apt-get download`, Debian's signed archive), and the extracted
files are checked against the hashes in toolchain.json: the generic headers
(the same for every architecture) and one `pyconfig.h` per architecture.
Hashing the files rather than the .deb keeps the pin valid when Debian
repackages the same headers in a security update.

Debian's own `pyconfig.h` is a dispatcher that only knows Linux, so each
target gets its own tree: the generic headers plus the architecture's real
`pyconfig.h` in its place. The macOS targets use the Linux `pyconfig.h` of the
same architecture; under Py_LIMITED_API the headers read from it only type
sizes and feature switches that are the same on both (LP64, 4-byte wchar_t),
and the wheel's Mach-O check (wheels/tests) proves the result links to the
C API only.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

PY = "python3.11"
TRIPLETS = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}


def tree_sha256(root: Path) -> str:
    """One hash over every file under `root`: sorted relative paths and contents."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        digest.update(f"{rel}\0{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    return digest.hexdigest()


def _apt_download(package: str, arch: str, into: Path) -> Path:
    """Fetches the .deb of `package` for `arch` (dpkg must know that architecture)."""
    try:
        subprocess.run(["apt-get", "-o", "APT::Sandbox::User=root", "download", f"{package}:{arch}"], cwd=into, check=True,
                       stdout=subprocess.DEVNULL)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise SystemExit(
            f"could not download {package}:{arch} with apt-get ({exc}); on Debian run "
            f"`dpkg --add-architecture {arch} && apt-get update` first (wheels/build.sh does)"
        ) from exc
    (deb,) = into.glob(f"{package}_*_{arch}.deb")
    return deb


def prepare(pins: dict, arch: str, out: Path) -> Path:
    """Makes `out/<arch>/python3.11` and returns the directory to pass to -I.

    A stamp of the pins it was made from lets later builds reuse it offline.
    """
    include = out / arch / PY
    stamp = out / arch / "pins"
    pinned = f"{pins['generic_tree_sha256']} {pins['pyconfig_sha256'][arch]}"
    if include.is_dir() and stamp.is_file() and stamp.read_text() == pinned:
        return include
    package = pins["debian_package"]
    with tempfile.TemporaryDirectory(prefix="pgn-headers-") as tmp:
        work = Path(tmp)
        deb = _apt_download(package, arch, work)
        subprocess.run(["dpkg-deb", "-x", str(deb), str(work / "root")], check=True)
        generic = work / "root/usr/include" / PY
        pyconfig = work / "root/usr/include" / TRIPLETS[arch] / PY / "pyconfig.h"
        _check(tree_sha256(generic), pins["generic_tree_sha256"], f"{deb.name}: generic headers")
        _check(_file_sha256(pyconfig), pins["pyconfig_sha256"][arch], f"{deb.name}: {TRIPLETS[arch]} pyconfig.h")
        if include.exists():
            shutil.rmtree(include)
        shutil.copytree(generic, include)
        shutil.copyfile(pyconfig, include / "pyconfig.h")
    stamp.write_text(pinned)
    return include


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _check(got: str, want: str, what: str) -> None:
    if got != want:
        raise SystemExit(
            f"{what} hash {got} is not the pinned {want}: the headers changed upstream. "
            "Review the difference, then update python_headers in wheels/toolchain.json"
        )
