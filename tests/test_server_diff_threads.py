"""How server() spreads calls over the user's executor, against grpc.server():
every call the executor will take runs at once, whatever kind of executor it
is, and calls whose client has gone before a handler picked them up are not
run, so a burst of abandoned calls doesn't delay the live ones."""

from __future__ import annotations

import contextlib
import threading
import time
from concurrent import futures

import grpc
import pytest

from diff.harness import KINDS, WAIT, factory, method, setup_handlers, unary

pytestmark = pytest.mark.timeout(120)


class DelegatingExecutor(futures.Executor):
    """An executor that is not a ThreadPoolExecutor and says nothing about
    how many threads it has (no _max_workers)."""

    def __init__(self, threads: int) -> None:
        self._pool = futures.ThreadPoolExecutor(threads)

    def submit(self, fn, /, *args, **kwargs):
        return self._pool.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)


@contextlib.contextmanager
def _serving(kind: str, executor: futures.Executor, handlers):
    """A started server of one kind on `executor`, with a channel to it;
    server, channel and executor are closed at the end."""
    server = factory(kind)(executor)
    setup_handlers(handlers)(server, None)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        grpc.channel_ready_future(channel).result(timeout=WAIT)
        yield channel
    finally:
        server.stop(0).wait(WAIT)
        channel.close()
        executor.shutdown(wait=False)


def _blocking_calls_started(kind: str, executor: futures.Executor, calls: int) -> int:
    """How many of `calls` blocking calls run at the same time: each handler
    waits until all have started (or 10 s pass)."""
    count = [0]
    lock = threading.Lock()
    everyone = threading.Event()

    def block(request, context):
        with lock:
            count[0] += 1
            if count[0] == calls:
                everyone.set()
        everyone.wait(10)
        return request

    with _serving(kind, executor, {"Block": unary(block)}) as channel:
        stub = channel.unary_unary(method("Block"))
        pending = [stub.future(b"x", timeout=30) for _ in range(calls)]
        everyone.wait(15)
        with lock:
            seen = count[0]
        for f in pending:
            f.result(timeout=30)
        return seen


@pytest.mark.parametrize("make_executor", [lambda: DelegatingExecutor(32), lambda: futures.ThreadPoolExecutor(32)],
                         ids=["custom-executor", "thread-pool"])
def test_every_blocking_call_the_executor_takes_runs_at_once(make_executor):
    seen = {kind: _blocking_calls_started(kind, make_executor(), 25) for kind in KINDS}
    assert seen == {"grpcio": 25, "native": 25}


def test_blocking_calls_beyond_the_pool_wait_for_a_thread():
    """With 4 threads, 4 blocking calls run and the rest wait, on both."""
    def started(kind):
        gate = threading.Event()
        running = []
        lock = threading.Lock()

        def block(request, context):
            with lock:
                running.append(request)
            gate.wait(10)
            return request

        with _serving(kind, futures.ThreadPoolExecutor(4), {"Block": unary(block)}) as channel:
            stub = channel.unary_unary(method("Block"))
            pending = [stub.future(b"%d" % i, timeout=30) for i in range(10)]
            deadline = time.monotonic() + WAIT
            while len(running) < 4 and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.3)  # room for a fifth to start, if one wrongly could
            with lock:
                n = len(running)
            gate.set()
            assert sorted(f.result(timeout=30) for f in pending) == sorted(b"%d" % i for i in range(10))
            return n

    assert {kind: started(kind) for kind in KINDS} == {"grpcio": 4, "native": 4}


class _AsksEachCall(grpc.GenericRpcHandler):
    """A generic handler that isn't grpcio's dictionary (so it is asked on
    every call): it raises for /Raise, and knows no other method."""

    def service(self, details):
        if details.method.endswith("/Raise"):
            raise ValueError("service() failed")
        return None


