"""Differential tests: how handlers are found and wrapped on
grpc.aio.server() and pygrpc_native.aio.server(), for what only grpc.aio
has: an interceptor handing back a sync handler, grpc.aio clients of
generated code, and context.read() / context.write() in the methods that
pygrpc_native serves through its grpcio fallback. The scenarios both kinds
of server share are in test_diff_handlers.py."""

import asyncio
import collections
import gc
import os
import threading
import time
import weakref

import grpc
import grpc.aio
import pytest

from diff.aio_harness import SERVICE, both, call_stream, call_unary, describe, method, same, setup_handlers, stream, unary
from diff.flavours import ASYNCIO
from diff.servicers import diffsuite_servicer, echo_servicer

PGN_TRANSPORT = os.environ.get("PGN_TRANSPORT", "h2")

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


class _Interceptor(grpc.aio.ServerInterceptor):
    def __init__(self, fn):
        self._fn = fn

    async def intercept_service(self, continuation, handler_call_details):
        return await self._fn(continuation, handler_call_details)


def test_per_call_wrappers_are_let_go():
    """An interceptor that wraps each call's handler in a closure of its
    own (the usual way to add per-call logic): once the calls are over,
    their wrappers are garbage, as on grpc.aio. Ours kept every one (a
    cache of handler kinds keyed by the function), 1-2 KB per call."""
    alive = weakref.WeakSet()

    async def wrapping(continuation, details):
        handler = await continuation(details)
        inner = handler.unary_unary

        async def wrapper(request, ctx):
            return await inner(request, ctx)

        alive.add(wrapper)
        return grpc.unary_unary_rpc_method_handler(wrapper)

    async def echo(req, ctx):
        return req

    def scenario(run):
        answers = [call_unary(run.channel, method("Echo"), b"x").responses for _ in range(20)]
        time.sleep(0.2)
        gc.collect()
        return answers == [(b"x",)] * 20, len(alive)

    assert same(setup_handlers({"Echo": unary(echo)}), scenario, interceptors=[_Interceptor(wrapping)]) == (True, 0)
    alive.clear()


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


class _Details(collections.namedtuple("_Details", ("method", "invocation_metadata")), grpc.HandlerCallDetails):
    pass


def test_known_difference_continuation_given_details_of_its_own():
    # An interceptor that hands continuation() a HandlerCallDetails of its
    # own gets the handler of the method it names; grpc.aio's continuation
    # takes only its own kind, and the call ends UNKNOWN (README).
    async def echo(req, ctx):
        return b"echo:" + req

    async def other(req, ctx):
        return b"other:" + req

    async def rename(continuation, details):
        return await continuation(_Details(method("Other"), details.invocation_metadata))

    setup = setup_handlers({"Echo": unary(echo), "Other": unary(other)})
    ref, ours = both(setup, lambda run: call_unary(run.channel, method("Echo"), b"x"), interceptors=[_Interceptor(rename)])
    assert ref.code == SC.UNKNOWN
    assert (ours.code, ours.responses) == (SC.OK, (b"other:x",))


def test_known_difference_a_sync_stream_handlers_messages_are_serialized_on_its_thread():
    # A non-coroutine handler's response stream is serialized where it is
    # produced, on its migration-pool thread; grpc.aio serializes it on
    # the event loop (README).
    def setup(server, state):
        def serialize(message):
            state.record("serializer thread", threading.get_ident())
            return message

        def handler(request, context):
            state.record("handler thread", threading.get_ident())
            yield b"one"

        handlers = {"S": grpc.unary_stream_rpc_method_handler(handler, response_serializer=serialize)}
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))

    def scenario(run):
        out = call_stream(run.channel, method("S"), b"x")
        same_thread = run.state.wait_for("serializer thread") == run.state.wait_for("handler thread")
        return out.responses, same_thread

    ref, ours = both(setup, scenario)
    assert ref == ((b"one",), False)
    assert ours == ((b"one",), True)


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




