"""Differential tests: the grpc.aio.Server lifecycle and limits on
grpc.aio.server() and pygrpc_native.aio.server() — start, stop(grace) and
its return value, wait_for_termination(timeout), maximum_concurrent_rpcs,
and message-size options."""

import asyncio
import time

import grpc
import grpc.aio
import pytest

from diff.aio_harness import (
    LOOPS,
    WAIT,
    LoopThread,
    call_stream,
    call_unary,
    factory,
    for_both,
    method,
    same,
    setup_handlers,
    stream,
    unary,
    wait_event,
)

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


class _Server:
    """An aio server of one kind on its own loop thread, with a slow method
    (which records how it ended) and an echo, for scenarios that drive
    start/stop themselves."""

    def __init__(self, kind, loop="asyncio", handler_seconds=0.3, **server_kwargs):
        self.loop = LoopThread(loop)
        self.outcome = []
        self.entered = None

        async def create():
            self.entered = asyncio.Event()

            async def slow(req, ctx):
                self.entered.set()
                try:
                    await asyncio.sleep(handler_seconds)
                except asyncio.CancelledError:
                    self.outcome.append("CancelledError")
                    raise
                self.outcome.append("finished")
                return b"slow done"

            async def echo(req, ctx):
                return req

            server = factory(kind)(**server_kwargs)
            setup_handlers({"Slow": unary(slow), "Echo": unary(echo)})(server, None)
            return server, server.add_insecure_port("127.0.0.1:0")

        self.server, self.port = self.loop.run(create())

    def run(self, coro, timeout=WAIT):
        return self.loop.run(coro, timeout)

    def start(self):
        self.run(self.server.start())

    def wait_entered(self):
        return self.run(asyncio.wait_for(self.entered.wait(), WAIT))

    def channel(self):
        return grpc.insecure_channel(f"127.0.0.1:{self.port}")

    def close(self):
        self.loop.bounded(self.server.stop(0), 2)
        self.loop.close()


def _timed(server, coro, timeout=WAIT):
    """(result, seconds) of a coroutine run on the server's loop; "hung" if
    it didn't finish in time."""
    started = time.monotonic()
    result = server.loop.bounded(coro, timeout)
    return result, time.monotonic() - started


# -- servers and ports -------------------------------------------------------------


def test_isinstance_grpc_aio_server():
    def check(kind):
        loop = LoopThread()

        async def make():
            server = factory(kind)()
            result = isinstance(server, grpc.aio.Server)
            await server.stop(None)
            return result

        try:
            return loop.run(make())
        finally:
            loop.close()

    assert for_both(check) is True


@pytest.mark.parametrize("loop", LOOPS)
def test_start_serve_stop(loop):
    def check(kind):
        s = _Server(kind, loop=loop)
        try:
            s.start()
            with s.channel() as ch:
                out = call_unary(ch, method("Echo"), b"hi")
            stopped = _timed(s, s.server.stop(1))
            return out.responses, stopped[0], stopped[1] < 1
        finally:
            s.close()

    assert for_both(check) == ((b"hi",), None, True)


def test_start_twice_raises():
    def check(kind):
        s = _Server(kind)
        try:
            s.start()
            try:
                s.start()
                return "no error"
            except Exception as exc:  # noqa: BLE001
                return type(exc).__name__
        finally:
            s.close()

    # grpc.aio ignores the second start().
    assert for_both(check) == "no error"


# -- stop(grace) ---------------------------------------------------------------------


def test_stop_with_grace_lets_in_flight_call_finish():
    def check(kind):
        s = _Server(kind, handler_seconds=0.3)
        try:
            s.start()
            with s.channel() as ch:
                future = ch.unary_unary(method("Slow")).future(b"", timeout=10)
                s.wait_entered()
                result, took = _timed(s, s.server.stop(3))
                return result, took < 2, future.result(timeout=WAIT), list(s.outcome)
        finally:
            s.close()

    assert for_both(check) == (None, True, b"slow done", ["finished"])


