"""pygrpc_native.aio.server(): grpc.aio.Server on top of the native front.

Handlers run on the event loop that called ``start()`` (uvloop included).
The loop watches the front's event descriptor, which is readable exactly
while events wait, and takes them itself in batches: one loop wake-up per
batch, no thread of ours in between. Each call then runs as a task, as in
grpc.aio, so that a client cancel or a passed deadline (EVENT_CANCEL) can
cancel it.

Sends never block the loop: the front is non-blocking, and a full call
buffer (a slow client) is waited out on a future Go resolves
(EVENT_ROOM). Nor do most write: a message or headers are left to the
connection's writer goroutine, and the frames of a call's end (its answer,
its status) wait in Go until the loop's next turn, which writes them out
once per connection (``_hold_writes``): no wake-up of a writer goroutine
per call, and the answers of a burst leave together (bench/README). Only
a call's end is held: its handler is done, while a coroutine that writes a
message may still block the loop afterwards, and its client must get the
message first, as grpc.aio's does. Request streams reach coroutine handlers as events routed to
the call (EVENT_MESSAGE, EVENT_HALF_CLOSE; see _waits); a handler run in
the migration thread pool reads its requests from Go itself
(``read_message``, waiting without the GIL), as pygrpc_native.server()'s
handlers do. With maximum_concurrent_rpcs, Go counts a call until its
handler returns (``handler_done``), as grpc.aio counts it.

grpc.aio's outcomes are kept: an exception gives UNKNOWN ``Unexpected
<class '...'>: message`` (a code set before it wins, its details don't), a
unary ``None`` response is an empty message, ``abort()`` sends the status at
once and raises AbortError.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import enum
import inspect
import types
from concurrent import futures
from typing import Any, Callable, Dict, NoReturn, Optional, Sequence

import grpc
import grpc.aio
from grpc._cython import cygrpc

from .._call_state import CallState, context_refs
from .._calls import _HandlerCallDetails, Method, RequestIterator, behavior_of
from .._core import Lookup, ServerArguments, ServerCore, Stage, aio_rpc_limit, fixed_window, grace_of
from .._events import EVENT_CALL, EVENT_CANCEL, EVENT_LOOKUP
from .._grpc_logs import AIO_LOG
from .._handle import AioServerHandle
from ._context import ServicerContext, SyncHandlerContext, client_closed_error, failure_code, send_blocking, serialize
from ._waits import FINISHED, LoopWaits, check_open


_OK = grpc.StatusCode.OK
_EXECUTE_BATCH_ERROR = cygrpc.ExecuteBatchError
_SERVER_STOPPED = cygrpc._ServerStoppedError
_UNKNOWN = grpc.StatusCode.UNKNOWN
_UNIMPLEMENTED = grpc.StatusCode.UNIMPLEMENTED
# _request's answer for a call that ended before its handler ran.
_ENDED = object()

# grpc.aio's details for an AbortError a handler raises without abort().
_ABORT_REPLACED = "Unexpected <class 'AssertionError'>: Abort error has been replaced!"

# Events taken from Go at once.
_BATCH = 256


class _BehaviorKind(enum.Enum):
    """How a handler's behavior is called."""

    COROUTINE = "coroutine"
    ASYNC_GENERATOR = "async generator"
    SYNC = "sync"  # in the migration thread pool


def _kind_of(behavior: Any) -> _BehaviorKind:
    if inspect.isasyncgenfunction(behavior):
        return _BehaviorKind.ASYNC_GENERATOR
    if inspect.iscoroutinefunction(behavior):
        return _BehaviorKind.COROUTINE
    return _BehaviorKind.SYNC


