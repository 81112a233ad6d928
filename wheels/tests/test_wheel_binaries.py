"""Inspects the extension inside every built wheel, without running it.

The macOS wheels can't be run here (no Mac is reachable), so this is what
vouches for them: the right architecture and minimum macOS (the tag's),
PyInit__native exported, and every imported symbol either the Python C API
(looked up in the loading interpreter) or bound to one of the system
libraries the wheel declares. The Linux wheels get the same symbol check on
ELF: glibc symbols no newer than 2.17, musl symbols in musl's export list
(auditwheel and the smoke runs cover the rest). No wheel may carry a path
of the machine that built it.

Reads the wheels in PGN_WHEEL_DIR (default dist/), which wheels/check.sh
fills first; no wheel there is a failure, not a skip. PGN_WHEEL_DIR may name
several folders (separated by os.pathsep) and PGN_WHEEL_TARGETS may narrow
the targets checked (comma-separated names of wheels/toolchain.json): the
Bazel test //wheels/tests:inspection_test checks the wheels of //wheels
that way.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import zipfile
from pathlib import Path

import lief
import pytest

lief.logging.disable()

ROOT = Path(__file__).resolve().parents[2]
WHEEL_DIRS = [Path(d) for d in os.environ.get("PGN_WHEEL_DIR", str(ROOT / "dist")).split(os.pathsep)]
TARGETS = json.loads((ROOT / "wheels" / "toolchain.json").read_text())["targets"]
if os.environ.get("PGN_WHEEL_TARGETS"):
    TARGETS = {name: TARGETS[name] for name in os.environ["PGN_WHEEL_TARGETS"].split(",")}
EXTENSION = "pygrpc_native/_native.abi3.so"

MACOS_LIBRARIES = {
    "/usr/lib/libSystem.B.dylib",
    "/usr/lib/libresolv.9.dylib",
    "/System/Library/Frameworks/CoreFoundation.framework/Versions/A/CoreFoundation",
    "/System/Library/Frameworks/Security.framework/Versions/A/Security",
}
GLIBC_LIBRARIES = {"libc.so.6", "libpthread.so.0", "libresolv.so.2"}
MACHO_CPU = {"x86_64": lief.MachO.Header.CPU_TYPE.X86_64, "arm64": lief.MachO.Header.CPU_TYPE.ARM64}
ELF_MACHINE = {"x86_64": lief.ELF.ARCH.X86_64, "aarch64": lief.ELF.ARCH.AARCH64}
FLAT_LOOKUP = -2  # BIND_SPECIAL_DYLIB_FLAT_LOOKUP: resolved in whatever loaded us


def _is_c_api(c_name: str) -> bool:
    """Py... and _Py...: the names the C API exports (C names, no Mach-O underscore)."""
    return c_name.startswith(("Py", "_Py"))


def _arch(platform_tag: str) -> str:
    return "x86_64" if platform_tag.endswith("x86_64") else platform_tag.rsplit("_", 1)[-1]


def _wheel(platform_tag: str) -> Path:
    found = sorted(w for d in WHEEL_DIRS for w in d.glob(f"pygrpc_native-*-cp310-abi3-{platform_tag}.whl"))
    assert found, f"no {platform_tag} wheel in {os.pathsep.join(map(str, WHEEL_DIRS))}: run bash wheels/build.sh first"
    return found[-1]


def _extension(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert "pygrpc_native/_native.c" not in names, "the wheel ships the C source"
        return zf.read(EXTENSION)


def _build_paths() -> list[bytes]:
    """Paths of this machine that a careless build embeds: checkout, Go, caches."""
    paths = {str(ROOT), str(Path.home())}
    for var in ("GOROOT", "GOMODCACHE", "GOCACHE"):
        try:
            out = subprocess.run(["go", "env", var], capture_output=True, text=True)
        except FileNotFoundError:  # no go on PATH (a Bazel test): nothing of it to embed
            break
        if out.returncode == 0 and out.stdout.strip():
            paths.add(out.stdout.strip())
    return sorted(p.rstrip("/").encode() + b"/" for p in paths if len(p) > 1)


def _musl_exports() -> set[str]:
    """Every symbol musl's libc.so exports: zig's stub of it (lib/libc/musl/libc.S)."""
    import ziglang  # only the musllinux checks need zig (Bazel builds no musllinux wheel)

    stub = Path(ziglang.__file__).parent / "lib" / "libc" / "musl" / "libc.S"
    return set(re.findall(r"^([A-Za-z_][A-Za-z0-9_]*):$", stub.read_text(), re.MULTILINE))


def _targets(goos: str) -> list[str]:
    return sorted(name for name, t in TARGETS.items() if t["goos"] == goos)


@pytest.mark.parametrize("name", _targets("darwin"))
def test_macos_extension(name: str) -> None:
    tag = TARGETS[name]["platform_tag"]
    binary = lief.MachO.parse(list(_extension(_wheel(tag)))).at(0)
    major, minor = re.match(r"macosx_(\d+)_(\d+)_", tag).groups()

    assert binary.header.cpu_type == MACHO_CPU[_arch(tag)]
    assert binary.build_version.platform == lief.MachO.BuildVersion.PLATFORMS.MACOS
    assert binary.build_version.minos[:2] == [int(major), int(minor)], "minos must match the wheel tag"
    assert "_PyInit__native" in {s.name for s in binary.exported_symbols}
    if _arch(tag) == "arm64":
        # Apple silicon runs no unsigned code: the linker's ad-hoc signature must be there.
        assert binary.has_code_signature, "arm64 extension without a code signature"

    load = lief.MachO.LoadCommand.TYPE.LOAD_DYLIB
    libraries = {lib.name for lib in binary.libraries if lib.command == load}
    (own_id,) = [lib.name for lib in binary.libraries if lib.command == lief.MachO.LoadCommand.TYPE.ID_DYLIB]
    assert own_id == "@rpath/_native.abi3.so", f"install name {own_id!r}"
    assert libraries <= MACOS_LIBRARIES, f"unexpected libraries: {libraries - MACOS_LIBRARIES}"
    assert not binary.has_rpath
    for binding in binary.bindings:
        symbol = binding.symbol.name
        if binding.has_library:
            assert binding.library.name in libraries, f"{symbol} bound to {binding.library.name}"
        else:
            assert binding.library_ordinal == FLAT_LOOKUP and _is_c_api(symbol[1:]), \
                f"{symbol} is neither the Python C API nor bound to a system library"


@pytest.mark.parametrize("name", _targets("linux"))
def test_linux_extension(name: str) -> None:
    tag = TARGETS[name]["platform_tag"]
    binary = lief.ELF.parse(list(_extension(_wheel(tag))))
    assert binary.header.machine_type == ELF_MACHINE[_arch(tag)]
    if tag.startswith("musllinux"):
        allowed = {f"libc.musl-{_arch(tag)}.so.1"}
    else:
        allowed = GLIBC_LIBRARIES
    assert set(binary.libraries) <= allowed, f"unexpected libraries: {set(binary.libraries) - allowed}"
    exported = {s.name for s in binary.dynamic_symbols if s.is_function and s.shndx != 0}
    exported |= {s.name for s in binary.dynamic_symbols if s.is_variable and s.shndx != 0}
    assert exported == {"PyInit__native"}, f"exports beyond PyInit__native: {sorted(exported)[:10]}"
    musl = _musl_exports() if tag.startswith("musllinux") else set()
    for symbol in binary.dynamic_symbols:
        if symbol.shndx != 0 or not symbol.name:
            continue
        if _is_c_api(symbol.name):
            assert not symbol.has_version or symbol.symbol_version.value in (0, 1), \
                f"{symbol.name} is versioned: it comes from a library, not the interpreter"
        elif tag.startswith("manylinux"):
            version = symbol.symbol_version
            assert symbol.has_version and version.has_auxiliary_version, \
                f"{symbol.name} is unversioned: not from glibc"
            glibc = version.symbol_version_auxiliary.name
            assert glibc.startswith("GLIBC_") and _version(glibc) <= (2, 17), f"{symbol.name}@{glibc}"
        else:
            assert symbol.name in musl, f"{symbol.name} is neither the Python C API nor in musl's libc"
    assert not binary.has(lief.ELF.DynamicEntry.TAG.RPATH)
    assert not binary.has(lief.ELF.DynamicEntry.TAG.RUNPATH)


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_no_build_paths(name: str) -> None:
    data = _extension(_wheel(TARGETS[name]["platform_tag"]))
    for path in _build_paths():
        assert path not in data, f"the extension embeds the build path {path.decode()}"


def _version(glibc: str) -> tuple[int, ...]:
    return tuple(int(part) for part in glibc.removeprefix("GLIBC_").split("."))
