"""Generated code for proto/*.proto, made at test time with grpcio-tools
into a temporary directory (no generated code is committed)."""

from __future__ import annotations

import importlib
import pathlib
import sys
import tempfile
from types import ModuleType
from typing import Dict, Tuple

PROTO_DIR = pathlib.Path(__file__).resolve().parents[2] / "proto"

_cache: Dict[str, Tuple[ModuleType, ModuleType]] = {}
_tmp = None


def generate(name: str) -> Tuple[ModuleType, ModuleType]:
    """(name_pb2, name_pb2_grpc) for proto/<name>.proto."""
    global _tmp
    if name in _cache:
        return _cache[name]
    from grpc_tools import protoc

    if _tmp is None:
        _tmp = tempfile.TemporaryDirectory(prefix="diffsuite_gen_")
    out = _tmp.name
    rc = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{PROTO_DIR}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            str(PROTO_DIR / f"{name}.proto"),
        ]
    )
    if rc != 0:
        raise RuntimeError(f"grpc_tools.protoc failed on proto/{name}.proto")
    sys.path.insert(0, out)
    try:
        pb2 = importlib.import_module(f"{name}_pb2")
        pb2_grpc = importlib.import_module(f"{name}_pb2_grpc")
    finally:
        sys.path.remove(out)
    _cache[name] = (pb2, pb2_grpc)
    return pb2, pb2_grpc
