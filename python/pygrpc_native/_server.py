"""pygrpc_native.server(): grpc.Server on top of the native front.

Threads, and why:

* Handlers run in the user's executor, as in grpcio, but calls are not
  submitted one by one. *Drain tasks* run in the executor: each takes calls
  from a deque shared with the others and, when it is empty, the next batch
  from Go itself (the GIL released while it waits, only one task waiting at
  a time). Under load one task goes from call to call with no thread hop
  and no GIL hand-off, which is the cheapest way to run handlers that don't
  block: with the GIL, more threads would only take turns.
* More tasks start only when a handler holds its task up. A monitor thread
  looks every ``_TICK`` while tasks exist: if calls wait and a task is still
  in the call it was in at the previous look, it submits one more task,
  unless the last one it submitted has not started yet (the executor has
  no free thread, and more would only queue up). So handlers that block get
  as many threads as the executor gives, whatever kind of executor it is,
  while fast handlers share one; and a look costs a few microseconds.
* When a look finds every task held and no call waiting, here or in Go,
  the monitor sleeps until a call arrives (Go's event descriptor), a task
  queues calls it can't run, or ``_HELD_WAIT`` passes: long-running
  handlers (streams open for minutes) would otherwise keep it waking 500
  times a second for nothing (~60 ms of CPU a second with 8 of them here,
  where grpc.server() spends ~5).
* A task gives its thread back when there is nothing to do for ``_IDLE``,
  when another task already waits for Go's next batch, when more tasks
  run than the monitor last wanted (it lowers the number after every look
  that finds no task held up), or, after a call, when a job that isn't
  ours waits for the pool (a pool shared with the application's jobs):
  a task of ours then queues behind that job for the calls left.
* While no task runs, the monitor itself waits for calls in Go and starts
  the first task when some arrive.
* Calls whose client has gone (cancelled, deadline passed, connection
  closed) before a handler picked them up are not run: Go drops the ones
  still queued there, and a drain task asks Go whether a call is still live
  just before running it (one look at Go's call table, a fraction of a
  percent of a call's cost): a client that closes its connection right
  after sending is usually noticed by then.
* Callbacks (add_callback) run once their call ends, on a thread of their
  own, as on grpcio's serving thread: never in the handler's thread, nor
  in the pool (_callbacks.CallbackRunner).
* Lookups of methods only generic handlers (or interceptors) know run on
  the thread that took them from Go, the monitor or a drain task, one at a
  time, as grpcio's serving thread runs them: a call no handler serves is
  answered even while every thread of the pool is held.
* A handler of a request stream reads it from its own thread
  (``read_message``, which waits in Go without the GIL); Go reads the
  client's next messages only as the handler takes them.
* With maximum_concurrent_rpcs, Go counts a call until its handler returns
  (``handler_done``), as grpcio counts it.
"""

from __future__ import annotations

import collections
import logging
import math
import sys
import threading
import time
from concurrent import futures
from typing import Any, Deque, List, Optional, Sequence, Set, Tuple

import grpc

from ._callbacks import CallbackRunner
from ._calls import CallRunner, Method
from ._core import ServerArguments, ServerCore, Stage, grace_of, sync_rpc_limit
from ._calls import intercept
from ._events import EVENT_CALL, EVENT_LOOKUP
from ._handle import ServerHandle
from ._wakeup import Wakeup

_LOGGER = logging.getLogger("pygrpc_native")

_UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]

# Events taken from Go at once (Go also caps a batch at 1 MiB of payload).
_BATCH = 256
# How long a drain task waits for more calls before it gives its thread back.
_IDLE = 0.02
# How often the monitor looks for handlers that hold their task up.
_TICK = 0.002
# The longest the monitor sleeps while every task is held and no call
# waits (a call's arrival ends the sleep at once).
_HELD_WAIT = 0.25
# How often wait_for_termination() lets Python run signal handlers.
_WAIT_SLICE = 0.1


# What _Server._submit returns for a job the pool refused (submit() of a
# user's executor may return anything, None included).
_REFUSED = object()


