"""pygrpc_native.server(): grpc.Server on top of the native front.

Threads, and why:

* Calls run in the user's thread pool, as in grpcio, but not one
  ``submit()`` per call. Events are taken from Go in batches (one GIL trip
  for many calls); calls go to a deque, and *drain tasks* in the pool work
  it off. A drain task that finds the deque empty takes the next batch from
  Go itself, so under load a pool thread goes from call to call with no
  thread hop at all; after ``_IDLE`` without calls it returns its thread to
  the pool.
* One dispatcher thread waits for events as a *standby* receiver: Go gives
  it events only while no drain task is waiting for them, that is when the
  server is idle (so an idle server holds no pool thread) or every drain
  task is busy in a handler (so new calls still reach idle pool threads).
  It runs no user code.
* Calls with callbacks (add_callback) are watched: if one ends without its
  handler finishing it (client cancel, deadline), Go reports it on a queue
  of its own, which a callback thread started on first use drains, so
  callbacks run at once even while every pool thread is busy. Callbacks of
  calls the handler finished run in the pool. Either way, as in grpcio,
  not in the handler's thread.
* Lookups of methods only generic handlers know run in the pool, since they
  call user code (``service()``).

What the native path doesn't serve (client-streaming and bidi methods,
methods no handler of ours knows, such as ones only interceptors answer)
goes to a grpcio server with the same handlers, interceptors, options and
thread pool, listening on a Unix socket in a private directory; Go relays
those calls to it (README: "What runs natively").
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from concurrent import futures
from typing import Any, Dict, List, Optional, Sequence

import grpc

from ._calls import run_call
from ._context import ServicerContext
from ._core import NEW, STARTED, STOPPED, ServerCore
from ._front import EVENT_CALL, EVENT_LOOKUP

_LOGGER = logging.getLogger("pygrpc_native")

_UNKNOWN = grpc.StatusCode.UNKNOWN.value[0]
_UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]

# Events taken from Go at once; large enough that a burst is one GIL trip.
_BATCH = 256
# Drain tasks used when the executor doesn't say how many threads it has.
_DEFAULT_DRAINERS = 16
# How long a drain task waits for more calls before it gives its thread back.
_IDLE = 0.02
# How often wait_for_termination() lets Python run signal handlers.
_WAIT_SLICE = 0.1



class _Server(ServerCore, grpc.Server):
    def __init__(
        self,
        thread_pool: futures.Executor,
        handlers: Optional[Sequence[grpc.GenericRpcHandler]],
        interceptors: Optional[Sequence[grpc.ServerInterceptor]],
        options: Optional[Sequence[Any]],
        maximum_concurrent_rpcs: Optional[int],
        compression: Optional[grpc.Compression],
    ) -> None:
        if thread_pool is None:
            raise ValueError("server() needs a thread pool, e.g. concurrent.futures.ThreadPoolExecutor(16)")
        self._init_core(options, maximum_concurrent_rpcs, compression)
        self.fallback = grpc.server(
            thread_pool,
            interceptors=interceptors,
            options=self.fallback_options,
            maximum_concurrent_rpcs=maximum_concurrent_rpcs,
        )
        self.interceptors = tuple(interceptors or ())
        self._pool = thread_pool
        self._watched: Dict[int, ServicerContext] = {}
        self._callback_thread: Optional[threading.Thread] = None
        self._pending: collections.deque = collections.deque()
        self._drain_lock = threading.Lock()
        self._drainers = 0
        self._closed = False  # Go's queue reported its end
        self._max_drainers = getattr(thread_pool, "_max_workers", None) or _DEFAULT_DRAINERS
        self._dispatcher: Optional[threading.Thread] = None
        self._termination = threading.Event()
        self._shutdown_events: List[threading.Event] = []
        if handlers:
            self.add_generic_rpc_handlers(handlers)

    # -- lifecycle -----------------------------------------------------------

    def start(self) -> None:
        with self.lock:
            # grpcio's words, which differ after start() and after stop().
            if self.stage is STARTED:
                raise ValueError("Cannot start already-started server!")
            if self.stage is STOPPED:
                raise ValueError("the server has already started")
            self.add_registered_methods()
            if self.bound:
                self.fallback.add_insecure_port(self.fallback_address)
                self.fallback.start()
                self.front.start()
                self._dispatcher = threading.Thread(
                    target=self._dispatch, name="pygrpc_native-dispatcher", daemon=True
                )
                self._dispatcher.start()
            self.stage = STARTED

    def stop(self, grace: Optional[float]) -> threading.Event:
        """grpcio's stop(): new calls are refused when it returns; calls in
        flight get ``grace`` seconds, then are cancelled; the returned event
        is set when the server has stopped (stop(None) waits for that)."""
        with self.lock:
            event = threading.Event()
            if self.stage is NEW or self._termination.is_set():
                self.stage = STOPPED
                self.front.stop(None)  # releases a bound port
                self.cleanup()
                self._termination.set()
                event.set()
                return event
            self._shutdown_events.append(event)
            # A stop while one is under way can only shorten it (both
            # servers cancel calls at the earliest deadline), as in grpcio.
            self.front.stop(grace, wait=False)
            fallback_stopped = self.fallback.stop(grace)
            if self.stage is STARTED:
                self.stage = STOPPED
                threading.Thread(
                    target=self._finish_stop, args=(fallback_stopped,), name="pygrpc_native-stop", daemon=True
                ).start()
        if grace is None:
            event.wait()
        return event

    def _finish_stop(self, fallback_stopped: threading.Event) -> None:
        """Waits for both servers, removes the fallback's socket, then
        signals. The front has stopped when the dispatcher ends: it reads
        Go's queue until the front closes it (a front that never started
        stopped at once)."""
        fallback_stopped.wait()
        if self._dispatcher is not None:
            self._dispatcher.join()
        self.cleanup()
        self._terminated()

    def _terminated(self) -> None:
        with self.lock:
            self._termination.set()
            for event in self._shutdown_events:
                event.set()

    def wait_for_termination(self, timeout: Optional[float] = None) -> bool:
        """Waits in short slices so that Ctrl+C interrupts it, as in grpcio.
        Returns True if the timeout passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._termination.is_set():
            if deadline is None:
                self._termination.wait(_WAIT_SLICE)
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            self._termination.wait(min(left, _WAIT_SLICE))
        return False

    # -- dispatch ------------------------------------------------------------

    def _dispatch(self) -> None:
        """Takes events while no drain task waits for them, until the front
        stops."""
        try:
            while (events := self.front.recv_batch(_BATCH, None, True)) is not None:
                self._take(events, draining=False)
            self._closed = True
        except Exception:  # noqa: BLE001 - the server must not die silently
            _LOGGER.exception("pygrpc_native dispatcher failed; stopping the server")
            self.front.stop(None)
            self._terminated()

    def _take(self, events: List[Any], draining: bool) -> None:
        """Sorts a batch: calls to the deque, lookups to the pool. Then
        starts drain tasks for the calls no running task will take: one per
        call, up to the pool's size, less the caller if it is a drain task
        (it takes one itself)."""
        methods = self.methods
        pending = self._pending
        for kind, call_id, method_id, payload, _client in events:
            if kind == EVENT_CALL:
                pending.append((methods[method_id], call_id, payload))
            elif kind == EVENT_LOOKUP:
                self._submit(self.lookup, call_id, payload.decode("utf-8", "replace"))
            # EVENT_CANCEL: only watched calls have callbacks to run, and
            # their cancellations come through _watch_calls.
        if pending:
            with self._drain_lock:
                want = min(len(pending) - draining, self._max_drainers - self._drainers)
                for _ in range(want):
                    self._drainers += 1
                    if not self._submit(self._drain):
                        self._drainers -= 1

    def _drain(self) -> None:
        left = False
        try:
            left = self._drain_calls()
        finally:
            if not left:  # an unexpected error: still give the slot back
                self._leave()

    def _leave(self) -> None:
        with self._drain_lock:
            self._release_slot()

    def _release_slot(self) -> None:
        """Gives a drain task's slot back; called with _drain_lock held."""
        self._drainers -= 1

    def _drain_calls(self) -> bool:
        """Runs calls until none wait; returns True once it has given its
        slot back, which it does under the same lock as its last look at
        the deque, so that _take never counts on a task that is leaving."""
        pending = self._pending
        front = self.front
        while True:
            try:
                method, call_id, payload = pending.popleft()
            except IndexError:
                events = None if self._closed else front.recv_batch(_BATCH, _IDLE)
                if events:
                    self._take(events, draining=True)
                    continue
                if events is None:
                    self._closed = True
                with self._drain_lock:
                    if not pending:
                        self._release_slot()
                        return True
                continue
            try:
                run_call(self, method, call_id, payload)
            except Exception:  # noqa: BLE001 - never lose the drain task
                _LOGGER.exception("pygrpc_native: unexpected error serving %s", method.path)
                try:
                    front.finish(call_id, _UNKNOWN, "Unexpected server error")
                except RuntimeError:
                    pass  # the server has stopped

    def _submit(self, fn: Any, *args: Any) -> bool:
        try:
            self._pool.submit(fn, *args)
            return True
        except RuntimeError:
            # The executor was shut down: calls can no longer be served.
            _LOGGER.error("pygrpc_native: the thread pool refused work (was it shut down?)")
            while self._pending:
                _, call_id, _ = self._pending.popleft()
                self.front.finish(call_id, _UNAVAILABLE, "Server thread pool is shut down")
            if fn == self.lookup:
                self.front.finish(args[0], _UNAVAILABLE, "Server thread pool is shut down")
            return False

    # -- callbacks -----------------------------------------------------------

    def watch(self, ctx: ServicerContext) -> bool:
        """Makes ctx's callbacks run if its call ends without its handler
        finishing it; False if the call has already ended."""
        call_id = ctx._call_id
        self._watched[call_id] = ctx
        try:
            watching = self.front.watch(call_id)
        except RuntimeError:
            watching = False  # the server has stopped
        if not watching:
            self._watched.pop(call_id, None)
            return False
        if self._callback_thread is None:
            with self.lock:
                if self._callback_thread is None:
                    self._callback_thread = threading.Thread(
                        target=self._watch_calls, name="pygrpc_native-callbacks", daemon=True
                    )
                    self._callback_thread.start()
        return True

    def _watch_calls(self) -> None:
        while (events := self.front.recv_watched(64)) is not None:
            for _kind, call_id, _method_id, _payload, _client in events:
                ctx = self._watched.pop(call_id, None)
                if ctx is not None:
                    self._run_callbacks(ctx)

    def run_callbacks(self, ctx: ServicerContext) -> None:
        """Runs the callbacks of a call that ended in its handler's thread,
        from the pool."""
        if self._watched.pop(ctx._call_id, None) is not None:
            self._submit(self._run_callbacks, ctx)

    @staticmethod
    def _run_callbacks(ctx: ServicerContext) -> None:
        callbacks, ctx.callbacks = ctx.callbacks, None
        for callback in callbacks or ():
            try:
                callback()
            except Exception:  # noqa: BLE001 - as grpcio
                _LOGGER.exception("Exception calling callback!")


def server(
    thread_pool: futures.Executor,
    handlers: Optional[Sequence[grpc.GenericRpcHandler]] = None,
    interceptors: Optional[Sequence[grpc.ServerInterceptor]] = None,
    options: Optional[Sequence[Any]] = None,
    maximum_concurrent_rpcs: Optional[int] = None,
    compression: Optional[grpc.Compression] = None,
    xds: bool = False,
) -> grpc.Server:
    """Creates a server like grpc.server(), with the protocol served in Go.

    Takes grpcio's arguments; ``xds=True`` is refused with ValueError.
    """
    if xds:
        raise ValueError("xds=True is not supported")
    if maximum_concurrent_rpcs is not None and maximum_concurrent_rpcs < 1:
        raise ValueError("maximum_concurrent_rpcs should be a positive integer")
    return _Server(thread_pool, handlers, interceptors, options, maximum_concurrent_rpcs, compression)
