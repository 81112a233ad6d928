"""pygrpc_native.aio.server(): grpc.aio.Server on top of the native front.

Handlers run on the event loop that called ``start()`` (uvloop included).
The loop watches the front's event descriptor, which is readable exactly
while events wait, and takes them itself in batches: one loop wake-up per
batch, no thread of ours in between. Each call then runs as a task, as in
grpc.aio, so that a client cancel or a passed deadline (EVENT_CANCEL) can
cancel it.

Sends never block the loop: the front is non-blocking, and a full call
buffer (a slow client) is waited out with ``asyncio.sleep``.

grpc.aio's outcomes are kept: an exception gives UNKNOWN ``Unexpected
<class '...'>: message`` (a code set before it wins, its details don't), a
unary ``None`` response is an empty message, ``abort()`` sends the status at
once and raises AbortError.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from concurrent import futures
from typing import Any, Dict, Optional, Sequence, Tuple

import grpc
import grpc.aio

from .._calls import HandlerCallDetails, Method
from .._context import ServicerContext as SyncServicerContext
from .._context import compression_name
from .._core import NEW, STARTED, STOPPED, ServerCore
from .._front import EVENT_CALL, EVENT_CANCEL
from ._context import ServicerContext, check_trailing_metadata

_LOGGER = logging.getLogger("pygrpc_native")

_OK = grpc.StatusCode.OK
_UNKNOWN = grpc.StatusCode.UNKNOWN
_UNIMPLEMENTED = grpc.StatusCode.UNIMPLEMENTED

# Events taken from Go at once.
_BATCH = 256

# How a handler's behaviour is called.
_COROUTINE, _ASYNC_GENERATOR, _SYNC = "coroutine", "async generator", "sync"


def _kind_of(behavior: Any) -> str:
    if inspect.isasyncgenfunction(behavior):
        return _ASYNC_GENERATOR
    if inspect.iscoroutinefunction(behavior):
        return _COROUTINE
    return _SYNC


class _SyncContext(SyncServicerContext):
    """The context of a non-coroutine handler, run in the migration thread
    pool: grpcio's sync context, except that abort() sends the status and
    returns instead of raising, as grpc.aio's does."""

    def abort(self, code: grpc.StatusCode, details: str) -> None:  # type: ignore[override]
        try:
            super().abort(code, details)
        except Exception:  # noqa: BLE001 - the sync context raises; this one doesn't
            pass
        self.finished = True
        _send_blocking(self._server.front.finish, self._call_id, self.code_.value[0], details, self.trailing_metadata_)

    def set_compression(self, compression: grpc.Compression) -> None:
        # As grpc.aio's context: RuntimeError once the initial metadata is
        # sent, NoCompression changes nothing.
        name = compression_name(compression)
        if not self.initial_metadata_allowed:
            raise RuntimeError("Compression setting must be specified before sending initial metadata")
        if name:
            _send_blocking(self._server.front.set_compression, self._call_id, name)

    def disable_next_message_compression(self) -> None:
        _send_blocking(self._server.front.disable_next_message_compression, self._call_id)

    def add_callback(self, callback: Any) -> None:  # type: ignore[override]
        # grpc.aio's sync context returns None here, and runs the callbacks
        # when the call completes (not on a client cancel).
        if self.callbacks is not None and not self.finished:
            self.callbacks.append(callback)

    def set_trailing_metadata(self, trailing_metadata: Any) -> None:
        check_trailing_metadata(trailing_metadata)
        self.trailing_metadata_ = tuple(trailing_metadata)

    def time_remaining(self) -> Optional[float]:  # type: ignore[override]
        # grpc.aio's context: None without a deadline.
        try:
            return self._server.front.time_remaining(self._call_id)
        except RuntimeError:
            return 0.0  # the server has stopped: the call has ended

    def is_active(self) -> bool:
        return not self.finished and self._server.front.is_active(self._call_id)

    def cancel(self) -> None:
        self._server.front.cancel(self._call_id)
        self.finished = True


def _send_blocking(send: Any, *args: Any) -> Optional[bool]:
    """A send from a pool thread on the loop's non-blocking front: waits for
    room by sleeping, which is fine off the loop."""
    delay = 0.0005
    while (ok := send(*args)) is None:
        time.sleep(delay)
        delay = min(delay * 2, 0.02)
    return ok