def _answers_with_every_thread_held(kind: str):
    """With both threads of the pool held by handlers, calls that no
    handler serves: each one's (code, details) within 2 s (DEADLINE_EXCEEDED
    if it waited for a thread)."""
    gate = threading.Event()
    held = threading.Semaphore(0)

    def block(request, context):
        held.release()
        gate.wait(10)
        return request

    server = factory(kind)(futures.ThreadPoolExecutor(2))
    setup_handlers({"Block": unary(block)})(server, None)
    server.add_generic_rpc_handlers((_AsksEachCall(),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            blocked = [channel.unary_unary(method("Block")).future(b"x", timeout=30) for _ in range(2)]
            for _ in blocked:
                assert held.acquire(timeout=WAIT)
            out = []
            for path in (method("Unknown"), "/other.Service/Method", method("Raise")):
                try:
                    channel.unary_unary(path)(b"", timeout=2)
                    out.append("OK")
                except grpc.RpcError as err:
                    out.append((err.code(), err.details()))
            gate.set()
            for f in blocked:
                f.result(timeout=WAIT)
            return out
    finally:
        gate.set()
        server.stop(0).wait(WAIT)


def test_calls_no_handler_serves_are_answered_while_every_thread_is_held():
    """grpcio finds handlers on its serving thread, so a call to a method
    no handler knows, or whose generic handler raises, is answered at once
    however busy the pool is; ours looked them up in the pool, and they
    waited for a thread (their deadline, here)."""
    assert {kind: _answers_with_every_thread_held(kind) for kind in KINDS} == {
        kind: [
            (grpc.StatusCode.UNIMPLEMENTED, "Method not found!"),
            (grpc.StatusCode.UNIMPLEMENTED, "Method not found!"),
            (grpc.StatusCode.UNKNOWN, "Error in service handler!"),
        ]
        for kind in KINDS
    }


def _abandoned_burst(kind: str, calls: int) -> tuple[int, float]:
    """`calls` calls cancelled 5 ms after they start, against handlers that
    sleep 20 ms on 16 threads; then one live call. Returns how many handlers
    started once every call was cancelled, and how long the live call took."""
    started: list[float] = []
    lock = threading.Lock()

    def slow(request, context):
        with lock:
            started.append(time.monotonic())
        time.sleep(0.02)
        return request

    with _serving(kind, futures.ThreadPoolExecutor(16), {"Slow": unary(slow)}) as channel:
        stub = channel.unary_unary(method("Slow"))
        burst = [stub.future(b"x", timeout=60) for _ in range(calls)]
        time.sleep(0.005)
        for f in burst:
            f.cancel()
        cancelled = time.monotonic()
        assert stub(b"live", timeout=60) == b"live"
        took = time.monotonic() - cancelled
        time.sleep(0.2)  # handlers already running finish
        with lock:
            # A handler that had started, or was about to, as its call was
            # cancelled may enter a moment later; the live call's own is one.
            return sum(1 for t in started if t > cancelled + 0.05), took


def test_calls_abandoned_while_queued_are_not_run():
    # How many run before their cancel depends on how fast the client
    # creates and cancels them (0.5-1.2 s for 1000 under load), so only what
    # runs afterwards is counted. Running every abandoned call still queued
    # would start hundreds of handlers over about a second (20 ms each on 16
    # threads) before the live one; skipping them answers it at once. The
    # bounds leave room for a slow machine, and are far from running them.
    calls = 1000
    (grpcio_late, grpcio_took), (native_late, native_took) = (_abandoned_burst(kind, calls) for kind in KINDS)
    assert native_late < 100, (native_late, grpcio_late)
    assert native_took < 1.0, (native_took, grpcio_took)
    assert grpcio_late < 100 and grpcio_took < 1.0, "the control itself"


def _longest_job_wait(kind: str) -> float:
    """Two clients keep calls coming (4 at a time each) to a server on a
    pool of one thread, which the application also gives jobs of its own,
    one every 50 ms for a second: the longest a job waited to start."""
    pool = futures.ThreadPoolExecutor(1)
    waits = []
    with _serving(kind, pool, {"Fast": unary(lambda request, context: request)}) as channel:
        stub = channel.unary_unary(method("Fast"))
        stop = threading.Event()

        def client() -> None:
            while not stop.is_set():
                for f in [stub.future(b"x", timeout=WAIT) for _ in range(4)]:
                    f.result()

        clients = [threading.Thread(target=client) for _ in range(2)]
        for c in clients:
            c.start()
        try:
            time.sleep(0.2)
            until = time.monotonic() + 1.0
            while time.monotonic() < until:
                queued = time.monotonic()
                waits.append(pool.submit(lambda queued=queued: time.monotonic() - queued).result(timeout=WAIT))
                time.sleep(0.05)
        finally:
            stop.set()
            for c in clients:
                c.join(WAIT)
    return max(waits)


def test_jobs_sharing_the_pool_are_not_held_up_by_calls():
    """grpcio submits each call to the pool as a job of its own, so the
    application's jobs in the same pool take their turn between calls
    (waits of a few ms here); ours kept the pool's thread running calls as
    long as they came: jobs waited up to 0.3-1.6 s."""
    waits = {kind: _longest_job_wait(kind) for kind in KINDS}
    assert all(wait < 0.2 for wait in waits.values()), waits


class _CancelsFirstJob(futures.ThreadPoolExecutor):
    """A pool whose first job is cancelled before it runs (as a shutdown
    with cancel_futures=True cancels the jobs still queued)."""

    def __init__(self) -> None:
        super().__init__(max_workers=4)
        self._first = True

    def submit(self, fn, /, *args, **kwargs):
        if self._first:
            self._first = False
            cancelled: futures.Future = futures.Future()
            cancelled.cancel()
            return cancelled
        return super().submit(fn, *args, **kwargs)


def test_a_job_the_pool_cancels_loses_no_later_call():
    """grpcio loses the call whose job was cancelled (it waits for its
    deadline) and serves the rest. Ours then served no call again: the
    cancelled drain task stayed counted, and the monitor waited for it."""

    def run(kind):
        with _serving(kind, _CancelsFirstJob(), {"Echo": unary(lambda req, ctx: req)}) as channel:
            codes = []
            for _ in range(4):
                try:
                    channel.unary_unary(method("Echo"))(b"x", timeout=2)
                    codes.append(grpc.StatusCode.OK)
                except grpc.RpcError as err:
                    codes.append(err.code())
            return codes

    ref, ours = (run(kind) for kind in KINDS)
    assert ref == ours == [grpc.StatusCode.DEADLINE_EXCEEDED] + [grpc.StatusCode.OK] * 3


def test_known_difference_request_deserializers_run_on_the_handlers_thread():
    # grpcio deserializes a request on its one serving thread, outside the
    # pool; ours on the pool thread that reads it, the handler's (README).
    seen = {}
    for kind in KINDS:
        where = []

        def deserialize(raw, where=where):
            where.append(("deserializer", threading.current_thread().name.startswith("pool")))
            return raw

        def handler(request, context, where=where):
            where.append(("handler", threading.current_thread().name.startswith("pool")))
            return request

        handlers = {"M": unary(handler, request_deserializer=deserialize)}
        with _serving(kind, futures.ThreadPoolExecutor(2, thread_name_prefix="pool"), handlers) as channel:
            assert channel.unary_unary(method("M"))(b"x", timeout=WAIT) == b"x"
        seen[kind] = where
    assert seen == {
        "grpcio": [("deserializer", False), ("handler", True)],
        "native": [("deserializer", True), ("handler", True)],
    }
