"""A server with one client-streaming method, in a process of its own so
that a test can read its resident memory (test_stream_memory.py).

    python stream_memory_server.py KIND

KIND is ``grpc`` (grpc.server()), ``native`` (pygrpc_native.server()),
``grpc_aio`` (grpc.aio.server()) or ``native_aio``
(pygrpc_native.aio.server()). It prints ``PORT <n>`` once serving, and
stops when its stdin closes.

``/mem.M/Collect`` sleeps for the seconds in the request metadata
``x-sleep`` (0 without it) before it reads a single message, then reads
them all and answers b"<count> <bytes>".
"""

import asyncio
import sys
import threading
import time
from concurrent import futures

import grpc

PATH_SERVICE, PATH_METHOD = "mem.M", "Collect"


def _sleep_seconds(context):
    return float(dict(context.invocation_metadata()).get("x-sleep", "0"))


def collect(requests, context):
    time.sleep(_sleep_seconds(context))
    count = size = 0
    for r in requests:
        count += 1
        size += len(r)
    return b"%d %d" % (count, size)


async def collect_async(requests, context):
    await asyncio.sleep(_sleep_seconds(context))
    count = size = 0
    async for r in requests:
        count += 1
        size += len(r)
    return b"%d %d" % (count, size)


def _handlers(fn):
    handler = grpc.stream_unary_rpc_method_handler(fn)
    return (grpc.method_handlers_generic_handler(PATH_SERVICE, {PATH_METHOD: handler}),)


def _wait_for_stdin_to_close():
    sys.stdin.read()


def serve_sync(kind):
    if kind == "native":
        import pygrpc_native

        server = pygrpc_native.server(futures.ThreadPoolExecutor(4))
    else:
        server = grpc.server(futures.ThreadPoolExecutor(4))
    server.add_generic_rpc_handlers(_handlers(collect))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"PORT {port}", flush=True)
    _wait_for_stdin_to_close()
    server.stop(0).wait(5)


async def serve_aio(kind):
    if kind == "native_aio":
        import pygrpc_native.aio

        server = pygrpc_native.aio.server()
    else:
        server = grpc.aio.server()
    server.add_generic_rpc_handlers(_handlers(collect_async))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"PORT {port}", flush=True)
    closed = asyncio.Event()
    loop = asyncio.get_running_loop()
    threading.Thread(target=lambda: (_wait_for_stdin_to_close(), loop.call_soon_threadsafe(closed.set)), daemon=True).start()
    await closed.wait()
    await server.stop(0)


if __name__ == "__main__":
    which = sys.argv[1]
    if which in ("grpc", "native"):
        serve_sync(which)
    elif which in ("grpc_aio", "native_aio"):
        asyncio.run(serve_aio(which))
    else:
        raise SystemExit(f"unknown kind {which!r}: grpc, native, grpc_aio or native_aio")