def test_stop_refuses_new_calls():
    def check(kind):
        s = _Server(kind, handler_seconds=0.5)
        try:
            s.start()
            with s.channel() as ch:
                future = ch.unary_unary(method("Slow")).future(b"", timeout=10)
                s.wait_entered()
                stopping = asyncio.run_coroutine_threadsafe(s.server.stop(3), s.loop.loop)
                time.sleep(0.1)
                with s.channel() as fresh:
                    new_channel = call_unary(fresh, method("Echo"), b"late", timeout=2).code
                same_channel = call_unary(ch, method("Echo"), b"late", timeout=2).code
                result = future.result(timeout=WAIT)
                stopping.result(WAIT)
            return new_channel, same_channel, result
        finally:
            s.close()

    assert for_both(check) == (SC.UNAVAILABLE, SC.UNAVAILABLE, b"slow done")


@pytest.mark.parametrize("grace", [0.2, 0, None], ids=["grace-expires", "zero", "None"])
def test_stop_cancels_in_flight_call(grace):
    def check(kind):
        s = _Server(kind, handler_seconds=5)
        try:
            s.start()
            with s.channel() as ch:
                future = ch.unary_unary(method("Slow")).future(b"", timeout=10)
                s.wait_entered()
                result, took = _timed(s, s.server.stop(grace))
                try:
                    future.result(timeout=WAIT)
                    client = "ok"
                except grpc.RpcError as err:
                    client = err.code()
                time.sleep(0.05)
                return result, took < 2, client, list(s.outcome)
        finally:
            s.close()

    ref = for_both(check)
    assert ref[:2] == (None, True) and ref[3] == ["CancelledError"]


def _client_outcome(future):
    """The status code a call's future ends with, "ok", or "no answer"."""
    try:
        future.result(timeout=WAIT)
        return "ok"
    except grpc.FutureTimeoutError:
        return "no answer"
    except grpc.RpcError as err:
        return err.code()


def test_later_stop_shortens_a_running_graceful_stop():
    # grpc.aio: stop(None) during a stop(30) cancels the calls at once, and
    # both stops return.
    def check(kind):
        s = _Server(kind, handler_seconds=30)
        try:
            s.start()
            with s.channel() as ch:
                future = ch.unary_unary(method("Slow")).future(b"", timeout=60)
                s.wait_entered()
                first = asyncio.run_coroutine_threadsafe(s.server.stop(30), s.loop.loop)
                time.sleep(0.1)
                second = s.loop.bounded(s.server.stop(None), WAIT)
                try:
                    first_result = first.result(WAIT)
                except Exception as exc:  # noqa: BLE001
                    first_result = type(exc).__name__
                time.sleep(0.05)
                return second, first_result, _client_outcome(future), list(s.outcome)
        finally:
            s.close()

    assert for_both(check) == (None, None, SC.UNAVAILABLE, ["CancelledError"])


def test_concurrent_stops_end_at_the_shortest_grace():
    # Not stop(None) together with stop(0): grpc.aio 1.85 sometimes crashes
    # the process on that pair.
    def check(kind):
        s = _Server(kind, handler_seconds=30)
        try:
            s.start()
            with s.channel() as ch:
                future = ch.unary_unary(method("Slow")).future(b"", timeout=60)
                s.wait_entered()

                async def stop_three_ways():
                    return await asyncio.gather(s.server.stop(30), s.server.stop(3), s.server.stop(0))

                results = s.loop.bounded(stop_three_ways(), WAIT)
                time.sleep(0.05)
                return results, _client_outcome(future), list(s.outcome)
        finally:
            s.close()

    assert for_both(check) == ([None, None, None], SC.UNAVAILABLE, ["CancelledError"])


def test_stop_idle_twice_and_before_start():
    def check(kind):
        s = _Server(kind)
        try:
            before = _timed(s, s.server.stop(1), 3)[0]
            s2 = _Server(kind)
            s2.start()
            first = _timed(s2, s2.server.stop(1), 3)[0]
            second = _timed(s2, s2.server.stop(1), 3)[0]
            s2.close()
            return before, first, second
        finally:
            s.close()

    assert for_both(check) == (None, None, None)


