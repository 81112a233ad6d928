"""Differential tests: the grpc.aio.Server lifecycle on grpc.aio.server()
and pygrpc_native.aio.server() — start, stop(grace) and its return value,
wait_for_termination(timeout), and the arguments a server is created with.
Limits both kinds of server share (message sizes, options,
maximum_concurrent_rpcs) are in test_diff_limits.py."""

import asyncio
import contextlib
import gc
import subprocess
import sys
import time
import warnings
import weakref

import grpc
import grpc.aio
import pytest

from diff.aio_harness import (
    LOOPS,
    WAIT,
    LoopThread,
    call_unary,
    factory,
    for_both,
    future_outcome,
    method,
    setup_handlers,
    unary,
)

from diff.harness import KINDS, wait_until

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


@contextlib.contextmanager
def _slow_call_in_flight(kind, handler_seconds, call_timeout=10):
    """A started _Server of kind, a channel to it and the future of a Slow
    call whose handler has begun; the server is closed at the end."""
    s = _Server(kind, handler_seconds=handler_seconds)
    try:
        s.start()
        with s.channel() as ch:
            future = ch.unary_unary(method("Slow")).future(b"", timeout=call_timeout)
            s.wait_entered()
            yield s, ch, future
    finally:
        s.close()


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


@pytest.mark.parametrize("limit", [0, -1])
def test_maximum_concurrent_rpcs_below_one_is_refused(limit):
    # grpc.aio's check; grpc.server() takes such a limit (test_server_diff_limits.py).
    def check(kind):
        loop = LoopThread()

        async def make():
            try:
                server = factory(kind)(maximum_concurrent_rpcs=limit)
            except ValueError as exc:
                return str(exc)
            await server.stop(None)
            return "made"

        try:
            return loop.run(make())
        finally:
            loop.close()

    assert for_both(check) == "maximum_concurrent_rpcs should be a positive integer"


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


def test_known_difference_a_server_made_outside_a_loop_serves_on_the_loop_that_starts_it():
    # grpc.aio's server takes the event loop current when it is made (or,
    # on newer Pythons, refuses to be made without one), and its start()
    # fails on another; ours serves on the loop that calls start() (README).
    import pygrpc_native.aio as native_aio

    async def echo(req, ctx):
        return b"echo:" + req

    def run(make):
        try:
            server = make()
        except RuntimeError:
            return "refused when made"
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.S", {"E": grpc.unary_unary_rpc_method_handler(echo)}),))
        port = server.add_insecure_port("127.0.0.1:0")

        async def serve():
            try:
                await server.start()
            except RuntimeError:
                return "refused at start"
            try:
                async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                    return await channel.unary_unary("/t.S/E")(b"x", timeout=WAIT)
            finally:
                await server.stop(None)

        return asyncio.run(serve())

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # grpc.aio's get_event_loop() outside a loop
        ref, ours = run(grpc.aio.server), run(native_aio.server)
    assert ref in ("refused when made", "refused at start")
    assert ours == b"echo:x"


def test_start_twice_and_after_stop():
    def check(kind):
        loop = LoopThread()

        async def attempt(stop_first):
            server = factory(kind)()
            server.add_insecure_port("127.0.0.1:0")
            await server.start()
            if stop_first:
                await server.stop(None)
            try:
                await server.start()
                return "started"
            except Exception as exc:  # noqa: BLE001
                return type(exc).__name__, str(exc)
            finally:
                await server.stop(None)

        try:
            return [loop.run(attempt(False)), loop.run(attempt(True))]
        finally:
            loop.close()

    # grpc.aio ignores a second start(), and refuses one after stop().
    assert for_both(check) == ["started", ("UsageError", "Server not in ready state")]


# -- stop(grace) ---------------------------------------------------------------------


def test_stop_with_grace_lets_in_flight_call_finish():
    def check(kind):
        with _slow_call_in_flight(kind, 0.3) as (s, ch, future):
            result, took = _timed(s, s.server.stop(3))
            return result, took < 2, future.result(timeout=WAIT), list(s.outcome)

    assert for_both(check) == (None, True, b"slow done", ["finished"])


def test_stop_refuses_new_calls():
    def check(kind):
        with _slow_call_in_flight(kind, 0.5) as (s, ch, future):
            stopping = asyncio.run_coroutine_threadsafe(s.server.stop(3), s.loop.loop)
            time.sleep(0.1)
            with s.channel() as fresh:
                new_channel = call_unary(fresh, method("Echo"), b"late", timeout=2).code
            same_channel = call_unary(ch, method("Echo"), b"late", timeout=2).code
            result = future.result(timeout=WAIT)
            stopping.result(WAIT)
            return new_channel, same_channel, result

    assert for_both(check) == (SC.UNAVAILABLE, SC.UNAVAILABLE, b"slow done")


