"""One differential scenario, run against every kind of server.

A *flavour* names the pair of servers a scenario compares: ``sync`` is
grpc.server() against pygrpc_native.server() (tests/diff/harness.py);
``asyncio`` and ``uvloop`` are grpc.aio.server() against
pygrpc_native.aio.server() on that event loop (tests/diff/aio_harness.py).
A table test (tests/test_diff_*.py) takes a ``flavour`` parameter and writes
its scenario once: handlers, client steps and what is compared. Where the
two kinds of grpcio server themselves behave differently, the test pins
each with ``flavour.pick(sync=..., aio=...)``.

Handlers are written once, as grpc.aio handlers: a coroutine function for a
unary response, an async generator function for a stream, ``await`` on the
context's coroutine methods. For the sync servers ``flavour.unary`` and
``flavour.stream`` run them to their end on the server's worker thread
(``as_sync``), where the context's ``send_initial_metadata`` gives an
awaitable that makes the sync call when awaited and ``abort`` raises as it
does there. Such a handler may await only those, ``asyncio.sleep(0)``, and
the waits below (``sleep``, ``wait_event``), which block the worker thread
on a sync server; awaiting anything else that suspends is an error naming
the handler. Request streams reach a flavoured handler as async iterators
on both kinds. A plain function passes as it is: it is a handler on both
kinds of server (grpc.aio runs it in its migration thread pool).

Interceptors are written once too, as the body of a grpc.aio interceptor
(``async def fn(continuation, details)``, awaiting ``continuation``);
``flavour.interceptor(fn)`` makes the interceptor class each server wants.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any, Awaitable, Callable, Dict, Optional, Tuple

import grpc
import grpc.aio
import pytest

from diff import aio_harness, harness


class Flavour:
    """One pair of servers; ``str(flavour)`` is its name (the test id)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name

    @property
    def aio(self) -> bool:
        return self.name != "sync"

    def pick(self, *, sync: Any, aio: Any) -> Any:
        """What a scenario expects: sync on grpc.server(), aio on grpc.aio.server()."""
        return aio if self.aio else sync

    # -- running ----------------------------------------------------------------

    def both(self, setup: Callable[[Any, harness.State], None], scenario: Callable[[Any], Any], **kwargs: Any):
        """(grpcio's result, ours) of scenario, each on a fresh server of this
        flavour (kwargs go to harness.running / aio_harness.running)."""
        if self.aio:
            return aio_harness.both(setup, scenario, loop=self.name, **kwargs)
        return harness.both(setup, scenario, **kwargs)

    def serving(self, kind: str, setup: Callable[[Any, harness.State], None], ports: Any = harness.ANY_PORT, **kwargs: Any):
        """A started server of kind and this flavour with ports (harness.serving /
        aio_harness.serving): a harness.Served, for scenarios that call the
        server at several addresses; stopped at the end."""
        if self.aio:
            return aio_harness.serving(kind, setup, ports, loop=self.name, **kwargs)
        return harness.serving(kind, setup, ports, **kwargs)

    def same(self, setup: Callable[[Any, harness.State], None], scenario: Callable[[Any], Any], **kwargs: Any) -> Any:
        """Runs scenario on both servers, asserts the results are equal (up
        to the documented metadata order, harness.comparable) and returns
        grpcio's, as observed."""
        ref, ours = self.both(setup, scenario, **kwargs)
        assert harness.comparable(ours) == harness.comparable(ref), (
            f"\n  grpcio ({self.name}):        {ref!r}\n  pygrpc_native ({self.name}): {ours!r}"
        )
        return ref

    # -- handlers ---------------------------------------------------------------

    def adapt(self, fn: Callable, request_streaming: bool = False) -> Callable:
        """fn, a grpc.aio handler, as this flavour's servers want it."""
        return fn if self.aio else as_sync(fn, request_streaming)

    def unary(self, fn: Callable, **kwargs: Any) -> grpc.RpcMethodHandler:
        return grpc.unary_unary_rpc_method_handler(self.adapt(fn), **kwargs)

    def stream(self, fn: Callable, **kwargs: Any) -> grpc.RpcMethodHandler:
        return grpc.unary_stream_rpc_method_handler(self.adapt(fn), **kwargs)

    def stream_unary(self, fn: Callable, **kwargs: Any) -> grpc.RpcMethodHandler:
        return grpc.stream_unary_rpc_method_handler(self.adapt(fn, True), **kwargs)

    def stream_stream(self, fn: Callable, **kwargs: Any) -> grpc.RpcMethodHandler:
        return grpc.stream_stream_rpc_method_handler(self.adapt(fn, True), **kwargs)

    def handlers(self, handlers: Dict[str, grpc.RpcMethodHandler], service: str = harness.SERVICE):
        """A setup function registering handlers (harness.setup_handlers)."""
        return harness.setup_handlers(handlers, service)

    def recording(self, name: str, fn: Callable, streaming: bool = False) -> Callable[[Any, harness.State], None]:
        """A setup serving method name with fn(request, context, state): a
        coroutine, or with streaming an async generator, that records what
        it saw into the run's state."""

        def setup(server: Any, state: harness.State) -> None:
            if streaming:

                async def stream_handler(request: Any, context: Any) -> Any:
                    async for item in fn(request, context, state):
                        yield item

                self.handlers({name: self.stream(stream_handler)})(server, state)
            else:

                async def unary_handler(request: Any, context: Any) -> Any:
                    return await fn(request, context, state)

                self.handlers({name: self.unary(unary_handler)})(server, state)

        return setup

    def unary_case(self, fn: Callable, request: bytes = b"req", metadata: Any = None, **handler_kwargs: Any) -> Any:
        """fn served as method M (handler_kwargs: its (de)serializers), one
        unary call with request and metadata compared on both servers
        (same); grpcio's harness.Outcome."""
        setup = self.handlers({"M": self.unary(fn, **handler_kwargs)})
        return self.same(setup, lambda run: harness.call_unary(run.channel, harness.method("M"), request, metadata=metadata))

    def stream_case(self, fn: Callable, request: bytes = b"req", metadata: Any = None, **handler_kwargs: Any) -> Any:
        """As unary_case, for fn served as the response-streaming method S."""
        setup = self.handlers({"S": self.stream(fn, **handler_kwargs)})
        return self.same(setup, lambda run: harness.call_stream(run.channel, harness.method("S"), request, metadata=metadata))

    def servicer(self, servicer: Any, request_streaming: Tuple[str, ...] = ()) -> Any:
        """servicer (an instance of a generated Servicer class whose methods
        are grpc.aio handlers) as this flavour's servers want it;
        request_streaming names its methods that take a request stream."""
        return servicer if self.aio else _SyncServicer(servicer, request_streaming)

    def interceptor(self, fn: Callable[[Callable, Any], Awaitable[Any]]):
        """A server interceptor of this flavour whose intercept_service is fn."""
        return _AioInterceptor(fn) if self.aio else _SyncInterceptor(fn)