@pytest.mark.parametrize("how", ["write", "generator"])
def test_written_message_arrives_while_the_handler_blocks_the_loop(how):
    # A coroutine that writes and then blocks the loop (a sync call inside
    # a coroutine, which asyncio discourages but users write): grpc.aio's
    # write() has handed the message to its core, which sends it from a
    # thread of its own, so the client has it before the block ends. Ours
    # must not leave it waiting for the loop's next turn.
    # The connection is warmed up first, so that no frame of its setup
    # (SETTINGS, a PING and their acks) happens to write the message out.
    block = 1.5

    def setup(server, state):
        if how == "write":

            async def handler(req, ctx):
                await ctx.write(b"first")
                if req:
                    time.sleep(block)
                await ctx.write(b"second")

        else:

            async def handler(req, ctx):
                yield b"first"
                if req:
                    time.sleep(block)
                yield b"second"

        setup_handlers({"S": stream(handler)})(server, state)

    def scenario(run):
        assert list(run.channel.unary_stream(method("S"))(b"", timeout=10)) == [b"first", b"second"]
        time.sleep(0.3)
        responses = run.channel.unary_stream(method("S"))(b"block", timeout=10)
        started = time.monotonic()
        first = next(responses)
        early = time.monotonic() - started < block / 2
        return first, early, list(responses)

    assert same(setup, scenario) == (b"first", True, [b"second"])


def test_a_task_that_blocks_the_loop_delays_the_answers_of_its_turn():
    # A known difference (README): on h2 the end of a call sent from the
    # loop is written at the loop's next turn, so a task that blocks the
    # loop in the same turn delays it; grpc.aio's core writes it at once.
    # Call B waits on a gate that call A's handler opens just before it
    # returns: B resumes (and blocks) in the turn where A's answer is sent.
    # A is called once before (the first call of a method only generic
    # handlers know is served apart, by Go's goroutine for the lookup). The
    # client sends no BDP pings: acking one writes out what is held, which
    # with grpcio's default client often hides the difference.
    block = 1.5

    def setup(server, state):
        gates = {}

        def gate():
            return gates.setdefault("gate", asyncio.Event())

        async def a(req, ctx):
            if req:
                gate().set()
            return b"a"

        async def b(req, ctx):
            state.record("b waiting", True)
            await gate().wait()
            time.sleep(block)
            return b"b"

        setup_handlers({"A": unary(a), "B": unary(b)})(server, state)

    def scenario(run):
        with grpc.insecure_channel(run.target, options=[("grpc.http2.bdp_probe", 0)]) as channel:
            assert channel.unary_unary(method("A"))(b"", timeout=10) == b"a"
            later = channel.unary_unary(method("B")).future(b"", timeout=10)
            run.state.wait_for("b waiting")
            started = time.monotonic()
            answer = channel.unary_unary(method("A"))(b"open", timeout=10)
            early = time.monotonic() - started < block / 2
            return answer, early, later.result()

    ref, ours = both(setup, scenario)
    assert ref == (b"a", True, b"b")
    assert ours == (b"a", PGN_TRANSPORT == "grpcgo", b"b")


def test_a_generic_handler_without_service_fails_its_calls_only():
    """grpc.aio takes a generic handler without service() (it raised at
    registration on ours, and registered none of the others): each call it
    is asked for fails UNKNOWN with the AttributeError; a handler before it
    still serves."""

    class Good(grpc.GenericRpcHandler):
        def service(self, details):
            return unary(_say) if details.method.endswith("/Good") else None

    class NoService:
        pass

    async def _say(req, ctx):
        return b"good"

    def setup(server, state):
        server.add_generic_rpc_handlers((Good(), NoService()))

    def scenario(run):
        return call_unary(run.channel, method("Good")).responses, call_unary(run.channel, method("Other")).brief()

    assert same(setup, scenario) == (
        (b"good",),
        (grpc.StatusCode.UNKNOWN, "Unexpected <class 'AttributeError'>: 'NoService' object has no attribute 'service'"),
    )
