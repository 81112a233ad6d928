"""pygrpc_native.aio: a drop-in for grpc.aio.server(), handlers on your event loop."""

from ._server import server

__all__ = ["server"]