@pytest.mark.parametrize("grace", [0.2, 0, None], ids=["grace-expires", "zero", "None"])
def test_stop_cancels_in_flight_call(grace):
    def check(kind):
        with _slow_call_in_flight(kind, 5) as (s, ch, future):
            result, took = _timed(s, s.server.stop(grace))
            client = future_outcome(future)
            time.sleep(0.05)
            return result, took < 2, client, list(s.outcome)

    ref = for_both(check)
    assert ref[:2] == (None, True) and ref[2] != "no answer" and ref[3] == ["CancelledError"]


def test_later_stop_shortens_a_running_graceful_stop():
    # grpc.aio: stop(None) during a stop(30) cancels the calls at once, and
    # both stops return.
    def check(kind):
        with _slow_call_in_flight(kind, 30, call_timeout=60) as (s, ch, future):
            first = asyncio.run_coroutine_threadsafe(s.server.stop(30), s.loop.loop)
            time.sleep(0.1)
            second = s.loop.bounded(s.server.stop(None), WAIT)
            try:
                first_result = first.result(WAIT)
            except Exception as exc:  # noqa: BLE001
                first_result = type(exc).__name__
            time.sleep(0.05)
            return second, first_result, future_outcome(future), list(s.outcome)

    assert for_both(check) == (None, None, SC.UNAVAILABLE, ["CancelledError"])


def test_concurrent_stops_end_at_the_shortest_grace():
    # Not stop(None) together with stop(0): grpc.aio 1.85 sometimes crashes
    # the process on that pair.
    def check(kind):
        with _slow_call_in_flight(kind, 30, call_timeout=60) as (s, ch, future):

            async def stop_three_ways():
                return await asyncio.gather(s.server.stop(30), s.server.stop(3), s.server.stop(0))

            results = s.loop.bounded(stop_three_ways(), WAIT)
            time.sleep(0.05)
            return results, future_outcome(future), list(s.outcome)

    assert for_both(check) == ([None, None, None], SC.UNAVAILABLE, ["CancelledError"])


def test_stop_with_a_negative_grace_cancels_at_once():
    # grpc.aio waits that long (not at all); ours raised ValueError.
    def check(kind):
        with _slow_call_in_flight(kind, 3) as (s, ch, future):
            s.run(s.server.stop(-1))
            return future_outcome(future), list(s.outcome)

    assert for_both(check) == (SC.UNAVAILABLE, ["CancelledError"])


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


def test_stop_before_start_changes_nothing():
    """stop() before start() does nothing (as grpc.aio): the server then
    starts and serves at its port; a wait for its end times out. Ours
    stopped it for good (start() raised UsageError)."""

    def check(kind):
        s = _Server(kind)
        try:
            s.run(s.server.stop(None))
            waited = s.loop.bounded(s.server.wait_for_termination(timeout=0.2), 3)
            s.start()
            with s.channel() as ch:
                answer = ch.unary_unary(method("Echo"))(b"served", timeout=WAIT)
            return waited, answer
        finally:
            s.close()

    assert for_both(check) == (True, b"served")


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


@pytest.mark.parametrize("method_name", ["stop", "wait_for_termination"])
def test_stop_awaited_on_another_loop_raises(method_name):
    """stop() or wait_for_termination() awaited on a loop other than the
    server's (asyncio.run() in the main thread, the server on a loop
    thread): grpc.aio's awaits a future of the server's loop, which asyncio
    refuses at once (RuntimeError "... attached to a different loop"); a
    stop has begun by then. Ours waited for good."""

    def check(kind):
        s = _Server(kind)
        try:
            s.start()

            async def elsewhere():
                coro = s.server.stop(0) if method_name == "stop" else s.server.wait_for_termination()
                try:
                    await asyncio.wait_for(coro, 5)
                except RuntimeError as err:
                    return "different loop" in str(err)
                except asyncio.TimeoutError:
                    return "waited"
                return "returned"

            raised = asyncio.run(elsewhere())
            if method_name == "wait_for_termination":
                # (grpc.aio's server may be left unable to stop after that:
                # its stop() can raise on its own loop then)
                return raised, True
            with grpc.insecure_channel(f"127.0.0.1:{s.port}") as channel:
                stopped = wait_until(lambda: call_unary(channel, method("Echo"), b"x", timeout=1).code == SC.UNAVAILABLE)
            return raised, stopped
        finally:
            with contextlib.suppress(RuntimeError):  # grpc.aio's stop() may raise (above)
                s.loop.bounded(s.server.stop(0), 2)
            s.loop.close()

    assert for_both(check) == (True, True)


