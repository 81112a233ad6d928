"""grpc-status-details-bin cases shared by the sync and aio status suites.

grpcio sends grpc-status-details-bin exactly as the handler set it: with any
code, without details, not matching the call's status, even bytes that are
no google.rpc.Status; checking it is the client's business (grpcio-status's
``rpc_status.from_call()``), not the server's.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

import grpc
import pytest

DETAILS_KEY = "grpc-status-details-bin"

SC = grpc.StatusCode


def status_bytes(code: int, message: str, with_detail: bool = False) -> bytes:
    """A serialized google.rpc.Status (the test is skipped without
    googleapis-common-protos)."""
    status_pb2 = pytest.importorskip("google.rpc.status_pb2")
    from google.protobuf import any_pb2

    details = [any_pb2.Any(type_url="type.googleapis.com/x.Y", value=b"\x01")] if with_detail else []
    return status_pb2.Status(code=code, message=message, details=details).SerializeToString()


Case = Tuple[Tuple[Tuple[str, bytes], ...], Optional[grpc.StatusCode], Optional[str]]

# name: () -> (trailing metadata, code the handler sets, details it sets)
CASES: Dict[str, Callable[[], Case]] = {
    "status-without-details": lambda: (((DETAILS_KEY, status_bytes(3, "bad")),), SC.INVALID_ARGUMENT, "bad"),
    "other-code-and-message": lambda: (((DETAILS_KEY, status_bytes(3, "bad", True)),), SC.NOT_FOUND, "other"),
    "not-a-status": lambda: (((DETAILS_KEY, b"\xff\x00not a status"),), SC.NOT_FOUND, "x"),
    "two-values": lambda: (((DETAILS_KEY, status_bytes(3, "a")), (DETAILS_KEY, b"b")), SC.NOT_FOUND, "x"),
    "with-ok": lambda: (((DETAILS_KEY, status_bytes(3, "bad", True)),), None, None),
}


def from_call_outcome(rpc_status: Any, err: grpc.RpcError) -> Any:
    """rpc_status.from_call(err), or the ValueError it raises as text."""
    try:
        return rpc_status.from_call(err)
    except ValueError as exc:
        return f"ValueError: {exc}"
