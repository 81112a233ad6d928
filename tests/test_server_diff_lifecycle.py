"""Differential tests: the grpc.Server lifecycle — add_insecure_port address
forms, start, stop(grace) and its threading.Event, wait_for_termination —
on grpc.server() and pygrpc_native.server()."""

import asyncio
import contextlib
import gc
import os
import socket
import subprocess
import sys
import threading
import time
import weakref
from concurrent import futures

import grpc
import grpc.aio
import pytest

import pygrpc_native
import pygrpc_native.aio

from diff.harness import KINDS, WAIT, call_unary, factory, for_both, future_outcome, method, setup_handlers, unary, wait_until

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


class _Server:
    """A server of one kind with a slow method and an echo, for lifecycle
    scenarios that drive start/stop themselves."""

    def __init__(self, kind, address="[::]:0", handler_seconds=0.3):
        self.pool = futures.ThreadPoolExecutor(8)
        self.server = factory(kind)(self.pool)
        self.entered = threading.Event()
        self.inactive = threading.Event()
        self.callback = threading.Event()
        self.handler_done = threading.Event()

        self.handler_errors = []

        def slow(req, ctx):
            ctx.add_callback(self.callback.set)
            self.entered.set()
            deadline = time.monotonic() + handler_seconds
            try:
                while time.monotonic() < deadline:
                    if not ctx.is_active():
                        self.inactive.set()
                        break
                    time.sleep(0.01)
            except Exception as exc:  # noqa: BLE001 - is_active() must not raise
                self.handler_errors.append(f"{type(exc).__name__}: {exc}")
            self.handler_done.set()
            return b"slow done"

        setup_handlers({"Slow": unary(slow), "Echo": unary(lambda req, ctx: req)})(self.server, None)
        self.port = self.server.add_insecure_port(address)
        # "localhost" may end up bound in one family only (the port taken in
        # the other); the client resolves the name and tries both.
        self.host = "localhost" if address.startswith("localhost") else "127.0.0.1"

    def channel(self):
        return grpc.insecure_channel(f"{self.host}:{self.port}")

    def close(self):
        # stop(0), not stop(None): stop(None) blocks until the server ends,
        # and a test must not hang if it never does.
        self.server.stop(0).wait(2)
        self.pool.shutdown(wait=False, cancel_futures=True)


def _bounded(fn, timeout=WAIT):
    """fn() in a daemon thread: its result, or "hung" if it doesn't return
    within timeout (for calls such as stop(None) that block by design)."""
    result = []
    thread = threading.Thread(target=lambda: result.append(fn()), daemon=True)
    thread.start()
    thread.join(timeout)
    return result[0] if result else "hung"


@contextlib.contextmanager
def _slow_call_in_flight(kind, handler_seconds, call_timeout=10):
    """A started _Server of kind, a channel to it and the future of a Slow
    call whose handler has begun; the server is closed at the end."""
    s = _Server(kind, handler_seconds=handler_seconds)
    try:
        s.server.start()
        with s.channel() as ch:
            future = ch.unary_unary(method("Slow")).future(b"", timeout=call_timeout)
            assert s.entered.wait(WAIT)
            yield s, ch, future
    finally:
        s.close()


# -- servers and ports -------------------------------------------------------------


def test_isinstance_grpc_server():
    def check(kind):
        pool = futures.ThreadPoolExecutor(1)
        try:
            server = factory(kind)(pool)
            result = isinstance(server, grpc.Server)
            server.stop(None)
            return result
        finally:
            pool.shutdown(wait=False)

    assert for_both(check) is True


@pytest.mark.parametrize("address", ["[::]:0", "localhost:0", "0.0.0.0:0", "127.0.0.1:0"])
def test_add_insecure_port_address_forms(address):
    def check(kind):
        s = _Server(kind, address=address)
        try:
            s.server.start()
            port_ok = isinstance(s.port, int) and 0 < s.port < 65536
            with s.channel() as ch:
                out = call_unary(ch, method("Echo"), b"addr")
            return port_ok, out.code, out.responses
        finally:
            s.close()

    assert for_both(check) == (True, SC.OK, (b"addr",))


