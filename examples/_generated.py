"""Generates the example's gRPC code from proto/echo.proto at run time, so
that no generated code is committed. Needs grpcio-tools."""

import importlib
import pathlib
import sys
import tempfile
from types import ModuleType

_PROTO_DIR = pathlib.Path(__file__).resolve().parent.parent / "proto"


def load_echo() -> tuple[ModuleType, ModuleType]:
    """Returns the (echo_pb2, echo_pb2_grpc) modules.

    Type checkers see them as plain modules (their attributes are Any): the
    code exists only once this runs.

    The code is generated into a temporary directory that is removed once the
    modules are imported: they live in sys.modules from then on.
    """
    protoc = importlib.import_module("grpc_tools.protoc")

    with tempfile.TemporaryDirectory(prefix="pygrpc-native-example-") as out:
        status = protoc.main(
            ["protoc", f"-I{_PROTO_DIR}", f"--python_out={out}", f"--grpc_python_out={out}", str(_PROTO_DIR / "echo.proto")]
        )
        if status != 0:
            raise RuntimeError("grpc_tools.protoc failed on proto/echo.proto")
        sys.path.insert(0, out)
        try:
            return importlib.import_module("echo_pb2"), importlib.import_module("echo_pb2_grpc")
        finally:
            sys.path.remove(out)