class _AioServer(ServerCore):
    registered_fixed = False  # as grpc.aio (see ServerCore)
    checks_generic_handlers = False  # as grpc.aio (see ServerCore)
    new_call_context = staticmethod(contextvars.copy_context)  # as a task's (see ServerCore)

    def __init__(self, arguments: ServerArguments) -> None:
        super().__init__(arguments)
        self.front.blocking = False
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._waits: Optional[LoopWaits] = None
        self._fixed_window = fixed_window(arguments.options)
        self._call_tasks: Dict[int, asyncio.Task] = {}  # call id -> the task serving it
        self._behavior_kinds: Dict[types.CodeType, _BehaviorKind] = {}  # _kind's
        self._event_fd: Optional[int] = None
        self._terminated = asyncio.Event()
        # What _serve_until_stopped waits on, resolved once the front has
        # stopped: a task's cancel() cancels the future it waits on at once,
        # so this reads as cancelled as soon as asyncio.run()'s sweep has
        # cancelled that task, before the task runs again (_serve reads it).
        # Not _terminated: that one only ever comes true, once Go's queue
        # has ended, and stop() and wait_for_termination() wait on it.
        self._serving: Optional[asyncio.Future] = None
        self._start_context = contextvars.Context()  # start()'s, once started

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        with self.lock:
            if self.stage is Stage.STOPPED:
                raise grpc.aio.UsageError("Server not in ready state")  # grpc.aio's words
            if self.stage is not Stage.NEW:
                return  # grpc.aio ignores a second start()
            self.stage = Stage.STARTED
        self._loop = asyncio.get_running_loop()
        self._start_context = contextvars.copy_context()  # the calls' tasks start from it
        self._waits = LoopWaits(self._loop, self.front, self._fixed_window)
        self.add_registered_methods()
        if self.bound:
            self.front.start()
            self.metrics.start()
            self._event_fd = self.front.event_fd()
            self.front._hold_writes(self._loop.call_soon)
            self._loop.add_reader(self._event_fd, self._on_events)
            self._serving = self._loop.create_future()
            # (The future holds the task while the task waits on it.) A loop
            # closed without stop() lets it go pending, quietly, as grpc.aio's
            # server goes (asyncio would log "Task was destroyed but it is
            # pending!" at exit).
            task = self._loop.create_task(self._serve_until_stopped(self._serving))
            task._log_destroy_pending = False  # type: ignore[attr-defined]

    async def stop(self, grace: Optional[float]) -> None:
        with self.lock:
            if self.stage is Stage.NEW:
                return  # as grpc.aio: nothing to stop yet; start() still works
            self.stage = Stage.STOPPED
        if self._event_fd is None:
            self.front.stop(None)  # releases a bound port
            self._terminated.set()
            return
        # New calls are refused from here. A stop while one is under way can
        # only shorten it (calls are cancelled at the earliest deadline), as
        # in grpc.aio.
        grace = grace_of(grace)
        if asyncio.get_running_loop() is self._loop:
            # Before Go's stop: its timer then ends the calls left after
            # this one has marked the stop (an op of a call it cancels finds
            # the server stopped).
            self._refuse_ops_as_stopped(grace)
        self.front.stop(grace, wait=False)
        self._check_loop()
        # The loop keeps running the calls meanwhile; _on_events sets
        # _terminated once Go's queue has ended, that is once the front has
        # stopped.
        await self._terminated.wait()

    def _refuse_ops_as_stopped(self, grace: Optional[float]) -> None:
        """From when the stop cancels the calls left (at once, or once the
        grace has passed), an op on an ended call raises grpc.aio's
        _ServerStoppedError (and its server's WARNING), as grpc.aio's do
        once its stop has cancelled them; during the grace, an op on a call
        that ended otherwise (its client cancelled) fails as it would
        without a stop. On the server's loop (_check_loop)."""
        waits = self._waits
        if not grace:
            waits.stopping = True  # type: ignore[union-attr]  # set at start
        else:
            self._loop.call_later(grace, setattr, waits, "stopping", True)  # type: ignore[union-attr]

    async def _serve_until_stopped(self, serving: asyncio.Future) -> None:
        """Lives while the server serves (until serving is resolved).
        asyncio.run() cancels every task of its loop as it returns (after
        Ctrl+C too), grpc.aio's own among them, which cancels its calls (the
        client gets CANCELLED): this task's cancellation, while the server
        still serves, does the same for ours, and stops the server (its loop
        is going)."""
        try:
            await serving
        except asyncio.CancelledError:
            with self.lock:
                serving = self.stage is Stage.STARTED
                self.stage = Stage.STOPPED
            if serving:
                self._waits.stopping = True  # type: ignore[union-attr]  # set at start
                for call_id in list(self._call_tasks):
                    try:
                        self.front.cancel(call_id)
                    except RuntimeError:
                        break  # the front has stopped
                self.front.stop(0, wait=False)
            raise

    def _check_loop(self) -> None:
        """grpc.aio's stop() and wait_for_termination() await futures of the
        loop the server started on, which asyncio refuses on another loop
        (RuntimeError; a stop has begun by then). The same error here, at
        once: waiting there on _terminated, which the server's loop sets,
        would hang."""
        if self._loop is not None and asyncio.get_running_loop() is not self._loop:
            raise RuntimeError(f"Task {asyncio.current_task()!r} got Future <Future pending> attached to a different loop")

    def collected(self) -> None:
        """The user's handle of a started server was deallocated (or its
        ``__del__`` called): the server stops on its loop, as grpc.aio's
        does: new calls are refused and wait_for_termination() returns once
        it has stopped. Nothing waits here."""
        loop = self._loop
        if loop is None or loop.is_closed() or self.stage is not Stage.STARTED:
            return
        try:
            loop.call_soon_threadsafe(self._stop_collected)
        except RuntimeError:
            pass  # the loop is shutting down; so is the server

    def _stop_collected(self) -> None:
        """collected()'s stop, on the server's loop. A loop stopped and
        closed before the stop is done lets it go quietly (asyncio would log
        "Task was destroyed but it is pending!")."""
        task = self._loop.create_task(self.stop(None))  # type: ignore[union-attr]  # set at start
        task._log_destroy_pending = False  # type: ignore[attr-defined]

    async def wait_for_termination(self, timeout: Optional[float] = None) -> bool:
        """Returns True if the timeout passed first, as grpc.aio does."""
        self._check_loop()
        try:
            await asyncio.wait_for(asyncio.shield(self._terminated.wait()), timeout)
        except asyncio.TimeoutError:
            return True
        return False

    # -- events --------------------------------------------------------------

    handler_log = AIO_LOG

    def lookup_failed(self, call_id: int, path: str, exc: Exception) -> None:
        # grpc.aio reports the exception, as for one raised by a handler.
        AIO_LOG.error("Unexpected [%s] raised by servicer method [%s]", type(exc).__name__, path, exc_info=exc)
        self.reject(call_id, _UNKNOWN.value[0], f"Unexpected {type(exc)}: {exc}")

    def _on_events(self) -> None:
        """The event descriptor is readable: take one batch (the loop calls
        back while more wait, between other work)."""
        events = self.front.recv_batch(_BATCH, 0)
        if events is None:
            self.front._hold_writes(None)
            self._loop.remove_reader(self._event_fd)  # type: ignore[union-attr]
            self._terminated.set()
            if not self._serving.done():  # type: ignore[union-attr]  # set at start
                self._serving.set_result(None)  # type: ignore[union-attr]
        elif events:
            self._take(events)

    def _take(self, events: Any) -> None:
        """Starts a task per call, cancels the tasks of calls that ended,
        resolves lookups, routes what calls wait for; on the loop, once per
        batch."""
        loop = self._loop
        front = self.front
        methods = self.methods
        call_tasks = self._call_tasks
        waits = self._waits
        pre_intercepted = self.pre_intercepted
        for kind, call_id, method_id, payload, _client in events:
            if kind == EVENT_CALL:
                method = methods[method_id]
                pre = pre_intercepted.get(call_id) if pre_intercepted else None
                # A looked-up call's own path: the method it was routed to
                # may be one shared by such calls (_core._SHARED_PATH).
                call = CallState(front, call_id, method.path if pre is None else pre[2])
                serve = self._serve(method, call, payload)
                if pre is None:
                    task = loop.create_task(serve)  # type: ignore[union-attr]
                else:
                    # In (a copy of) the Context its lookup ran in: what its
                    # service() and interceptors set there, its handler sees.
                    task = pre[1].run(loop.create_task, serve)  # type: ignore[union-attr]
                call_tasks[call_id] = task
                if self.holds_slots:
                    # Once the task is done, even if it was cancelled before
                    # it ever ran, the call's place is free.
                    task.add_done_callback(lambda _task, call_id=call_id: self.release_slot(call_id))
            elif kind == EVENT_CANCEL:
                task = call_tasks.pop(call_id, None)
                if task is not None:
                    cancelled = waits.cancelled  # type: ignore[union-attr]
                    cancelled.add(call_id)
                    task.add_done_callback(lambda _task, call_id=call_id: cancelled.discard(call_id))
                    # As grpc.aio: a read in progress sees the end of the
                    # stream and a write waiting for room fails, and the
                    # task is cancelled at its next await.
                    woken = waits.end_requests(call_id)  # type: ignore[union-attr]
                    if waits.end_room(call_id) or woken:  # type: ignore[union-attr]
                        loop.call_soon(task.cancel)  # type: ignore[union-attr]
                    else:
                        task.cancel()
            elif kind == EVENT_LOOKUP:
                lookup = self.lookup(call_id, payload.decode("utf-8", "replace"))
                if lookup is not None:
                    lookup.context.run(loop.create_task, self._intercept_lookup(lookup))  # type: ignore[union-attr]
            else:
                waits.on_event(kind, call_id, payload)  # type: ignore[union-attr]

    # -- one call ------------------------------------------------------------

    def _kind(self, behavior: Any) -> _BehaviorKind:
        """_kind_of, remembered by the function's code rather than by the
        function: an interceptor's wrapper is a new closure per call (kept
        by function, each would stay in memory for good), all of one code.
        A servicer's bound method counts as its function; a function marked
        with inspect.markcoroutinefunction(), or anything else callable, is
        looked at on each call."""
        func = behavior.__func__ if type(behavior) is types.MethodType else behavior
        if type(func) is not types.FunctionType or hasattr(func, "_is_coroutine_marker"):
            return _kind_of(behavior)
        code = func.__code__
        kind = self._behavior_kinds.get(code)
        if kind is None:
            kind = self._behavior_kinds[code] = _kind_of(behavior)
        return kind

    def _cancel(self, call_id: int) -> None:
        """Ends a call CANCELLED, unless the front has stopped (every call
        has ended then)."""
        try:
            self.front.cancel(call_id)
        except RuntimeError:
            pass

    async def _serve(self, method: Method, call: CallState, payload: Optional[bytes]) -> None:
        if not self.is_live(call.call_id):
            # Reset (or timed out) between the batch and this first step:
            # its slot is freed by the task's done callback.
            self._call_tasks.pop(call.call_id, None)
            return
        ctx = ServicerContext(call, self._waits)  # type: ignore[arg-type]  # set at start
        # The context's references before its handler runs (context_refs);
        # 0 until then: a failure before it keeps the details.
        held = 0
        try:
            handler = method.handler
            if self.interceptors or handler is None:
                pre = self.pre_intercepted.pop(call.call_id, None)
                handler = pre[0] if pre is not None else await self._intercept(method, ctx)
                if handler is None:
                    await ctx._finish(_UNIMPLEMENTED, "Method not found!")
                    return
            call.serializer = handler.response_serializer  # type: ignore[union-attr]  # set above
            behavior = behavior_of(handler)
            deserializer = handler.request_deserializer  # type: ignore[union-attr]
            if payload is not None and not handler.request_streaming:  # type: ignore[union-attr]
                request = payload if deserializer is None else deserializer(payload)  # unary: no coroutine
            else:
                request = await self._request(call, ctx, handler, behavior, payload)  # type: ignore[arg-type]
                if request is _ENDED:
                    return
            held = context_refs(ctx)
            streaming = handler.response_streaming  # type: ignore[union-attr]
            if streaming:
                await self._serve_stream(behavior, call, ctx, request)
                response = None
            elif self._kind(behavior) is _BehaviorKind.SYNC:
                response = await self._run_sync(behavior, call, request)
            else:
                response = await behavior(request, ctx)  # unary, inline: one coroutine less per call
            if not call.ended:
                if self._waits.stopping:  # type: ignore[union-attr]
                    self._waits.check_not_stopped(call.call_id)  # type: ignore[union-attr]
                if context_refs(ctx) > held:
                    call.keep_details()  # the handler left its context to someone
                code = call.code or _OK
                if streaming:
                    body = None
                elif code is _OK:
                    body = serialize(call.serializer, response)
                else:
                    # grpc.aio sends an empty message with a status the
                    # handler set, whatever it returned (so the client has
                    # headers, and retries nothing).
                    body = b""
                await ctx._finish(code, call.details, body)  # type: ignore[arg-type]  # _finish() checks them
        except asyncio.CancelledError:
            AIO_LOG.debug("RPC cancelled for servicer method [%s]", call.method)
            if call.call_id not in self._waits.cancelled and self._serving.cancelled():  # type: ignore[union-attr]
                # asyncio.run()'s sweep, which may run this task before
                # _serve_until_stopped: the call ends CANCELLED here.
                self._cancel(call.call_id)
        except _SERVER_STOPPED:
            AIO_LOG.warning("Aborting method [%s] due to server stop.", call.method)
        except grpc.aio.AbortError:
            if not call.ended:
                # Raised by the handler itself, not by abort(): grpc.aio's
                # outcome is an AssertionError's.
                AIO_LOG.error("Unexpected [AssertionError] raised by servicer method [%s]", call.method)
                if context_refs(ctx) > held:
                    call.keep_details()
                await ctx._finish(failure_code(call), _ABORT_REPLACED)
        except _EXECUTE_BATCH_ERROR as exc:
            # An op the handler made failed: ignored where the client had
            # closed the call, as grpc.aio ignores it; otherwise logged as
            # grpc.aio logs it (Go has ended the call: metadata it refused;
            # one the handler raised itself is ended here).
            if not client_closed_error(exc):
                AIO_LOG.error("ExecuteBatchError raised in core by servicer method [%s]", call.method, exc_info=exc)
                await ctx._finish(failure_code(call), f"Unexpected {type(exc)}: {exc}")
        except Exception as exc:  # noqa: BLE001 - grpc.aio's outcome for any exception
            AIO_LOG.error("Unexpected [%s] raised by servicer method [%s]", type(exc).__name__, call.method, exc_info=exc)
            if context_refs(ctx) > held:
                call.keep_details()  # (the exception's frames may be all that holds it)
            try:
                details = f"Unexpected {type(exc)}: {exc}"
            except Exception:  # noqa: BLE001 - its str() raised: grpc.aio never answers then (README)
                details = f"Unexpected {type(exc)}"
            await ctx._finish(failure_code(call), details)
        except (KeyboardInterrupt, SystemExit):
            # As grpc.aio: the call ends CANCELLED, and the exception ends
            # the loop (asyncio raises it out of run_forever).
            self._cancel(call.call_id)
            raise
        except BaseException:  # noqa: BLE001 - as grpc.aio: logged, and the call left to its deadline
            AIO_LOG.exception("Exception not handled by _handle_exceptions in servicer method [%s]", call.method)
        finally:
            self._call_tasks.pop(call.call_id, None)
            # A write another task still waits with (the handler left it
            # running) learns that the call is over.
            self._waits.end_room(call.call_id)  # type: ignore[union-attr]
            if call.requests is not None:
                self._waits.forget(call.call_id)  # type: ignore[union-attr]
            if call.callbacks:
                # In a copy of the server's Context, not the handler's, as
                # grpc.aio runs them: what the interceptors and the handler
                # set there, a callback doesn't see.
                run = self._start_context.copy().run
                try:
                    for callback in call.callbacks:  # type: ignore[union-attr]  # never None here
                        run(callback, ctx)
                except Exception:  # noqa: BLE001 - as grpc.aio, the first failure ends the run
                    AIO_LOG.exception("Error in callback for method [%s]", call.method)

    async def _request(
        self, call: CallState, ctx: ServicerContext, handler: grpc.RpcMethodHandler, behavior: Any, payload: Optional[bytes]
    ) -> Any:
        """The request a handler that reads a request stream, or serves a
        method whose requests stream in Go, is given, of the shape it takes
        whatever the method's own kind (an interceptor may give a method a
        handler of other kinds, as grpc.aio allows): a request stream for a
        request-streaming handler (of one message for a unary-request
        method), else the one request (a request stream's first message;
        grpc.aio doesn't read on). _ENDED where the call has ended instead.
        (_serve takes a unary request for a unary handler itself.)"""
        deserializer = handler.request_deserializer
        pooled = self._kind(behavior) is _BehaviorKind.SYNC
        if payload is not None:  # a unary request; the handler reads a stream
            request = payload if deserializer is None else deserializer(payload)
            if pooled:
                return iter((request,))
            stream = call.requests = SingleRequest(request)
            return stream
        if handler.request_streaming and pooled:
            return PoolRequestIterator(call, deserializer)
        stream = call.requests = self._waits.request_stream(call, deserializer)  # type: ignore[union-attr]
        if handler.request_streaming:
            return stream
        first = await stream.read()
        if first is grpc.aio.EOF:
            # grpc.aio leaves such a call waiting for its deadline (README:
            # known differences); answered as grpc.server() answers it.
            await ctx._finish(_UNIMPLEMENTED, f'"{call.method.encode()!r}" requires exactly one request message.')
            return _ENDED
        return first

    async def _serve_stream(self, behavior: Any, call: CallState, ctx: ServicerContext, request: Any) -> None:
        kind = self._kind(behavior)
        if kind is _BehaviorKind.ASYNC_GENERATOR:
            # ctx.write(), without a coroutine per message when it needs
            # no await.
            write_now = ctx._write_now
            async for message in behavior(request, ctx):
                body = write_now(message)
                if body is not None:
                    await ctx._write_later(body)
        elif kind is _BehaviorKind.COROUTINE:
            await behavior(request, ctx)
        else:
            await self._run_sync(behavior, call, request, streaming=True)

    async def _run_sync(self, behavior: Any, call: CallState, request: Any, streaming: bool = False) -> Any:
        """Runs a non-coroutine handler in the migration thread pool with
        grpcio's sync context, on the same CallState; its outcome then
        follows grpc.aio's rules."""
        ctx = SyncHandlerContext(call)
        send_message = self.front.send_message

        def run() -> Any:
            held = context_refs(ctx)
            try:
                result = behavior(request, ctx)
                if not streaming:
                    return result
                for message in result:
                    call.initial_metadata_sent = True  # it goes with the first message
                    if call.ended or not send_blocking(call, send_message, serialize(call.serializer, message)):
                        break
                return None
            finally:
                if context_refs(ctx) > held and not call.ended:
                    call.keep_details()  # the handler left its context to someone (or raised)

        result = await asyncio.get_running_loop().run_in_executor(self.thread_pool, run)
        if ctx.callbacks and not streaming and not call.ended:
            # As grpc.aio runs them: on the loop, once the handler has
            # returned its response and before that is sent, so that one
            # that raises fails the call as the handler's exception would;
            # never after an exception, an abort, a cancellation, or for a
            # response stream.
            for callback in ctx.callbacks:
                callback()
        return result

    async def _intercept(self, method: Method, ctx: ServicerContext) -> Optional[grpc.RpcMethodHandler]:
        return await self._run_interceptors(
            method.path, method.handler, _HandlerCallDetails(method.path, ctx.invocation_metadata())
        )

    async def _run_interceptors(
        self, path: str, base: Optional[grpc.RpcMethodHandler], details: _HandlerCallDetails
    ) -> Optional[grpc.RpcMethodHandler]:
        """The handler the interceptors give a call to path (see
        ServerCore.continuation for base)."""
        interceptors = self.interceptors
        ask = self.continuation(path, base)

        async def step(index: int, call_details: Any) -> Optional[grpc.RpcMethodHandler]:
            if index == len(interceptors):
                return ask(call_details)
            return await interceptors[index].intercept_service(lambda d: step(index + 1, d), call_details)

        return await step(0, details)

    async def _intercept_lookup(self, lookup: Lookup) -> None:
        """A looked-up path no handler knows: the interceptors may answer
        it (see ServerCore.lookup)."""
        try:
            handler = await self._run_interceptors(lookup.details.method, None, lookup.details)
        except Exception as exc:  # noqa: BLE001 - grpc.aio's outcome for any exception
            self.lookup_failed(lookup.call_id, lookup.details.method, exc)
            return
        # The call's task starts in this task's Context, with what the
        # interceptors set in it.
        self.intercepted(dataclasses.replace(lookup, context=contextvars.copy_context()), handler)


