"""Writes the text-based stubs (.tbd) that the macOS wheels link against.

There is no macOS SDK on the Linux machine that builds the wheels. zig ships
libSystem's stub; the Go core also calls CoreFoundation and Security
(crypto/x509 verifies certificates through them) and libresolv (the DNS
resolver). A stub only names a library's install path and the symbols it
exports, which is all a linker needs to record the dependency: the real
library is the one on the user's Mac, found by install path at load time.

The symbols come from `symbols.txt` beside this script: one library per
section, `[install-name]` then one symbol a line. Regenerate that list from a
wheel built with the stubs missing (`--from DYLIB`): every undefined symbol
that is neither the Python C API nor in zig's libSystem.tbd is assigned to a
library by its prefix.

Usage:
    python wheels/macos/make_stubs.py [--from DYLIB --libsystem TBD]
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
SYMBOLS = HERE / "symbols.txt"
SDK = HERE / "sdk"
TARGETS = "[ x86_64-macos, arm64-macos ]"

# Where each stub lives under sdk/ (the linker's -F / -L paths) and which
# symbol prefixes belong to it when the list is regenerated from a dylib.
LIBRARIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "/System/Library/Frameworks/CoreFoundation.framework/Versions/A/CoreFoundation": (
        "Frameworks/CoreFoundation.framework/CoreFoundation.tbd", ("_CF",)),
    "/System/Library/Frameworks/Security.framework/Versions/A/Security": (
        "Frameworks/Security.framework/Security.tbd", ("_Sec",)),
    "/usr/lib/libresolv.9.dylib": ("lib/libresolv.tbd", ("_res_9_",)),
}


def read_symbols(path: Path) -> dict[str, list[str]]:
    """Parses symbols.txt into {install-name: sorted symbols}."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            name = line[1:-1]
            if name not in LIBRARIES:
                raise SystemExit(f"{path}: unknown library {name!r}; add it to LIBRARIES in {__file__}")
            current = sections.setdefault(name, [])
        elif current is None:
            raise SystemExit(f"{path}: symbol {line!r} before any [library] header")
        else:
            current.append(line)
    return {name: sorted(set(syms)) for name, syms in sections.items()}


def tbd_text(install_name: str, symbols: list[str]) -> str:
    """A tbd-version 4 stub exporting `symbols` for both macOS architectures."""
    lines = [
        "--- !tapi-tbd",
        "tbd-version:     4",
        f"targets:         {TARGETS}",
        f"install-name:    '{install_name}'",
        "exports:",
        f"  - targets:         {TARGETS}",
        "    symbols:         [ " + ",\n                       ".join(symbols) + " ]",
        "...",
        "",
    ]
    return "\n".join(lines)


def write_stubs(sections: dict[str, list[str]]) -> None:
    for install_name, (rel, _) in LIBRARIES.items():
        out = SDK / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(tbd_text(install_name, sections.get(install_name, [])))


def libsystem_exports(tbd: Path) -> set[str]:
    return set(re.findall(r"\b_[A-Za-z0-9_$]+", tbd.read_text()))


def needed_symbols(dylib: Path, libsystem: Path) -> dict[str, list[str]]:
    """Undefined non-Python symbols of `dylib` missing from libSystem, by library."""
    import lief  # only this mode needs it

    binary = lief.parse(str(dylib))
    have = libsystem_exports(libsystem)
    sections: dict[str, list[str]] = {name: [] for name in LIBRARIES}
    for sym in binary.symbols:
        name = sym.name
        if not sym.is_external or sym.has_export_info or name in have:
            continue
        if name.startswith(("_Py", "__Py")) or name == "dyld_stub_binder":
            continue
        owner = next((lib for lib, (_, prefixes) in LIBRARIES.items() if name.startswith(prefixes)), None)
        if owner is None:
            raise SystemExit(f"{dylib}: no library known for {name}; add its prefix to LIBRARIES")
        sections[owner].append(name)
    return {name: sorted(set(syms)) for name, syms in sections.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from", dest="dylib", type=Path, help="regenerate symbols.txt from this Mach-O")
    parser.add_argument("--libsystem", type=Path, help="zig's lib/libc/darwin/libSystem.tbd (with --from)")
    args = parser.parse_args()
    if args.dylib:
        if not args.libsystem:
            parser.error("--from needs --libsystem")
        sections = needed_symbols(args.dylib, args.libsystem)
        body = ["# Symbols the Go core needs beyond libSystem, by library (make_stubs.py --from).", ""]
        for install_name, syms in sections.items():
            body += [f"[{install_name}]", *syms, ""]
        SYMBOLS.write_text("\n".join(body))
    write_stubs(read_symbols(SYMBOLS))


if __name__ == "__main__":
    main()
