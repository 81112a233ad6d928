"""pygrpc_native: a gRPC server for Python whose HTTP/2 and gRPC work runs in Go.

``server()`` is a drop-in for ``grpc.server()``; the low-level API under it
is :class:`NativeGrpcFront` (docs/low-level-api.md).
"""

import logging as _logging
import typing as _typing

from ._credentials import ServerCredentials, ssl_server_credentials, ssl_server_credentials_from_files
from ._errors import SendLimitError
from ._events import (
    EVENT_CALL,
    EVENT_CANCEL,
    EVENT_HALF_CLOSE,
    EVENT_LOOKUP,
    EVENT_MESSAGE,
    EVENT_ROOM,
    FALLBACK,
    Event,
)
from ._server import server

if _typing.TYPE_CHECKING:
    from . import aio as aio
    from ._front import NativeGrpcFront

# As grpcio does for its "grpc" logger: handler errors are logged, but an
# application that configures no logging sees nothing on stderr.
_logging.getLogger(__name__).addHandler(_logging.NullHandler())

__all__ = [
    "EVENT_CALL",
    "EVENT_CANCEL",
    "EVENT_HALF_CLOSE",
    "EVENT_LOOKUP",
    "EVENT_MESSAGE",
    "EVENT_ROOM",
    "FALLBACK",
    "Event",
    "NativeGrpcFront",
    "SendLimitError",
    "ServerCredentials",
    "server",
    "ssl_server_credentials",
    "ssl_server_credentials_from_files",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> _typing.Any:
    # NativeGrpcFront is loaded with the compiled core, whose Go runtime
    # starts as it loads: importing the package doesn't start it, so that a
    # process may import pygrpc_native, fork, and serve in the children
    # (README: fork). server() and aio.server() load it as they are called.
    if name == "NativeGrpcFront":
        from ._front import NativeGrpcFront

        return NativeGrpcFront
    if name == "aio":
        # pygrpc_native.aio.server() after a plain `import pygrpc_native`, as
        # grpc.aio.server() after `import grpc`; imported on first use, which
        # binds it to the package (this isn't asked again).
        import importlib

        return importlib.import_module(".aio", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> _typing.List[str]:
    return sorted({*globals(), *__all__, "aio"})