class _DrainTask:
    """One drain task, as the monitor sees it: the id of the call it is in
    (None while it isn't in one), and what that was at the monitor's last
    look."""

    __slots__ = ("call_id", "call_id_at_last_look")

    def __init__(self) -> None:
        self.call_id: Optional[int] = None
        self.call_id_at_last_look: Optional[int] = None


# A call taken from Go, waiting for a drain task: (method, call id,
# request payload (None for a request stream)).
_PendingCall = Tuple[Method, int, Optional[bytes]]


class _Server(ServerCore):
    def __init__(self, arguments: ServerArguments) -> None:
        super().__init__(arguments)
        self._callbacks = CallbackRunner(self.front)
        self._call_runner = CallRunner(self, self._callbacks)
        self._pending: Deque[_PendingCall] = collections.deque()
        # Guards the task counts below (not the per-call path).
        self._tasks_lock = threading.Lock()
        self._started_tasks: Set[_DrainTask] = set()  # tasks that have started
        self._tasks = 0  # tasks submitted and not ended
        self._tasks_starting = 0  # tasks submitted and not started yet
        self._tasks_wanted = 1  # how many tasks the monitor wants running
        self._tasks_in_go = 0  # tasks waiting in Go for the next batch
        self._closed = False  # Go's queue reported its end
        # Ends the monitor's wait: when the last task ends (it then waits in
        # Go), and while it sleeps on held tasks (_quiet), when a task
        # queues calls.
        self._monitor_wake = Wakeup()
        self._quiet = False  # the monitor's last look found every task held and no call waiting
        self._monitor: Optional[threading.Thread] = None
        self._termination = threading.Event()
        self._shutdown_events: List[threading.Event] = []

    # -- lifecycle -----------------------------------------------------------

    def start(self) -> None:
        with self.lock:
            # grpcio's words, which differ after start() and after stop().
            if self.stage is Stage.STARTED:
                raise ValueError("Cannot start already-started server!")
            if self.stage is Stage.STOPPED:
                raise ValueError("the server has already started")
            self.add_registered_methods()
            if self.bound:
                self.front.start()
                self.metrics.start()
                self._monitor = threading.Thread(
                    target=self._run_monitor, name="pygrpc_native-monitor", daemon=True
                )
                self._monitor.start()
            self.stage = Stage.STARTED

    def stop(self, grace: Optional[float]) -> threading.Event:
        """grpcio's stop(): new calls are refused when it returns; calls in
        flight get ``grace`` seconds, then are cancelled; the returned event
        is set when the server has stopped (stop(None) waits for that)."""
        with self.lock:
            event = threading.Event()
            if self.stage is Stage.NEW:
                # As grpcio: nothing to stop yet (the server still starts,
                # and wait_for_termination() waits for a stop after that).
                event.set()
                return event
            if self._termination.is_set():
                event.set()
                return event
            self._shutdown_events.append(event)
            # A stop while one is under way can only shorten it (calls are
            # cancelled at the earliest deadline), as in grpcio.
            self.front.stop(grace_of(grace), wait=False)
            self._monitor_wake.set()  # a monitor asleep on held tasks looks now (_look)
            if self.stage is Stage.STARTED:
                self.stage = Stage.STOPPED
                threading.Thread(target=self._finish_stop, name="pygrpc_native-stop", daemon=True).start()
        if grace is None and not self._callbacks.running_here():
            # (From a callback, the stop would wait for itself to end.)
            event.wait()
        return event

    def _finish_stop(self) -> None:
        """Waits for the front, then for the callbacks of its calls, then
        signals, as grpcio's stop. The front has stopped when the monitor
        ends: it reads Go's queue until the front closes it (a front that
        never started stopped at once)."""
        if self._monitor is not None:
            self._monitor.join()
        self._callbacks.drain()
        self._terminated()

    def _terminated(self) -> None:
        with self.lock:
            self._termination.set()
            for event in self._shutdown_events:
                event.set()

    def collected(self) -> None:
        """The user's handle was deallocated (or its ``__del__`` called, as
        grpcio's tests do): the server stops, as grpcio's does: new calls
        are refused, the calls in flight run to their end (no grace limit,
        no cancel) and wait_for_termination() returns once it has stopped.
        The stop runs on a thread of its own: nothing waits here, and no
        lock is taken by a collection that may run while this thread holds
        it."""
        if self._monitor is None:
            # No monitor ever ran (never started, or with no port): nothing
            # else gives its wake-up's pipe back.
            self._monitor_wake.close()
        if self._termination.is_set() or sys.is_finalizing():
            # At interpreter exit (a server kept in a module's globals) the
            # process takes the server with it; and no thread can start then:
            # before 3.12 Thread.start() waits for it forever.
            return
        try:
            threading.Thread(target=self.stop, args=(math.inf,), name="pygrpc_native-del", daemon=True).start()
        except RuntimeError:
            pass  # interpreter shutdown (3.12+ refuses new threads): the process is ending anyway

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

    def _run_monitor(self) -> None:
        """Waits for calls in Go while no drain task runs; otherwise looks
        every _TICK for handlers that hold their task up (see the module
        docstring). Ends when Go's queue does."""
        front = self.front
        try:
            event_fd = front.event_fd()
            while not self._closed:
                if self._tasks == 0:
                    events = front.recv_batch(_BATCH, None, client_keys=False)
                    if events is None:
                        self._closed = True
                    else:
                        self._take(events)
                    continue
                if self._quiet:
                    # Woken by a call (in Go or queued by a task) or not:
                    # look now, against the look before the sleep.
                    self._monitor_wake.wait(_HELD_WAIT, event_fd)
                    self._quiet = False
                elif self._monitor_wake.wait(_TICK):
                    continue
                self._look()
        except Exception:  # noqa: BLE001 - the server must not die silently
            _LOGGER.exception("pygrpc_native monitor failed; stopping the server")
            self.front.stop(None)
            self._terminated()
        finally:
            self._quiet = False
            self._monitor_wake.close()

    def _look(self) -> None:
        """One look of the monitor: grows the drain tasks by one when a
        handler has held its task since the last look while calls wait;
        otherwise lowers the number of tasks it wants."""
        if self.stage is Stage.STOPPED and self._tasks_in_go == 0:
            # Stopping, every task may be held by a handler that won't
            # return soon: calls that ended while they waited for one are
            # let go here, and the front's end is looked for here too, even
            # while calls wait (else stop() would wait for those handlers).
            self._let_go_ended()
            events = self.front.recv_batch(_BATCH, 0, client_keys=False)
            if events is None:
                self._closed = True
                return
            self._take(events)
        held = False
        for task in list(self._started_tasks):
            call_id = task.call_id
            if call_id is not None and call_id == task.call_id_at_last_look:
                held = True
            task.call_id_at_last_look = call_id
        if not held:
            if self._tasks_wanted > 1:
                self._tasks_wanted -= 1
            return
        if self._tasks_in_go == 0 and not self._pending:
            # Every task is busy: see whether calls wait in Go.
            events = self.front.recv_batch(_BATCH, 0, client_keys=False)
            if events is None:
                self._closed = True
                return
            self._take(events)
            if all(task.call_id is not None for task in list(self._started_tasks)):
                # Nothing to do until a call comes. Raised before pending is
                # read, as a task appends to pending before it reads this:
                # one of the two sees the other.
                self._quiet = True
                if not self._pending:
                    return
                self._quiet = False
        with self._tasks_lock:
            if self._pending and self._tasks_starting == 0 and not self._closed:
                self._tasks_wanted = max(self._tasks_wanted, self._tasks + 1)
                self._spawn()

    def _let_go_ended(self) -> None:
        """Lets go of the calls at the head of the deque that have ended
        (cancelled at the end of a stop's grace): no handler runs for them,
        and their places are free."""
        pending = self._pending
        while pending:
            try:
                entry = pending.popleft()
            except IndexError:
                return  # a task took it
            if self.is_live(entry[1]):
                pending.appendleft(entry)
                return
            self.release_slot(entry[1])

    def _take(self, events: List[Any]) -> None:
        """Sorts a batch: calls to the deque; lookups are made here. Starts
        a drain task if none runs."""
        methods = self.methods
        pending = self._pending
        for kind, call_id, method_id, payload, _client in events:
            if kind == EVENT_CALL:
                pending.append((methods[method_id], call_id, payload))
            elif kind == EVENT_LOOKUP:
                path = payload.decode("utf-8", "replace")
                try:
                    self._lookup(call_id, path)
                except Exception:  # noqa: BLE001 - only a bug gets here; the taker goes on
                    self._call_runner.unexpected_error(path, call_id)
            # EVENT_CANCEL: only watched calls have callbacks to run, and
            # their cancellations come through _watch_calls.
        if pending and self._tasks == 0:
            with self._tasks_lock:
                if self._tasks == 0:
                    self._spawn()
        elif pending and self._quiet:
            self._monitor_wake.set()  # a task took calls while every other is held

    def _spawn(self) -> None:
        """Submits one drain task; called with _tasks_lock held."""
        task = _DrainTask()
        self._tasks += 1
        self._tasks_starting += 1
        future = self._submit(self._drain, task)
        if future is _REFUSED:
            self._tasks -= 1
            self._tasks_starting -= 1
            return
        add_done_callback = getattr(future, "add_done_callback", None)
        if callable(add_done_callback):
            add_done_callback(self._drain_cancelled)

    def _drain_cancelled(self, future: Any) -> None:
        """A drain task's future is done: one cancelled before it ran (an
        executor's shutdown(cancel_futures=True), say) never takes its
        counts back itself, and with them counted the monitor would wait
        for it for good; they are taken back on a thread of its own (this
        may run at once, in _spawn, with _tasks_lock held)."""
        cancelled = getattr(future, "cancelled", None)  # an executor of the user's may return any future
        if callable(cancelled) and cancelled():
            threading.Thread(target=self._drain_never_ran, name="pygrpc_native-cancelled-task", daemon=True).start()

    def _drain_never_ran(self) -> None:
        with self._tasks_lock:
            self._tasks_starting -= 1
            self._tasks -= 1
            if self._tasks == 0:
                self._monitor_wake.set()  # the monitor takes calls from Go again

    def _drain(self, task: _DrainTask) -> None:
        with self._tasks_lock:
            self._tasks_starting -= 1
            self._started_tasks.add(task)
        try:
            self._drain_calls(task)
        except Exception:  # noqa: BLE001 - only a bug gets here
            _LOGGER.exception("pygrpc_native: a drain task failed")
            self._end_task(task)

    def _end_task(self, task: _DrainTask) -> None:
        with self._tasks_lock:
            self._end_task_locked(task)

    def _end_task_locked(self, task: _DrainTask) -> None:
        self._started_tasks.discard(task)
        self._tasks -= 1
        if self._tasks == 0:
            self._monitor_wake.set()  # the monitor waits in Go from now on

    def _drain_calls(self, task: _DrainTask) -> None:
        """Runs calls until there are none for _IDLE, another task waits
        for Go, or the monitor wants fewer tasks. Ends the task under the
        same lock as its last look at the deque, so that _take never counts
        on a task that is leaving."""
        pending = self._pending
        call_runner = self._call_runner
        pool_queue = _work_queue(self.thread_pool)
        while True:
            try:
                method, call_id, payload = pending.popleft()
            except IndexError:
                task.call_id = None
                if self._receive():
                    continue
                with self._tasks_lock:
                    if not pending:
                        self._end_task_locked(task)
                        return
                continue
            if not self.is_live(call_id):
                self.release_slot(call_id)  # the client is gone; Go counted it as cancelled
                continue
            task.call_id = call_id
            try:
                call_runner.run(method, call_id, payload)
            except Exception:  # noqa: BLE001 - never lose the drain task
                call_runner.unexpected_error(method.path, call_id)
            if self._tasks > self._tasks_wanted:
                with self._tasks_lock:
                    if self._tasks > self._tasks_wanted:
                        task.call_id = None
                        self._end_task_locked(task)
                        return
            if pool_queue is not None and pool_queue.qsize() > self._tasks_starting:
                # Work of others waits for the pool (the user's own jobs
                # share it): the thread goes back, and the calls left wait
                # behind that work, as on grpcio, whose every call is a job
                # of its own.
                with self._tasks_lock:
                    task.call_id = None
                    if pending:
                        self._spawn()
                    self._end_task_locked(task)
                    return

    def _lookup(self, call_id: int, path: str) -> None:
        """Resolves a path Go doesn't know: a handler of ours, or the
        interceptors' answer (see ServerCore.lookup)."""
        lookup = self.lookup(call_id, path)
        if lookup is None:
            return
        try:
            handler = lookup.context.run(
                intercept, self.interceptors, self.continuation(lookup.details.method, None), lookup.details
            )
        except Exception as exc:  # noqa: BLE001 - grpcio's answer to a failing interceptor
            self.lookup_failed(call_id, path, exc)
            return
        self.intercepted(lookup, handler)

    def _receive(self) -> bool:
        """Takes the next batch from Go into the deque, waiting up to _IDLE,
        unless another task already waits for it. True if calls wait now."""
        if self._closed or self._tasks_in_go:
            return bool(self._pending)
        self._tasks_in_go += 1
        try:
            events = self.front.recv_batch(_BATCH, _IDLE, client_keys=False)
        finally:
            self._tasks_in_go -= 1
        if events is None:
            self._closed = True
        elif events:
            self._take(events)
        return bool(self._pending)

    def _submit(self, fn: Any, *args: Any) -> Any:
        """Submits fn to the pool; returns what submit() returned, or
        _REFUSED if the pool refused it, and the calls waiting for it are then
        answered UNAVAILABLE. The server goes on: a later call tries the
        pool again."""
        try:
            return self.thread_pool.submit(fn, *args)
        except RuntimeError:
            # The executor was shut down: calls can no longer be served.
            _LOGGER.error("pygrpc_native: the thread pool refused work (was it shut down?)")
            details = "Server thread pool is shut down"
        except Exception:  # noqa: BLE001 - an executor of the user's whose submit() failed
            _LOGGER.exception("pygrpc_native: the thread pool's submit() failed")
            details = "Server thread pool refused the call"
        while self._pending:
            _, call_id, _ = self._pending.popleft()
            self._call_runner.reject(call_id, _UNAVAILABLE, details)
        return _REFUSED