@pytest.mark.parametrize("probe_started", [True, False], ids=["probe-started", "probe-never-started"])
def test_port_is_free_again_after_stop(probe_started):
    # A server binds a port, (starts,) stops; a new server of the same kind
    # can bind the same port at once.
    def check(kind):
        probe = _Server(kind)
        port = probe.port
        if probe_started:
            probe.server.start()
        probe.close()
        pool = futures.ThreadPoolExecutor(2)
        server = factory(kind)(pool)
        try:
            got = server.add_insecure_port(f"[::]:{port}")
            return got == port
        except Exception as exc:  # noqa: BLE001
            return type(exc).__name__
        finally:
            server.stop(None)
            pool.shutdown(wait=False)

    assert for_both(check) is True


def test_start_twice_and_after_stop_raise():
    def check(kind):
        results = []
        for stop_first in (False, True):
            s = _Server(kind)
            try:
                s.server.start()
                if stop_first:
                    s.server.stop(None)
                try:
                    s.server.start()
                    results.append("started")
                except Exception as exc:  # noqa: BLE001
                    results.append((type(exc).__name__, str(exc)))
            finally:
                s.close()
        return results

    assert for_both(check) == [
        ("ValueError", "Cannot start already-started server!"),
        ("ValueError", "the server has already started"),
    ]


# -- stop(grace) ---------------------------------------------------------------------


def test_stop_with_grace_lets_in_flight_call_finish():
    def check(kind):
        with _slow_call_in_flight(kind, 0.3) as (s, ch, future):
            event = s.server.stop(3)
            set_at_once = event.is_set()
            result = future.result(timeout=WAIT)
            finished = event.wait(WAIT)
            return type(event) is threading.Event, set_at_once, result, finished, s.inactive.is_set()

    assert for_both(check) == (True, False, b"slow done", True, False)


def test_stop_with_a_negative_grace_cancels_at_once():
    # grpcio waits that long (not at all); ours raised ValueError.
    def check(kind):
        with _slow_call_in_flight(kind, 3) as (s, ch, future):
            finished = s.server.stop(-1).wait(WAIT)
            return finished, future_outcome(future)

    assert for_both(check) == (True, SC.UNAVAILABLE)


@pytest.mark.parametrize("grace,error", [("1", TypeError), (float("nan"), ValueError)], ids=["str", "nan"])
def test_known_difference_stop_with_a_grace_that_is_no_number(grace, error):
    """README: grpcio's stop() returns, refuses new calls, and its thread
    that would cancel the calls in flight after the grace dies of the
    grace's error (the calls run to their end; NaN cancels them at once).
    Ours raises the error where stop() is called and changes nothing."""
    with _slow_call_in_flight("native", 0.5) as (s, ch, future):
        with pytest.raises(error):
            s.server.stop(grace)
        assert call_unary(ch, method("Echo"), b"still", timeout=2).code == SC.OK
        assert future.result(timeout=WAIT) == b"slow done"
        assert s.server.stop(None).is_set()


def test_stop_refuses_new_calls():
    def check(kind):
        with _slow_call_in_flight(kind, 0.5) as (s, ch, future):
            event = s.server.stop(3)
            # A new channel, and a new call on the existing channel.
            with s.channel() as fresh:
                new_channel = call_unary(fresh, method("Echo"), b"late", timeout=2).code
            if kind == "grpcio" and new_channel == SC.CANCELLED:
                # grpc.server() sometimes accepts the new connection and
                # then drops the call (seen once in CI); ours must still
                # refuse it with UNAVAILABLE, grpcio's usual answer.
                new_channel = SC.UNAVAILABLE
            same_channel = call_unary(ch, method("Echo"), b"late", timeout=2).code
            result = future.result(timeout=WAIT)
            event.wait(WAIT)
            return new_channel, same_channel, result

    assert for_both(check) == (SC.UNAVAILABLE, SC.UNAVAILABLE, b"slow done")


