"""Differential tests: how handlers are found and wrapped on
grpc.aio.server() and pygrpc_native.aio.server(), for what only grpc.aio
has: an interceptor handing back a sync handler, grpc.aio clients of
generated code, and context.read() / context.write() in the methods that
pygrpc_native serves through its grpcio fallback. The scenarios both kinds
of server share are in test_diff_handlers.py."""

import asyncio

import grpc
import grpc.aio
import pytest

from diff.aio_harness import call_stream, call_unary, describe, method, same, setup_handlers, stream, unary
from diff.flavours import ASYNCIO
from diff.servicers import diffsuite_servicer, echo_servicer

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


class _Interceptor(grpc.aio.ServerInterceptor):
    def __init__(self, fn):
        self._fn = fn

    async def intercept_service(self, continuation, handler_call_details):
        return await self._fn(continuation, handler_call_details)


def test_interceptor_awaits_and_wraps_with_sync_handler():
    # An interceptor that awaits something and hands back a non-coroutine
    # handler: it runs in the migration thread pool.
    async def echo(req, ctx):
        return b"echo:" + req

    async def slow_sync(continuation, details):
        await asyncio.sleep(0.01)
        handler = await continuation(details)
        if handler is not None and handler.unary_unary is not None:
            return unary(lambda req, ctx: b"sync:" + req)
        return handler

    setup = setup_handlers({"Echo": unary(echo)})
    ref = same(setup, lambda run: call_unary(run.channel, method("Echo"), b"x"), interceptors=[_Interceptor(slow_sync)])
    assert ref.responses == (b"sync:x",)


# -- grpcio-tools generated code -------------------------------------------------------


def test_generated_code_with_grpc_aio_client():
    # The same generated stubs, called through a grpc.aio channel on the
    # test's own event loop.
    pb2, pb2_grpc, servicer = echo_servicer(ASYNCIO)

    def setup(server, state):
        pb2_grpc.add_EchoServicer_to_server(servicer, server)

    async def client(target):
        async with grpc.aio.insecure_channel(target) as channel:
            stub = pb2_grpc.EchoStub(channel)
            said = await stub.Say(pb2.EchoRequest(message="aio"), timeout=5)
            counted = [r.index async for r in stub.Count(pb2.CountRequest(message="c", count=4), timeout=5)]
            call = stub.Say(pb2.EchoRequest(message="fail"), timeout=5)
            try:
                await call
            except grpc.aio.AioRpcError as err:
                return said.message, counted, err.code(), err.details()
        return "no error"

    ref = same(setup, lambda run: asyncio.run(asyncio.wait_for(client(run.target), 10)))
    assert ref == ("said aio", [0, 1, 2, 3], SC.INVALID_ARGUMENT, "no failing allowed")


@pytest.mark.parametrize("style", ["iterate", "read"])
def test_generated_request_streaming_failures(style):
    pb2, pb2_grpc, servicer = diffsuite_servicer(ASYNCIO, style)

    def setup(server, state):
        pb2_grpc.add_DiffSuiteServicer_to_server(servicer, server)

    def scenario(run):
        stub = pb2_grpc.DiffSuiteStub(run.channel)
        out = []
        for call in (
            lambda: stub.ClientStream(iter([pb2.Request(text="fail")]), timeout=5),
            lambda: stub.ClientStream(iter([pb2.Request(text="abort")]), timeout=5),
            lambda: list(stub.Bidi(iter([pb2.Request(text="a"), pb2.Request(text="abort")]), timeout=5)),
        ):
            try:
                call()
                out.append("ok")
            except grpc.RpcError as err:
                out.append((err.code(), err.details(), tuple(err.trailing_metadata())))
        return out

    ref = same(setup, scenario)
    assert ref == [
        (SC.UNKNOWN, "Unexpected <class 'ValueError'>: client stream failed", ()),
        (SC.FAILED_PRECONDITION, "client stream aborted", (("x-cs", "1"),)),
        (SC.INVALID_ARGUMENT, "bidi abort ü", ()),
    ]


def test_read_in_unary_stream_handler():
    # context.read() in a unary-request handler: grpc.aio has read the one
    # request already, so read() gives EOF.
    def setup(server, state):
        async def handler(req, ctx):
            try:
                got = await ctx.read()
                state.record("read", "EOF" if got is grpc.aio.EOF else repr(got))
            except BaseException as exc:
                state.record("read", describe(exc))
                raise
            yield b"x"

        setup_handlers({"S": stream(handler)})(server, state)

    def scenario(run):
        out = call_stream(run.channel, method("S"), timeout=2)
        return out.code, out.responses, run.state.wait_for("read", 1)

    assert same(setup, scenario) == (SC.OK, (b"x",), "EOF")