SYNC = Flavour("sync")
ASYNCIO = Flavour("asyncio")
UVLOOP = Flavour("uvloop")

# What a table test runs on: both kinds of server. The event loop changes
# how an aio server waits, not what a handler sees, so only representative
# scenarios also run on uvloop (each_flavour_and_uvloop).
each_flavour = pytest.mark.parametrize("flavour", [SYNC, ASYNCIO], ids=str)
each_flavour_and_uvloop = pytest.mark.parametrize("flavour", [SYNC, ASYNCIO, UVLOOP], ids=str)
# For the aio-only files' representative scenarios.
each_loop = pytest.mark.parametrize("flavour", [ASYNCIO, UVLOOP], ids=str)


# -- a grpc.aio handler on a sync server --------------------------------------------


class _Call:
    """An awaitable that calls fn(*args) when awaited, without suspending:
    like a coroutine, it does its work (and raises) only when awaited."""

    def __init__(self, fn: Callable, *args: Any) -> None:
        self._fn = fn
        self._args = args

    def __await__(self):
        return self._fn(*self._args)
        yield  # noqa: unreachable - makes __await__ a generator


def _finish(awaitable: Any, what: Any) -> Any:
    """Drives awaitable (a coroutine, or an async generator's step) to its
    end on this thread. A bare yield (asyncio.sleep(0)) is passed over; a
    suspension on anything else needs an event loop, which a sync server's
    worker thread does not have."""
    while True:
        try:
            suspended_on = awaitable.send(None)
        except StopIteration as end:
            return end.value
        if suspended_on is not None:
            awaitable.close()
            raise RuntimeError(
                f"{what!r} awaited {suspended_on!r} on a sync server; a flavoured handler may await only the "
                "context and diff.flavours.sleep / wait_event there"
            )


class _SyncContext:
    """A sync server's ServicerContext seen through grpc.aio's API: the
    methods that are coroutines there give awaitables that make the sync
    call when awaited."""

    def __init__(self, context: grpc.ServicerContext) -> None:
        self._context = context

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    def send_initial_metadata(self, metadata: Any) -> _Call:
        return _Call(self._context.send_initial_metadata, metadata)


class _AsyncRequests:
    """A sync server's request iterator as the async iterator grpc.aio gives."""

    def __init__(self, requests: Any) -> None:
        self._requests = requests

    def __aiter__(self) -> "_AsyncRequests":
        return self

    def __anext__(self) -> _Call:
        try:
            request = next(self._requests)
        except StopIteration:
            raise StopAsyncIteration from None
        return _Call(lambda: request)