def test_del_stops_a_started_server():
    def check(kind):
        s = _Server(kind)
        try:
            s.start()
            s.server.__del__()
            return s.loop.bounded(s.server.wait_for_termination(timeout=5), 8)
        finally:
            s.close()

    assert for_both(check) is False


@pytest.mark.parametrize("loop", LOOPS)
def test_a_started_server_dropped_without_stop_stops(loop):
    # The last reference to a started server goes: grpc.aio's is collected
    # and stops on its loop (its port refuses calls). Ours used to be kept
    # alive by its loop's reader and served on for good.
    def check(kind):
        thread = LoopThread(loop)

        async def start():
            server = factory(kind)()
            setup_handlers({"Echo": unary(lambda req, ctx: req)})(server, None)
            port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            return weakref.ref(server), port

        try:
            ref, port = thread.run(start())

            async def collect():
                gc.collect()
                await asyncio.sleep(0.1)  # the stop runs on the loop
                return ref() is None

            collected = thread.run(collect())
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                wait_until(lambda: call_unary(channel, method("Echo"), b"x", timeout=1).code != SC.OK)
                after = call_unary(channel, method("Echo"), b"x", timeout=1).code
            return collected, after
        finally:
            thread.close()

    assert for_both(check) == (True, SC.UNAVAILABLE)


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


# -- creation arguments ----------------------------------------------------------------


def _created(kind, **server_kwargs):
    """"created" if factory(kind)(**server_kwargs) makes a server (stopped
    at once), else the name of the exception it raised."""
    loop = LoopThread()

    async def make():
        try:
            server = factory(kind)(**server_kwargs)
            await server.stop(None)
            return "created"
        except Exception as exc:  # noqa: BLE001
            return type(exc).__name__

    try:
        return loop.run(make())
    finally:
        loop.close()


@pytest.mark.parametrize("value", [0, -1, 0.5, "3", float("inf"), float("nan"), 2**31, 2.5, 2**31 - 1])
def test_maximum_concurrent_rpcs_invalid(value):
    # grpc.aio's limiter converts the value to a C int: ValueError,
    # TypeError, OverflowError; 2.5 is taken (as 2: test_diff_limits.py).
    for_both(lambda kind: _created(kind, maximum_concurrent_rpcs=value))


def test_sync_interceptor_is_refused():
    # grpc.aio.server() only takes grpc.aio.ServerInterceptor instances.
    class SyncInterceptor(grpc.ServerInterceptor):
        def intercept_service(self, continuation, handler_call_details):
            return continuation(handler_call_details)

    assert for_both(lambda kind: _created(kind, interceptors=[SyncInterceptor()])) == "ValueError"


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



# Run in a process of its own: asyncio.run() cancels the main task (as on
# Ctrl+C) while it waits for the server's termination, with a call in
# flight; what the client gets.
_RUN_CANCELLED = """
import asyncio, sys, threading, time
import grpc, grpc.aio, pygrpc_native.aio
kind = sys.argv[1]
make = grpc.aio.server if kind == "grpcio" else pygrpc_native.aio.server
outcome = []

async def slow(request, context):
    await asyncio.sleep(2)
    return request

def client(port):
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            channel.unary_unary("/diff.Diff/Slow")(b"x", timeout=5)
            outcome.append("OK")
        except grpc.RpcError as err:
            outcome.append(f"{err.code().name} {err.details()}")

async def main():
    server = make(handlers=[grpc.method_handlers_generic_handler("diff.Diff", {"Slow": grpc.unary_unary_rpc_method_handler(slow)})])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    caller = threading.Thread(target=client, args=(port,))
    caller.start()
    asyncio.get_running_loop().call_later(0.5, asyncio.current_task().cancel)
    await server.wait_for_termination()

try:
    asyncio.run(main())
except asyncio.CancelledError:
    pass
time.sleep(1)
print(outcome, flush=True)
"""


def test_calls_in_flight_when_asyncio_run_cancels_everything():
    """asyncio.run() cancels every task of its loop as it returns (after
    Ctrl+C too): grpc.aio's calls in flight end CANCELLED at once. Ours
    ended UNAVAILABLE "Cancelling all calls", which a retry policy may
    retry."""

    def run(kind):
        done = subprocess.run([sys.executable, "-c", _RUN_CANCELLED, kind], capture_output=True, text=True, timeout=30)
        return done.stdout.strip()

    assert {kind: run(kind) for kind in KINDS} == {kind: "['CANCELLED CANCELLED']" for kind in KINDS}


