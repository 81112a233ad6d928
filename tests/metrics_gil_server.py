"""A server whose handler holds the GIL, for tests/test_metrics_prometheus.py.

Run as ``python metrics_gil_server.py KIND METRICS_PORT`` with KIND native or
native-aio: it serves ``/hold.Hold/Hold`` (registered), whose handler holds
the GIL as tests/health_gil_server.py's does (printing ``holding``, then
``held SECONDS``), with the Prometheus endpoint on 127.0.0.1:METRICS_PORT.
It prints ``port N`` once serving, and stops when its stdin closes.
"""

import asyncio
import sys
from concurrent import futures

import grpc
from health_gil_server import HOLD_SECONDS, _calibrate, _hold

import pygrpc_native
import pygrpc_native.aio


def main(kind: str, metrics_port: str) -> None:
    n = _calibrate(HOLD_SECONDS)
    options = [("grpc.pygrpc_native.metrics_address", f"127.0.0.1:{metrics_port}")]
    if kind == "native-aio":
        asyncio.run(_serve_aio(options, n))
        return
    server = pygrpc_native.server(futures.ThreadPoolExecutor(4), options=options)
    server.add_registered_method_handlers(
        "hold.Hold", {"Hold": grpc.unary_unary_rpc_method_handler(lambda request, context: _hold(n))}
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"port {port}", flush=True)
    sys.stdin.read()
    server.stop(0).wait(5)


async def _serve_aio(options, n: int) -> None:
    async def hold(request, context):
        return _hold(n)

    server = pygrpc_native.aio.server(options=options)
    server.add_registered_method_handlers("hold.Hold", {"Hold": grpc.unary_unary_rpc_method_handler(hold)})
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"port {port}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await server.stop(0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