class _AioServer(ServerCore, grpc.aio.Server):
    def __init__(
        self,
        migration_thread_pool: Optional[futures.Executor],
        handlers: Optional[Sequence[grpc.GenericRpcHandler]],
        interceptors: Optional[Sequence[Any]],
        options: Optional[Sequence[Any]],
        maximum_concurrent_rpcs: Optional[int],
        compression: Optional[grpc.Compression],
    ) -> None:
        self._init_core(options, maximum_concurrent_rpcs, compression)
        self.front.blocking = False
        self.fallback = grpc.aio.server(
            migration_thread_pool,
            interceptors=interceptors,
            options=self.fallback_options,
            maximum_concurrent_rpcs=maximum_concurrent_rpcs,
        )
        self.interceptors = tuple(interceptors or ())
        self._pool = migration_thread_pool
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._calls: Dict[int, Tuple[asyncio.Task, ServicerContext]] = {}
        self._kinds: Dict[Any, str] = {}
        self._event_fd: Optional[int] = None
        self._terminated = asyncio.Event()
        if handlers:
            self.add_generic_rpc_handlers(handlers)

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        with self.lock:
            if self.stage is STOPPED:
                raise grpc.aio.UsageError("Server not in ready state")  # grpc.aio's words
            if self.stage is not NEW:
                return  # grpc.aio ignores a second start()
            self.stage = STARTED
        self._loop = asyncio.get_running_loop()
        self.add_registered_methods()
        if self.bound:
            self.fallback.add_insecure_port(self.fallback_address)
            await self.fallback.start()
            self.front.start()
            self._event_fd = self.front.event_fd()
            self._loop.add_reader(self._event_fd, self._on_events)

    async def stop(self, grace: Optional[float]) -> None:
        with self.lock:
            stage, self.stage = self.stage, STOPPED
        if stage is NEW or self._event_fd is None:
            self.front.stop(None)  # releases a bound port
            self._terminated.set()
            self.cleanup()
            return
        # New calls are refused from here. A stop while one is under way can
        # only shorten it (both servers cancel calls at the earliest
        # deadline), as in grpc.aio.
        self.front.stop(grace, wait=False)
        fallback_stopped = asyncio.ensure_future(self.fallback.stop(grace))
        # The loop keeps running the calls meanwhile; _on_events sets
        # _terminated once Go's queue has ended, that is once the front has
        # stopped.
        await self._terminated.wait()
        await fallback_stopped
        self.cleanup()

    async def wait_for_termination(self, timeout: Optional[float] = None) -> bool:
        """Returns True if the timeout passed first, as grpc.aio does."""
        try:
            await asyncio.wait_for(asyncio.shield(self._terminated.wait()), timeout)
        except asyncio.TimeoutError:
            return True
        return False

    # -- events --------------------------------------------------------------

    def _on_events(self) -> None:
        """The event descriptor is readable: take one batch (the loop calls
        back while more wait, between other work)."""
        events = self.front.recv_batch(_BATCH, 0)
        if events is None:
            self._loop.remove_reader(self._event_fd)  # type: ignore[union-attr]
            self._terminated.set()
        elif events:
            self._take(events)

    def _take(self, events: Any) -> None:
        """Starts a task per call, cancels the tasks of calls that ended,
        resolves lookups; on the loop, once per batch."""
        loop = self._loop
        methods = self.methods
        for kind, call_id, method_id, payload, _client in events:
            if kind == EVENT_CALL:
                method = methods[method_id]
                ctx = ServicerContext(self, call_id, method.path)
                self._calls[call_id] = (loop.create_task(self._serve(method, ctx, payload)), ctx)  # type: ignore[union-attr]
            elif kind == EVENT_CANCEL:
                entry = self._calls.pop(call_id, None)
                if entry is not None:
                    entry[0].cancel()
            else:
                self.lookup(call_id, payload.decode("utf-8", "replace"))

    # -- one call ------------------------------------------------------------

    def serialize(self, ctx: ServicerContext, message: Any) -> bytes:
        # grpc.aio sends None as an empty message (also when a serializer
        # returns None) and str as UTF-8, the latter even before a
        # serializer sees it.
        if isinstance(message, str):
            message = message.encode()
        serializer = ctx.serializer
        if serializer is not None:
            message = serializer(message)
        return b"" if message is None else message

    def log_error(self, message: str, *args: Any) -> None:
        _LOGGER.error(message, *args)

    def _kind(self, behavior: Any) -> str:
        kind = self._kinds.get(behavior)
        if kind is None:
            kind = self._kinds[behavior] = _kind_of(behavior)
        return kind

    async def _serve(self, method: Method, ctx: ServicerContext, payload: bytes) -> None:
        try:
            handler = method.handler
            if self.interceptors:
                handler = await self._intercept(method, ctx)
                if handler is None:
                    await ctx.finish(_UNIMPLEMENTED, "Method not found!")
                    return
            ctx.serializer = handler.response_serializer
            deserializer = handler.request_deserializer
            request = payload if deserializer is None else deserializer(payload)
            if handler.response_streaming:
                await self._serve_stream(handler.unary_stream, ctx, request)
            else:
                # Unary, inline: one coroutine less per call.
                behavior = handler.unary_unary
                if self._kind(behavior) is _SYNC:
                    response = await self._run_sync(behavior, ctx, request)
                else:
                    response = await behavior(request, ctx)
                if not ctx.status_sent:
                    code = ctx.code_ or _OK
                    body = self.serialize(ctx, response) if code is _OK else None
                    await ctx.finish(code, ctx.details_, body)
        except asyncio.CancelledError:
            pass  # the client has its status already
        except grpc.aio.AbortError:
            pass  # abort() sent the status
        except Exception as exc:  # noqa: BLE001 - grpc.aio's outcome for any exception
            _LOGGER.error("Unexpected error serving %s", method.path, exc_info=exc)
            await ctx.finish(ctx.code_ or _UNKNOWN, f"Unexpected {type(exc)}: {exc}")
        finally:
            self._calls.pop(ctx._call_id, None)
            try:
                for callback in ctx.done_callbacks:
                    callback(ctx)
            except Exception:  # noqa: BLE001 - as grpc.aio, the first failure ends the run
                _LOGGER.exception("Exception calling done callback")

    async def _serve_stream(self, behavior: Any, ctx: ServicerContext, request: Any) -> None:
        kind = self._kind(behavior)
        if kind is _ASYNC_GENERATOR:
            async for message in behavior(request, ctx):
                await ctx.write(message)
        elif kind is _COROUTINE:
            await behavior(request, ctx)
        else:
            await self._run_sync(behavior, ctx, request, streaming=True)
        if not ctx.status_sent:
            await ctx.finish(ctx.code_ or _OK, ctx.details_)

    async def _run_sync(self, behavior: Any, ctx: ServicerContext, request: Any, streaming: bool = False) -> Any:
        """Runs a non-coroutine handler in the migration thread pool with
        grpcio's sync context; its outcome then follows grpc.aio's rules."""
        sync_ctx = _SyncContext(self, ctx._call_id, ctx._method)  # type: ignore[arg-type]
        sync_ctx._details_cache = ctx._details_cache

        def call() -> Any:
            result = behavior(request, sync_ctx)
            if not streaming:
                return result
            for message in result:
                sync_ctx.initial_metadata_allowed = False  # it goes with the first message
                if sync_ctx.finished or not _send_blocking(
                    self.front.send_message, ctx._call_id, self.serialize(ctx, message)
                ):
                    break
            return None

        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, call)
        finally:
            ctx.code_ = sync_ctx.code_
            if sync_ctx.details_ is not None:
                ctx.details_ = sync_ctx.details_.decode("utf-8", "replace")
            if sync_ctx.trailing_metadata_ is not None:
                ctx.trailing_metadata_ = sync_ctx.trailing_metadata_
            ctx.status_sent = ctx.status_sent or sync_ctx.finished
            for callback in sync_ctx.callbacks or ():
                ctx.add_done_callback(lambda done_ctx, cb=callback: cb() if done_ctx.done() else None)

    async def _intercept(self, method: Method, ctx: ServicerContext) -> Optional[grpc.RpcMethodHandler]:
        interceptors = self.interceptors
        details = HandlerCallDetails(method.path, ctx.invocation_metadata())

        async def step(index: int, call_details: Any) -> Optional[grpc.RpcMethodHandler]:
            if index == len(interceptors):
                return method.handler
            return await interceptors[index].intercept_service(lambda d: step(index + 1, d), call_details)

        return await step(0, details)


def server(
    migration_thread_pool: Optional[futures.Executor] = None,
    handlers: Optional[Sequence[grpc.GenericRpcHandler]] = None,
    interceptors: Optional[Sequence[Any]] = None,
    options: Optional[Sequence[Any]] = None,
    maximum_concurrent_rpcs: Optional[int] = None,
    compression: Optional[grpc.Compression] = None,
) -> grpc.aio.Server:
    """Creates a server like grpc.aio.server(), with the protocol served in Go.

    Takes grpc.aio's arguments.
    """
    if maximum_concurrent_rpcs is not None and maximum_concurrent_rpcs < 1:
        raise ValueError("maximum_concurrent_rpcs should be a positive integer")
    return _AioServer(migration_thread_pool, handlers, interceptors, options, maximum_concurrent_rpcs, compression)