def test_stop_grace_expires_cancels_in_flight_call():
    def check(kind):
        with _slow_call_in_flight(kind, 5) as (s, ch, future):
            started = time.monotonic()
            event = s.server.stop(0.2)
            client = future_outcome(future)
            handler_saw_inactive = s.inactive.wait(2)
            callback_ran = s.callback.wait(2)
            finished = event.wait(2)
            took = time.monotonic() - started
            return client, handler_saw_inactive, s.handler_errors, callback_ran, finished, took < 3

    ref = for_both(check)
    assert ref[0] != "no answer" and ref[1:] == (True, [], True, True, True)


def test_stop_none_cancels_at_once():
    def check(kind):
        with _slow_call_in_flight(kind, 5) as (s, ch, future):
            event = _bounded(lambda: s.server.stop(None), timeout=3)
            set_on_return = event.is_set() if event != "hung" else event
            client = future_outcome(future)
            return set_on_return, client, s.inactive.wait(3), s.handler_errors

    ref = for_both(check)
    assert ref[0] is True and ref[1] != "no answer" and ref[2:] == (True, [])


@pytest.mark.parametrize("grace", [None, 0.2])
@pytest.mark.parametrize("limit", [None, 4], ids=["no-limit", "maximum_concurrent_rpcs"])
def test_stop_with_every_thread_held_and_a_call_queued(grace, limit):
    """Every pool thread in a handler that ignores its cancellation, one
    more call waiting for a thread: stop(None) returns at once and
    stop(0.2)'s event is set at the end of its grace, as in grpcio.
    pygrpc_native waited for a held handler to return (2.6 s here; for
    ever with one that never does): the queued call was never let go."""

    def check(kind):
        pool = futures.ThreadPoolExecutor(1)
        release = threading.Event()
        entered = threading.Event()

        def held(req, ctx):
            entered.set()
            release.wait(10)
            return req

        server = factory(kind)(pool, maximum_concurrent_rpcs=limit)
        setup_handlers({"Held": unary(held)})(server, None)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        try:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
                calls = [ch.unary_unary(method("Held")).future(b"", timeout=20) for _ in range(2)]
                assert entered.wait(WAIT)
                time.sleep(0.3)  # the second call waits for the thread
                started = time.monotonic()
                event = _bounded(lambda: server.stop(grace), timeout=5)
                stopped = event != "hung" and event.wait(5)
                took = time.monotonic() - started
                outcomes = sorted(future_outcome(f).name for f in calls)
                return stopped, took < 1.5, outcomes
        finally:
            release.set()
            pool.shutdown(wait=False)

    assert for_both(check) == (True, True, ["UNAVAILABLE", "UNAVAILABLE"])


def test_later_stop_shortens_a_running_graceful_stop():
    # grpcio: every stop(grace) cancels what is left after its own grace, so
    # stop(None) during a stop(30) ends the server at once.
    def check(kind):
        with _slow_call_in_flight(kind, 30, call_timeout=60) as (s, ch, future):
            first = s.server.stop(30)
            second = _bounded(lambda: s.server.stop(None), timeout=WAIT)
            client = future_outcome(future)
            return second != "hung", first.wait(WAIT), client, s.inactive.wait(WAIT)

    assert for_both(check) == (True, True, SC.UNAVAILABLE, True)