def _iterate(agen: Any, what: Any):
    """An async generator's items, as a sync generator; closing this one
    closes agen (its finally blocks run, as a sync handler's would)."""
    try:
        while True:
            try:
                item = _finish(agen.__anext__(), what)
            except StopAsyncIteration:
                return
            yield item
    finally:
        _finish(agen.aclose(), what)


def as_sync(fn: Callable, request_streaming: bool = False) -> Callable:
    """fn, a grpc.aio handler (coroutine or async generator function, taking
    a request, or with request_streaming an async iterator of requests), as
    a sync server's handler. The result keeps fn as ``aio_handler``
    (interceptors unwrap it). A plain function comes back as it is: it
    serves on both kinds of server (grpc.aio runs it in its migration
    thread pool)."""

    def arguments(request: Any, context: grpc.ServicerContext) -> Tuple[Any, _SyncContext]:
        return (_AsyncRequests(request) if request_streaming else request), _SyncContext(context)

    if inspect.isasyncgenfunction(fn):

        def handler(request: Any, context: grpc.ServicerContext) -> Any:
            return _iterate(fn(*arguments(request, context)), fn)

    elif inspect.iscoroutinefunction(fn):

        def handler(request: Any, context: grpc.ServicerContext) -> Any:
            return _finish(fn(*arguments(request, context)), fn)

    else:
        return fn  # a plain function is a handler on both kinds of server as it is
    handler.aio_handler = fn  # type: ignore[attr-defined]
    return handler


class _SyncServicer:
    """A servicer whose methods are grpc.aio handlers, as the sync servers
    want it: each method looked up comes back as_sync."""

    def __init__(self, servicer: Any, request_streaming: Tuple[str, ...]) -> None:
        self._servicer = servicer
        self._request_streaming = request_streaming

    def __getattr__(self, name: str) -> Any:
        return as_sync(getattr(self._servicer, name), name in self._request_streaming)


_BEHAVIOURS = ("unary_unary", "unary_stream", "stream_unary", "stream_stream")


def _map_behaviours(handler: Optional[grpc.RpcMethodHandler], change: Callable[[Callable, bool], Callable]):
    """handler with change(behaviour, request_streaming) for each of its behaviours."""
    if handler is None:
        return None
    fields: Dict[str, Callable] = {}
    for name in _BEHAVIOURS:
        behaviour = getattr(handler, name)
        if behaviour is not None:
            fields[name] = change(behaviour, name.startswith("stream_"))
    return handler._replace(**fields)


def _unwrapped(behaviour: Callable, request_streaming: bool) -> Callable:
    return getattr(behaviour, "aio_handler", behaviour)


def _wrapped(behaviour: Callable, request_streaming: bool) -> Callable:
    if inspect.iscoroutinefunction(behaviour) or inspect.isasyncgenfunction(behaviour):
        return as_sync(behaviour, request_streaming)
    return behaviour


class _AioInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, fn: Callable) -> None:
        self._fn = fn

    async def intercept_service(self, continuation, handler_call_details):
        return await self._fn(continuation, handler_call_details)


class _SyncInterceptor(grpc.ServerInterceptor):
    """Runs a grpc.aio interceptor body on a sync server: continuation gives
    the handler with its grpc.aio behaviours, and the behaviours of the
    handler fn returns are made sync again."""

    def __init__(self, fn: Callable) -> None:
        self._fn = fn

    def intercept_service(self, continuation, handler_call_details):
        async def aio_continuation(details: Any) -> Any:
            return _map_behaviours(continuation(details), _unwrapped)

        return _map_behaviours(_finish(self._fn(aio_continuation, handler_call_details), self._fn), _wrapped)


# -- waits a flavoured handler may await ----------------------------------------------


def _on_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def sleep(seconds: float) -> None:
    """asyncio.sleep on a loop; on a sync server's worker thread, time.sleep."""
    if _on_loop():
        await asyncio.sleep(seconds)
    else:
        time.sleep(seconds)


async def wait_event(event: Any, timeout: float = harness.WAIT) -> bool:
    """Waits for a threading.Event the test sets: polling on a loop (the loop
    keeps running), blocking on a sync server's worker thread."""
    if _on_loop():
        return await aio_harness.wait_event(event, timeout)
    return event.wait(timeout)


async def record_outcome(state: harness.State, key: str, awaitable: Awaitable[Any]) -> None:
    """Awaits awaitable (a context method a scenario checks) and records
    under key what happened: "no error", or the exception it raised
    (aio_harness.describe), which is not raised further."""
    try:
        await awaitable
        state.record(key, "no error")
    except Exception as exc:  # noqa: BLE001 - what it raised is the outcome
        state.record(key, aio_harness.describe(exc))
