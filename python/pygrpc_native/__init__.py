"""pygrpc_native: a gRPC server for Python whose HTTP/2 and gRPC work runs in Go.

The low-level API is :class:`NativeGrpcFront` (docs/low-level-api.md).
"""

from ._front import EVENT_CALL, EVENT_CANCEL, EVENT_LOOKUP, Event, NativeGrpcFront

__all__ = ["EVENT_CALL", "EVENT_CANCEL", "EVENT_LOOKUP", "Event", "NativeGrpcFront"]
__version__ = "0.1.0"