def _work_queue(pool: futures.Executor) -> Any:
    """The queue of a ThreadPoolExecutor's jobs not started yet (None for
    another executor): read for its size only."""
    work_queue = getattr(pool, "_work_queue", None) if isinstance(pool, futures.ThreadPoolExecutor) else None
    return work_queue if callable(getattr(work_queue, "qsize", None)) else None


def server(
    thread_pool: Optional[futures.Executor],
    handlers: Optional[Sequence[grpc.GenericRpcHandler]] = None,
    interceptors: Optional[Sequence[grpc.ServerInterceptor]] = None,
    options: Optional[Sequence[Any]] = None,
    maximum_concurrent_rpcs: Optional[int] = None,
    compression: Optional[grpc.Compression] = None,
    xds: bool = False,
) -> grpc.Server:
    """Creates a server like grpc.server(), with the protocol served in Go.

    Takes grpcio's arguments; ``xds=True`` is refused with ValueError. As
    with grpcio, ``thread_pool=None`` is accepted, but a server without one
    can't serve: the first call brings it down (README: known differences).
    """
    if xds:
        raise ValueError(
            "xds=True is not supported: pygrpc_native has no xDS client; serve xDS with grpc.server(xds=True)"
        )
    limit = sync_rpc_limit(maximum_concurrent_rpcs)
    return ServerHandle(_Server(ServerArguments(thread_pool, handlers, interceptors, options, limit, compression)))