# -- wait_for_termination ---------------------------------------------------------------


def test_wait_for_termination_timeout_and_after_stop():
    def check(kind):
        s = _Server(kind)
        try:
            s.start()
            timed_out, waited = _timed(s, s.server.wait_for_termination(timeout=0.2))
            s.run(s.server.stop(0))
            after_stop = s.loop.bounded(s.server.wait_for_termination(timeout=1), 3)
            return timed_out, 0.15 < waited < 2, after_stop
        finally:
            s.close()

    assert for_both(check) == (True, True, False)


def test_wait_for_termination_returns_when_stopped():
    def check(kind):
        s = _Server(kind)
        try:
            s.start()

            async def stop_later():
                await asyncio.sleep(0.2)
                await s.server.stop(0)

            async def wait():
                stopper = asyncio.ensure_future(stop_later())
                result = await s.server.wait_for_termination(timeout=5)
                await stopper
                return result

            result, took = _timed(s, wait())
            return result, took < 3
        finally:
            s.close()

    assert for_both(check) == (False, True)


def test_wait_for_termination_before_start():
    def check(kind):
        s = _Server(kind)
        try:
            return _timed(s, s.server.wait_for_termination(timeout=0.2), 3)[0]
        finally:
            s.close()

    for_both(check)


# -- maximum_concurrent_rpcs --------------------------------------------------------


def _blocking_setup(server, state):
    async def block(req, ctx):
        state.event("entered").set()
        await wait_event(state.event("release"))
        return b"released"

    async def echo(req, ctx):
        return req

    async def block_stream(req, ctx):
        yield b"first"
        state.event("entered").set()
        await wait_event(state.event("release"))
        yield b"second"

    setup_handlers({"Block": unary(block), "Echo": unary(echo), "S": stream(block_stream)})(server, state)


@pytest.mark.parametrize("loop", LOOPS)
def test_maximum_concurrent_rpcs(loop):
    def scenario(run):
        first = run.channel.unary_unary(method("Block")).future(b"", timeout=10)
        assert run.state.event("entered").wait(WAIT)
        refused = call_unary(run.channel, method("Echo"), b"x")
        run.state.event("release").set()
        first_result = first.result(timeout=WAIT)
        time.sleep(0.2)  # grpcio counts the call done a moment after it ends
        after = call_unary(run.channel, method("Echo"), b"y")
        return first_result, refused, after

    ref = same(_blocking_setup, scenario, loop=loop, maximum_concurrent_rpcs=1)
    assert ref[0] == b"released"
    assert ref[1].brief() == (SC.RESOURCE_EXHAUSTED, "Concurrent RPC limit exceeded!")
    assert ref[2].responses == (b"y",)


def test_maximum_concurrent_rpcs_counts_streams():
    def scenario(run):
        call = run.channel.unary_stream(method("S"))(b"", timeout=10)
        first = next(call)
        assert run.state.event("entered").wait(WAIT)
        refused = call_stream(run.channel, method("S"), b"")
        run.state.event("release").set()
        rest = list(call)
        return first, rest, refused

    ref = same(_blocking_setup, scenario, maximum_concurrent_rpcs=1)
    assert ref[2].brief() == (SC.RESOURCE_EXHAUSTED, "Concurrent RPC limit exceeded!")


def test_maximum_concurrent_rpcs_not_reached():
    def scenario(run):
        calls = [run.channel.unary_unary(method("Echo")).future(b"%d" % i, timeout=10) for i in range(4)]
        return [c.result() for c in calls]

    assert same(_blocking_setup, scenario, maximum_concurrent_rpcs=4) == [b"0", b"1", b"2", b"3"]


@pytest.mark.parametrize("value", [0, -1])
def test_maximum_concurrent_rpcs_invalid(value):
    def check(kind):
        loop = LoopThread()

        async def make():
            try:
                server = factory(kind)(maximum_concurrent_rpcs=value)
                await server.stop(None)
                return "created"
            except Exception as exc:  # noqa: BLE001
                return type(exc).__name__

        try:
            return loop.run(make())
        finally:
            loop.close()

    for_both(check)


