"""Run the same scenario against grpc.aio.server() and pygrpc_native.aio.server().

The asyncio counterpart of tests/diff/harness.py (whose State, Outcome and
call helpers it reuses). Each server is created, set up, started and stopped
on its own event loop, which runs in a background thread (plain asyncio or
uvloop: ``loop=``); the scenario itself is plain synchronous code that calls
the server with a grpcio channel, exactly as in the sync suite, and can run
coroutines on the server's loop with ``run.on_loop(coro)``.

Handlers are coroutines (or async generators) unless a test says otherwise;
they record what they saw into ``run.state`` (thread-safe: the test thread
reads it). Handlers that must wait for the test use ``wait_event`` /
``wait_until_async`` below, which poll without blocking the loop. Every
blocking step has a time limit: nothing here waits forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import queue
import threading
import time
from concurrent import futures
from typing import Any, Awaitable, Callable, List, Optional, Sequence, Tuple

import grpc
import grpc.aio

import pygrpc_native.aio
from diff import harness as _sync
from diff.harness import (  # noqa: F401 - re-exported for the aio tests
    CALL_TIMEOUT,
    SERVICE,
    WAIT,
    Outcome,
    State,
    for_both,
    future_outcome,
    method,
    peer_shape,
    setup_handlers,
    stream,
    unary,
    wait_until,
)

LOOPS = ("asyncio", "uvloop")

logging.getLogger("grpc._cython.cygrpc").setLevel(logging.CRITICAL)
logging.getLogger("grpc.aio").setLevel(logging.CRITICAL)
logging.getLogger("grpc._server").setLevel(logging.CRITICAL)
logging.getLogger("pygrpc_native").setLevel(logging.CRITICAL)
logging.getLogger("asyncio").setLevel(logging.CRITICAL)


# -- what the client sees ----------------------------------------------------------
#
# Response metadata is compared grouped by key: the order of values under one
# key is kept (gRPC guarantees it), the order across different keys is not
# (grpc-go keeps metadata in a map; tests named test_known_difference_*_order
# show that difference explicitly with the raw_* helpers).


def by_key(metadata: Any) -> Tuple[Tuple[str, Any], ...]:
    """Metadata pairs sorted by key only (a stable sort: the values of one
    key stay in the order they came)."""
    return tuple(sorted(((m[0], m[1]) for m in (metadata or ())), key=lambda kv: kv[0]))


def normalized(outcome: Outcome) -> Outcome:
    return dataclasses.replace(
        outcome, initial_metadata=by_key(outcome.initial_metadata), trailing_metadata=by_key(outcome.trailing_metadata)
    )


def call_unary(*args: Any, **kwargs: Any) -> Outcome:
    """harness.call_unary with response metadata grouped by key."""
    return normalized(_sync.call_unary(*args, **kwargs))


def call_stream(*args: Any, **kwargs: Any) -> Outcome:
    """harness.call_stream with response metadata grouped by key."""
    return normalized(_sync.call_stream(*args, **kwargs))


def outcome_of(err_or_call: Any, responses: Sequence[bytes] = ()) -> Outcome:
    return normalized(_sync.outcome_of(err_or_call, responses))


raw_call_unary = _sync.call_unary
raw_call_stream = _sync.call_stream


def factory(kind: str) -> Callable[..., grpc.aio.Server]:
    if kind == "grpcio":
        return grpc.aio.server
    if kind == "native":
        return pygrpc_native.aio.server
    raise ValueError(kind)


def new_loop(loop_kind: str) -> asyncio.AbstractEventLoop:
    if loop_kind == "asyncio":
        return asyncio.new_event_loop()
    if loop_kind == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    raise ValueError(loop_kind)


class LoopThread:
    """An event loop running in a daemon thread."""

    def __init__(self, loop_kind: str = "asyncio") -> None:
        self.kind = loop_kind
        self.loop = new_loop(loop_kind)
        self._thread = threading.Thread(target=self._main, name=f"aio-diff-{loop_kind}", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Awaitable[Any], timeout: float = WAIT) -> Any:
        """Runs coro on the loop; its result, waiting at most timeout."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[arg-type]
        try:
            return future.result(timeout)
        except futures.TimeoutError:
            future.cancel()
            raise

    def bounded(self, coro: Awaitable[Any], timeout: float = WAIT) -> Any:
        """Like run(), but a coroutine still running after timeout gives the
        string "hung" instead of an exception (compared like any outcome)."""
        try:
            return self.run(coro, timeout)
        except futures.TimeoutError:
            return "hung"

    def close(self) -> None:
        async def cancel_rest() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=1)

        with contextlib.suppress(Exception):
            self.run(cancel_rest(), 2)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(WAIT)
        if not self._thread.is_alive():
            with contextlib.suppress(Exception):
                self.loop.close()


