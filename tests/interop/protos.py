"""Compiles proto/grpc/testing/*.proto with grpcio-tools and imports the result.

The protos import each other as "grpc/testing/....proto", the standard
layout, so protoc writes modules that import ``grpc.testing.*_pb2``. That
name belongs to grpcio's ``grpc`` package, so the generated modules are put
in a package of their own, ``interop_pb``, with those imports rewritten.
Nothing generated is committed: it goes to a directory of the caller's
choosing (a temporary one by default).
"""

from __future__ import annotations

import importlib
import pathlib
import sys
import tempfile
import types
from typing import Optional

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROTO_DIR = ROOT / "proto"
FILES = ("empty", "messages", "test")
PACKAGE = "interop_pb"


def generate(out_dir: pathlib.Path) -> pathlib.Path:
    """Writes the ``interop_pb`` package under out_dir; returns out_dir."""
    from grpc_tools import protoc  # grpcio-tools

    out_dir = pathlib.Path(out_dir)
    raw = out_dir / "_protoc"
    raw.mkdir(parents=True, exist_ok=True)
    args = ["grpc_tools.protoc", f"-I{PROTO_DIR}", f"--python_out={raw}", f"--grpc_python_out={raw}"]
    args += [str(PROTO_DIR / "grpc" / "testing" / f"{name}.proto") for name in FILES]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed on proto/grpc/testing/*.proto")
    pkg = out_dir / PACKAGE
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text('"""Generated from proto/grpc/testing by tests/interop/protos.py."""\n')
    for src in sorted((raw / "grpc" / "testing").glob("*.py")):
        text = src.read_text().replace("from grpc.testing import ", f"from {PACKAGE} import ")
        (pkg / src.name).write_text(text)
    return out_dir


def load(out_dir: Optional[pathlib.Path] = None) -> types.SimpleNamespace:
    """Imports the generated modules (generating them first unless out_dir
    already holds them). Returns a namespace with empty_pb2, messages_pb2,
    test_pb2 and test_pb2_grpc."""
    if out_dir is None:
        out_dir = pathlib.Path(tempfile.mkdtemp(prefix="interop_pb_"))
    out_dir = pathlib.Path(out_dir)
    if not (out_dir / PACKAGE / "test_pb2_grpc.py").exists():
        generate(out_dir)
    if str(out_dir) not in sys.path:
        sys.path.insert(0, str(out_dir))
    mods = {name: importlib.import_module(f"{PACKAGE}.{name}") for name in
            ("empty_pb2", "messages_pb2", "test_pb2", "test_pb2_grpc")}
    return types.SimpleNamespace(**mods)
