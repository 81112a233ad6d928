"""A countdown service on pygrpc_native.aio.server(): asyncio handlers, with
the HTTP/2 and gRPC work done in Go.

    bazel run //services/countdown:server -- --port 50052

countdown.Countdown/Count takes a number N (ASCII digits, raw bytes: no
protobuf, to keep the example small) and streams b"N", b"N-1", ..., b"1".
"""

import argparse
import asyncio
from collections.abc import AsyncIterator

import grpc

import pygrpc_native.aio

SERVICE = "countdown.Countdown"
# Longer counts are refused: a client can't make the server stream forever.
MAX_COUNT = 1000


async def count(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> AsyncIterator[bytes]:
    try:
        n = int(request)
    except ValueError:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"not a number: {request!r}")
    if not 1 <= n <= MAX_COUNT:
        await context.abort(grpc.StatusCode.OUT_OF_RANGE, f"count must be 1..{MAX_COUNT}, got {n}")
    for i in range(n, 0, -1):
        yield str(i).encode()


async def start_server(address: str = "127.0.0.1:0") -> tuple[grpc.aio.Server, int]:
    """Returns (started server, bound port), serving on the running loop."""
    server = pygrpc_native.aio.server()
    handler = grpc.method_handlers_generic_handler(
        SERVICE, {"Count": grpc.unary_stream_rpc_method_handler(count)}
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port(address)
    await server.start()
    return server, port


async def serve(port: int) -> None:
    server, port = await start_server(f"127.0.0.1:{port}")
    print(f"countdown serving on 127.0.0.1:{port}", flush=True)
    await server.wait_for_termination()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=50052)
    try:
        asyncio.run(serve(p.parse_args().port))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
