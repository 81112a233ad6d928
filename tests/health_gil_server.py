"""A server whose handler holds the GIL, for tests/test_health_native.py.

Run as ``python health_gil_server.py KIND`` with KIND one of grpcio, native,
grpcio-aio, native-aio: it serves the health service (the servicer that
kind's users register) and ``/hold.Hold/Hold``, whose handler prints
``holding``, then runs one regular-expression match that holds the GIL (the
``re`` engine never releases it) for about HOLD_SECONDS, then prints
``held SECONDS``. It prints ``port N`` once serving, and stops when its stdin
closes. It runs in a process of its own so that the test's clients don't
need the GIL it holds.
"""

import asyncio
import math
import re
import sys
import time
from concurrent import futures

import grpc
import grpc.aio
from grpc_health.v1 import health as reference
from grpc_health.v1 import health_pb2_grpc

import pygrpc_native
import pygrpc_native.aio
import pygrpc_native.health

HOLD_SECONDS = 3.0

# Matching this against "x" * n backtracks through ~2**n ways to split the
# x's before failing, all inside one C call.
_PATTERN = re.compile(r"(x+x+)+y")


def _match_seconds(n: int) -> float:
    start = time.perf_counter()
    _PATTERN.fullmatch("x" * n)
    return time.perf_counter() - start


def _calibrate(target: float) -> int:
    """A length whose match takes about target seconds or more. Each extra
    character about doubles the time; the fastest of a few runs is the
    machine's speed, the others being slowed down by whatever else runs."""
    n = 12
    while (took := min(_match_seconds(n) for _ in range(3))) < 0.05:
        n += 1
    return n + max(0, math.ceil(math.log2(target / took)))


def _hold(n: int) -> bytes:
    print("holding", flush=True)
    start = time.perf_counter()
    _PATTERN.fullmatch("x" * n)
    print(f"held {time.perf_counter() - start:.3f}", flush=True)
    return b"held"


def main(kind: str) -> None:
    n = _calibrate(HOLD_SECONDS)
    native = kind.startswith("native")
    if native:
        servicer = pygrpc_native.health.HealthServicer()
    else:
        servicer = reference.aio.HealthServicer() if kind.endswith("aio") else reference.HealthServicer()
    if kind.endswith("aio"):
        asyncio.run(_serve_aio(native, servicer, n))
        return
    server = (pygrpc_native.server if native else grpc.server)(futures.ThreadPoolExecutor(4))
    handler = grpc.unary_unary_rpc_method_handler(lambda request, context: _hold(n))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("hold.Hold", {"Hold": handler}),))
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"port {port}", flush=True)
    sys.stdin.read()
    server.stop(0).wait(5)


async def _serve_aio(native: bool, servicer, n: int) -> None:
    async def hold(request, context):
        return _hold(n)

    server = (pygrpc_native.aio.server if native else grpc.aio.server)()
    handler = grpc.unary_unary_rpc_method_handler(hold)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("hold.Hold", {"Hold": handler}),))
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"port {port}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await server.stop(0)


if __name__ == "__main__":
    main(sys.argv[1])