@dataclasses.dataclass
class Run:
    kind: str
    loop_kind: str
    server: grpc.aio.Server
    port: int
    channel: grpc.Channel
    state: State
    target: str
    loop: LoopThread

    def on_loop(self, coro: Awaitable[Any], timeout: float = WAIT) -> Any:
        return self.loop.run(coro, timeout)


async def wait_event(event: threading.Event, timeout: float = WAIT) -> bool:
    """Waits (without blocking the loop) for a threading.Event set by the test."""
    deadline = time.monotonic() + timeout
    while not event.is_set():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.005)
    return True


async def wait_until_async(predicate: Callable[[], bool], timeout: float = WAIT) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.005)
    return True


class DaemonThreadPool(futures.Executor):
    """The reference server's migration thread pool: grpc.aio can leave a
    pool thread blocked for good on a future of its loop once the call has
    ended and the loop has closed (a plain-function stream handler whose
    deadline passed: "coroutine 'Queue.put' was never awaited"), and a
    ThreadPoolExecutor's threads, which aren't daemons, then keep the test
    process from exiting after every test has passed (seen under Bazel).
    Ours keeps the ThreadPoolExecutor: a thread of ours left stuck should
    hang the run, as it would hang a user's process."""

    def __init__(self, workers: int, name: str) -> None:
        self._work: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._run, name=f"{name}_{i}", daemon=True) for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> futures.Future:
        future: futures.Future = futures.Future()
        self._work.put((future, fn, args, kwargs))
        return future

    def _run(self) -> None:
        while (item := self._work.get()) is not None:
            future, fn, args, kwargs = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # noqa: BLE001 - the future carries it
                future.set_exception(exc)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if cancel_futures:
            while True:
                try:
                    item = self._work.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        for _ in self._threads:
            self._work.put(None)
        if wait:
            for thread in self._threads:
                thread.join()


@contextlib.contextmanager
def serving(
    kind: str,
    setup: Callable[[grpc.aio.Server, State], None],
    ports: Sequence[Tuple[str, Tuple[Any, ...]]] = _sync.ANY_PORT,
    *,
    loop: str = "asyncio",
    workers: int = 4,
    stop_grace: Optional[float] = 0,
    **server_kwargs: Any,
):
    """An aio server of one kind on its own loop thread, set up with
    setup(server, state), given ports and started; a harness.Served.
    Stopped at the end."""
    loop_thread = LoopThread(loop)
    name = f"aio-diff-{kind}"
    pool: futures.Executor = (
        DaemonThreadPool(workers, name)
        if kind == "grpcio"
        else futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
    )
    state = State()
    server = None

    async def create_and_start() -> List[int]:
        nonlocal server
        server = factory(kind)(pool, **server_kwargs)
        setup(server, state)
        bound = [getattr(server, add)(*args) for add, args in ports]
        await server.start()
        return bound

    def stop() -> None:
        if server is not None:
            loop_thread.bounded(server.stop(stop_grace), WAIT)

    try:
        bound = loop_thread.run(create_and_start())
        yield _sync.Served(kind, server, state, bound, stop, loop_thread)
    finally:
        stop()
        loop_thread.close()
        pool.shutdown(wait=False, cancel_futures=True)


@contextlib.contextmanager
def running(
    kind: str,
    setup: Callable[[grpc.aio.Server, State], None],
    *,
    loop: str = "asyncio",
    address: str = "[::]:0",
    host: str = "127.0.0.1",
    channel_options: Optional[Sequence[Tuple[str, Any]]] = None,
    **serving_kwargs: Any,
):
    """A started aio server of one kind on its own loop thread (serving(),
    on address), with a sync grpcio channel to it; stopped at the end."""
    with serving(kind, setup, [("add_insecure_port", (address,))], loop=loop, **serving_kwargs) as served:
        with _sync.channel_to(served, host, channel_options) as (channel, target):
            yield Run(kind, loop, served.server, served.ports[0], channel, served.state, target, served.loop)


def both(setup, scenario: Callable[[Run], Any], **kwargs: Any) -> Tuple[Any, Any]:
    """Runs scenario against a fresh grpc.aio server and a fresh native aio server."""
    return _sync.on_each_kind(running, setup, scenario, **kwargs)


def same(setup, scenario: Callable[[Run], Any], **kwargs: Any) -> Any:
    """Runs scenario against both servers, asserts identical results, and
    returns grpc.aio's (so a test can also pin what grpc.aio does)."""
    ref, ours = both(setup, scenario, **kwargs)
    assert ours == ref, f"\n  grpc.aio.server():          {ref!r}\n  pygrpc_native.aio.server(): {ours!r}"
    return ref


def describe(exc: BaseException) -> str:
    """'Module.Class: message' for an exception a handler saw."""
    cls = type(exc)
    return f"{cls.__module__}.{cls.__qualname__}: {exc}"
