"""Writes a wheel byte for byte the same every time from the same inputs.

Entries are sorted (the .dist-info last, RECORD at the very end, as the wheel
spec recommends), every entry has the same timestamp (SOURCE_DATE_EPOCH), the
same owner-less Unix mode (0644, or 0755 for the extension) and the same
compression level. The metadata is made from pyproject.toml, so the wheel
says what `pip wheel .` would say.
"""

from __future__ import annotations

import base64
import hashlib
import time
import tomllib
import zipfile
from pathlib import Path

ZIP_EPOCH_MIN = 315532800  # 1980-01-01: the earliest time a zip entry can hold


def metadata(root: Path) -> tuple[str, str, str]:
    """(distribution name for file names, version, METADATA text) from pyproject.toml."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    lines = [
        "Metadata-Version: 2.4",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
        f"Summary: {project['description']}",
        f"License-Expression: {project['license']}",
        *(f"License-File: {name}" for name in project.get("license-files", [])),
        *(f"Classifier: {c}" for c in project.get("classifiers", [])),
        f"Requires-Python: {project['requires-python']}",
        *(f"Requires-Dist: {d}" for d in project.get("dependencies", [])),
        "Description-Content-Type: text/markdown",
        "",
        (root / project["readme"]).read_text(),
    ]
    dist = project["name"].replace("-", "_")
    return dist, project["version"], "\n".join(lines)


# What the package holds besides the extension: sources and typing files.
PACKAGE_SUFFIXES = (".py", ".pyi", "py.typed")


def package_files(package: Path, extension: Path) -> dict[str, tuple[bytes, bool]]:
    """The Python package in `package` as installed, plus the compiled `extension`."""
    files = {
        f"pygrpc_native/{p.relative_to(package).as_posix()}": (p.read_bytes(), False)
        for p in sorted(package.rglob("*"))
        if p.is_file() and p.name.endswith(PACKAGE_SUFFIXES) and "__pycache__" not in p.parts
    }
    files["pygrpc_native/_native.abi3.so"] = (extension.read_bytes(), True)
    return files


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def write(out_dir: Path, root: Path, files: dict[str, tuple[bytes, bool]], tag: str,
          epoch: int) -> Path:
    """Writes `{dist}-{version}-{tag}.whl` with `files` ({archive name: (bytes, executable)})."""
    dist, version, meta = metadata(root)
    info = f"{dist}-{version}.dist-info"
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    wheel_meta = "\n".join([
        "Wheel-Version: 1.0",
        "Generator: pygrpc-native wheels/build.py",
        "Root-Is-Purelib: false",
        *(f"Tag: {t}" for t in _expand(tag)),
        "",
    ])
    entries = dict(sorted(files.items()))
    entries[f"{info}/METADATA"] = (meta.encode(), False)
    entries[f"{info}/WHEEL"] = (wheel_meta.encode(), False)
    for name in sorted(project.get("license-files", [])):
        entries[f"{info}/licenses/{name}"] = ((root / name).read_bytes(), False)
    record_name = f"{info}/RECORD"
    record = [_record_line(n, data) for n, (data, _) in entries.items()] + [f"{record_name},,"]
    entries[record_name] = (("\n".join(record) + "\n").encode(), False)

    when = time.gmtime(max(epoch, ZIP_EPOCH_MIN))[:6]
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, (data, executable) in entries.items():
            entry = zipfile.ZipInfo(name, date_time=when)
            entry.create_system = 3  # Unix, so the mode below is read
            entry.external_attr = (0o100755 if executable else 0o100644) << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(entry, data, compresslevel=9)
    return path


def _expand(tag: str) -> list[str]:
    """`cp310-abi3-a.b` -> the Tag lines `cp310-abi3-a` and `cp310-abi3-b`."""
    python, abi, platforms = tag.split("-")
    return [f"{python}-{abi}-{p}" for p in platforms.split(".")]