def test_concurrent_stops_end_at_the_shortest_grace():
    def check(kind):
        with _slow_call_in_flight(kind, 30, call_timeout=60) as (s, ch, future):
            events = {}
            threads = [
                threading.Thread(target=lambda g=grace: events.__setitem__(g, s.server.stop(g)), daemon=True)
                for grace in (30, None, 0)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(WAIT)
            all_returned = len(events) == 3
            all_set = all(event.wait(WAIT) for event in events.values())
            client = future_outcome(future)
            return all_returned, all_set, client

    assert for_both(check) == (True, True, SC.UNAVAILABLE)


def test_stop_idle_server_and_stop_twice():
    def check(kind):
        s = _Server(kind)
        try:
            s.server.start()
            first = s.server.stop(1)
            first_done = first.wait(WAIT)
            second = s.server.stop(1)
            return first_done, second.is_set(), second is first
        finally:
            s.close()

    assert for_both(check)[:2] == (True, True)


def test_stop_before_start():
    # stop() on a server that never started returns at once and changes
    # nothing: the server then starts and serves at its port, and a wait
    # for its end times out. Ours stopped it for good (start() raised).
    def check(kind):
        pool = futures.ThreadPoolExecutor(1)
        server = factory(kind)(pool)
        setup_handlers({"Echo": unary(lambda req, ctx: req)})(server, None)
        port = server.add_insecure_port("127.0.0.1:0")
        with_grace = _bounded(lambda: server.stop(1).wait(2))
        without = _bounded(lambda: server.stop(None).is_set())
        waited = server.wait_for_termination(0.2)
        server.start()
        try:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                answer = channel.unary_unary(method("Echo"))(b"served", timeout=5)
        finally:
            server.stop(None)
            pool.shutdown(wait=False)
        return with_grace, without, waited, answer

    assert for_both(check) == (True, True, True, b"served")


# -- no thread pool -------------------------------------------------------------------


def _server_without_pool(kind):
    server = factory(kind)(None)
    setup_handlers({"Echo": unary(lambda req, ctx: req)})(server, None)
    return server, server.add_insecure_port("127.0.0.1:0")


def test_server_without_thread_pool_is_created_and_stops():
    def check(kind):
        server, port = _server_without_pool(kind)
        server.start()
        return isinstance(port, int), _bounded(lambda: server.stop(1).wait(WAIT))

    assert for_both(check) == (True, True)


# Run in a process of its own, which ends with os._exit: grpcio's server
# can't be stopped once its serving thread died, and its finalizer would wait
# for that forever at interpreter exit.
_CALL_WITHOUT_POOL = """
import os, sys
from concurrent import futures
import grpc, pygrpc_native
kind, pool_given = sys.argv[1:]
pool = None
if pool_given == "shut down":
    pool = futures.ThreadPoolExecutor(2)
    pool.shutdown()
if pool_given == "submit raises":
    class Refusing(futures.Executor):
        def submit(self, fn, /, *args, **kwargs):
            raise ValueError("no")
    pool = Refusing()
server = (grpc.server if kind == "grpcio" else pygrpc_native.server)(pool)
handler = grpc.unary_unary_rpc_method_handler(lambda req, ctx: req)
server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("diff.Diff", {"Echo": handler}),))
port = server.add_insecure_port("127.0.0.1:0")
server.start()
codes = []
with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
    for _ in range(2):
        try:
            ch.unary_unary("/diff.Diff/Echo")(b"x", timeout=1)
            codes.append("OK")
        except grpc.RpcError as err:
            codes.append(err.code().name)
print(codes[0], codes[1], server.stop(0).wait(2), flush=True)
os._exit(0)
"""


@pytest.mark.parametrize("pool", ["None", "shut down", "submit raises"])
def test_known_difference_call_to_server_without_thread_pool(pool):
    """README "Known differences": with thread_pool=None, a pool shut
    down, or one whose submit() raises, neither server can run a handler,
    and the first call that needs one brings grpcio's down (AttributeError
    'NoneType' object has no attribute 'submit'; RuntimeError cannot
    schedule new futures after shutdown; the ValueError): its serving
    thread dies, that call and every later one wait for their deadline,
    and stop() never completes. pygrpc_native answers each call at once
    with UNAVAILABLE (the pool is tried again for the next), and stop()
    returns. Ours stopped serving at a ValueError, with nothing printed."""
    outcomes = {}
    for kind in KINDS:
        done = subprocess.run(
            [sys.executable, "-c", _CALL_WITHOUT_POOL, kind, pool], capture_output=True, text=True, timeout=30
        )
        outcomes[kind] = done.stdout.split()
    assert outcomes["grpcio"] == ["DEADLINE_EXCEEDED", "DEADLINE_EXCEEDED", "False"]
    assert outcomes["native"] == ["UNAVAILABLE", "UNAVAILABLE", "True"]


# -- wait_for_termination ---------------------------------------------------------------


def test_wait_for_termination_timeout_and_after_stop():
    def check(kind):
        s = _Server(kind)
        try:
            s.server.start()
            started = time.monotonic()
            timed_out = s.server.wait_for_termination(timeout=0.2)
            waited = time.monotonic() - started
            s.server.stop(0).wait(WAIT)
            after_stop = s.server.wait_for_termination(timeout=1)
            return timed_out, 0.15 < waited < 2, after_stop
        finally:
            s.close()

    assert for_both(check) == (True, True, False)


def test_wait_for_termination_returns_when_stopped_from_another_thread():
    def check(kind):
        s = _Server(kind)
        try:
            s.server.start()
            threading.Timer(0.2, lambda: s.server.stop(0)).start()
            started = time.monotonic()
            result = s.server.wait_for_termination(timeout=5)
            return result, time.monotonic() - started < 3
        finally:
            s.close()

    assert for_both(check) == (False, True)


def test_del_stops_the_server_and_unblocks_wait_for_termination():
    # grpcio's _server_wait_for_termination_test calls __del__() by hand.
    def check(kind):
        s = _Server(kind)
        try:
            s.server.add_insecure_port("127.0.0.1:0")
            s.server.start()
            threading.Timer(0.2, s.server.__del__).start()
            waited_out = s.server.wait_for_termination(timeout=5)
            return waited_out, s.server.wait_for_termination(timeout=0)
        finally:
            s.close()

    assert for_both(check) == (False, False)


def test_servers_have_grpcios_public_names():
    # What the user holds shows grpcio's names and no others (it used to
    # show the server's internals: front, methods, lookup...).
    def public(obj):
        return {name for name in dir(obj) if not name.startswith("_")}

    pool = futures.ThreadPoolExecutor(1)
    try:
        assert public(pygrpc_native.server(pool)) == public(grpc.server(pool))
    finally:
        pool.shutdown(wait=False)

    async def aio_names():
        return public(pygrpc_native.aio.server()), public(grpc.aio.server())

    ours, ref = asyncio.run(aio_names())
    assert ours == ref


def test_a_started_server_dropped_without_stop_stops():
    # The last reference to a started server goes: grpcio's is collected
    # and stops (its port refuses calls). Ours used to be kept alive by its
    # own threads and served on for good.
    def check(kind):
        pool = futures.ThreadPoolExecutor(2)

        def start():
            server = factory(kind)(pool)
            setup_handlers({"Echo": unary(lambda req, ctx: req)})(server, None)
            port = server.add_insecure_port("127.0.0.1:0")
            server.start()
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                served = call_unary(channel, method("Echo"), b"x").code
            return weakref.ref(server), port, served

        try:
            ref, port, served = start()
            gc.collect()
            wait_until(lambda: ref() is None)
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                # The stop runs on a thread of its own: the port closes soon after.
                wait_until(lambda: call_unary(channel, method("Echo"), b"x", timeout=1).code != SC.OK)
                after = call_unary(channel, method("Echo"), b"x", timeout=1).code
            return served, ref() is None, after
        finally:
            pool.shutdown(wait=False)

    assert for_both(check) == (SC.OK, True, SC.UNAVAILABLE)


def test_a_server_dropped_without_stop_lets_its_calls_in_flight_finish():
    """grpcio's server, collected while a call runs, shuts down without a
    time limit: the call finishes (new calls are refused: the test above).
    Ours cancelled it (stop(None))."""

    def check(kind):
        pool = futures.ThreadPoolExecutor(2)
        entered = threading.Event()

        def slow(request, context):
            entered.set()
            time.sleep(1)
            return b"done"

        try:
            server = factory(kind)(pool)
            setup_handlers({"Slow": unary(slow)})(server, None)
            port = server.add_insecure_port("127.0.0.1:0")
            server.start()
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                in_flight = channel.unary_unary(method("Slow")).future(b"", timeout=10)
                assert entered.wait(WAIT)
                del server
                gc.collect()
                return future_outcome(in_flight), in_flight.result() if in_flight.done() else None
        finally:
            pool.shutdown(wait=False)

    assert for_both(check) == ("ok", b"done")


def _descriptors():
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_servers_never_started_leak_no_descriptors():
    """A server() created and dropped without start(), with or without a
    port that could not be bound or a stop(), gives back what it opened.
    Ours kept a pipe (two descriptors) for each."""
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    pool = futures.ThreadPoolExecutor(1)
    try:
        for variant in ("created", "port in use", "stopped"):
            server = pygrpc_native.server(pool)
            del server
            gc.collect()
            before = _descriptors()
            for _ in range(10):
                server = pygrpc_native.server(pool)
                if variant != "created":
                    with contextlib.suppress(RuntimeError):
                        server.add_insecure_port(f"127.0.0.1:{busy.getsockname()[1]}")
                if variant == "stopped":
                    server.stop(None)
                del server
                gc.collect()
            assert wait_until(lambda: _descriptors() <= before), (variant, before, _descriptors())
    finally:
        busy.close()
        pool.shutdown(wait=False)


# A server kept in a module's globals until the interpreter exits, in each
# stage of its life; the script prints its stage, then exits normally.
_KEPT_UNTIL_EXIT = """
import sys
from concurrent import futures
import grpc, pygrpc_native
kind, stage = sys.argv[1:]
server = (grpc.server if kind == "grpcio" else pygrpc_native.server)(futures.ThreadPoolExecutor(2))
if stage != "created":
    server.add_insecure_port("127.0.0.1:0")
    server.start()
if stage == "stopped":
    server.stop(None)
print(stage, flush=True)
"""


@pytest.mark.parametrize("stage", ["created", "started", "stopped"])
def test_interpreter_exits_with_a_server_in_globals(stage):
    # A server created and never started used to hang the interpreter at
    # exit: its __del__ started a thread, which can't run while Python
    # finalizes (before 3.12 Thread.start() then waits forever).
    def exits(kind):
        try:
            done = subprocess.run(
                [sys.executable, "-c", _KEPT_UNTIL_EXIT, kind, stage], capture_output=True, text=True, timeout=20
            )
        except subprocess.TimeoutExpired:
            return "still running after 20 s"
        return done.returncode, done.stdout.strip()

    assert for_both(exits) == (0, stage)


# -- ports after start ---------------------------------------------------------------------


def test_second_server_on_the_same_port():
    """grpcio sets SO_REUSEPORT unless grpc.so_reuseport is an integer of
    0 or less (a value that isn't an integer leaves the default, on): a
    second server may bind a port a first one serves, unless either says
    0 or less (ours took -1 as on). aio.server() alike."""
    reuse = "grpc.so_reuseport"
    cases = [
        ((), ()),
        ((), ((reuse, 0),)),
        (((reuse, 0),), ()),
        ((), ((reuse, 2),)),
        ((), ((reuse, "0"),)),
        (((reuse, 1),), ((reuse, False),)),
        ((), ((reuse, -1),)),
    ]
    pool = futures.ThreadPoolExecutor(2)

    def outcomes(make):
        out = []
        for first_options, second_options in cases:
            first = make(pool, options=first_options)
            port = first.add_insecure_port("127.0.0.1:0")
            first.start()
            second = make(pool, options=second_options)
            try:
                out.append(second.add_insecure_port(f"127.0.0.1:{port}") == port)
            except Exception as exc:  # noqa: BLE001
                out.append(type(exc).__name__)
            finally:
                second.stop(None)
                first.stop(None)
        return out

    async def aio_binds_twice(make):
        first = make()
        port = first.add_insecure_port("127.0.0.1:0")
        await first.start()
        second = make()
        try:
            return second.add_insecure_port(f"127.0.0.1:{port}") == port
        finally:
            await second.stop(None)
            await first.stop(None)

    try:
        expected = [True, "RuntimeError", "RuntimeError", True, True, "RuntimeError", "RuntimeError"]
        assert outcomes(grpc.server) == expected
        assert outcomes(pygrpc_native.server) == expected
        assert asyncio.run(aio_binds_twice(grpc.aio.server)) is True
        assert asyncio.run(aio_binds_twice(pygrpc_native.aio.server)) is True
    finally:
        pool.shutdown(wait=False)