# Run in a process of its own: a server whose handler ends the process
# (sys.exit or KeyboardInterrupt); it prints its port.
_HANDLER_EXITS = """
import asyncio, sys
import grpc, grpc.aio, pygrpc_native.aio
kind, how = sys.argv[1], sys.argv[2]
make = grpc.aio.server if kind == "grpcio" else pygrpc_native.aio.server

async def leave(request, context):
    if how == "exit":
        sys.exit(7)
    raise KeyboardInterrupt

async def main():
    server = make(handlers=[grpc.method_handlers_generic_handler("diff.Diff", {"Leave": grpc.unary_unary_rpc_method_handler(leave)})])
    print(server.add_insecure_port("127.0.0.1:0"), flush=True)
    await server.start()
    await server.wait_for_termination()

asyncio.run(main())
"""


@pytest.mark.parametrize("how", ["exit", "interrupt"])
def test_a_handler_that_ends_the_process(how):
    """A handler calls sys.exit() or raises KeyboardInterrupt: on grpc.aio
    the loop ends with it and the client's call ends CANCELLED. Ours ended
    it UNAVAILABLE "Cancelling all calls" (the server's teardown)."""

    def run(kind):
        with subprocess.Popen(
            [sys.executable, "-c", _HANDLER_EXITS, kind, how], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        ) as server:
            try:
                port = int(server.stdout.readline())
                with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                    try:
                        channel.unary_unary(method("Leave"))(b"x", timeout=10)
                        outcome = "OK"
                    except grpc.RpcError as err:
                        outcome = f"{err.code().name} {err.details()}"
                return outcome, server.wait(timeout=30)
            finally:
                server.kill()

    code = 7 if how == "exit" else -2  # the interrupt: killed by SIGINT, as Python ends then
    assert {kind: run(kind) for kind in KINDS} == {kind: ("CANCELLED CANCELLED", code) for kind in KINDS}


_CLOSED_WITHOUT_STOP = """
import asyncio, sys
import grpc, grpc.aio
import pygrpc_native.aio

kind, flavour = sys.argv[1], sys.argv[2]
make = grpc.aio.server if kind == "grpcio" else pygrpc_native.aio.server


async def start():
    server = make()
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("t.T", {"U": grpc.unary_unary_rpc_method_handler(lambda r, c: r)}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


if flavour == "uvloop":
    import uvloop

    loop = uvloop.new_event_loop()
else:
    loop = asyncio.new_event_loop()
server, port = loop.run_until_complete(start())


def call():
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        return channel.unary_unary("/t.T/U")(b"hi", timeout=5)


print(loop.run_until_complete(loop.run_in_executor(None, call)))
loop.run_until_complete(loop.shutdown_default_executor())
loop.close()
"""


@pytest.mark.parametrize("loop", LOOPS)
def test_a_loop_closed_without_stop_says_nothing(loop):
    """An application that runs its own loop and closes it without
    server.stop(): grpc.aio's server goes quietly. Ours left asyncio's
    ERROR "Task was destroyed but it is pending!" (the task that waits for
    asyncio.run()'s final sweep) on stderr at exit."""

    def run(kind):
        done = subprocess.run(
            [sys.executable, "-c", _CLOSED_WITHOUT_STOP, kind, loop], capture_output=True, text=True, timeout=30
        )
        return done.stdout.strip(), "Task was destroyed" in done.stderr

    assert {kind: run(kind) for kind in KINDS} == {kind: ("b'hi'", False) for kind in KINDS}


_DROPPED_THEN_CLOSED = """
import asyncio, threading
import grpc
import pygrpc_native.aio


async def main():
    server = pygrpc_native.aio.server()
    server.add_insecure_port("127.0.0.1:0")
    await server.start()
    del server  # its stop begins on the loop


loop = asyncio.new_event_loop()
thread = threading.Thread(target=loop.run_forever, daemon=True)
thread.start()
asyncio.run_coroutine_threadsafe(main(), loop).result()
loop.call_soon_threadsafe(loop.stop)
thread.join()
loop.close()
print("closed")
"""


def test_a_server_dropped_on_a_loop_closed_at_once_says_nothing():
    """A started server's handle dropped on a loop that is stopped and
    closed at once: the stop that the drop began is let go quietly. Ours
    logged "Task was destroyed but it is pending!" for it and for the
    server's own task on every run (grpc.aio, for its shutdown task, 1 run
    in 6: not compared)."""
    done = subprocess.run([sys.executable, "-X", "dev", "-c", _DROPPED_THEN_CLOSED], capture_output=True, text=True, timeout=30)
    assert (done.stdout.strip(), "Task was destroyed" in done.stderr) == ("closed", False), done.stderr