# -- options ----------------------------------------------------------------------


async def _echo(req, ctx):
    return req


async def _sized(req, ctx):
    return b"r" * int(req)


def _echo_setup(server, state):
    setup_handlers({"Echo": unary(_echo), "Sized": unary(_sized)})(server, state)


def test_large_request_and_response():
    payload = bytes(range(256)) * (3 * 1024 * 1024 // 256)

    def scenario(run):
        out = call_unary(run.channel, method("Echo"), payload, timeout=20)
        return out.code, out.responses == (payload,)

    assert same(_echo_setup, scenario) == (SC.OK, True)


def test_max_receive_and_send_message_length():
    def scenario(run):
        return (
            call_unary(run.channel, method("Echo"), b"x" * 1024).code,
            call_unary(run.channel, method("Echo"), b"x" * 1025).code,
            call_unary(run.channel, method("Sized"), b"1024").code,
            call_unary(run.channel, method("Sized"), b"2000").code,
        )

    options = [("grpc.max_receive_message_length", 1024), ("grpc.max_send_message_length", 1024)]
    ref = same(_echo_setup, scenario, options=options)
    assert ref == (SC.OK, SC.RESOURCE_EXHAUSTED, SC.OK, SC.RESOURCE_EXHAUSTED)


def test_option_names_given_as_bytes():
    # grpc.aio takes bytes option names as it takes str ones: known ones
    # apply, unknown ones are ignored.
    def scenario(run):
        return call_unary(run.channel, method("Echo"), b"x" * 1024).code, call_unary(run.channel, method("Echo"), b"x" * 1025).code

    options = [(b"grpc.some_option_nobody_knows", 1), (b"grpc.max_receive_message_length", 1024)]
    assert same(_echo_setup, scenario, options=options) == (SC.OK, SC.RESOURCE_EXHAUSTED)


def test_ignored_options():
    options = [
        ("grpc.some_option_nobody_knows", 1),
        ("grpc.primary_user_agent", "diff-suite"),
        ("grpc.http2.max_ping_strikes", 2),
        ("grpc.keepalive_time_ms", 60000),
        ("grpc.max_receive_message_length", "1024"),  # not an integer: ignored
    ]

    def scenario(run):
        return call_unary(run.channel, method("Echo"), b"x" * 2000).code

    assert same(_echo_setup, scenario, options=options) == SC.OK


def test_sync_interceptor_is_refused():
    # grpc.aio.server() only takes grpc.aio.ServerInterceptor instances.
    class SyncInterceptor(grpc.ServerInterceptor):
        def intercept_service(self, continuation, handler_call_details):
            return continuation(handler_call_details)

    def check(kind):
        loop = LoopThread()

        async def make():
            try:
                server = factory(kind)(interceptors=[SyncInterceptor()])
                await server.stop(None)
                return "created"
            except Exception as exc:  # noqa: BLE001
                return type(exc).__name__

        try:
            return loop.run(make())
        finally:
            loop.close()

    assert for_both(check) == "ValueError"


# -- options ---------------------------------------------------------------------------


def test_server_compression_none_serves():
    def scenario(run):
        return call_unary(run.channel, method("Echo"), b"abc").responses

    assert same(_echo_setup, scenario, compression=grpc.Compression.NoCompression) == (b"abc",)


def test_migration_thread_pool_none_runs_sync_handlers():
    # Without a migration_thread_pool, non-coroutine handlers still run.
    def check(kind):
        loop = LoopThread()

        async def make():
            server = factory(kind)(None)
            setup_handlers({"M": unary(lambda req, ctx: b"sync:" + req)})(server, None)
            port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            return server, port

        try:
            server, port = loop.run(make())
            with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
                out = call_unary(ch, method("M"), b"x")
            loop.bounded(server.stop(0))
            return out
        finally:
            loop.close()

    assert for_both(check).responses == (b"sync:x",)