class SingleRequest:
    """A unary call's request as a request stream of one message, for a
    request-streaming coroutine handler an interceptor gave its method:
    iterated, or read with context.read()."""

    __slots__ = ("_left",)

    def __init__(self, request: Any) -> None:
        self._left = [request]

    async def read(self) -> Any:
        return self._left.pop() if self._left else grpc.aio.EOF

    def __aiter__(self) -> "SingleRequest":
        return self

    async def __anext__(self) -> Any:
        if self._left:
            return self._left.pop()
        raise StopAsyncIteration()


class PoolRequestIterator(RequestIterator):
    """The request stream of a handler in the migration thread pool, as
    grpc.aio gives it: an exception of the deserializer reaches the handler
    (which then fails as for any exception), and None is a message. It
    ends when the client cancels or the deadline passes; once the status
    is sent, next() raises grpc.aio's error (check_open), as a read on the
    loop does there."""

    __slots__ = ("_over",)

    def __init__(self, call: CallState, deserializer: Optional[Callable[[bytes], Any]]) -> None:
        super().__init__(call, deserializer)
        # grpc.aio's is a generator: once a step raised (an exception, or
        # the stream's end), or it was closed, it stays ended.
        self._over = False

    def __next__(self) -> Any:
        if self._over:
            raise StopIteration()
        try:
            return super().__next__()
        except BaseException:
            self._over = True
            raise

    def close(self) -> None:
        """Ends the iteration, as closing grpc.aio's generator does."""
        self._over = True

    def _end_or_raise(self) -> NoReturn:
        check_open(self._call, FINISHED)
        raise StopIteration()

    def _deserialize(self, message: bytes) -> Any:
        return self._deserializer(message)  # type: ignore[misc]  # not None: see __next__


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
    if interceptors and any(not isinstance(i, grpc.aio.ServerInterceptor) for i in interceptors):
        # grpc.aio's words, its unfilled placeholder included.
        raise ValueError("Interceptor must be ServerInterceptor,the following are invalid: {invalid_interceptors}")
    # grpc.aio's checks (grpc.server() takes a limit below 1: it refuses every call).
    limit = aio_rpc_limit(maximum_concurrent_rpcs)
    return AioServerHandle(_AioServer(ServerArguments(migration_thread_pool, handlers, interceptors, options, limit, compression)))
