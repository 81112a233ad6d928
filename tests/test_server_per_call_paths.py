"""Paths that only an interceptor answers, call by call (an auth check
denying any path, a catch-all): however many distinct ones clients call,
the server learns a bounded number of them (_core._PER_CALL_PATHS); the
rest are routed to a method shared by their kinds, and each call still
runs with its own path. Before, every distinct path stayed registered for
good, in Go's method table (copied on every add) and Python's: a client
calling random paths grew the server by one method each."""

import asyncio
import gc
import logging
from concurrent import futures

import grpc
import grpc.aio
import pytest

import pygrpc_native
import pygrpc_native.aio
from pygrpc_native import _calls, _core

pytestmark = pytest.mark.timeout(60)

CAP = 3
PATHS = [f"/any.Svc{i}/M" for i in range(CAP + 5)]


@pytest.fixture(autouse=True)
def small_cap(monkeypatch):
    monkeypatch.setattr(_core, "_PER_CALL_PATHS", CAP, raising=False)


def _methods_alive():
    return sum(1 for o in gc.get_objects() if type(o) is _calls.Method)


def _call_every_path(port):
    """Each path twice, then a failing one past the cap: (answers, code)."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        answers = [channel.unary_unary(path)(b"", timeout=5) for path in PATHS + PATHS]
        try:
            channel.unary_unary("/any.Fail/M")(b"", timeout=5)
            code = grpc.StatusCode.OK
        except grpc.RpcError as err:
            code = err.code()
    return answers, code


def _echo_path(path):
    def handler(request, context):
        if path == "/any.Fail/M":
            raise ValueError("fails")
        return path.encode()

    return handler


class _Answering(grpc.ServerInterceptor):
    def intercept_service(self, continuation, details):
        return grpc.unary_unary_rpc_method_handler(_echo_path(details.method))


class _AioAnswering(grpc.aio.ServerInterceptor):
    async def intercept_service(self, continuation, details):
        inner = _echo_path(details.method)

        async def handler(request, context):
            return inner(request, context)

        return grpc.unary_unary_rpc_method_handler(handler)


def test_server():
    before = _methods_alive()
    server = pygrpc_native.server(futures.ThreadPoolExecutor(2), interceptors=[_Answering()])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        answers, code = _call_every_path(port)
    finally:
        server.stop(None)
    assert answers == [p.encode() for p in PATHS + PATHS]
    assert code == grpc.StatusCode.UNKNOWN
    # CAP paths, and one shared method for unary calls.
    assert _methods_alive() - before <= CAP + 1


def test_aio_server(caplog):
    async def main():
        server = pygrpc_native.aio.server(interceptors=[_AioAnswering()])
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            return await asyncio.get_running_loop().run_in_executor(None, _call_every_path, port)
        finally:
            await server.stop(None)

    before = _methods_alive()
    with caplog.at_level(logging.ERROR, logger="grpc._cython.cygrpc"):
        answers, code = asyncio.run(main())
    assert answers == [p.encode() for p in PATHS + PATHS]
    assert code == grpc.StatusCode.UNKNOWN
    assert _methods_alive() - before <= CAP + 1
    # The call past the cap is logged with its own path, not the shared one.
    assert "Unexpected [ValueError] raised by servicer method [/any.Fail/M]" in [r.getMessage() for r in caplog.records]
