"""The loggers grpcio's servers write under, for the same events.

What a handler does wrong (an exception, a failing serializer or callback,
abort() with OK) is logged where grpcio logs it, with grpcio's words, so
that logging set up for grpcio (levels, filters, handlers on ``grpc``)
applies unchanged after the switch. The server's own troubles stay under
``pygrpc_native``.
"""

import logging

# grpc.server(): its handler and callback failures.
SERVER_LOG = logging.getLogger("grpc._server")
# grpc.server(): serializers and deserializers that fail.
COMMON_LOG = logging.getLogger("grpc._common")
# grpc.aio.server(): its handler and callback failures.
AIO_LOG = logging.getLogger("grpc._cython.cygrpc")
